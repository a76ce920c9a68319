"""A member of the shard registry: admits and fires only the partitions it owns.

Each member computes the same rendezvous assignment from the live member set
(`assignment`), takes a partition assigned to it only when nobody owns it (released by
its previous owner, or gone with that owner's lease), claims the partition's ownership in
the store with the ownership's epoch, and runs that partition's acquire loop. A partition no
longer assigned to it (a member joined) is stopped, its chunks finished, and released.
A lost lease (a pause longer than the TTL) stops every partition at once and drops what
is queued; the member rejoins as a new incarnation and takes partitions with new epochs.

One member is the single leader's case: it owns every partition.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from scheduler_core.acquire import PartitionAcquirer, PartitionLoop
from scheduler_core.assignment import partitions_of
from scheduler_core.control import Owned, Relay, RelayScope, run_relays
from scheduler_core.logfields import log_fields
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch
from scheduler_core.ports import Clock, MessageBus, Registry, TriggerStore, Wakeups, partition_fence, partition_of
from scheduler_core.scheduler import CoreStats, SchedulerCore, consume_results, listen_for_wakeups
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import StopStore

log = logging.getLogger(__name__)

REFRESH_S = 0.5  # re-read the registry at least this often, watch or no watch


@dataclass
class _Owned:
    acq: PartitionAcquirer
    loop: PartitionLoop


@dataclass
class MemberStatus:
    member: str = ""
    owned: dict[int, Epoch] = field(default_factory=dict)
    incarnations: int = 0
    rebalances: int = 0
    stats: CoreStats = field(default_factory=CoreStats)


class ShardedScheduler:
    def __init__(
        self,
        store: TriggerStore,
        bus: MessageBus,
        registry: Registry,
        clock: Clock,
        settings: SchedulerSettings | None = None,
        metrics: SchedulerMetrics | None = None,
        *,
        consume: bool = True,
        inline: bool = False,
        run_loops: bool = True,
        wakeups: Wakeups | None = None,
        relays: Callable[[RelayScope], Sequence[Relay]] | None = None,
        stops: StopStore | None = None,
    ) -> None:
        """`inline` and `run_loops=False` are for driven-clock tests: chunks fire on the
        caller's thread, and no loop thread ticks (the test ticks `core` itself).
        `wakeups`: where wake-ups for short delays are heard (default: the store's own);
        only the loops of partitions this member owns are woken. `relays`: builds, for
        this member's scope (the triggers of the partitions it owns; the fences while it
        owns the lowest partition), the relays of the control channel (schedule edits,
        rollback fences) run every `control.RELAY_EVERY` while it runs."""
        self.store = store
        self.bus = bus
        self.registry = registry
        self.clock = clock
        self.settings = settings or SchedulerSettings()
        self.metrics = metrics or SchedulerMetrics()
        self.consume = consume
        self.partitions = {p.index: p for p in store.partitions()}
        self.run_loops = run_loops
        self.core = SchedulerCore(
            store,
            bus,
            clock,
            Epoch(0),
            self.settings,
            self.metrics,
            partitions=[],
            inline=inline,
            ownership_alive=registry.alive,
        )
        self.status = MemberStatus(member=registry.member, stats=self.core.stats)
        self._owned: dict[int, _Owned] = {}
        self._wanted_since: dict[int, float] = {}
        self._settled = False
        self.wakeups: Wakeups | None = wakeups if wakeups is not None else getattr(store, "wakeups", None)
        self._takes = 0  # partitions taken so far: the relays' scope generation
        self.relays: list[Relay] = list(relays(self)) if relays is not None else []
        self.stops = stops  # where the stops live, for the result consumer (callbacks.ResultConsumer)

    # --- the relays' scope (scheduler_core.control.RelayScope) ---------------------------

    def owner(self, trigger_id: int) -> Owned | None:
        """The ownership of the trigger's partition when this member holds it (and knows
        its lease alive): the relays write under that partition's epoch and ownership."""
        if not self.partitions:
            return None
        owned = self._owned.get(partition_of(trigger_id, len(self.partitions)))
        if owned is None or owned.loop.lost.is_set() or not self.registry.alive():
            return None
        return Owned(owned.acq.epoch, owned.acq.ownership)

    def business_wide(self) -> bool:
        """The owner of the lowest partition relays the business-wide messages: one member
        at a time, moving with that partition's ownership."""
        return bool(self.partitions) and self.owner_of_partition(min(self.partitions))

    def owner_of_partition(self, index: int) -> bool:
        owned = self._owned.get(index)
        return owned is not None and not owned.loop.lost.is_set() and self.registry.alive()

    def generation(self) -> int:
        return self._takes

    # --- the member loop ----------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        consumer = None
        if self.consume:
            consumer = threading.Thread(
                target=consume_results,
                args=(self.bus, self.store, self.metrics, stop),
                kwargs={"clock": self.clock, "settings": self.settings, "stops": self.stops},
                name="results",
                daemon=True,
            )
            consumer.start()
        unlisten = listen_for_wakeups(self.wakeups, self._loops_of)
        relays_stop = threading.Event()
        relaying = None
        if self.relays:
            relaying = threading.Thread(
                target=run_relays,
                args=(self.relays, relays_stop, self.metrics.errors.labels(component="relay").inc),
                name="relays",
                daemon=True,
            )
            relaying.start()
        try:
            self._join(stop)
            while not stop.is_set():
                try:
                    self.step(stop)
                except Exception:
                    self.metrics.errors.labels(component="registry").inc()
                    log.exception("registry step failed; retrying")
                    stop.wait(1.0)
                    continue
                self.registry.wait_change(REFRESH_S)
        finally:
            unlisten()
            relays_stop.set()
            if relaying is not None:
                relaying.join(timeout=10)
            self._leave()
            if consumer is not None:
                consumer.join(timeout=5)

    def _join(self, stop: threading.Event) -> None:
        delay = 0.2
        while not stop.is_set():
            try:
                self.registry.join()
                self.status.incarnations += 1
                log.info(
                    "member %s joined the registry", self.registry.member, extra=log_fields(member=self.registry.member)
                )
                return
            except Exception as exc:
                self.metrics.errors.labels(component="registry").inc()
                log.warning("joining the registry failed (%s); retrying", exc)
                stop.wait(delay)
                delay = min(5.0, delay * 2)

    def step(self, stop: threading.Event) -> None:
        """One look at the registry: give up, take and check partitions; reclaim if due."""
        if not self.registry.alive():
            if self._owned:
                log.warning(
                    "member %s: lease lost; stopping %d partition(s) at once",
                    self.registry.member,
                    len(self._owned),
                    extra=log_fields(member=self.registry.member),
                )
            for index in list(self._owned):
                self._drop(index, lost=True)
            self.status.owned = {}
            self.metrics.partitions_owned.set(0)
            self._join(stop)
            return
        view = self.registry.view()
        me = self.registry.member
        members = set(view.members) | {me}
        wanted = set(partitions_of(me, members, self.partitions))
        now = time.monotonic()
        for index in wanted:
            self._wanted_since.setdefault(index, now)
        for index in list(self._wanted_since):
            if index not in wanted:
                del self._wanted_since[index]
        # 1. ownerships lost under us (the key is gone or another's): stop at once
        for index, owned in list(self._owned.items()):
            current = view.owners.get(index)
            if current is None or current.member != me or current.epoch != owned.acq.epoch or owned.loop.lost.is_set():
                log.warning(
                    "partition %s: ownership of epoch %s lost",
                    index,
                    owned.acq.epoch,
                    extra=log_fields(partition=index, epoch=owned.acq.epoch),
                )
                self._drop(index, lost=True)
        # 2. partitions assigned elsewhere now: finish their chunks, then release
        for index in [i for i in self._owned if i not in wanted]:
            self._handover(index)
        # 3. partitions assigned to us that nobody owns: take them
        for index in sorted(wanted - set(self._owned)):
            if stop.is_set() or not self.registry.alive():
                return
            current = view.owners.get(index)
            if current is not None and current.member == me:
                # ours in etcd but not running here: a take whose ownership claim failed (the
                # database away, or a lock held by a paused predecessor): claim again
                self._start(index, current.epoch, now)
                continue
            if current is not None:
                continue  # its previous owner has not released it, nor has its lease expired
            self._take(index, now)
        if wanted <= set(self._owned):
            self._settled = True
        self.metrics.partitions_owned.set(len(self._owned))
        self.status.owned = {i: o.acq.epoch for i, o in self._owned.items()}
        self.core.maintain()

    def _loops_of(self, index: int) -> list[PartitionLoop]:
        owned = self._owned.get(index)  # read without the step's care: a dict lookup is atomic
        return [] if owned is None else [owned.loop]

    def _take(self, index: int, now: float) -> None:
        epoch = self.registry.take(index)
        if epoch is not None:
            self._start(index, epoch, now)

    def _start(self, index: int, epoch: Epoch, now: float) -> None:
        partition = self.partitions[index]
        if not self.store.claim_epoch(epoch, partition_fence(partition)):
            # a newer epoch already holds the ownership: ours is stale, give the key back
            log.warning(
                "partition %s: epoch %s is older than the store's ownership epoch; releasing",
                index,
                epoch,
                extra=log_fields(partition=index, epoch=epoch),
            )
            self.registry.release(index, epoch)
            return
        acq = self.core.own(partition, epoch)
        loop = PartitionLoop(
            acq, self.core.admission.tick, threading.Event(), lambda: self._owns(index, epoch), self.metrics
        )
        self._owned[index] = _Owned(acq, loop)
        self._takes += 1  # the relays read the store whole once: the previous owner's may not have carried all
        if self.run_loops:
            loop.start()
        waited = max(0.0, time.monotonic() - self._wanted_since.get(index, now))
        self.metrics.handoff.observe(waited)
        if self._settled:  # a take after the member's first full set is a rebalance
            self.metrics.rebalances.inc()
            self.status.rebalances += 1
        log.info(
            "partition %s: owned with epoch %s (waited %.2f s for it)",
            partition.name,
            epoch,
            waited,
            extra=log_fields(partition=index, epoch=epoch),
        )

    def _owns(self, index: int, epoch: Epoch) -> bool:
        owned = self._owned.get(index)
        return owned is not None and owned.acq.epoch == epoch and self.registry.alive()

    def _handover(self, index: int) -> None:
        owned = self._owned.pop(index)
        owned.loop.halt()
        owned.loop.join(timeout=10)
        done = self.core.disown(owned.acq, lost=False, timeout=self.settings.acquire_deadline.total_seconds())
        if not done:
            log.warning(
                "partition %s: chunks still firing at handover; the next owner reclaims them",
                index,
                extra=log_fields(partition=index, epoch=owned.acq.epoch),
            )
        self.registry.release(index, owned.acq.epoch)
        self.metrics.rebalances.inc()
        self.status.rebalances += 1
        log.info(
            "partition %s: handed over (epoch %s)",
            owned.acq.partition.name,
            owned.acq.epoch,
            extra=log_fields(partition=index, epoch=owned.acq.epoch),
        )

    def _drop(self, index: int, *, lost: bool) -> None:
        owned = self._owned.pop(index)
        owned.loop.halt()
        self.core.disown(owned.acq, lost=lost)
        owned.loop.join(timeout=10)

    def _leave(self) -> None:
        """A clean stop: finish queued chunks, then revoke the lease (every partition goes
        at once, for the others to take without waiting for a TTL)."""
        for owned in self._owned.values():
            owned.loop.halt()
        for owned in self._owned.values():
            owned.loop.join(timeout=10)
        if self.registry.alive():
            self.core.drain(timeout=30)
            self.core.shutdown()
        else:
            # queued chunks are the next owners' to reclaim: firing them would only be
            # refused by the ownership epochs (or publish duplicates)
            self.core.shutdown(cancel=True)
        self._owned.clear()
        self.metrics.partitions_owned.set(0)
        try:
            self.registry.leave()
        except Exception as exc:
            log.warning("leaving the registry failed (the lease will expire): %s", exc)
