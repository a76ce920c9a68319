"""The store side of jobs as an operator manages them (issue 28): the job list, a trigger's
schedule replaced through the schedule-edit path (`SqlSupersedes.record_edit`, in the
transaction of the change), a job's definition removed, and the run log read from the
fired records. Beside `SqlTriggerStore` (not in it), reaching its engine and tables."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case, delete, or_, select, update

from dbkit.connections import begin, connect
from scheduler_core.model import Job, JobCode, Lane, Trigger, TriggerId, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after, times_until
from scheduler_core.store.rows import job_from_row, trigger_from_row
from scheduler_core.store.run_records import published_by_outcome
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.supersede import MARGIN, Supersede
from scheduler_core.times import from_ms, opt_to_ms, to_ms

S = TriggerState
_PERIODIC = (TriggerKind.CRON, TriggerKind.FIXED_RATE)
_ONE_MS = timedelta(milliseconds=1)
# a schedule denser than any sane one between E and the next fire: the list stops there
_MAX_PENDING = 20_000
RUN_COLUMNS = (
    "command_id",
    "trigger_id",
    "job_code",
    "biz_code",
    "scheduled_at",
    "item_index",
    "item_total",
    "state",
    "fired_at",
    "published_at",
    "received_at",
    "started_at",
    "result_at",
    "attempt",
    "misfired",
    "message",
    "executor",
)


class TriggerBusy(Exception):
    """The trigger is being fired right now (acquired): its schedule changes after that fire."""


@dataclass(frozen=True, slots=True)
class Rescheduled:
    trigger: Trigger
    supersede: Supersede | None  # what the edit superseded from E on (None: nothing published ahead)


class SqlJobAdmin:
    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def jobs(self, biz_code: str | None = None) -> list[Job]:
        j = self.t.job
        stmt = select(j).order_by(j.c.biz_code, j.c.job_code)
        if biz_code is not None:
            stmt = stmt.where(j.c.biz_code == biz_code)
        with connect(self.store.engine) as conn:
            return [job_from_row(r) for r in conn.execute(stmt).mappings()]

    def reschedule(self, trigger_id: TriggerId, new: Trigger, margin: timedelta = MARGIN) -> Rescheduled:
        """The trigger's schedule becomes `new`'s (kind, cron, dialect, interval, zone, end,
        misfire policy; `new.next_fire_at` is its first fire computed from now), effective
        at E = now + margin as every schedule edit: the old schedule's commands already
        published for E or later that the new one lacks are superseded (skipped, the
        executors told through the trigger's stop), the new one's occurrences before its
        next fire time are published by whoever holds the bus. A paused trigger stays
        paused; a trigger being fired raises TriggerBusy (nothing written)."""
        tr = self.t.trigger
        now_ms = self.store.clock.now_ms()
        effective_ms = now_ms + int(margin.total_seconds() * 1000)
        with begin(self.store.engine) as conn:
            row = conn.execute(select(tr).where(tr.c.id == trigger_id).with_for_update()).mappings().one_or_none()
            if row is None:
                raise KeyError(f"no trigger {trigger_id}")
            old = trigger_from_row(row)
            if old.state is S.ACQUIRED:
                raise TriggerBusy(f"trigger {trigger_id} is being fired right now; try again in a second")
            if old.state is S.CANCELLED:
                raise ValueError(f"trigger {trigger_id} is cancelled")
            # how far the old schedule has published: a periodic trigger's occurrences
            # before its next_fire_at (one lookahead ahead); a one-shot admitted ahead its one
            published_until: int | None = None
            if old.state is S.WAITING and old.kind in _PERIODIC:
                published_until = to_ms(old.next_fire_at)
            elif old.state is S.COMPLETED and old.kind is TriggerKind.ONCE:
                published_until = to_ms(old.next_fire_at) + 1
            next_ms = to_ms(new.next_fire_at)
            if published_until is not None and new.kind in _PERIODIC and published_until > next_ms:
                # never back over what the old schedule published: from there on the new
                # schedule fires as usual, the occurrences before it are the edit's pending runs
                moved = next_after(new, from_ms(published_until) - _ONE_MS)
                next_ms = to_ms(moved) if moved is not None else next_ms
            if new.kind is TriggerKind.NONE:
                state = S.COMPLETED
            elif old.state in (S.PAUSED, S.CREATED):
                state = old.state
            else:
                state = S.WAITING
            conn.execute(
                update(tr)
                .where(tr.c.id == trigger_id, tr.c.version == old.version)
                .values(
                    kind=new.kind.value,
                    cron_expr=new.cron,
                    cron_dialect=new.cron_dialect if new.kind is TriggerKind.CRON else None,
                    interval_ms=None if new.interval is None else int(new.interval.total_seconds() * 1000),
                    time_zone=new.time_zone,
                    end_at=opt_to_ms(new.end_at),
                    misfire_policy=new.misfire_policy.value,
                    priority=new.priority,
                    next_fire_at=next_ms,
                    state=state.value,
                    version=old.version + 1,
                    updated_at=now_ms,
                )
            )
            supersede = None
            if published_until is not None and effective_ms < published_until:
                times = _times_between(new, effective_ms, next_ms) if new.kind in _PERIODIC else []
                supersede = SqlSupersedes(self.store).record_edit(
                    conn, trigger_id, old.biz_code, effective_ms, times, now_ms
                )
            after = trigger_from_row(conn.execute(select(tr).where(tr.c.id == trigger_id)).mappings().one())
        return Rescheduled(after, supersede)

    def set_lane(self, job_code: JobCode, lane: Lane) -> int:
        """The job and each of its triggers move to `lane` (one transaction); returns the
        triggers moved. Their version is left alone: a fire under way completes as it was
        admitted (on the old lane's topic), and the next admission is the new lane's."""
        j, tr = self.t.job, self.t.trigger
        now = self.store.clock.now_ms()
        with begin(self.store.engine) as conn:
            conn.execute(update(j).where(j.c.job_code == job_code).values(lane=lane.value, updated_at=now))
            return int(
                conn.execute(
                    update(tr).where(tr.c.job_code == job_code).values(lane=lane.value, updated_at=now)
                ).rowcount
            )

    def delete_job(self, job_code: JobCode) -> None:
        """The job's definition, sharding items and follow-up links go; its triggers stay
        (cancelled by the caller first) with the fired history attached to them."""
        j, si, fu, tr = self.t.job, self.t.sharding_item, self.t.followup, self.t.trigger
        with begin(self.store.engine) as conn:
            job_id = conn.execute(select(j.c.id).where(j.c.job_code == job_code)).scalar_one_or_none()
            if job_id is None:
                raise KeyError(f"no job {job_code!r}")
            ids = [int(i) for (i,) in conn.execute(select(tr.c.id).where(tr.c.job_id == job_id))]
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                conn.execute(delete(fu).where(or_(fu.c.trigger_id.in_(chunk), fu.c.child_trigger_id.in_(chunk))))
            conn.execute(delete(si).where(si.c.job_id == job_id))
            conn.execute(delete(j).where(j.c.id == job_id))

    def runs(
        self,
        *,
        job_code: JobCode | None = None,
        biz_code: str | None = None,
        states: Sequence[str] = (),
        since: datetime | None = None,
        before: datetime | None = None,
        limit: int = 100,
    ) -> list[dict[str, Any]]:
        """The run log: one row per fired record (a fire and sharding item), newest
        scheduled first. `state` as read (`published` for a record whose trigger recorded
        its occurrence's outcome, see FiredState)."""
        fr = self.t.fired
        state = case((published_by_outcome(self.t), "published"), else_=fr.c.state).label("state")
        stmt = select(*(state if c == "state" else fr.c[c] for c in RUN_COLUMNS))
        if job_code is not None:
            # with its business (the caller's): the (biz_code, scheduled_at) index serves both
            stmt = stmt.where(fr.c.job_code == job_code)
        if biz_code is not None:
            stmt = stmt.where(fr.c.biz_code == biz_code)
        if since is not None:
            stmt = stmt.where(fr.c.scheduled_at >= to_ms(since))
        if before is not None:  # the next page: scheduled before the last row seen (keyset, no OFFSET)
            stmt = stmt.where(fr.c.scheduled_at < to_ms(before))
        if states:
            stmt = stmt.where(state.in_(list(states)))
        stmt = stmt.order_by(fr.c.scheduled_at.desc(), fr.c.trigger_id, fr.c.item_index).limit(max(1, limit))
        with connect(self.store.engine) as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]


def _times_between(new: Trigger, start_ms: int, end_ms: int) -> list[int]:
    """The new schedule's occurrences in [start_ms, end_ms)."""
    return times_until(new, next_after(new, from_ms(start_ms) - _ONE_MS), from_ms(end_ms), _MAX_PENDING)


__all__ = ["RUN_COLUMNS", "Rescheduled", "SqlJobAdmin", "TriggerBusy"]
