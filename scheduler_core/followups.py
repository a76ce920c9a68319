"""On success, fire these triggers: after each successful run (each succeeded item) of a
trigger, each of its follow-up triggers is fired once, at once (xxl-job's child jobs:
`XxlJobCompleter` triggers every `child_jobid` when a run's handle code is 200).

Exactly once per (parent command, child trigger), however often the parent's result is
delivered: the child run's command ids are derived from the parent's command id and the
child trigger, and claimed in the store (`dus_followup_fired`) in the same transaction
that inserts the child's fired records. A redelivered result finds the claim and
republishes only a child run still pending (its publication failed half-way), with the
same command ids, which executors de-duplicate.

The child run's scheduled time S is the parent's plus 1..999 ms, picked from a hash of
the parent's command id: never a whole second, so a cron occurrence of the child (whose
command id would be the same) is never taken; the rare taken S moves on to the next
offset. A failed or timed-out parent fires nothing; a trigger is never its own follow-up.
"""

from __future__ import annotations

import logging
import zlib
from collections.abc import Sequence
from datetime import datetime

from scheduler_core.fire import FirePipeline
from scheduler_core.logfields import log_fields
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Trigger,
    TriggerId,
    parse_command_id,
)
from scheduler_core.ports import BusMessage, Clock, MessageBus, TriggerStore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)
OFFSETS = 999  # S = parent T + 1..999 ms


class Followups:
    def __init__(self, store: TriggerStore, bus: MessageBus, clock: Clock, settings: SchedulerSettings,
                 metrics: SchedulerMetrics) -> None:  # fmt: skip
        self.store = store
        self.clock = clock
        self.pipeline = FirePipeline(store, bus, clock, settings, metrics)
        self.fired = 0  # child runs published by this instance (first publications and retries)

    def after(self, results: Sequence[tuple[CommandId, FiredState]]) -> int:
        """Fire the follow-ups of every succeeded command in `results`; returns how many
        child runs were published now. Raises when a publication fails: the caller
        redelivers the results and the same child runs are published again."""
        succeeded = [cid for cid, state in results if state is FiredState.SUCCEEDED]
        if not succeeded:
            return 0
        # one small query per batch of results: the whole (tiny) table of chains, so a
        # batch of 50K distinct triggers costs no IN list, and nothing is cached stale
        links = self.store.followups_of()
        if not links:
            return 0
        pairs: list[tuple[CommandId, TriggerId]] = []
        for cid in dict.fromkeys(succeeded):
            try:
                tid = parse_command_id(cid)[0]
            except ValueError:
                continue
            pairs += [(cid, child) for child in links.get(tid, ()) if child != tid]
        if not pairs:
            return 0
        claims = self.store.followup_claims(pairs)
        triggers = {t.id: t for t in self.store.get_triggers(list({c for _, c in pairs}))}
        jobs = self.store.get_jobs([JobCode(t.job_code) for t in triggers.values()])
        published = 0
        for parent, child in pairs:
            trigger = triggers.get(child)
            job = jobs.get(trigger.job_code) if trigger is not None else None
            if trigger is None or job is None:
                log.error(
                    "follow-up of %s: trigger %s (or its job) is gone; child not fired",
                    parent,
                    child,
                    extra=log_fields(command_id=parent, trigger_id=child),
                )
                continue
            published += self._fire(parent, trigger, job, claims.get((parent, child)))
        self.fired += published
        return published

    def _fire(self, parent: CommandId, trigger: Trigger, job: Job, claimed: CommandId | None) -> int:
        assert trigger.id is not None
        epoch = self.store.current_epoch()
        note = f"follow-up of {parent}"
        if claimed is None:
            records, messages = self._new_run(parent, trigger, job, epoch, note)
            claimed = self.store.claim_followup(parent, trigger.id, records, to_ms(self.clock.now()))
            if claimed != records[0].command_id:  # a duplicate's consumer claimed it first
                records, messages = self.pipeline.run_now(
                    trigger, job, from_ms(parse_command_id(claimed)[1]), epoch, note
                )
        else:
            records, messages = self.pipeline.run_now(trigger, job, from_ms(parse_command_id(claimed)[1]), epoch, note)
        current = self.store.get_fired([r.command_id for r in records])
        if not any(r.state is FiredState.PENDING for r in current.values()):
            return 0  # published before: a redelivered parent result fires nothing again
        self.pipeline.publish(messages)
        self.store.mark_published([r.command_id for r in records], self.clock.now())
        return 1

    def _new_run(
        self, parent: CommandId, trigger: Trigger, job: Job, epoch: Epoch, note: str
    ) -> tuple[list[FiredRecord], list[BusMessage]]:
        _tid, parent_ms, _idx = parse_command_id(parent)
        start = zlib.crc32(f"{parent}>{trigger.id}".encode())
        for k in range(OFFSETS):
            at: datetime = from_ms(parent_ms + 1 + (start + k) % OFFSETS)
            records, messages = self.pipeline.run_now(trigger, job, at, epoch, note)
            if not self.store.get_fired([r.command_id for r in records]):
                return records, messages
        raise RuntimeError(
            f"follow-up of {parent}: no free command id for trigger {trigger.id} within "
            f"{OFFSETS} ms of the parent's time"
        )
