"""The console's HTTP side (Starlette): read-only pages and the JSON API, over data.py.

Bad input is a clear page (or JSON) with its status code, never a stack trace: an
unknown business 404, a bad query parameter 400, a store that cannot be read 503. With
a token every request needs `Authorization: Bearer <token>` (401 without it).
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from dualrun.errors import NoComparison
from reports.load import load_report
from reports.redact import redact
from reports.render_html import render_html
from scheduler_core.errors import StoreError
from scheduler_core.store.driver_errors import as_store_error, driver_message
from switchyard.console import data, runs
from switchyard.console.templating import render

log = logging.getLogger(__name__)

# pages load nothing from anywhere: inline CSS, images only as data URIs (the report's plots)
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src data:",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


class BadInput(ValueError):
    pass


class Failure(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


def _first_line(exc: BaseException) -> str:
    if isinstance(exc, StoreError) and exc.detail:
        return redact(exc.detail)[:300]
    return redact(driver_message(exc))[:300]


def _failure(exc: BaseException) -> Failure:
    if isinstance(exc, Failure):
        return exc
    exc = as_store_error(exc)  # a driver error from a read that is not behind the store's port yet
    if isinstance(exc, data.UnknownBusiness):
        return Failure(404, "Unknown business", f"No business {exc.biz_code!r} in the store.")
    if isinstance(exc, NoComparison):
        return Failure(
            404,
            "No comparison",
            "No comparison is stored for this business yet: run `switchyard dualrun compare` first.",
        )
    if isinstance(exc, BadInput):
        return Failure(400, "Bad request", str(exc))
    if isinstance(exc, (StoreError, OSError)):
        log.warning("the store cannot be read: %s", _first_line(exc))
        return Failure(503, "Store unavailable", f"The store cannot be read: {_first_line(exc)}")
    log.error("console request failed: %s: %s", type(exc).__name__, redact(str(exc))[:300])
    return Failure(500, "Internal error", f"The console could not answer ({type(exc).__name__}); see its log.")


def _error_response(f: Failure, api: bool) -> Response:
    if api:
        return JSONResponse({"error": f.title, "message": f.message, "status": f.status}, f.status, headers=HEADERS)
    return HTMLResponse(
        render("error.html.j2", now=None, status=f.status, title=f.title, message=f.message), f.status, headers=HEADERS
    )


def _window(request: Request) -> timedelta | None:
    raw = request.query_params.get("window")
    if raw is None:
        return None
    try:
        return data.parse_window(raw)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def make_app(src: data.Sources, token: str | None = None) -> Starlette:
    """The console over these sources; with `token`, every request must bear it."""

    async def answer(
        request: Request,
        work: Callable[[], Any],
        page: str | None = None,
        wrap: Callable[[Any], dict[str, Any]] | None = None,
    ) -> Response:
        api = page is None

        def respond() -> Response:
            body = work()
            if api:
                return JSONResponse(body, headers=HEADERS)
            if isinstance(body, str):
                return HTMLResponse(body, headers=HEADERS)
            assert page is not None
            return HTMLResponse(
                render(page, now=src.now().isoformat(timespec="seconds"), **(wrap(body) if wrap else body)),
                headers=HEADERS,
            )

        try:
            return await run_in_threadpool(respond)
        except Exception as exc:  # every failure is a page or JSON with its status, never a traceback
            return _error_response(_failure(exc), api)

    def code_of(request: Request) -> str:
        return str(request.path_params["code"])

    async def index(request: Request) -> Response:
        return await answer(request, lambda: data.businesses(src), "index.html.j2", lambda rows: {"rows": rows})

    async def business_page(request: Request) -> Response:
        return await answer(
            request, lambda: data.business(src, code_of(request)), "business.html.j2", lambda b: {"b": b}
        )

    async def report_page(request: Request) -> Response:
        code = code_of(request)

        def work() -> str:
            if data.business_exists(src, code) is False:
                raise data.UnknownBusiness(code)
            return render_html(load_report(src.dualrun, code, now=src.now()).content())

        return await answer(request, work, "report")

    async def scheduler_page(request: Request) -> Response:
        def work() -> dict[str, Any]:
            window = _window(request)
            return {
                "s": data.scheduler(src),
                "lag": data.lag(src, window),
                "windows": data.WINDOWS,
                "window": request.query_params.get("window") if window is not None else None,
            }

        return await answer(request, work, "scheduler.html.j2")

    async def audit_page(request: Request) -> Response:
        return await answer(
            request, lambda: {"audit": data.audit(src, request.query_params.get("business"))}, "audit.html.j2"
        )

    async def quarantine_page(request: Request) -> Response:
        return await answer(
            request,
            lambda: {"quarantine": data.quarantine(src, request.query_params.get("business"))},
            "quarantine.html.j2",
        )

    async def api_businesses(request: Request) -> Response:
        return await answer(request, lambda: data.businesses(src))

    async def api_business(request: Request) -> Response:
        return await answer(request, lambda: data.business(src, code_of(request)))

    async def api_report(request: Request) -> Response:
        code = code_of(request)

        def work() -> dict[str, Any]:
            if data.business_exists(src, code) is False:
                raise data.UnknownBusiness(code)
            return load_report(src.dualrun, code, now=src.now()).content()

        return await answer(request, work)

    async def api_scheduler(request: Request) -> Response:
        return await answer(request, lambda: data.scheduler(src))

    async def api_lag(request: Request) -> Response:
        return await answer(request, lambda: data.lag(src, _window(request)))

    async def api_audit(request: Request) -> Response:
        return await answer(request, lambda: data.audit(src, request.query_params.get("business")))

    async def api_quarantine(request: Request) -> Response:
        return await answer(request, lambda: data.quarantine(src, request.query_params.get("business")))

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        title = "Not found" if status == 404 else "Method not allowed" if status == 405 else "Error"
        return _error_response(
            Failure(status, title, f"No page at {request.url.path}." if status == 404 else title),
            request.url.path.startswith("/api/"),
        )

    routes = [
        Route("/", index),
        Route("/business/{code:path}", business_page),
        Route("/report/{code:path}", report_page),
        Route("/scheduler", scheduler_page),
        Route("/audit", audit_page),
        Route("/quarantine", quarantine_page),
        Route("/api/businesses", api_businesses),
        Route("/api/businesses/{code:path}", api_business),
        Route("/api/report/{code:path}", api_report),
        Route("/api/scheduler", api_scheduler),
        Route("/api/lag", api_lag),
        Route("/api/audit", api_audit),
        Route("/api/quarantine", api_quarantine),
        *runs.routes(src),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    if token:
        app.add_middleware(BearerToken, token=token)
    return app


class BearerToken:
    """Every request needs `Authorization: Bearer <token>`; else 401 (nothing else is said)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        auth = dict(scope["headers"]).get(b"authorization", b"")
        scheme, _, given = auth.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self.token):
            await self.app(scope, receive, send)
            return
        api = str(scope.get("path", "")).startswith("/api/")
        f = Failure(401, "Unauthorized", "This console needs a bearer token (Authorization: Bearer ...).")
        response = _error_response(f, api)
        response.headers["WWW-Authenticate"] = 'Bearer realm="switchyard console"'
        await response(scope, receive, send)
