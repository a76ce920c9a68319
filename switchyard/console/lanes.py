"""The console's lanes (issue 29): per lane and business, the lookahead in use, the
forecast (waiting triggers due in each coming window), the fire-time lag p50/p95/p99, the
published-not-yet-due backlog, and per lane the lookahead lag (negative: admission is
behind now). Page /lanes, API /api/lanes (`?window=1h`: the lag's window).

Where each figure comes from, said on the page too:
- the store (always, on `serve` as on a real deployment): the forecast (the grouped count
  the adaptive lookahead reads itself, `due_forecast`), the lag (the fired records of the
  window with their trigger's lane) and the backlog (fired records still to come whose
  fire time is ahead: what a stop now would skip);
- the scheduler's metrics (only with `--scheduler-metrics`, or `serve`'s own, and only
  from a scheduler run with `--adaptive-lookahead`: a fixed lookahead exports no lane
  gauges): the window each lane uses and its lookahead lag. The leader's are shown.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from reports.redact import redact_tree
from scheduler_core.model import Lane
from scheduler_core.stats import percentile
from scheduler_core.store.reads import published_ahead, receipt_lags_by_lane
from scheduler_core.times import to_ms
from switchyard.console import data
from switchyard.console.data import LaneGauges, Member, Sources
from switchyard.console.responses import HEADERS, BadInput, error_response, failure, page_context
from switchyard.console.templating import render

MINUTE_MS = 60_000
# the coming windows the forecast is told in (minutes from now); the last is how far it reads
FORECAST_MINUTES = (1, 5, 15, 60)
WINDOW_NAMES = tuple(f"{m}m" for m in FORECAST_MINUTES)
LANE_ORDER = {lane: i for i, lane in enumerate(Lane)}


def _gauges(members: list[Member] | None) -> tuple[str | None, LaneGauges]:
    """The lane gauges of the leader (else of any member that exports them)."""
    for m in sorted(members or [], key=lambda m: (not m.leader, not m.lanes)):
        if m.reachable and m.lanes:
            return m.name, m.lanes
    return None, LaneGauges()


def _forecast(src: Sources, now_ms: int) -> dict[tuple[str, Lane], list[int]]:
    """Per business and lane, its waiting triggers due in each coming window (cumulative)."""
    rows = src.store.due_forecast(now_ms, now_ms + FORECAST_MINUTES[-1] * MINUTE_MS - 1, MINUTE_MS)
    out: dict[tuple[str, Lane], list[int]] = defaultdict(lambda: [0] * len(FORECAST_MINUTES))
    for biz, lane, bucket, n in rows:
        minute = (bucket - now_ms) // MINUTE_MS
        counts = out[biz, lane]
        for i, m in enumerate(FORECAST_MINUTES):
            if minute < m:
                counts[i] += n
    return out


def _lags(src: Sources, start_ms: int, end_ms: int) -> dict[tuple[str, Lane], dict[str, Any]]:
    values: dict[tuple[str, Lane], list[float]] = defaultdict(list)
    fired: dict[tuple[str, Lane], int] = defaultdict(int)
    for biz, lane, _at, lag_ms in receipt_lags_by_lane(src.store, start_ms, end_ms):
        fired[biz, lane] += 1
        if lag_ms is not None:
            values[biz, lane].append(lag_ms / 1000)
    out = {}
    for key, n in fired.items():
        v = sorted(values[key])
        out[key] = {"fired": n, "p50": percentile(v, 50), "p95": percentile(v, 95), "p99": percentile(v, 99)}
    return out


def lanes(src: Sources, window: timedelta | None = None) -> dict[str, Any]:
    """What the page and the API show (see the module doc)."""
    span = window or src.lag_window
    now = src.now()
    now_ms = to_ms(now)
    forecast = _forecast(src, now_ms)
    lags = _lags(src, now_ms - int(span.total_seconds() * 1000), now_ms)
    backlog = published_ahead(src.store, now_ms)
    members = src.members() if src.members is not None else None
    source, g = _gauges(members)
    keys: set[tuple[str, Lane]] = {*forecast, *lags, *backlog}
    keys |= {(biz, Lane.of(lane or None)) for lane, biz in (*g.lookahead_s, *g.forecast, *g.backlog) if biz}
    rows = []
    for biz, lane in sorted(keys, key=lambda k: (LANE_ORDER[k[1]], k[0])):
        lag = lags.get((biz, lane), {})
        rows.append(
            {
                "lane": lane.value,
                "business": biz,
                "lookahead_s": g.lookahead_s.get((lane.value, biz)),
                "forecast": dict(zip(WINDOW_NAMES, forecast.get((biz, lane), [0] * len(WINDOW_NAMES)), strict=True)),
                "fired": lag.get("fired", 0),
                "lag_s": {q: lag.get(q) for q in ("p50", "p95", "p99")},
                "backlog": backlog.get((biz, lane), 0),
                "backlog_scheduler": g.backlog.get((lane.value, biz)),
            }
        )
    summary = []
    for lane in Lane:
        windows = [v for (ln, _b), v in g.lookahead_s.items() if ln == lane.value]
        lag_s = g.lag_s.get(lane.value)
        mine = [r for r in rows if r["lane"] == lane.value]
        summary.append(
            {
                "lane": lane.value,
                "lookahead_s": max(windows) if windows else None,
                "lookahead_lag_s": lag_s,
                "behind": lag_s is not None and lag_s < 0,
                "forecast": {k: sum(r["forecast"][k] for r in mine) for k in WINDOW_NAMES},
                "backlog": sum(r["backlog"] for r in mine),
                "businesses": len(mine),
            }
        )
    return redact_tree(
        {
            "now": now.isoformat(timespec="seconds"),
            "window_s": span.total_seconds(),
            "forecast_windows": list(WINDOW_NAMES),
            "members_known": members is not None,
            "gauges_from": source,
            "lanes": summary,
            "rows": rows,
        }
    )


def _window(query: Mapping[str, str]) -> timedelta | None:
    raw = query.get("window")
    if raw is None:
        return None
    try:
        return data.parse_window(raw)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def routes(src: Sources) -> list[Route]:
    """The lanes' page and API, for `make_app`."""

    async def answer(request: Request, api: bool) -> Response:
        def respond() -> Response:
            body = lanes(src, _window(request.query_params))
            if api:
                return JSONResponse(body, headers=HEADERS)
            html = render(
                "lanes.html.j2",
                now=body["now"],
                windows=data.WINDOWS,
                window=request.query_params.get("window"),
                **page_context(request),
                r=body,
            )
            return HTMLResponse(html, headers=HEADERS)

        try:
            return await run_in_threadpool(respond)
        except Exception as exc:  # every failure is a page or JSON with its status
            return error_response(failure(exc), api, request)

    async def page(request: Request) -> Response:
        return await answer(request, api=False)

    async def api(request: Request) -> Response:
        return await answer(request, api=True)

    return [Route("/lanes", page), Route("/api/lanes", api)]


__all__ = ["FORECAST_MINUTES", "lanes", "routes"]
