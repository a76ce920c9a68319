"""The scheduler: campaigns for leadership, fences the store with its epoch, runs one
acquire loop per partition and the reclaimer while it leads, and applies results from
the callback topic whether it leads or not.

`SchedulerCore` is the leader's work, steppable one tick at a time for driven-clock
tests; `Scheduler.run` drives it with threads and an election.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler_core.acquire import PartitionAcquirer, TickResult
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.errors import StoreError
from scheduler_core.fire import FireOutcome, FirePipeline
from scheduler_core.firepool import FirePool
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch, Trigger, TriggerId, TriggerState
from scheduler_core.ports import Clock, Election, MessageBus, Transition, TriggerStore
from scheduler_core.settings import SchedulerSettings

log = logging.getLogger(__name__)


@dataclass
class CoreStats:
    ticks: int = 0
    acquired: int = 0
    fired: int = 0
    commands: int = 0
    messages: int = 0
    completed: int = 0
    misfired: int = 0
    skipped: int = 0
    released: int = 0
    reclaimed: int = 0
    lost: int = 0
    fire_errors: int = 0
    last_error: str = ""

    def add(self, out: FireOutcome) -> None:
        self.fired += len(out.fired)
        self.commands += out.commands
        self.messages += out.messages
        self.completed += len(out.completed)
        self.misfired += len(out.misfired)
        self.skipped += len(out.skipped)
        self.released += len(out.released)
        self.lost += len(out.lost)


class SchedulerCore:
    """The leader's work for one epoch."""

    def __init__(
        self,
        store: TriggerStore,
        bus: MessageBus,
        clock: Clock,
        epoch: Epoch,
        settings: SchedulerSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        *,
        inline: bool = False,
    ) -> None:
        self.store = store
        self.clock = clock
        self.epoch = epoch
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.stats = CoreStats()
        self._lock = threading.Lock()
        # One admission at a time across the partition loops: a tick reads the pool's free
        # capacity and domain budgets before its SELECT and spends them at submit, so loops
        # ticking side by side each saw the same headroom and acquired what the pool then
        # refused (released, selected and acquired again: 1.5x the acquisitions for the
        # same fires, and twice the ticks, in bench/admission). The loops still each own
        # their partition; only the admit step (select, CAS, hand-off) is serialized, and
        # the fire pool's work runs outside it.
        self._admit = threading.Lock()
        self._in_flight: set[TriggerId] = set()
        self.pool = FirePool(self.settings.fire_pool_capacity, self.settings.fire_workers, self.settings.budget_of,
                             inline=inline)
        self.pipeline = FirePipeline(store, bus, clock, self.settings, self.metrics)
        self.acquirers = [
            PartitionAcquirer(p, store, self.pool, self._fire_chunk, clock, self.settings, self.metrics, epoch,
                              on_submitted=self._queued)
            for p in store.partitions()
        ]
        self._last_reclaim = -1e18

    def _queued(self, chunk: Sequence[Trigger], queued: bool) -> None:
        ids = [t.id for t in chunk if t.id is not None]
        with self._lock:
            if queued:
                self._in_flight.update(ids)
            else:
                self._in_flight.difference_update(ids)

    def _fire_chunk(self, chunk: Sequence[Trigger], epoch: Epoch) -> None:
        ids = [t.id for t in chunk if t.id is not None]
        with self._lock:
            self._in_flight.update(ids)
        try:
            out = self.pipeline.fire(chunk, epoch)
            with self._lock:
                self.stats.add(out)
        except Exception as exc:  # a chunk must never kill the pool thread
            # The rows stay acquired by this epoch; after their deadline the reclaimer
            # fires them again with the same command ids.
            self.metrics.errors.labels(component="fire").inc()
            with self._lock:
                self.stats.fire_errors += 1
                self.stats.last_error = f"{type(exc).__name__}: {exc}"
            log.exception("fire of %d trigger(s) failed; they will be reclaimed after their deadline", len(ids))
        finally:
            with self._lock:
                self._in_flight.difference_update(ids)

    def tick(self, acquirer: PartitionAcquirer) -> TickResult:
        with self._admit:
            result = acquirer.tick()
        with self._lock:
            self.stats.ticks += 1
            self.stats.acquired += result.acquired
            # acquired but refused by the fire pool, and released to waiting: they come back
            # on a later tick, so `acquired` exceeds `fired` by exactly these
            self.stats.released += result.released
        return result

    def tick_all(self) -> list[TickResult]:
        """One tick of every partition, then reclaim if due (driven tests, demos)."""
        results = [self.tick(a) for a in self.acquirers]
        self.reclaim_if_due()
        return results

    def reclaim_if_due(self) -> int:
        now_mono = self.clock.monotonic()
        if now_mono - self._last_reclaim < self.settings.reclaim_interval.total_seconds():
            return 0
        self._last_reclaim = now_mono
        return self.reclaim()

    def reclaim(self) -> int:
        """Acquired rows past their deadline whose owner is not firing them here: a dead
        epoch's work, or this epoch's chunk that failed. Fired again, same command ids."""
        now = self.clock.now()
        total = 0
        for acq in self.acquirers:
            with self._admit:  # it hands chunks to the pool too (see _admit)
                total += self._reclaim_partition(acq, now)
        with self._lock:
            self.stats.reclaimed += total
        return total

    def _reclaim_partition(self, acq: PartitionAcquirer, now: datetime) -> int:
        total = 0
        expired = self.store.select_expired(acq.partition, now, None, self.settings.batch_size)
        with self._lock:
            expired = [t for t in expired if t.id not in self._in_flight]
        by_epoch: dict[Epoch | None, list[TriggerId]] = {}
        for t in expired:
            if t.id is not None:
                by_epoch.setdefault(t.owner_epoch, []).append(t.id)
        for old_epoch, ids in by_epoch.items():
            won = self.store.cas(Transition(
                ids=ids, from_state=TriggerState.ACQUIRED, to_state=TriggerState.ACQUIRED,
                expected_epoch=old_epoch, epoch=self.epoch, deadline=now + self.settings.acquire_deadline,
                fence_epoch=self.epoch,
            ))
            if won:
                log.warning("reclaimed %d trigger(s) of epoch %s past their deadline", len(won), old_epoch)
                self.metrics.reclaimed.inc(len(won))
                acq.submit(won)
                total += len(won)
        return total

    def drain(self, timeout: float = 30.0) -> bool:
        return self.pool.wait_idle(timeout)

    def shutdown(self) -> None:
        self.pool.shutdown()


@dataclass
class SchedulerStatus:
    leader: bool = False
    epoch: Epoch | None = None
    terms: int = 0
    stats: CoreStats = field(default_factory=CoreStats)


class Scheduler:
    """A scheduler process: leader or follower."""

    def __init__(
        self,
        store: TriggerStore,
        bus: MessageBus,
        election: Election,
        clock: Clock,
        settings: SchedulerSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        *,
        consume_results: bool = True,
    ) -> None:
        self.store = store
        self.bus = bus
        self.election = election
        self.clock = clock
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.status = SchedulerStatus()
        self.core: SchedulerCore | None = None
        self.consume_results = consume_results

    def run(self, stop: threading.Event, campaign_timeout: timedelta = timedelta(seconds=1)) -> None:
        consumer_thread = None
        if self.consume_results:
            consumer_thread = threading.Thread(target=self._consume, args=(stop,), name="results", daemon=True)
            consumer_thread.start()
        try:
            while not stop.is_set():
                epoch = self.election.campaign(campaign_timeout)
                if epoch is None:
                    continue
                if not self.store.claim_epoch(epoch):
                    # a newer leader already fenced the store: we are not it
                    log.warning("epoch %s is older than the store's fence; stepping down", epoch)
                    self.election.resign()
                    continue
                self._lead(epoch, stop)
        finally:
            self.metrics.leader.set(0)
            if consumer_thread is not None:
                consumer_thread.join(timeout=5)

    def _lead(self, epoch: Epoch, stop: threading.Event) -> None:
        log.info("leading with epoch %s", epoch)
        core = SchedulerCore(self.store, self.bus, self.clock, epoch, self.settings, self.metrics)
        self.core = core
        self.status.leader, self.status.epoch = True, epoch
        self.status.terms += 1
        self.status.stats = core.stats
        self.metrics.leader.set(1)
        lost = threading.Event()

        def loop(acq: PartitionAcquirer) -> None:
            while not stop.is_set() and not lost.is_set():
                if not self.election.is_leader():
                    lost.set()
                    return
                try:
                    result = core.tick(acq)
                    wait = result.wait.total_seconds()
                except Exception:
                    self.metrics.errors.labels(component="store").inc()
                    log.exception("partition %s: tick failed; retrying", acq.partition.name)
                    wait = 1.0
                # waits are cut short by a stop or a lost leadership
                if wait > 0 and (stop.wait(min(wait, 1.0)) or lost.is_set()):
                    return

        threads = [threading.Thread(target=loop, args=(a,), name=f"acquire-{a.partition.name}", daemon=True)
                   for a in core.acquirers]
        for t in threads:
            t.start()
        try:
            while not stop.is_set() and not lost.is_set():
                if not self.election.is_leader():
                    lost.set()
                    break
                try:
                    core.reclaim_if_due()
                except Exception:
                    self.metrics.errors.labels(component="store").inc()
                    log.exception("reclaim failed; retrying")
                stop.wait(0.2)
        finally:
            deposed = not stop.is_set()
            lost.set()
            for t in threads:
                t.join(timeout=10)
            if deposed:
                # queued chunks are the new leader's to reclaim; firing them now would only
                # publish duplicates (the fence refuses their outcome anyway)
                core.pool.shutdown(cancel=True)
            else:
                core.drain(timeout=30)
                core.shutdown()
            self.status.leader = False
            self.metrics.leader.set(0)
            if not stop.is_set():
                log.warning("lost leadership of epoch %s", epoch)
            else:
                self.election.resign()

    def _consume(self, stop: threading.Event) -> None:
        consumer: ResultConsumer | None = None
        try:
            while not stop.is_set():
                try:
                    if consumer is None:  # the bus may be down at start: subscribe with the retries
                        consumer = ResultConsumer(self.bus, self.store, self.metrics, clock=self.clock,
                                                  settings=self.settings)
                    consumer.poll()
                except (StoreError, Exception) as exc:
                    self.metrics.errors.labels(component="results").inc()
                    log.warning("applying results failed (%s: %s); retrying", type(exc).__name__, exc)
                    stop.wait(1.0)
        finally:
            if consumer is not None:
                consumer.close()
