"""The store side of schedule edits (`scheduler_core.supersede`): `dus_trigger_supersede`
and the fired records an edit supersedes. Beside `SqlTriggerStore` (not in it), reaching
its engine and tables."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from dbkit.capabilities import capabilities
from dbkit.connections import begin, connect
from scheduler_core.control import EVERYTHING, Owned, RelayScope
from scheduler_core.fire import FirePipeline
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, FiredRecord, FiredState, Trigger
from scheduler_core.ports import MessageBus
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store import stop_rows
from scheduler_core.store.rows import (
    FINAL_RANK,
    FIRED_COLUMNS,
    MESSAGE_MAX,
    PROVISIONAL_SKIP_RANK,
    fired_row,
    unskipped_values,
)
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.supersede import MESSAGE_PREFIX, Supersede, SupersedeRelay, skip_message


class SqlSupersedes:
    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    # -- the edit (in the transaction that changes the trigger) ----------------------------

    def record_edit(
        self, conn: Connection, trigger_id: int, biz_code: str, effective_ms: int, new_times: Iterable[int], now_ms: int
    ) -> Supersede:
        """The schedule of `trigger_id` changed, effective `effective_ms`; `new_times` are
        the new schedule's occurrences from then up to the trigger's (new) next_fire_at.
        Marks the old schedule's records at or after E that the new one lacks skipped, and
        stores what is superseded and what is pending, merged with an earlier edit's."""
        ts, fr = self.t.trigger_supersede, self.t.fired
        new = set(new_times)
        # lock the row first: a relay claiming its pending runs waits for this edit, or
        # this edit waits for the relay's records (and then sees them below)
        prior = conn.execute(select(ts).where(ts.c.trigger_id == trigger_id).with_for_update()).first()
        # a locking read: the latest committed records, not the transaction's snapshot
        published = {
            int(r.scheduled_at): int(r.state_rank)
            for r in conn.execute(
                select(fr.c.scheduled_at, fr.c.state_rank)
                .where(fr.c.trigger_id == trigger_id, fr.c.scheduled_at >= effective_ms)
                .with_for_update()
            )
        }
        skipped = {t for t in published if t not in new}
        owed: set[int] = set()
        if prior is not None:
            # an earlier edit's supersedes still ahead stand, unless this schedule has them again
            skipped |= {t for t in json.loads(prior.skipped) if t >= now_ms and t not in new}
            # runs queued before E and not yet published (an earlier edit's, a resume's
            # backlog, a rollback's runs before its fence) are owed whatever the schedule
            # becomes from E: written over, they ran nowhere
            owed = {t for t in json.loads(prior.pending) if t < effective_ms}
            owed -= self._published(conn, trigger_id, owed)
        pending = sorted({t for t in new if t not in published} | owed)
        revived = sorted(t for t in new if t in published)
        message = skip_message(effective_ms)
        for chunk in _chunks(sorted(skipped)):
            conn.execute(
                update(fr)
                .where(fr.c.trigger_id == trigger_id, fr.c.scheduled_at.in_(chunk), fr.c.state_rank < FINAL_RANK)
                .values(
                    state=FiredState.SKIPPED.value,
                    state_rank=PROVISIONAL_SKIP_RANK,
                    message=message[:MESSAGE_MAX],
                    result_at=now_ms,
                )
            )
        for chunk in _chunks(revived):
            # superseded by an earlier edit, wanted again: back to waiting for its result
            conn.execute(
                update(fr)
                .where(
                    fr.c.trigger_id == trigger_id,
                    fr.c.scheduled_at.in_(chunk),
                    fr.c.state == FiredState.SKIPPED.value,
                    fr.c.state_rank == PROVISIONAL_SKIP_RANK,
                    fr.c.message.like(f"{MESSAGE_PREFIX}%"),
                )
                .values(**unskipped_values(fr))
            )
        values: dict[str, Any] = {
            "biz_code": biz_code,
            "effective_at": effective_ms,
            "skipped": json.dumps(sorted(skipped)),
            "pending": json.dumps(pending),
            "updated_at": now_ms,
        }
        if prior is None:
            epoch = 1
            conn.execute(insert(ts).values(trigger_id=trigger_id, epoch=epoch, **values))
        else:
            epoch = int(prior.epoch) + 1
            conn.execute(update(ts).where(ts.c.trigger_id == trigger_id).values(epoch=epoch, **values))
        # the executors learn the superseded times as windows of the trigger's stop (the one
        # mechanism of every stop: scheduler_core.stops), relayed by whoever holds the bus
        stop_rows.set_edit_windows(conn, self.t, trigger_id, skipped, effective_ms, now_ms)
        return Supersede(trigger_id, biz_code, effective_ms, frozenset(skipped), tuple(pending), epoch)

    def _published(self, conn: Connection, trigger_id: int, times: set[int]) -> set[int]:
        fr = self.t.fired
        out: set[int] = set()
        for chunk in _chunks(sorted(times)):
            q = select(fr.c.scheduled_at).where(fr.c.trigger_id == trigger_id, fr.c.scheduled_at.in_(chunk))
            out.update(int(r.scheduled_at) for r in conn.execute(q))
        return out

    # -- runs outside the schedule, published by the relay ---------------------------------

    def add_pending(self, trigger: Trigger, times_ms: Sequence[int]) -> None:
        """Runs of `trigger` at `times_ms` for whoever holds the bus to publish (as an
        edit's pending runs: same relay, same claim, command ids of (trigger, time)): a
        resume's one run at R under FIRE_ONCE_NOW (`scheduler_core.operations.resume`)."""
        ts = self.t.trigger_supersede
        assert trigger.id is not None
        now = self.store.clock.now_ms()
        with begin(self.store.engine) as conn:
            prior = conn.execute(select(ts).where(ts.c.trigger_id == trigger.id).with_for_update()).first()
            if prior is None:
                conn.execute(
                    insert(ts).values(
                        trigger_id=trigger.id,
                        biz_code=trigger.biz_code,
                        effective_at=min(times_ms),
                        skipped="[]",
                        pending=json.dumps(sorted(set(times_ms))),
                        epoch=1,
                        updated_at=now,
                    )
                )
                return
            pending = sorted(set(json.loads(prior.pending)) | set(times_ms))
            conn.execute(
                update(ts)
                .where(ts.c.trigger_id == trigger.id)
                .values(pending=json.dumps(pending), epoch=int(prior.epoch) + 1, updated_at=now)
            )

    # -- the relay (SupersedeStore) --------------------------------------------------------

    def supersedes(self, changed_within: timedelta | None = None) -> list[Supersede]:
        """Every stored supersede, or those changed within the last `changed_within` (by
        updated_at, written with the writer's clock: the window must cover clock skew) and
        those with runs still pending."""
        ts = self.t.trigger_supersede
        stmt = select(ts).order_by(ts.c.trigger_id)
        if changed_within is not None:
            recent = self.store.clock.now_ms() - int(changed_within.total_seconds() * 1000)
            stmt = stmt.where((ts.c.updated_at >= recent) | (ts.c.pending != "[]"))
        with connect(self.store.engine) as conn:
            return [_supersede_of(r) for r in conn.execute(stmt)]

    def claim_pending(self, s: Supersede, records: list[FiredRecord], owned: Owned | None = None) -> bool:
        ts = self.t.trigger_supersede
        with begin(self.store.engine) as conn:
            if owned is not None and owned.fence is not None and owned.epoch is not None:
                # a partition's owner under the registry: only while its fence still holds
                # the ownership (read with a shared lock as the fire pipeline's records
                # are: a newer owner's claim waits for this transaction, or is seen by it)
                lock = capabilities(conn).shared_lock_reads
                if not self.store._fence_holds(conn, owned.fence, owned.epoch, lock):
                    return False
            # the row lock first (see record_edit): an edit in between makes this a no-op
            still = conn.execute(
                update(ts)
                .where(ts.c.trigger_id == s.trigger_id, ts.c.epoch == s.epoch)
                .values(updated_at=self.store.clock.now_ms())
            ).rowcount
            if not still:
                return False
            if records:  # insert-if-absent by command id
                fr = self.t.fired
                verb = capabilities(conn).ignore_prefix
                rows = [dict(zip(FIRED_COLUMNS, fired_row(r), strict=True)) for r in records]
                conn.execute(insert(fr).prefix_with(verb), rows)
        return True

    def pending_published(self, s: Supersede, command_ids: list[CommandId]) -> None:
        ts = self.t.trigger_supersede
        if command_ids:
            self.store.mark_published(command_ids, self.store.clock.now())
        with begin(self.store.engine) as conn:
            conn.execute(
                update(ts)
                .where(ts.c.trigger_id == s.trigger_id, ts.c.epoch == s.epoch)
                .values(pending="[]", updated_at=self.store.clock.now_ms())
            )


def _supersede_of(row: Any) -> Supersede:
    return Supersede(
        trigger_id=int(row.trigger_id),
        biz_code=row.biz_code,
        effective_ms=int(row.effective_at),
        skipped_ms=frozenset(int(t) for t in json.loads(row.skipped)),
        pending_ms=tuple(int(t) for t in json.loads(row.pending)),
        epoch=int(row.epoch),
    )


def _chunks(values: Sequence[int], size: int = 500) -> Iterable[list[int]]:
    for i in range(0, len(values), size):
        yield list(values[i : i + size])


def supersede_relay(
    store: SqlTriggerStore,
    bus: MessageBus,
    settings: SchedulerSettings,
    metrics: SchedulerMetrics,
    scope: RelayScope = EVERYTHING,
) -> SupersedeRelay:
    """The relay of schedule edits for the process that has the bus (the scheduler leader,
    `switchyard serve`, a shard registry member for its partitions' triggers): its
    pending runs built and published as the fire pipeline does."""
    pipeline = FirePipeline(store, bus, store.clock, settings, metrics)
    return SupersedeRelay(SqlSupersedes(store), store, pipeline, scope)


__all__ = ["SqlSupersedes", "supersede_relay"]
