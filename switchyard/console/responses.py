"""How the console answers, for every module of routes: a page or JSON with its status
code, never a stack trace (an unknown business 404, bad input 400, a store that cannot be
read 503), and the signed-in principal handed to every page."""

from __future__ import annotations

import logging
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response

from dbkit.translate import as_store_error, driver_message
from dualrun.errors import NoComparison
from reports.redact import redact
from scheduler_core.errors import StoreError
from switchyard.console import data
from switchyard.console.auth import ANONYMOUS, Authority, Principal, Role
from switchyard.console.templating import render

log = logging.getLogger("switchyard.console.app")

# pages load nothing from anywhere: inline CSS, images only as data URIs (the report's plots)
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'"
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
    "X-Frame-Options": "DENY",
}
PRINCIPAL = "switchyard.principal"
AUTHORITY = "switchyard.authority"
WRITES = "switchyard.writes"
BODY = "switchyard.body"  # a write's body, read by the gate (app.Gate) to check its CSRF token


class BadInput(ValueError):
    pass


class Failure(Exception):
    def __init__(self, status: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status, self.title, self.message = status, title, message


def first_line(exc: BaseException) -> str:
    if isinstance(exc, StoreError) and exc.detail:
        return redact(exc.detail)[:300]
    return redact(driver_message(exc))[:300]


def failure(exc: BaseException) -> Failure:
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
        log.warning("the store cannot be read: %s", first_line(exc))
        return Failure(503, "Store unavailable", f"The store cannot be read: {first_line(exc)}")
    log.error("console request failed: %s: %s", type(exc).__name__, redact(str(exc))[:300])
    return Failure(500, "Internal error", f"The console could not answer ({type(exc).__name__}); see its log.")


def form_of(request: Request) -> dict[str, str]:
    """The urlencoded form of a write (the gate read its body), last value of a name wins."""
    body = request.scope.get(BODY, b"")
    return dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))


def principal(request: Request) -> Principal:
    found = request.scope.get(PRINCIPAL)
    return found if isinstance(found, Principal) else ANONYMOUS


def page_context(request: Request | None) -> dict[str, Any]:
    """What base.html.j2 shows of the session: who, the role, the CSRF token of its forms."""
    if request is None:
        return {"me": None, "csrf": "", "writes": False}
    me = principal(request)
    authority = request.scope.get(AUTHORITY)
    csrf = authority.csrf(me) if isinstance(authority, Authority) else ""
    return {"me": me, "csrf": csrf, "writes": bool(request.scope.get(WRITES))}


def error_response(f: Failure, api: bool, request: Request | None = None) -> Response:
    if api:
        return JSONResponse({"error": f.title, "message": f.message, "status": f.status}, f.status, headers=HEADERS)
    return HTMLResponse(
        render("error.html.j2", now=None, status=f.status, title=f.title, message=f.message, **page_context(request)),
        f.status,
        headers=HEADERS,
    )


def require(request: Request, role: Role) -> Principal:
    """The request's principal if its role reaches `role`; else a 403 naming both (the
    gate has already answered 401 to a request without credentials)."""
    me = principal(request)
    if not request.scope.get(WRITES) and role > Role.VIEWER:
        raise Failure(403, "Read-only console", "This console serves no writes: start it with --writes and tokens.")
    if not me.may(role):
        raise Failure(403, "Forbidden", f"{me.name} is {me.role.label}: this needs the {role.label} role or higher.")
    return me


__all__ = [
    "AUTHORITY",
    "BODY",
    "CSP",
    "HEADERS",
    "PRINCIPAL",
    "WRITES",
    "BadInput",
    "Failure",
    "error_response",
    "failure",
    "first_line",
    "form_of",
    "page_context",
    "principal",
    "require",
]
