"""The scheduler: campaigns for leadership, claims the store's ownership with its epoch, runs one
acquire loop per partition and the reclaimer while it leads, and applies results from
the callback topic whether it leads or not.

`SchedulerCore` is the leader's work, steppable one tick at a time for driven-clock
tests; `Scheduler.run` drives it with threads and an election.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from scheduler_core.acquire import Admission, PartitionAcquirer, PartitionLoop, TickResult
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.control import Owned, Relay, RelayScope, relay_round
from scheduler_core.errors import BusError, StoreError
from scheduler_core.firepath import CoreStats, FirePath, InFlight
from scheduler_core.firepool import FirePool
from scheduler_core.hold import HeldChunks
from scheduler_core.logfields import log_fields
from scheduler_core.lookahead import AdaptiveLookahead
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch
from scheduler_core.ports import (
    Clock,
    Election,
    MessageBus,
    Partition,
    TriggerStore,
    Wakeups,
    partition_fence,
)
from scheduler_core.reclaim import Reclaimer
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import StopStore

log = logging.getLogger(__name__)

__all__ = ["CoreStats", "Scheduler", "SchedulerCore", "SchedulerStatus", "consume_results", "listen_for_wakeups"]


class SchedulerCore:
    """The leader's work for one epoch: every partition, each write checked against the
    leader's ownership epoch.

    Under the shard registry a member's core starts with no partition (`partitions=[]`)
    and is given each partition it takes with that partition's own epoch and ownership
    (`own`), and loses it again (`disown`). What happens to an acquired chunk is
    `scheduler_core.firepath`'s: the core builds the path's parts and hands each acquirer
    the path, never a call back into itself."""

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
        partitions: Sequence[Partition] | None = None,
        ownership_alive: Callable[[], bool] | None = None,
    ) -> None:
        """`ownership_alive`: under the registry, whether the member's lease is known
        alive (asked before publishing)."""
        self.store = store
        self.clock = clock
        self.epoch = epoch
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.stats = CoreStats()
        self._lock = threading.Lock()  # the acquirers list is replaced under it
        self.admission = Admission(self.stats)
        self.in_flight = InFlight(ownership_alive)
        self.pool = FirePool(
            self.settings.fire_pool_capacity,
            self.settings.fire_workers,
            self.settings.budget_of,
            inline=inline,
            lane_budget_of=self.settings.lane_pool_budget,
        )
        # chunks due within hold_within, fired at T (the threaded pool only: driven-clock
        # tests fire on the caller's thread as they tick)
        within_ms = int(self.settings.hold_within.total_seconds() * 1000)
        self.held: HeldChunks | None = None
        if within_ms > 0 and not inline:
            self.held = HeldChunks(
                clock,
                self.pool.try_submit,
                within_ms=within_ms,
                per_window=self.settings.hold_per_window,
                window_ms=max(1, int(self.settings.pack_window.total_seconds() * 1000)),
                merge_max=self.settings.batch_size,
                early_ms=int(self.settings.hold_read_ahead.total_seconds() * 1000),
            )
        self.path = FirePath(
            store=store,
            bus=bus,
            clock=clock,
            settings=self.settings,
            metrics=self.metrics,
            pool=self.pool,
            held=self.held,
            in_flight=self.in_flight,
            stats=self.stats,
        )
        self.pipeline = self.path.pipeline
        # each lane's window from the forecast (issue 29); None: the one fixed lookahead
        self.lookahead = (
            AdaptiveLookahead(store, clock, self.settings, self.metrics) if self.settings.adaptive_lookahead else None
        )
        self.acquirers = [
            self._acquirer(p, epoch, None) for p in (store.partitions() if partitions is None else partitions)
        ]
        self.reclaimer = Reclaimer(store, clock, self.settings, self.metrics, self.admission, self.in_flight)

    def _acquirer(self, partition: Partition, epoch: Epoch, ownership: str | None) -> PartitionAcquirer:
        return PartitionAcquirer(
            partition=partition,
            store=self.store,
            pool=self.pool,
            path=self.path,
            clock=self.clock,
            settings=self.settings,
            metrics=self.metrics,
            epoch=epoch,
            ownership=ownership,
            lookahead=self.lookahead,
        )

    def own(self, partition: Partition, epoch: Epoch) -> PartitionAcquirer:
        """Admit `partition` from now on as its owner of `epoch` (the registry handed it
        over and the partition's ownership was claimed in the store with that epoch)."""
        acq = self._acquirer(partition, epoch, partition_fence(partition))
        # not under the admission lock: a take must not wait for another partition's tick
        # (the list is replaced, never changed in place, so a reclaim pass keeps its own)
        with self._lock:
            self.in_flight.restore(acq.ownership, epoch)
            self.acquirers = [a for a in self.acquirers if a.partition.index != partition.index] + [acq]
        return acq

    def disown(self, acq: PartitionAcquirer, *, lost: bool, timeout: float = 30.0) -> bool:
        """Stop admitting `acq`'s partition. Lost (the lease expired, a newer owner may be
        admitting): its queued chunks are dropped. Handed over on purpose: wait, at most
        `timeout`, until its chunks are done; True when none is left."""
        with self.admission.lock:
            with self._lock:
                self.acquirers = [a for a in self.acquirers if a is not acq]
            if lost:
                self.in_flight.revoke(acq.ownership, acq.epoch)
                return True
            return self.in_flight.wait_done(acq.ownership, timeout)

    def tick(self, acquirer: PartitionAcquirer) -> TickResult:
        return self.admission.tick(acquirer)

    def tick_all(self) -> list[TickResult]:
        """One tick of every partition, then reclaim if due (driven tests, demos)."""
        results = [self.tick(a) for a in self.acquirers]
        self.reclaim_if_due()
        return results

    def maintain(self) -> int:
        """The loop beside the ticks (the leader's, a shard member's): the adaptive
        lookahead's forecast read again when due, then `reclaim_if_due`."""
        if self.lookahead is not None:
            try:
                self.lookahead.refresh_if_due(self.clock.now())
            except Exception:  # the store briefly away: the ticks fall back to reading it
                log.warning("reading the lookahead's forecast failed; retrying", exc_info=True)
        return self.reclaim_if_due()

    def reclaim_if_due(self) -> int:
        return self._count_reclaimed(self.reclaimer.reclaim_if_due(self.acquirers))

    def reclaim(self) -> int:
        """Acquired rows past their deadline whose owner is not firing them here: a dead
        epoch's work, or this epoch's chunk that failed. Fired again, same command ids."""
        return self._count_reclaimed(self.reclaimer.reclaim(self.acquirers))

    def _count_reclaimed(self, n: int) -> int:
        self.stats.add_reclaimed(n)
        return n

    def drain(self, timeout: float = 30.0) -> bool:
        if self.held is not None and not self.held.wait_empty(timeout):
            return False
        return self.pool.wait_idle(timeout)

    def shutdown(self, cancel: bool = False) -> None:
        """Stop firing. `cancel` (deposed, or the lease lost): held and queued chunks are
        dropped, for the next owner to reclaim."""
        if self.held is not None:
            self.held.stop(cancel=cancel)
        self.pool.shutdown(cancel=cancel)


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
        wakeups: Wakeups | None = None,
        relays: Callable[[RelayScope], Sequence[Relay]] | None = None,
        stops: StopStore | None = None,
    ) -> None:
        """`wakeups`: where wake-ups for short delays are heard (default: the store's own,
        which hears the triggers added through this process's store). `relays`: builds,
        for this scheduler's scope (everything, a new generation per leadership won), the
        relays of the control channel run every loop of the leader's. `stops`: where the
        stops live, for the result consumer (`ResultConsumer`)."""
        self.stops = stops
        self.store = store
        self.bus = bus
        self.election = election
        self.clock = clock
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.status = SchedulerStatus()
        self.core: SchedulerCore | None = None
        self.consume_results = consume_results
        self.wakeups: Wakeups | None = wakeups if wakeups is not None else getattr(store, "wakeups", None)
        # called every loop of the leader's (200 ms): e.g. a schedule edit's relay
        # (scheduler_core.supersede), which needs the bus and one process doing it
        self.relays: tuple[Relay, ...] = tuple(relays(self)) if relays is not None else ()

    # --- the relays' scope (scheduler_core.control.RelayScope) ---------------------------
    # The relays run only while this process leads, and relay everything then.

    def owner(self, trigger_id: int) -> Owned | None:
        return Owned()

    def business_wide(self) -> bool:
        return True

    def generation(self) -> int:
        """One per leadership won: the first relay round of each term reads the store
        whole, for what a previous leader stored but did not relay (its edits older than
        the relays' recent window included), not only at this process's first term."""
        return self.status.terms

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
                    # a newer leader already claimed the store's ownership: we are not it
                    log.warning(
                        "epoch %s is older than the store's ownership epoch; stepping down",
                        epoch,
                        extra=log_fields(epoch=epoch),
                    )
                    self.election.resign()
                    continue
                self._lead(epoch, stop)
        finally:
            self.metrics.leader.set(0)
            if consumer_thread is not None:
                consumer_thread.join(timeout=5)

    def _lead(self, epoch: Epoch, stop: threading.Event) -> None:
        log.info("leading with epoch %s", epoch, extra=log_fields(epoch=epoch))
        core = SchedulerCore(self.store, self.bus, self.clock, epoch, self.settings, self.metrics)
        self.core = core
        self.status.leader, self.status.epoch = True, epoch
        self.status.terms += 1
        self.status.stats = core.stats
        self.metrics.leader.set(1)
        loops = [
            PartitionLoop(a, core.admission.tick, stop, self.election.is_leader, self.metrics) for a in core.acquirers
        ]
        for loop in loops:
            loop.start()
        unlisten = listen_for_wakeups(
            self.wakeups, lambda index: [lp for lp in loops if lp.acq.partition.index == index]
        )
        try:
            while not stop.is_set() and not any(loop.lost.is_set() for loop in loops):
                if not self.election.is_leader():
                    break
                try:
                    core.maintain()
                except StoreError as exc:  # the store is down: expected, retried without a trace
                    self.metrics.errors.labels(component="store").inc()
                    log.warning("reclaim failed (%s); retrying", exc, extra=log_fields(epoch=epoch))
                except Exception:
                    self.metrics.errors.labels(component="store").inc()
                    log.exception("reclaim failed; retrying", extra=log_fields(epoch=epoch))
                # the store or the bus briefly down: the next loop tries again
                relay_round(self.relays, self.metrics.errors.labels(component="relay").inc)
                stop.wait(0.2)
        finally:
            unlisten()
            deposed = not stop.is_set()  # any way out but a stop is a lost leadership
            for loop in loops:
                loop.halt()
            for loop in loops:
                loop.join(timeout=10)
            if deposed:
                # queued chunks are the new leader's to reclaim; firing them now would only
                # publish duplicates (their outcome is refused anyway: the epoch no longer holds the ownership)
                core.shutdown(cancel=True)
            else:
                core.drain(timeout=30)
                core.shutdown()
            self.status.leader = False
            self.metrics.leader.set(0)
            if not stop.is_set():
                log.warning("lost leadership of epoch %s", epoch, extra=log_fields(epoch=epoch))
            else:
                self.election.resign()

    def _consume(self, stop: threading.Event) -> None:
        consume_results(
            self.bus, self.store, self.metrics, stop, clock=self.clock, settings=self.settings, stops=self.stops
        )


def listen_for_wakeups(
    wakeups: Wakeups | None, loops_of: Callable[[int], Sequence[PartitionLoop]]
) -> Callable[[], None]:
    """Wake the loops this scheduler runs for the partitions of each wake-up (`loops_of`:
    a partition index -> its loops here, none when another process owns it); returns the
    call that stops listening."""
    if wakeups is None:
        return lambda: None

    def on_wake(due: Mapping[int, int]) -> None:
        for index, at_ms in due.items():
            for loop in loops_of(index):
                loop.wake(at_ms)

    return wakeups.listen(on_wake)


def consume_results(
    bus: MessageBus,
    store: TriggerStore,
    metrics: SchedulerMetrics,
    stop: threading.Event,
    *,
    clock: Clock | None = None,
    settings: SchedulerSettings | None = None,
    stops: StopStore | None = None,
) -> None:
    """Apply results from the callback topic until stopped (every scheduler process does,
    leading or not: the subscription is shared)."""
    consumer: ResultConsumer | None = None
    try:
        while not stop.is_set():
            try:
                if consumer is None:  # the bus may be down at start: subscribe with the retries
                    consumer = ResultConsumer(bus, store, metrics, clock=clock, settings=settings, stops=stops)
                consumer.poll()
            except (StoreError, BusError) as exc:  # the store or the bus is down: expected, retried
                metrics.errors.labels(component="results").inc()
                log.warning("applying results failed (%s: %s); retrying", type(exc).__name__, exc)
                stop.wait(1.0)
            except Exception:  # a defect, not an outage: the trace is logged, the consumer carries on
                metrics.errors.labels(component="results").inc()
                log.exception("applying results failed unexpectedly; retrying")
                stop.wait(1.0)
    finally:
        if consumer is not None:
            consumer.close()
