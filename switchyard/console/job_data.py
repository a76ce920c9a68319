"""The console's jobs (issue 28): the list across businesses with its filters and pages,
and a job's form read into the JobSpec that `switchyard.jobs.Jobs` writes (the CLI's one
validated path: nothing here writes to the store). No HTTP here.

A form's fields are plain strings, the same names in the JSON API:
business, job, handler, params, kind (cron | every | once | none), cron, zone, dialect,
every, at, end, misfire, shards, items (one parameter a line), timeout, retries, priority,
children (codes separated by commas or white space)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from dualrun.settings import parse_duration
from migrator.ownership import ownership
from reports.redact import redact_tree
from scheduler_core.alert_rule import KINDS as ALERT_KINDS
from scheduler_core.alert_rule import AlertRule, parse_kinds
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule, parse_block, parse_lane
from scheduler_core.model import DEFAULT_CRON_DIALECT, Block, Lane, MisfirePolicy, Trigger, TriggerKind, TriggerState
from scheduler_core.ports import TriggerBrief
from scheduler_core.store.reads import JobBrief, job_briefs, job_keys, job_schedules
from switchyard.console.data import Sources
from switchyard.jobs import JobView, job_state, natural_key

KINDS = {"cron": TriggerKind.CRON, "every": TriggerKind.FIXED_RATE, "once": TriggerKind.ONCE, "none": TriggerKind.NONE}
KIND_OF = {v: k for k, v in KINDS.items()}
STATES = ("running", "stopped", "child", "not admitted", "completed", "deleted")
PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
# JobInputError's field names that are named otherwise on the form
FORM_FIELD = {"item": "items", "child": "children", "schedule": "kind", "edit": "job", "alert": "alerts"}
PREVIEW_N = 5


@dataclass(frozen=True, slots=True)
class Filters:
    q: str = ""  # in the code, the handler or the parameter
    business: str = ""
    state: str = ""
    handler: str = ""
    name: str = ""  # in the code
    side: str = ""  # the live side (new, legacy, both, paused, ended, orphaned, double)
    page: int = 1
    size: int = PAGE_SIZE

    @staticmethod
    def of(query: Mapping[str, str]) -> Filters:
        def number(key: str, default: int, top: int) -> int:
            raw = (query.get(key) or "").strip()
            if not raw:
                return default
            if not raw.isdigit() or not 1 <= int(raw) <= top:
                raise ValueError(f"{key}: {raw!r} must be a whole number from 1 to {top}")
            return int(raw)

        state = (query.get("state") or "").strip()
        if state and state not in STATES:
            raise ValueError(f"state: {state!r} is not one of {', '.join(STATES)}")
        return Filters(
            q=(query.get("q") or "").strip(),
            business=(query.get("business") or "").strip(),
            state=state,
            handler=(query.get("handler") or "").strip(),
            name=(query.get("name") or "").strip(),
            side=(query.get("side") or "").strip(),
            page=number("page", 1, 1_000_000),
            size=number("size", PAGE_SIZE, MAX_PAGE_SIZE),
        )

    def query(self, **changes: object) -> dict[str, str]:
        """The filters as query parameters (the pager's links), without the defaults."""
        out = {}
        for f in fields(self):
            value = changes.get(f.name, getattr(self, f.name))
            default = (f.name == "page" and value == 1) or (f.name == "size" and value == PAGE_SIZE)
            if value not in ("", None) and not default:
                out[f.name] = str(value)
        return out


def _schedule_text(t: Trigger | None) -> str:
    if t is None:
        return ""
    if t.kind is TriggerKind.CRON:
        return f"cron {t.cron} ({t.time_zone})"
    if t.kind is TriggerKind.FIXED_RATE and t.interval is not None:
        return f"every {t.interval.total_seconds():g} s"
    if t.kind is TriggerKind.ONCE:
        return f"once at {t.next_fire_at.isoformat()}"
    return "none (after its parent)"


def job_list(src: Sources, f: Filters) -> dict[str, Any]:
    """Every job matching the filters, by business then code with numbers as numbers
    (xxl:billing:9 before xxl:billing:10), one page of them with each one's state, lane,
    live side, schedule and next fire time. A narrow read of every job (its code and
    business; its handler and parameter too under a search or a handler filter, every
    trigger's state under a state filter), then for the page alone: its jobs and their
    schedules, and the sides (of the page's businesses; of every business only under a
    side filter)."""
    biz = f.business or None
    # the handler and parameter of every job only to filter by them; else the page's jobs' own
    briefs = job_briefs(src.store, biz) if f.q or f.handler else None
    keys = job_keys(src.store, biz) if briefs is None else [(j.job_code, j.biz_code) for j in briefs]
    # every job's state only to filter by it; else the page's jobs' own (their schedules, read below)
    states: dict[str, str] = {}
    if f.state:
        first: dict[str, TriggerBrief] = {}
        for b in src.store.trigger_briefs(None if biz is None else [biz]):  # by id: the oldest live one
            if b.state is not TriggerState.CANCELLED:
                first.setdefault(b.job_code, b)
        states = {code: job_state(b.kind, b.state) for code, b in first.items()}

    def sides_of(biz_codes: list[str] | None) -> dict[str, str]:
        return {
            j.job_code: j.side.value
            for bo in ownership(src.store, src.migrator, src.legacy_live, biz_codes)
            for j in bo.jobs
        }

    # the live side reads the ledger and the legacy tables of a business: for every
    # business only when the list is filtered by it, else for the page's businesses only
    sides = sides_of([biz] if biz else None) if f.side else {}
    q = f.q.lower()
    name = f.name.lower()
    rows: list[tuple[str, str]] = []
    for i, (code, biz_of) in enumerate(keys):
        if (
            (f.state and states.get(code, "deleted") != f.state)
            or (name and name not in code.lower())
            or (f.side and sides.get(code, "") != f.side)
        ):
            continue
        if briefs is not None:
            j = briefs[i]
            if (f.handler and j.handler != f.handler) or (
                q and not any(q in s.lower() for s in (j.job_code, j.handler, j.params))
            ):
                continue
        rows.append((code, biz_of))
    rows.sort(key=lambda r: (r[1], natural_key(r[0])))
    total = len(rows)
    pages = max(1, -(-total // f.size))
    page = min(f.page, pages)
    shown = rows[(page - 1) * f.size : page * f.size]
    if not f.side and shown:
        sides = sides_of(sorted({b for _c, b in shown}))
    by_code: dict[str, JobBrief] = {
        j.job_code: j
        for j in (briefs if briefs is not None else job_briefs(src.store, job_codes=[c for c, _b in shown]))
    }
    page_rows = [by_code[c] for c, _b in shown if c in by_code]
    triggers = job_schedules(src.store, [j.job_code for j in page_rows])
    t_next = (TriggerState.WAITING, TriggerState.ACQUIRED)

    return redact_tree(
        {
            "total": total,
            "page": page,
            "pages": pages,
            "size": f.size,
            "businesses": sorted({b for _c, b in keys}) if biz is None else [biz],
            "jobs": [
                {
                    "job": j.job_code,
                    "business": j.biz_code,
                    "handler": j.handler,
                    "params": j.params,
                    "lane": j.lane.value,
                    "state": job_state(None if t is None else t.kind, None if t is None else t.state),
                    "side": sides.get(j.job_code, ""),
                    "schedule": _schedule_text(t),
                    "next_fire_at": None if t is None or t.state not in t_next else t.next_fire_at.isoformat(),
                }
                for j in page_rows
                for t in (triggers.get(j.job_code),)
            ],
        }
    )


def form_of_view(view: JobView) -> dict[str, str]:
    """A job's form filled with what it is now (the edit form)."""
    spec = view.spec()
    s = spec.schedule
    return {
        "business": spec.biz_code,
        "job": spec.job_code,
        "handler": spec.handler,
        "params": spec.params,
        "kind": KIND_OF[s.kind],
        "cron": s.cron or "",
        "zone": s.time_zone,
        "dialect": s.dialect,
        "every": "" if s.interval is None else f"{s.interval.total_seconds():g}s",
        "at": "" if s.at is None else s.at.isoformat(),
        "end": "" if s.end_at is None else s.end_at.isoformat(),
        "misfire": s.misfire_policy.value,
        "shards": str(spec.shard_total),
        "items": "\n".join(spec.items),
        "timeout": f"{spec.timeout.total_seconds():g}s",
        "retries": str(spec.max_retry),
        "priority": str(spec.priority),
        "children": ", ".join(spec.children),
        "lane": (spec.lane or Lane.DEFAULT).value,
        "block": spec.block.value,
        "alerts": "\n".join(spec.alerts.targets),
        "alert_on": ", ".join(spec.alerts.kinds) if spec.alerts.targets else ", ".join(ALERT_KINDS),
    }


# the form's fields (a field added here is also read in spec_of and filled in form_of_view)
BLANK_FORM = {
    "business": "",
    "job": "",
    "handler": "",
    "params": "",
    "kind": "cron",
    "cron": "",
    "zone": "UTC",
    "dialect": DEFAULT_CRON_DIALECT,
    "every": "",
    "at": "",
    "end": "",
    "misfire": MisfirePolicy.FIRE_ONCE_NOW.value,
    "shards": "1",
    "items": "",
    "timeout": "30s",
    "retries": "0",
    "priority": "5",
    "children": "",
    # empty: the business's default lane (switchyard.jobs resolves it)
    "lane": "",
    "block": Block.CONCURRENT.value,
    "alerts": "",
    "alert_on": ", ".join(ALERT_KINDS),
}


def as_form(given: Mapping[str, Any], base: Mapping[str, str] = BLANK_FORM) -> dict[str, str]:
    """A form's (or the API's JSON) values as the form's strings over `base`: what is not
    given keeps its value (an API edit names only what changes)."""
    out = dict(base)
    for key in BLANK_FORM:
        if key not in given or given[key] is None:
            continue
        value = given[key]
        if isinstance(value, (list, tuple)):
            value = ("\n" if key in ("items", "alerts") else ", ").join(str(v) for v in value)
        elif isinstance(value, bool):
            raise JobInputError(key, "is not a string or a number")
        out[key] = str(value)
    return out


def _int(name: str, text: str) -> int:
    if not re.fullmatch(r"-?\d+", text.strip()):
        raise JobInputError(name, f"{text!r} is not a whole number")
    return int(text)


def _duration(name: str, text: str) -> timedelta:
    try:
        return parse_duration(text.strip())
    except ValueError as exc:
        raise JobInputError(name, str(exc)) from None


def _zone(text: str) -> ZoneInfo:
    try:
        return ZoneInfo(text.strip() or "UTC")
    except (ZoneInfoNotFoundError, ValueError):
        raise JobInputError("zone", f"unknown time zone {text!r}") from None


def _when(name: str, text: str, zone: ZoneInfo) -> datetime | None:
    """An ISO time; without an offset it is read in the job's zone (a form's datetime)."""
    if not text.strip():
        return None
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise JobInputError(name, f"not an ISO time: {text!r} (e.g. 2026-12-24T08:00:00+01:00)") from None
    return at if at.tzinfo is not None else at.replace(tzinfo=zone)


def schedule_of(form: Mapping[str, str]) -> Schedule:
    kind_text = form.get("kind", "").strip()
    if kind_text not in KINDS:
        raise JobInputError("schedule", f"{kind_text!r} is not one of {', '.join(KINDS)}")
    kind = KINDS[kind_text]
    zone = _zone(form.get("zone", ""))
    misfire = form.get("misfire", "").strip() or MisfirePolicy.FIRE_ONCE_NOW.value
    try:
        policy = MisfirePolicy(misfire)
    except ValueError:
        raise JobInputError(
            "misfire", f"{misfire!r} is not one of {', '.join(p.value for p in MisfirePolicy)}"
        ) from None
    return Schedule(
        kind=kind,
        # the fields of the other kinds stay on the form unused: only this kind's are read
        cron=form.get("cron", "").strip() or None if kind is TriggerKind.CRON else None,
        dialect=form.get("dialect", "").strip() or DEFAULT_CRON_DIALECT,  # type: ignore[arg-type]
        time_zone=zone.key,
        interval=_duration("every", form.get("every", "")) if kind is TriggerKind.FIXED_RATE else None,
        at=_when("at", form.get("at", ""), zone) if kind is TriggerKind.ONCE else None,
        misfire_policy=policy,
        end_at=_when("end", form.get("end", ""), zone),
    )


def _alerts_of(form: Mapping[str, str]) -> AlertRule:
    """The alert targets (one a line: webhook:URL or mail:ADDRESS) and the kinds they alert on."""
    targets = tuple(line.strip() for line in form.get("alerts", "").splitlines() if line.strip())
    try:
        kinds = parse_kinds(form.get("alert_on", "") or ",".join(ALERT_KINDS))
        rule = AlertRule(targets=targets, kinds=kinds)
        rule.check()
    except ValueError as exc:
        raise JobInputError("alerts", str(exc)) from None
    return rule


def spec_of(form: Mapping[str, str]) -> JobSpec:
    """The JobSpec of a form, every field checked (JobInputError naming the first bad one)."""
    items = tuple(line.strip() for line in form.get("items", "").splitlines() if line.strip())
    shards_text = form.get("shards", "").strip()
    shards = _int("shards", shards_text) if shards_text else max(1, len(items))
    spec = JobSpec(
        job_code=form.get("job", "").strip(),
        biz_code=form.get("business", "").strip(),
        handler=form.get("handler", "").strip(),
        params=form.get("params", ""),
        schedule=schedule_of(form),
        shard_total=shards,
        items=items,
        timeout=_duration("timeout", form.get("timeout", "") or "30s"),
        max_retry=_int("retries", form.get("retries", "") or "0"),
        priority=_int("priority", form.get("priority", "") or "5"),
        children=tuple(c for c in re.split(r"[\s,]+", form.get("children", "")) if c),
        lane=parse_lane(form["lane"].strip()) if form.get("lane", "").strip() else None,
        block=parse_block(form.get("block", "").strip() or Block.CONCURRENT.value),
        alerts=_alerts_of(form),
    )
    spec.check()
    return spec


# the JobSpec fields the form sets: a field it does not show (one added to JobSpec for
# another page or command) is never changed by saving the form
FORM_SPEC_FIELDS = (
    "job_code",
    "biz_code",
    "handler",
    "params",
    "schedule",
    "shard_total",
    "items",
    "timeout",
    "max_retry",
    "priority",
    "children",
    "lane",
    "block",
    "alerts",
)


def changes_of(before: JobSpec, after: JobSpec) -> dict[str, Any]:
    """What an edit changes: the form's JobSpec fields that differ (Jobs.edit rewrites
    only those)."""
    return {
        name: getattr(after, name)
        for name in FORM_SPEC_FIELDS
        if getattr(after, name) != getattr(before, name)
        # a lane left empty keeps the job's own (it is the business's default only at the add)
        and not (name == "lane" and after.lane is None)
    }


def preview(form: Mapping[str, str], now: datetime, n: int = PREVIEW_N) -> list[str]:
    """The next `n` fire times of the form's schedule, in its zone and Quartz dialect."""
    s = schedule_of(form)
    zone = ZoneInfo(s.time_zone)
    return [t.astimezone(zone).isoformat() for t in s.next_times(now, n)]


def field_of(exc: JobInputError) -> str:
    return FORM_FIELD.get(exc.field, exc.field)


__all__ = [
    "BLANK_FORM",
    "STATES",
    "Filters",
    "as_form",
    "changes_of",
    "field_of",
    "form_of_view",
    "job_list",
    "preview",
    "schedule_of",
    "spec_of",
]
