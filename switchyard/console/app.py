"""The console's HTTP side (Starlette): read-only pages and the JSON API, over data.py.

Bad input is a clear page (or JSON) with its status code, never a stack trace: an
unknown business 404, a bad query parameter 400, a store that cannot be read 503. With
a token every request needs `Authorization: Bearer <token>` (401 without it).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qsl

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from reports.load import load_report
from reports.render_html import render_html
from scheduler_core.ports import MessageBus
from switchyard.console import data, executors, job_pages, lanes, runs
from switchyard.console.auth import (
    ANONYMOUS,
    COOKIE,
    CSRF_FIELD,
    CSRF_HEADER,
    LOGIN_COOKIE,
    LOGIN_NONCE_TTL_S,
    Authority,
    Role,
    Token,
)
from switchyard.console.responses import (
    AUTHORITY,
    BODY,
    HEADERS,
    PRINCIPAL,
    WRITES,
    BadInput,
    Failure,
    error_response,
    failure,
    first_line,
    page_context,
)
from switchyard.console.templating import render

log = logging.getLogger(__name__)

# kept under their old names for whoever imported them from here
_failure, _first_line = failure, first_line


def _error_response(f: Failure, api: bool, request: Request | None = None) -> Response:
    return error_response(f, api, request)


def _window(request: Request) -> timedelta | None:
    raw = request.query_params.get("window")
    if raw is None:
        return None
    try:
        return data.parse_window(raw)
    except ValueError as exc:
        raise BadInput(str(exc)) from None


def make_app(
    src: data.Sources,
    token: str | None = None,
    *,
    tokens: list[Token] | None = None,
    writes: bool = False,
    bus: MessageBus | None = None,
    authority: Authority | None = None,
) -> Starlette:
    """The console over these sources. With `tokens` (or the one read-only `token` of old,
    a viewer), every request needs one: a bearer or the session a login made. Writes are
    served only with `writes` (and tokens: a write needs a role); `bus` is what run-now
    with a parameter publishes on and a stop is broadcast on (None: the store only, the
    scheduler relays)."""
    if authority is None:
        given = list(tokens or [])
        if token:
            given.append(Token("console", Role.VIEWER, token.encode("utf-8")))
        authority = Authority(given)
    if writes and not authority.required:
        raise ValueError("a console serving writes needs tokens (a write needs a role)")

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
                render(
                    page,
                    now=src.now().isoformat(timespec="seconds"),
                    **page_context(request),
                    **(wrap(body) if wrap else body),
                ),
                headers=HEADERS,
            )

        try:
            return await run_in_threadpool(respond)
        except Exception as exc:  # every failure is a page or JSON with its status, never a traceback
            return _error_response(_failure(exc), api, request)

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
                raise data.UnknownBusiness(code, "not in the store")
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
                raise data.UnknownBusiness(code, "not in the store")
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

    async def login_page(request: Request) -> Response:
        return _login(request, authority)

    async def logout(request: Request) -> Response:
        # the gate checked the session's CSRF token: no other site can log one out
        response = RedirectResponse("/login", 303, headers=HEADERS)
        response.delete_cookie(COOKIE, path="/", httponly=True, samesite="strict")
        return response

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        title = "Not found" if status == 404 else "Method not allowed" if status == 405 else "Error"
        return _error_response(
            Failure(status, title, f"No page at {request.url.path}." if status == 404 else title),
            request.url.path.startswith("/api/"),
            request,
        )

    routes: list[BaseRoute] = [
        Route("/", index),
        Route("/login", login_page, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
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
        *executors.routes(src),
        *runs.routes(src),
        *lanes.routes(src),
    ]
    # each page family's own module adds its routes here (its writes behind the gate below)
    routes += job_pages.routes(src, bus)
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    app.add_middleware(Gate, authority=authority, writes=writes)
    return app


def _login(request: Request, authority: Authority, back_to: str | None = None) -> Response:
    """GET: the form. POST: the form's CSRF pair checked (login CSRF), then the token, a
    session cookie set (HttpOnly, SameSite=Strict: never sent with another site's
    request), back to where it came from."""
    nxt = back_to or request.query_params.get("next", "/")
    if not nxt.startswith("/") or nxt.startswith("//"):
        nxt = "/"  # only a page of this console: never an open redirect
    # one nonce per browser while its cookie lives (two tabs' forms both post)
    had = request.cookies.get(LOGIN_COOKIE, "")
    nonce = had if re.fullmatch(r"[0-9a-f]{32}", had) else authority.login_nonce()
    ctx = {
        "now": None,
        "next": nxt,
        "required": authority.required,
        "login_csrf": authority.login_csrf(nonce),
        **page_context(request),
    }

    def form(error: str = "", status: int = 200, headers: dict[str, str] | None = None) -> Response:
        response = HTMLResponse(
            render("login.html.j2", error=error, **ctx), status, headers={**HEADERS, **(headers or {})}
        )
        if authority.required:
            response.set_cookie(
                LOGIN_COOKIE,
                nonce,
                max_age=LOGIN_NONCE_TTL_S,
                path="/login",
                httponly=True,
                samesite="strict",
                secure=request.url.scheme == "https",
            )
        return response

    if request.method != "POST":
        return form()
    client = request.client.host if request.client else "?"
    body = request.scope.get(BODY, b"")
    fields = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
    if not authority.login_csrf_ok(had, fields.get(CSRF_FIELD, "")):
        # another site's post (it sends no cookie of ours, and cannot read the form's field),
        # or a form older than its cookie: refused before the token is looked at
        log.warning("console login refused from %s: no or a wrong login CSRF token", client)
        return form("This login form is stale or not this console's: log in again from this page.", 403)
    if authority.throttle.blocked(client):
        return form(
            "Too many wrong tokens from here: wait a minute.",
            429,
            {"Retry-After": str(int(authority.throttle.window_s))},
        )
    who = authority.bearer(fields.get("token", "").strip().encode("utf-8"))
    if who is None:
        authority.throttle.failed(client)
        log.warning("console login refused from %s", client)
        return form("That token is not one of this console's.", 401)
    log.info("console login: %s (%s)", who.name, who.role.label)
    response = RedirectResponse(nxt, 303, headers=HEADERS)
    response.set_cookie(
        COOKIE,
        authority.session_cookie(who),
        max_age=authority.ttl_s,
        path="/",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    response.delete_cookie(LOGIN_COOKIE, path="/login", httponly=True, samesite="strict")
    return response


MAX_BODY = 1 << 20  # a job's form is a few kB; a sharding item list of thousands still fits
SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


class Gate:
    """Who the request is, before any route: a bearer token, else the session cookie. With
    tokens configured, nothing but the login page answers without one (401). A write (any
    method but GET/HEAD/OPTIONS) is refused 403 on a read-only console, to a viewer, and,
    when it came with the cookie, without the session's CSRF token (form field `csrf` or
    header X-CSRF-Token). The body is read here (bounded) to find the field, and handed on."""

    def __init__(self, app: ASGIApp, authority: Authority, writes: bool) -> None:
        self.app = app
        self.authority = authority
        self.writes = writes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        method = str(scope.get("method", "GET")).upper()
        api = path.startswith("/api/")
        headers = {k.lower(): v for k, v in scope["headers"]}
        scope[AUTHORITY] = self.authority
        scope[WRITES] = self.writes

        async def refuse(f: Failure) -> None:
            response = _error_response(f, api, Request(scope))
            if f.status == 401:
                response.headers["WWW-Authenticate"] = 'Bearer realm="switchyard console"'
            await response(scope, receive, send)

        who = None
        auth = headers.get(b"authorization", b"")
        if auth:
            scheme, _, given = auth.partition(b" ")
            who = self.authority.bearer(given.strip()) if scheme.lower() == b"bearer" else None
            if who is None:
                await refuse(Failure(401, "Unauthorized", "That bearer token is not one of this console's."))
                return
        else:
            cookie = Request(scope).cookies.get(COOKIE)
            who = self.authority.session(cookie) if cookie else None
        if who is None and not self.authority.required:
            who = ANONYMOUS
        if who is not None:
            scope[PRINCIPAL] = who
        elif path != "/login":
            if api or method not in SAFE:
                await refuse(Failure(401, "Unauthorized", "This console needs a token (Authorization: Bearer ...)."))
                return
            query = scope.get("query_string", b"").decode("latin-1")
            response = _login(Request(scope), self.authority, path + ("?" + query if query else ""))
            response.status_code = 401
            response.headers["WWW-Authenticate"] = 'Bearer realm="switchyard console"'
            await response(scope, receive, send)
            return
        if method in SAFE:
            await self.app(scope, receive, send)
            return
        body = await _read_body(receive)
        if body is None:
            await refuse(Failure(413, "Too large", f"A request body is at most {MAX_BODY} bytes here."))
            return
        scope[BODY] = body
        if path != "/login":
            assert who is not None
            if path != "/logout":
                if not self.writes:
                    await refuse(
                        Failure(403, "Read-only console", "This console serves no writes: start it with --writes.")
                    )
                    return
                if not who.may(Role.OPERATOR):
                    await refuse(Failure(403, "Forbidden", f"{who.name} is {who.role.label}: a viewer only reads."))
                    return
            if who.via != "bearer":
                given = headers.get(CSRF_HEADER.encode("ascii"), b"").decode("ascii", "replace")
                if not given and b"x-www-form-urlencoded" in headers.get(b"content-type", b""):
                    form = dict(parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True))
                    given = form.get(CSRF_FIELD, "")
                if not self.authority.csrf_ok(who, given):
                    log.warning("console write refused: no or a wrong CSRF token (%s %s, %s)", method, path, who.name)
                    await refuse(
                        Failure(403, "CSRF check failed", "This form is stale or not this console's: reload the page.")
                    )
                    return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)


async def _read_body(receive: Receive) -> bytes | None:
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks)
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)
