"""Reclaim: acquired rows past their deadline that nobody here is firing (a dead or
deposed owner's work, or a chunk of ours whose fire failed) are taken over by the
partition's current owner and fired again with the same command ids."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime

from scheduler_core.acquire import Admission, PartitionAcquirer
from scheduler_core.firepath import InFlight
from scheduler_core.logfields import log_fields
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch, TriggerId, TriggerState
from scheduler_core.ports import Clock, Transition, TriggerStore
from scheduler_core.settings import SchedulerSettings

log = logging.getLogger(__name__)


class Reclaimer:
    def __init__(
        self,
        store: TriggerStore,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: SchedulerMetrics,
        admission: Admission,
        in_flight: InFlight,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.admission = admission
        # a row queued or firing here is this owner's live work, never reclaimable
        self.in_flight = in_flight
        self._last = -1e18

    def reclaim_if_due(self, acquirers: Sequence[PartitionAcquirer]) -> int:
        now_mono = self.clock.monotonic()
        if now_mono - self._last < self.settings.reclaim_interval.total_seconds():
            return 0
        self._last = now_mono
        return self.reclaim(acquirers)

    def reclaim(self, acquirers: Sequence[PartitionAcquirer]) -> int:
        """Each partition's expired acquisitions, under its owner's epoch and ownership."""
        now = self.clock.now()
        total = 0
        for acq in acquirers:
            with self.admission.lock:  # it hands chunks to the pool too (see Admission)
                total += self._partition(acq, now)
        return total

    def _partition(self, acq: PartitionAcquirer, now: datetime) -> int:
        total = 0
        expired = self.store.select_expired(acq.partition, now, None, self.settings.batch_size)
        by_epoch: dict[Epoch | None, list[TriggerId]] = {}
        for t in expired:
            if t.id is not None and not self.in_flight.contains(t.id):
                by_epoch.setdefault(t.owner_epoch, []).append(t.id)
        for old_epoch, ids in by_epoch.items():
            won = self.store.cas(
                Transition(
                    ids=ids,
                    from_state=TriggerState.ACQUIRED,
                    to_state=TriggerState.ACQUIRED,
                    expected_epoch=old_epoch,
                    epoch=acq.epoch,
                    deadline=now + self.settings.acquire_deadline,
                    fence_epoch=acq.epoch,
                    fence=acq.ownership,
                )
            )
            if won:
                log.warning(
                    "partition %s: reclaimed %d trigger(s) of epoch %s past their deadline",
                    acq.partition.name,
                    len(won),
                    old_epoch,
                    extra=log_fields(partition=acq.partition.index, epoch=acq.epoch, fence=acq.ownership),
                )
                self.metrics.reclaimed.inc(len(won))
                acq.submit(won)
                total += len(won)
        return total
