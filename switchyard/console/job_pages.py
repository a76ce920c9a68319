"""The console's job pages and their JSON API (issue 28): list, show, create, edit, copy,
delete, start, stop and run once now, every write through `switchyard.jobs.Jobs` (the
CLI's one validated path) with the signed-in token's name as the audit's actor.

Pages: GET /jobs, GET|POST /jobs/new, GET|POST /jobs/{job} (a POST's `action`: save,
preview, copy, delete, start, stop, run). API: GET|POST /api/jobs, GET /api/jobs/preview,
GET|POST|DELETE /api/jobs/{job}, POST /api/jobs/{job}/run|start|stop|copy.
Who may: a viewer reads; an operator starts, stops, runs now and previews; an admin
also creates, edits, copies and deletes (the gate in app.py has already refused a write
without a role or a CSRF token)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import quote, urlencode

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from scheduler_core.jobspec import JobInputError
from scheduler_core.model import Job
from scheduler_core.ports import MessageBus
from scheduler_core.stops import StopService
from scheduler_core.store.job_admin import TriggerBusy
from scheduler_core.store.stops import SqlStops
from switchyard.console import data, job_data
from switchyard.console.auth import Role
from switchyard.console.data import Sources
from switchyard.console.responses import (
    BODY,
    HEADERS,
    BadInput,
    Failure,
    error_response,
    failure,
    form_of,
    page_context,
    require,
)
from switchyard.console.templating import render
from switchyard.jobs import Jobs, UnknownName, preview

# what a redirect after a write says on the job's page (a fixed text per key: no page
# shows text taken from its own URL)
DONE = {
    "created": "Created.",
    "copied": "Copied: the copy is created stopped; start it when it should fire.",
    "saved": "Saved.",
    "unchanged": "Nothing changed.",
    "started": "Started.",
    "stopped": "Stopped: nothing runs at or after the stop time, including runs already handed out.",
    "ran": "Runs once now.",
}
ACTION_ROLE = {
    "save": Role.ADMIN,
    "copy": Role.ADMIN,
    "delete": Role.ADMIN,
    "start": Role.OPERATOR,
    "stop": Role.OPERATOR,
    "run": Role.OPERATOR,
    "preview": Role.OPERATOR,
}


def job_url(code: str) -> str:
    return "/jobs/" + quote(code, safe=":")


class FormError(Exception):
    """A form to show again, its bad field named (400)."""

    def __init__(self, form: dict[str, str], exc: JobInputError) -> None:
        super().__init__(str(exc))
        self.form = form
        self.field = job_data.field_of(exc)
        self.message = str(exc)


def _map(exc: BaseException) -> Failure:
    if isinstance(exc, UnknownName):
        return Failure(404, "Not found", str(exc.args[0]))
    if isinstance(exc, JobInputError):
        return Failure(400, "Bad input", str(exc))
    if isinstance(exc, ValueError) and not isinstance(exc, BadInput):
        return Failure(400, "Bad request", str(exc))
    if isinstance(exc, PermissionError):
        return Failure(403, "Refused", f"refused: {exc}")
    if isinstance(exc, TriggerBusy):
        return Failure(409, "Busy", f"{exc} (try again)")
    return failure(exc)


def routes(src: Sources, bus: MessageBus | None = None) -> list[BaseRoute]:
    def jobs_of(request: Request) -> Jobs:
        me = require(request, Role.VIEWER)
        return Jobs(src.store, src.migrator, StopService(SqlStops(src.store), bus), me.name)

    def page(request: Request, name: str, status: int = 200, **ctx: Any) -> Response:
        return HTMLResponse(
            render(name, now=src.now().isoformat(timespec="seconds"), **page_context(request), **ctx),
            status,
            headers=HEADERS,
        )

    async def run(request: Request, api: bool, work: Callable[[], Response]) -> Response:
        try:
            return await run_in_threadpool(work)
        except Exception as exc:  # a page or JSON with its status, never a traceback
            return error_response(_map(exc), api, request)

    def code_of(request: Request) -> str:
        return str(request.path_params["code"])

    def show_ctx(jobs: Jobs, job: Job, form: dict[str, str] | None = None) -> dict[str, Any]:
        view = jobs.view(job, all_items=True)
        return {
            "j": view.as_dict(),
            "form": form or job_data.form_of_view(view),
            "coming": preview(view.trigger, src.now()),
            "audit_q": urlencode({"business": job.biz_code}),
            "history": _history(src, job),
        }

    # -- pages -------------------------------------------------------------------------

    async def list_page(request: Request) -> Response:
        def work() -> Response:
            require(request, Role.VIEWER)
            f = job_data.Filters.of(request.query_params)
            result = job_data.job_list(src, f)
            return page(
                request,
                "jobs.html.j2",
                r=result,
                f=f,
                states=job_data.STATES,
                pager={
                    "prev": "/jobs?" + urlencode(f.query(page=result["page"] - 1)) if result["page"] > 1 else "",
                    "next": "/jobs?" + urlencode(f.query(page=result["page"] + 1))
                    if result["page"] < result["pages"]
                    else "",
                },
            )

        return await run(request, False, work)

    async def new_page(request: Request) -> Response:
        def work() -> Response:
            if request.method == "GET":
                require(request, Role.ADMIN)
                return page(request, "job_new.html.j2", form=dict(job_data.BLANK_FORM), error=None, coming=None)
            given = form_of(request)
            form = {**job_data.as_form(given), "stopped": given.get("stopped", "")}
            action = given.get("action", "save")
            require(request, ACTION_ROLE.get(action, Role.ADMIN))
            jobs = jobs_of(request)
            try:
                if action == "preview":
                    coming = job_data.preview(form, src.now())
                    return page(request, "job_new.html.j2", form=form, error=None, coming=coming)
                spec = job_data.spec_of(form)
                stopped = given.get("stopped") == "1"
                jobs.add(spec, stopped=stopped, reason=given.get("reason", "") or "console: job add")
            except JobInputError as exc:
                err = FormError(form, exc)
                return page(request, "job_new.html.j2", 400, form=form, error=err, coming=None)
            return RedirectResponse(job_url(spec.job_code) + "?done=created", 303, headers=HEADERS)

        return await run(request, False, work)

    async def job_page(request: Request) -> Response:
        def work() -> Response:
            jobs = jobs_of(request)
            job = jobs.resolve(code_of(request))
            done = DONE.get(request.query_params.get("done", ""), "")
            return page(request, "job.html.j2", **show_ctx(jobs, job), error=None, done=done, form_preview=None)

        return await run(request, False, work)

    async def job_post(request: Request) -> Response:
        def work() -> Response:
            given = form_of(request)
            action = given.get("action", "")
            if action not in ACTION_ROLE:
                raise BadInput(f"action: {action!r} is not one of {', '.join(ACTION_ROLE)}")
            require(request, ACTION_ROLE[action])
            jobs = jobs_of(request)
            job = jobs.resolve(code_of(request))
            reason = given.get("reason", "") or f"console: job {action}"
            here = job_url(job.job_code)
            if action in ("save", "preview"):
                ctx = show_ctx(jobs, job)
                form = job_data.as_form(given, ctx["form"])
                try:
                    if action == "preview":
                        coming = job_data.preview(form, src.now())
                        return page(
                            request, "job.html.j2", **{**ctx, "form": form}, error=None, done="", form_preview=coming
                        )
                    changes = job_data.changes_of(jobs.view(job, all_items=True).spec(), job_data.spec_of(form))
                    if not changes:
                        return RedirectResponse(here + "?done=unchanged", 303, headers=HEADERS)
                    jobs.edit(job, changes, reason=reason)
                except JobInputError as exc:
                    err = FormError(form, exc)
                    return page(
                        request, "job.html.j2", 400, **{**ctx, "form": form}, error=err, done="", form_preview=None
                    )
                return RedirectResponse(here + "?done=saved", 303, headers=HEADERS)
            if action == "copy":
                new_code = given.get("new_job", "").strip()
                copied = jobs.copy(job, new_code, biz_code=given.get("to_business", "").strip() or None, reason=reason)
                return RedirectResponse(job_url(copied.job.job_code) + "?done=copied", 303, headers=HEADERS)
            if action == "delete":
                if given.get("confirm") != "1":  # a button next to Run now: one stray click deletes nothing
                    raise JobInputError("confirm", "tick the box beside Delete to delete the job")
                jobs.delete(job, reason=reason)
                return RedirectResponse("/jobs", 303, headers=HEADERS)
            if action == "start":
                jobs.start(job, reason=reason)
                return RedirectResponse(here + "?done=started", 303, headers=HEADERS)
            if action == "stop":
                jobs.stop(job, reason=reason)
                return RedirectResponse(here + "?done=stopped", 303, headers=HEADERS)
            params = given.get("run_params") if given.get("with_param") == "1" else None
            addresses = tuple(a for a in re.split(r"[\s,]+", given.get("run_addresses", "")) if a)
            jobs.run(job, params=params, addresses=addresses, bus=bus, reason=reason)
            return RedirectResponse(here + "?done=ran", 303, headers=HEADERS)

        return await run(request, False, work)

    # -- API ---------------------------------------------------------------------------

    def body_of(request: Request) -> dict[str, Any]:
        raw = form_of_json(request)
        if not isinstance(raw, dict):
            raise BadInput("the body must be a JSON object")
        return raw

    def answer(body: Any, status: int = 200) -> Response:
        return JSONResponse(body, status, headers=HEADERS)

    async def api_list(request: Request) -> Response:
        def work() -> Response:
            if request.method == "GET":
                require(request, Role.VIEWER)
                return answer(job_data.job_list(src, job_data.Filters.of(request.query_params)))
            require(request, Role.ADMIN)
            given = body_of(request)
            spec = job_data.spec_of(job_data.as_form(given))
            view = jobs_of(request).add(spec, stopped=bool(given.get("stopped")), reason=str(given.get("reason", "")))
            return answer(view.as_dict(), 201)

        return await run(request, True, work)

    async def api_preview(request: Request) -> Response:
        def work() -> Response:
            require(request, Role.VIEWER)
            form = job_data.as_form(dict(request.query_params))
            return answer({"next_fires": job_data.preview(form, src.now())})

        return await run(request, True, work)

    async def api_job(request: Request) -> Response:
        def work() -> Response:
            jobs = jobs_of(request)
            job = jobs.resolve(code_of(request))
            if request.method == "GET":
                view = jobs.view(job)
                return answer({**view.as_dict(), "next_fires": preview(view.trigger, src.now())})
            require(request, Role.ADMIN)
            if request.method == "DELETE":
                report = jobs.delete(job, reason=str(request.query_params.get("reason", "")))
                return answer({"job": job.job_code, "deleted": True, "at": None if report is None else str(report.at)})
            given = body_of(request)
            before = jobs.view(job, all_items=True).spec()
            form = job_data.as_form(given, job_data.form_of_view(jobs.view(job, all_items=True)))
            changes = job_data.changes_of(before, job_data.spec_of(form))
            if not changes:
                return answer({**jobs.view(job).as_dict(), "note": "nothing changed"})
            view, note = jobs.edit(job, changes, reason=str(given.get("reason", "")))
            return answer({**view.as_dict(), "note": note})

        return await run(request, True, work)

    def api_action(action: str) -> Callable[[Request], Any]:
        async def endpoint(request: Request) -> Response:
            def work() -> Response:
                require(request, ACTION_ROLE[action])
                given = body_of(request) if request.scope.get(BODY) else {}
                jobs = jobs_of(request)
                job = jobs.resolve(code_of(request))
                reason = str(given.get("reason", ""))
                if action == "run":
                    params = given.get("params")
                    addresses = given.get("addresses") or []
                    if not isinstance(addresses, list):
                        raise JobInputError("address", "addresses is a list of executor addresses")
                    t = jobs.run(
                        job,
                        params=None if params is None else str(params),
                        addresses=tuple(str(a) for a in addresses),
                        bus=bus,
                        reason=reason,
                    )
                    return answer({"job": job.job_code, "trigger_id": t.id, "at": t.next_fire_at.isoformat()})
                if action == "copy":
                    to = str(given.get("business") or "") or None
                    view = jobs.copy(job, str(given.get("job", "")), biz_code=to, reason=reason)
                    return answer(view.as_dict(), 201)
                report = jobs.start(job, reason=reason) if action == "start" else jobs.stop(job, reason=reason)
                return answer(
                    {
                        "job": job.job_code,
                        "action": action,
                        "at": None if report.at is None else report.at.isoformat(),
                        "changed": report.changed,
                        "unchanged": {str(k): v for k, v in report.unchanged.items()},
                    }
                )

            return await run(request, True, work)

        return endpoint

    return [
        Route("/jobs", list_page),
        Route("/jobs/new", new_page, methods=["GET", "POST"]),
        Route("/jobs/{code:path}", job_page, methods=["GET"]),
        Route("/jobs/{code:path}", job_post, methods=["POST"]),
        Route("/api/jobs", api_list, methods=["GET", "POST"]),
        Route("/api/jobs/preview", api_preview),
        *(
            Route(f"/api/jobs/{{code:path}}/{a}", api_action(a), methods=["POST"])
            for a in ("run", "start", "stop", "copy")
        ),
        Route("/api/jobs/{code:path}", api_job, methods=["GET", "POST", "DELETE"]),
    ]


def _history(src: Sources, job: Job, limit: int = 20) -> list[dict[str, Any]]:
    """The audited writes of this job, newest first (its business's audit log, this job's rows)."""
    out = []
    for a in data.audit(src, job.biz_code, limit=2000):
        detail = a.get("detail")
        d: dict[str, Any] = detail if isinstance(detail, dict) else {}
        named = [x.get("job") for x in (d.get("before"), d.get("after")) if isinstance(x, dict)]
        if job.job_code in named:
            out.append(a)
            if len(out) == limit:
                break
    return out


def form_of_json(request: Request) -> Any:
    body = request.scope.get(BODY, b"")
    if not body:
        return {}
    try:
        return json.loads(body)
    except ValueError as exc:
        raise BadInput(f"the body is not JSON: {exc}") from None


__all__ = ["job_url", "routes"]
