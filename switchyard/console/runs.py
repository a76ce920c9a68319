"""The console's run log (issue 28): `/runs` and `/api/runs` list the runs (one row per
fire and sharding item) newest first, filtered by business, job, state and time window,
a page at a time by keyset (`before`: the last row's "scheduled ms:command id"; never
OFFSET, so the 1000th page costs what the first does); `/runs/{id}` shows one run with
its handler's log lines; with a business chosen, per day its runs by result and its
fire-time lag percentiles, as charts (`/api/runs/daily` as JSON; both kept a minute)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from dualrun.settings import parse_duration
from reports.redact import redact_tree
from scheduler_core.model import FiredState
from scheduler_core.store import run_log
from switchyard.console import run_charts
from switchyard.console.data import Sources
from switchyard.console.responses import HEADERS, BadInput, Failure, error_response, failure, page_context
from switchyard.console.templating import render
from switchyard.wiring import executor_registry

STATES = tuple(s.value for s in FiredState)
WINDOWS = ("1h", "24h", "7d", "30d")
DEFAULT_WINDOW = "24h"
MAX_WINDOW = timedelta(days=400)
PAGE = 50
CHART_DAYS = 14
# charts cost a figure render each (~100 ms): kept this long per (business, day count)
CHART_TTL_S = 60.0


class BadRunQuery(ValueError):
    pass


def _iso(ms: int | None) -> str | None:
    return None if ms is None else datetime.fromtimestamp(int(ms) / 1000, UTC).isoformat(timespec="milliseconds")


def run_row(r: dict[str, Any], names: dict[str, str] | None = None) -> dict[str, Any]:
    """A fired record as a run: lag is the start (else the receipt) after the scheduled
    time; duration the result after the start; executor the instance id of the process
    that ran it (None: no result yet, or from an executor older than the field), with its
    registry name in `names` while the registry keeps its row."""
    began = r["started_at"] if r["started_at"] is not None else r["received_at"]
    items = int(r.get("item_count") or 1)
    return {
        "id": r["command_id"],
        "business": r["biz_code"],
        "job": r["job_code"],
        "trigger_id": int(r["trigger_id"]),
        "item": int(r["item_index"]),
        "item_count": items,
        "item_total": int(r["item_total"]),
        "scheduled_at": _iso(r["scheduled_at"]),
        "fired_at": _iso(r["fired_at"]),
        "published_at": _iso(r["published_at"]),
        "received_at": _iso(r["received_at"]),
        "started_at": _iso(r["started_at"]),
        "finished_at": _iso(r["result_at"]),
        "result": r["state"],
        "attempt": int(r["attempt"]),
        "retries": int(r["attempt"]),
        "misfired": bool(r["misfired"]),
        "lag_ms": None if began is None else int(began) - int(r["scheduled_at"]),
        "duration_ms": None if began is None or r["result_at"] is None else int(r["result_at"]) - int(began),
        "message": r["message"] or "",
        "executor": r.get("executor"),
        "executor_name": (names or {}).get(r.get("executor") or ""),
    }


def _cursor(raw: str | None) -> tuple[int, str] | None:
    if not raw:
        return None
    ms, sep, cid = raw.partition(":")
    if not sep or not ms.isdigit() or not cid:
        raise BadRunQuery(f"before: {raw!r} is not a page position (scheduled ms:command id, as `next` gives it)")
    return int(ms), cid


def _filter(src: Sources, q: Any) -> tuple[run_log.RunFilter, dict[str, Any]]:
    states = [s for s in q.getlist("state") if s]
    bad = [s for s in states if s not in STATES]
    if bad:
        raise BadRunQuery(f"state: {bad[0]!r} is not one of {', '.join(STATES)}")
    window = q.get("window") or DEFAULT_WINDOW
    try:
        span = parse_duration(window)
    except ValueError:
        raise BadRunQuery(f"window: {window!r} is not a duration (e.g. {', '.join(WINDOWS)})") from None
    if not timedelta(0) < span <= MAX_WINDOW:
        raise BadRunQuery(f"window: {window!r} must be more than 0 and at most {MAX_WINDOW.days} days")
    now_ms = src.store.clock.now_ms()
    business = q.get("business") or None
    job = q.get("job") or None
    f = run_log.RunFilter(
        biz_code=business,
        job_code=job,
        states=tuple(states),
        since_ms=now_ms - int(span.total_seconds() * 1000),
    )
    return f, {"business": business or "", "job": job or "", "states": states, "window": window}


def _limit(q: Any) -> int:
    raw = q.get("limit")
    if raw is None:
        return PAGE
    if not raw.isdigit() or not 1 <= int(raw) <= run_log.MAX_PAGE:
        raise BadRunQuery(f"limit: {raw!r} must be 1..{run_log.MAX_PAGE}")
    return int(raw)


def runs_page(src: Sources, q: Any) -> dict[str, Any]:
    f, shown = _filter(src, q)
    rows, nxt = run_log.page(src.store, f, before=_cursor(q.get("before")), limit=_limit(q))
    names = executor_registry(src.store).names(r["executor"] for r in rows)
    body = {
        "filter": shown,
        "runs": [run_row(r, names) for r in rows],
        "next": None if nxt is None else f"{nxt[0]}:{nxt[1]}",
    }
    return redact_tree(body)


def run_detail(src: Sources, fired_id: str) -> dict[str, Any] | None:
    row = run_log.one(src.store, fired_id)
    if row is None:
        return None
    logs = [{**r, "logged_at": _iso(r["logged_at"])} for r in run_log.logs(src.store, fired_id)]
    names = executor_registry(src.store).names([row["executor"] or ""])
    return redact_tree({"run": {**run_row(row, names), "item_states": row.get("item_states") or ""}, "logs": logs})


def daily(src: Sources, business: str, days: int = CHART_DAYS) -> list[dict[str, Any]]:
    now_ms = src.store.clock.now_ms()
    end = now_ms - now_ms % run_log.DAY_MS + run_log.DAY_MS
    out = run_log.daily(src.store, business, end - days * run_log.DAY_MS, now_ms + 1)
    return [{**d, "day": _iso(d["day_ms"])[:10]} for d in out]  # type: ignore[index]


class _Charts:
    """Per (business, days): the daily figures and their rendered charts, kept CHART_TTL_S
    (an aggregate over the business's runs of those days, and two figures drawn)."""

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str, int], tuple[float, Any]] = {}

    def _cached(self, key: tuple[str, str, int], make: Any) -> Any:
        hit = self._kept.get(key)
        if hit is not None and time.monotonic() - hit[0] < CHART_TTL_S:
            return hit[1]
        value = make()
        if len(self._kept) > 512:
            self._kept.clear()
        self._kept[key] = (time.monotonic(), value)
        return value

    def daily(self, src: Sources, business: str, days: int = CHART_DAYS) -> list[dict[str, Any]]:
        return list(self._cached(("daily", business, days), lambda: daily(src, business, days)))

    def get(self, src: Sources, business: str, days: int = CHART_DAYS) -> dict[str, Any]:
        def draw() -> dict[str, Any]:
            data = self.daily(src, business, days)
            if not data:
                return {"days": 0}
            return {"results": run_charts.results_chart(data), "lag": run_charts.lag_chart(data), "days": len(data)}

        return dict(self._cached(("charts", business, days), draw))


def _page_url(shown: dict[str, Any], before: str) -> str:
    params: list[tuple[str, str]] = [(k, shown[k]) for k in ("business", "job", "window") if shown[k]]
    params += [("state", s) for s in shown["states"]]
    return "/runs?" + urlencode([*params, ("before", before)])


def routes(src: Sources) -> list[Route]:
    """The run log's pages and API, for `make_app`."""
    charts = _Charts()

    async def answer(request: Request, work: Any, page: str | None = None) -> Response:
        def respond() -> Response:
            body = work()
            if page is None:
                return JSONResponse(body, headers=HEADERS)
            now = src.now().isoformat(timespec="seconds")
            return HTMLResponse(render(page, now=now, **page_context(request), **body), headers=HEADERS)

        try:
            return await run_in_threadpool(respond)
        except Exception as exc:  # every failure is a page or JSON with its status
            if isinstance(exc, BadRunQuery):
                exc = BadInput(str(exc))
            return error_response(failure(exc), page is None, request)

    def detail_or_404(fired_id: str) -> dict[str, Any]:
        found = run_detail(src, fired_id)
        if found is None:
            raise Failure(404, "Unknown run", f"No fired record {fired_id!r} in the store.")
        return found

    async def runs_html(request: Request) -> Response:
        def work() -> dict[str, Any]:
            body = runs_page(src, request.query_params)
            biz = body["filter"]["business"]
            return {
                **body,
                "windows": WINDOWS,
                "all_states": STATES,
                "next_url": None if body["next"] is None else _page_url(body["filter"], body["next"]),
                "charts": charts.get(src, biz) if biz else None,
            }

        return await answer(request, work, "runs.html.j2")

    async def run_html(request: Request) -> Response:
        return await answer(request, lambda: detail_or_404(str(request.path_params["fired_id"])), "run.html.j2")

    async def api_runs(request: Request) -> Response:
        return await answer(request, lambda: runs_page(src, request.query_params))

    async def api_daily(request: Request) -> Response:
        def work() -> list[dict[str, Any]]:
            biz = request.query_params.get("business")
            if not biz:
                raise BadRunQuery("business: required (the charts are per business)")
            raw = request.query_params.get("days", str(CHART_DAYS))
            if not raw.isdigit() or not 1 <= int(raw) <= 400:
                raise BadRunQuery(f"days: {raw!r} must be 1..400")
            return charts.daily(src, biz, int(raw))

        return await answer(request, work)

    async def api_run(request: Request) -> Response:
        return await answer(request, lambda: detail_or_404(str(request.path_params["fired_id"])))

    return [
        Route("/runs", runs_html),
        Route("/runs/{fired_id}", run_html),
        Route("/api/runs", api_runs),
        Route("/api/runs/daily", api_daily),
        Route("/api/runs/{fired_id}", api_run),
    ]


__all__ = ["routes", "run_row", "runs_page"]
