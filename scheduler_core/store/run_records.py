"""The store's side of the run-record ports (scheduler_core.ports.RunRecordReads,
StopReads): a business's fired records and follow-up runs as a comparison of the two
sides reads them, and the standing stops. Mixed into SqlTriggerStore, so the packages
above the core read them through a port instead of the store's tables."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import and_, case, select
from sqlalchemy.sql import ColumnElement

from dbkit.connections import connect
from scheduler_core.fence import MESSAGE_PREFIX
from scheduler_core.model import FiredState
from scheduler_core.stops import MESSAGE_PREFIX as STOP_PREFIX
from scheduler_core.stops import Stop
from scheduler_core.store import stop_rows

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from scheduler_core.store.schema import Tables


# the columns `runs_oldest_first` reads (what an alert's detection needs of a run)
RUN_OUTCOME_COLUMNS = (
    "command_id",
    "trigger_id",
    "scheduled_at",
    "state",
    "received_at",
    "started_at",
    "result_at",
    "misfired",
    "message",
)


def published_by_outcome(t: Tables) -> ColumnElement[bool]:
    """SQL condition on `t.fired`: a record the fire path left `pending` whose trigger has
    recorded the outcome of its occurrence (last_fired_at at or after it), so was
    published (`SqlTriggerStore.outcome_recorded` says why). Per pending record, one
    primary-key read of its trigger."""
    fr, tr = t.fired, t.trigger
    last = select(tr.c.last_fired_at).where(tr.c.id == fr.c.trigger_id).scalar_subquery()
    return and_(fr.c.state == FiredState.PENDING.value, fr.c.published_at.is_(None), last >= fr.c.scheduled_at)


def read_state(t: Tables, fenced_as: str | None, stopped_as: str | None = None) -> ColumnElement[Any]:
    """The "state" column as read: `published` for a pending record whose trigger recorded
    its occurrence's outcome (the fire path stamps none: FiredState), a fence's skip as
    `fenced_as` and an operator's stop's as `stopped_as` (else `fenced_as`) when given."""
    fr = t.fired
    whens: list[tuple[ColumnElement[bool], str]] = [(published_by_outcome(t), FiredState.PUBLISHED.value)]
    if fenced_as is not None:
        # a deliberate skip on the new side: a rollback's fence, or an operator's stop
        # (pause, cancel, freeze); neither a missing run nor a failed one
        skipped = fr.c.state == FiredState.SKIPPED.value
        whens.append((and_(skipped, fr.c.message.like(f"{MESSAGE_PREFIX}%")), fenced_as))
        whens.append((and_(skipped, fr.c.message.like(f"{STOP_PREFIX}%")), stopped_as or fenced_as))
    return case(*whens, else_=fr.c.state).label("state")


class RunRecordRows:
    """Mixed into SqlTriggerStore."""

    engine: Engine
    t: Tables

    def fired_rows_of(
        self,
        biz_code: str,
        start_ms: int,
        end_ms: int,
        columns: Sequence[str],
        *,
        fenced_as: str | None = None,
        stopped_as: str | None = None,
        by_time: bool = False,
    ) -> list[tuple[Any, ...]]:
        """The `columns` of a business's fired records scheduled in [start_ms, end_ms); the
        "state" column as read by `read_state` (published derived from the trigger's outcome).
        `fenced_as`: the "state" column names a rollback fence's skip so (told from a misfire
        policy's skip by the message the fence writes, in the query: the message itself is
        never fetched unless asked for); `stopped_as`: an operator's stop's skip (pause, cancel,
        freeze) so, else as `fenced_as` (both deliberate). `by_time`: in scheduled_at order (idx_fired_biz_time)."""
        fr = self.t.fired
        stmt = select(*(read_state(self.t, fenced_as, stopped_as) if c == "state" else fr.c[c] for c in columns)).where(
            fr.c.biz_code == biz_code, fr.c.scheduled_at >= start_ms, fr.c.scheduled_at < end_ms
        )
        if by_time:
            stmt = stmt.order_by(fr.c.scheduled_at)
        with connect(self.engine) as conn:
            return [tuple(r) for r in conn.execute(stmt).all()]

    def followup_claims_of(self, biz_code: str, from_ms: int, until_ms: int) -> list[tuple[str, str]]:
        """(child job code, child command id) of the business's follow-up claims written in
        [from_ms, until_ms) (`dus_followup_fired`: one per child run after a parent's success)."""
        ff, tr = self.t.followup_fired, self.t.trigger
        stmt = (
            select(tr.c.job_code, ff.c.child_command_id)
            .select_from(ff.join(tr, tr.c.id == ff.c.child_trigger_id))
            .where(tr.c.biz_code == biz_code, ff.c.at >= from_ms, ff.c.at < until_ms)
        )
        with connect(self.engine) as conn:
            return [(str(code), str(cid)) for code, cid in conn.execute(stmt).all()]

    def runs_oldest_first(
        self,
        *,
        biz_code: str,
        job_code: str,
        since_ms: int,
        after: tuple[int, str] | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """A job's fired records scheduled at or after `since_ms`, oldest first, paged by
        (scheduled_at, command_id) after `after` (the last row of the page before): the
        alerter's scan (switchyard.alerts). By business first, so the (biz_code, scheduled_at)
        index serves it."""
        fr = self.t.fired
        stmt = select(*(fr.c[c] for c in RUN_OUTCOME_COLUMNS)).where(
            and_(fr.c.biz_code == biz_code, fr.c.job_code == job_code, fr.c.scheduled_at >= since_ms)
        )
        if after is not None:
            at, cid = after
            stmt = stmt.where((fr.c.scheduled_at > at) | and_(fr.c.scheduled_at == at, fr.c.command_id > cid))
        stmt = stmt.order_by(fr.c.scheduled_at, fr.c.command_id).limit(max(1, limit))
        with connect(self.engine) as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]

    def stops(self) -> list[Stop]:
        """Every standing stop (pause, cancel, freeze), by scope and key."""
        with connect(self.engine) as conn:
            return stop_rows.read_stops(conn, self.t)
