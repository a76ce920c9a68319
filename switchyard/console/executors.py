"""The console's executor registry: the page /executors and the API /api/executors.

The executor processes' heartbeats (live, lost, and with `?all=1` stopped) and, beside
them, the executors the xxl-job admin registered, read from the console's legacy
databases that are xxl-job admins' (switchyard.executors); `?business=B` keeps one
business's. A legacy database that cannot be read is a note on the page, not a failed
page: the registry is the store's. A store that cannot be read is a 503.
"""

from __future__ import annotations

import logging
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from dbkit.translate import as_store_error, driver_message
from reports.redact import redact, redact_tree
from scheduler_core.errors import SchemaError, StoreError
from switchyard.console.data import Sources
from switchyard.console.templating import render
from switchyard.executors import (
    dash,
    format_age,
    legacy_executors,
    native_executors,
    sorted_rows,
    xxl_admin_urls,
)
from switchyard.wiring import executor_registry

log = logging.getLogger(__name__)
# the console's own headers (app.HEADERS): pages load nothing from anywhere
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def executors(src: Sources, *, biz_code: str | None, include_stopped: bool) -> dict[str, Any]:
    """What the page and the API show: the rows (switchyard.executors) and the notes on
    legacy databases that could not be read."""
    rows = native_executors(executor_registry(src.store), biz_code=biz_code, include_stopped=include_stopped)
    notes: list[str] = []
    for url in src.legacy_urls:
        try:
            if xxl_admin_urls([url]):
                rows += legacy_executors(url, biz_code=biz_code, db_tz=src.legacy_db_tz)
        except Exception as exc:  # noqa: BLE001 - a legacy database down: said on the page
            notes.append(f"an xxl-job registry cannot be read: {driver_message(exc)[:300]}")
    out = {"business": biz_code, "all": include_stopped, "executors": sorted_rows(rows), "notes": notes}
    return redact_tree(out)  # type: ignore[no-any-return]


def _failure(raised: Exception) -> tuple[int, str, str]:
    exc = as_store_error(raised)
    if isinstance(exc, SchemaError):
        return 503, "Store not upgraded", redact(str(exc))[:300]
    if isinstance(exc, (StoreError, OSError)):
        log.warning("the store cannot be read: %s", redact(driver_message(exc))[:300])
        return 503, "Store unavailable", f"The store cannot be read: {redact(driver_message(exc))[:300]}"
    log.error("console request failed: %s: %s", type(exc).__name__, redact(str(exc))[:300])
    return 500, "Internal error", f"The console could not answer ({type(exc).__name__}); see its log."


def routes(src: Sources) -> list[Route]:
    """The registry's page and API, for the console's app to include."""

    async def answer(request: Request, api: bool) -> Response:
        biz_code = request.query_params.get("business") or None
        include_stopped = request.query_params.get("all") in ("1", "true", "yes")

        def respond() -> Response:
            body = executors(src, biz_code=biz_code, include_stopped=include_stopped)
            if api:
                return JSONResponse(body, headers=HEADERS)
            page = render(
                "executors.html.j2",
                now=src.now().isoformat(timespec="seconds"),
                age=format_age,
                dash=dash,
                **body,
            )
            return HTMLResponse(page, headers=HEADERS)

        try:
            return await run_in_threadpool(respond)
        except Exception as exc:  # every failure is a page or JSON with its status, never a traceback
            status, title, message = _failure(exc)
            if api:
                return JSONResponse({"error": title, "message": message, "status": status}, status, headers=HEADERS)
            page = render("error.html.j2", now=None, status=status, title=title, message=message)
            return HTMLResponse(page, status, headers=HEADERS)

    async def page(request: Request) -> Response:
        return await answer(request, api=False)

    async def api(request: Request) -> Response:
        return await answer(request, api=True)

    return [Route("/executors", page), Route("/api/executors", api)]
