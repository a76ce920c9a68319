"""Read-only queries over the core's tables for the packages above the core (dual-run's
collectors, the console, the embedded center): those packages reach the core's tables
only here and through the store's ports (tests/unit/test_table_owners.py holds that)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import func, select

from dbkit.connections import connect
from scheduler_core.model import FiredState, JobCode, Lane, Trigger, TriggerState
from scheduler_core.store.rows import trigger_from_row
from scheduler_core.store.sql import SqlTriggerStore


def job_schedules(store: SqlTriggerStore, job_codes: Collection[str]) -> dict[str, Trigger]:
    """Each of these jobs' schedule: its oldest trigger not cancelled (full rows; a page's
    few jobs, one query)."""
    tr = store.t.trigger
    codes = sorted(set(job_codes))
    out: dict[str, Trigger] = {}
    if not codes:
        return out
    stmt = select(tr).where(tr.c.job_code.in_(codes), tr.c.state != TriggerState.CANCELLED.value).order_by(tr.c.id)
    with store.engine.connect() as conn:
        for row in conn.execute(stmt).mappings():
            t = trigger_from_row(row)
            out.setdefault(t.job_code, t)
    return out


@dataclass(frozen=True, slots=True)
class JobBrief:
    """What the job list shows and filters on of a job (its full row: `store.get_jobs`)."""

    job_code: JobCode
    biz_code: str
    handler: str
    params: str
    lane: Lane


def job_briefs(
    store: SqlTriggerStore, biz_code: str | None = None, job_codes: Collection[str] | None = None
) -> list[JobBrief]:
    """Every job of the business (None: all), or these jobs, by business and code."""
    j = store.t.job
    stmt = select(j.c.job_code, j.c.biz_code, j.c.handler, j.c.params, j.c.lane).order_by(j.c.biz_code, j.c.job_code)
    if biz_code is not None:
        stmt = stmt.where(j.c.biz_code == biz_code)
    if job_codes is not None:
        if not job_codes:
            return []
        stmt = stmt.where(j.c.job_code.in_(sorted(set(job_codes))))
    with store.engine.connect() as conn:
        return [
            JobBrief(JobCode(str(code)), str(biz), str(handler), str(params), Lane.of(lane))
            for code, biz, handler, params, lane in conn.execute(stmt).all()
        ]


def job_keys(store: SqlTriggerStore, biz_code: str | None = None) -> list[tuple[str, str]]:
    """(job code, business) of every job of the business (None: all): what a list that
    filters by neither handler nor parameter needs of every job to order and page them."""
    j = store.t.job
    stmt = select(j.c.job_code, j.c.biz_code)
    if biz_code is not None:
        stmt = stmt.where(j.c.biz_code == biz_code)
    with store.engine.connect() as conn:
        return [(str(code), str(biz)) for code, biz in conn.execute(stmt).all()]


# a run published (or persisted to be) whose executor has not reported its end: still to
# come while its fire time is ahead (skipped ones are stopped, not a backlog)
_NOT_DONE = (FiredState.PENDING.value, FiredState.PUBLISHED.value, FiredState.RECEIVED.value)


def receipt_lags_by_lane(store: SqlTriggerStore, start_ms: int, end_ms: int) -> list[tuple[str, Lane, int, int | None]]:
    """(business, lane, scheduled_at, received_at - scheduled_at or None) of the fired
    records scheduled in [start_ms, end_ms), not skipped: the fire-time lag per lane. The
    lane is the record's trigger's (a job moved to another lane counts there, history too)."""
    fr, tr = store.t.fired, store.t.trigger
    stmt = (
        select(fr.c.biz_code, tr.c.lane, fr.c.scheduled_at, fr.c.received_at - fr.c.scheduled_at)
        .select_from(fr.join(tr, tr.c.id == fr.c.trigger_id))
        .where(
            fr.c.scheduled_at >= start_ms,
            fr.c.scheduled_at < end_ms,
            fr.c.state != FiredState.SKIPPED.value,
        )
    )
    with store.engine.connect() as conn:
        return [
            (str(biz), Lane.of(lane), int(at), None if lag is None else int(lag))
            for biz, lane, at, lag in conn.execute(stmt).all()
        ]


def published_ahead(store: SqlTriggerStore, now_ms: int) -> dict[tuple[str, Lane], int]:
    """Per business and lane, the runs published (fired records written) whose fire time
    is still ahead of `now_ms` and that no executor finished or a stop skipped: the
    published-not-yet-due backlog as the store holds it (what a stop now would skip).
    Counted per trigger first, on the scheduled_at index, then its lane."""
    fr, tr = store.t.fired, store.t.trigger
    per_trigger = (
        select(fr.c.trigger_id, fr.c.biz_code, func.count().label("n"))
        .where(fr.c.scheduled_at > now_ms, fr.c.state.in_(_NOT_DONE))
        .group_by(fr.c.trigger_id, fr.c.biz_code)
        .subquery()
    )
    stmt = (
        select(per_trigger.c.biz_code, tr.c.lane, func.sum(per_trigger.c.n))
        .select_from(per_trigger.join(tr, tr.c.id == per_trigger.c.trigger_id))
        .group_by(per_trigger.c.biz_code, tr.c.lane)
    )
    out: dict[tuple[str, Lane], int] = {}
    with store.engine.connect() as conn:
        for biz, lane, n in conn.execute(stmt).all():
            key = (str(biz), Lane.of(lane))
            out[key] = out.get(key, 0) + int(n)
    return out


def waiting_summary(store: SqlTriggerStore) -> tuple[int, int | None]:
    """How many triggers wait, and the earliest next fire time among them (epoch ms):
    one aggregate on the (state, next_fire_at) index."""
    tr = store.t.trigger
    with connect(store.engine) as conn:
        count, oldest_ms = conn.execute(
            select(func.count(), func.min(tr.c.next_fire_at)).where(tr.c.state == TriggerState.WAITING.value)
        ).one()
    return int(count), None if oldest_ms is None else int(oldest_ms)
