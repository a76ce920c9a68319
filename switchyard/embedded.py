"""The whole center in one process on the embedded default (`switchyard serve`): the
scheduler (local election), one executor per business, the result consumer and,
optionally, the console, on the in-process bus.

They are the same parts as in the distributed mode (scheduler_core's Scheduler, Executor,
ResultConsumer, FenceService), only wired to one bus inside the process. What the
in-process bus cannot do is keep messages across a restart, so two things are put back
from the store when the process starts:

* every command the store has a fired record of that no executor took (the scheduler
  publishes up to its lookahead ahead, with deliver-at = T) is published again, same
  command ids, deliver-at T (a fired record is not stamped published: see FiredState);
* every stop (`scheduler_core.stops`: an operator's pause, cancel or freeze, a rollback's
  fence) is broadcast again on the control channel, so executors skip what they must skip;
  a command a standing stop covers is recorded skipped instead of published again.

A rollback or a `trigger pause` run beside it (`--url` the same store) writes its stop to
the store only: no other process reaches this bus. So the store's stops are read every
`fence_every` (250 ms) and a new one is broadcast here (StopRelay), well inside the
stop's lead (1 s for an operator's stop, 2 s and more for a rollback).

The shutdown is ordered so no result is lost either: the scheduler stops firing first,
then the executors finish what they took and publish its results, then the consumer
applies every result still on the bus.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from functools import partial

from scheduler_core import operations
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.control import run_relays
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.executor import Executor
from scheduler_core.executor.identity import new_instance_id
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch, FiredRecord, FiredState, Lane
from scheduler_core.ports import Election, FiredUpdate
from scheduler_core.republish import republish
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import Cause, StopIndex, StopRelay
from scheduler_core.store.kills import kill_relay
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import supersede_relay
from scheduler_core.supersede import SupersedeRelay
from scheduler_core.times import to_ms
from switchyard.trigger_actions import RESUME_LEAD

log = logging.getLogger(__name__)
EPOCH_START = datetime(1970, 1, 2, tzinfo=timezone.utc)
FAR_AHEAD = timedelta(days=3650)


class ContinuingElection:
    """The local election, its epochs counted on from the store's fence: a restarted
    process leads with a newer epoch than the one before it, as an etcd leader would."""

    def __init__(self, inner: Election, base: int) -> None:
        self.inner = inner
        self.base = base

    def campaign(self, timeout: timedelta) -> Epoch | None:
        e = self.inner.campaign(timeout)
        return None if e is None else Epoch(self.base + int(e))

    def is_leader(self) -> bool:
        return self.inner.is_leader()

    def epoch(self) -> Epoch | None:
        e = self.inner.epoch()
        return None if e is None else Epoch(self.base + int(e))

    def resign(self) -> None:
        self.inner.resign()

    def close(self) -> None:
        self.inner.close()


# the states of a record no executor has taken: a schedule fire's records stay `pending`
# (published or not: FiredState), a follow-up's are stamped `published`
_UNTAKEN = (FiredState.PENDING, FiredState.PUBLISHED)


def untaken_commands(store: SqlTriggerStore) -> list[FiredRecord]:
    """Fired records never taken by an executor (their messages were in the in-process
    bus of a process that stopped). The pending ones whose trigger is still acquired for
    them may not have been published: published again here, and fired again by reclaim,
    both with the same command ids, which the executors take once."""
    return [r for r in store.fired_between(None, EPOCH_START, store.clock.now() + FAR_AHEAD) if r.state in _UNTAKEN]


def standing_stops(store: SqlTriggerStore) -> StopIndex:
    """Every stop the store holds, indexed as the executors index them."""
    return StopIndex({(s.scope, s.key): s for s in SqlStops(store).stops()})


def without_stopped(
    store: SqlTriggerStore, records: list[FiredRecord], index: StopIndex | None = None
) -> tuple[list[FiredRecord], int]:
    """The records to publish again, and how many a standing stop withholds: those are
    recorded skipped with the stop's message instead, so a restart does not re-send a
    command an operator stopped (scheduler_core.stops). Withheld only where no lift can
    bring it back: a cancel (never lifted), or a run due before any lift written from now
    on could take effect (a lift's R is RESUME_LEAD after it is written). A paused or
    frozen run further ahead is published again and skipped by every executor while the
    stop stands: withheld, a resume before its time would lose it (a lift revives what
    was published, and nothing would publish it)."""
    index = standing_stops(store) if index is None else index
    keep: list[FiredRecord] = []
    skipped: list[FiredUpdate] = []
    now = store.clock.now()
    horizon = to_ms(now + RESUME_LEAD)
    for r in records:
        at = to_ms(r.scheduled_at)
        w = index.covering(r.trigger_id, r.job_code, r.biz_code, at)
        if w is None or (w.cause is not Cause.CANCEL and at >= horizon):
            keep.append(r)
        else:
            skipped.append(FiredUpdate(command_id=r.command_id, state=FiredState.SKIPPED, at=now, message=w.message))
    if skipped:
        store.update_fired(skipped)
        log.info("%d command(s) a standing stop covers recorded skipped, not published again", len(skipped))
    return keep, len(skipped)


def marked_liftable(store: SqlTriggerStore, index: StopIndex | None = None) -> list[FiredRecord]:
    """The records a standing pause, freeze or rollback fence marked skipped, due after
    any lift written from now on could take effect, that no executor has answered: the
    lift revives them in the store, and only a publication puts them back on the bus.
    The last process published them and its in-process bus is gone, so they are published
    again (every executor skips them while the stop stands). A cancel's, an edit's or a
    lifted window's marks are final: left as they are."""
    index = standing_stops(store) if index is None else index
    out: list[FiredRecord] = []
    for r in SqlStops(store).marked_from(to_ms(store.clock.now() + RESUME_LEAD)):
        w = index.covering(r.trigger_id, r.job_code, r.biz_code, to_ms(r.scheduled_at))
        if w is not None and w.open and w.cause not in (Cause.CANCEL, Cause.EDIT):
            out.append(r)
    return out


def store_biz_codes(store: SqlTriggerStore) -> set[str]:
    """Every business (biz_code) that has a job in the store."""
    return store.job_biz_codes()


@dataclass
class EmbeddedCenter:
    store: SqlTriggerStore
    settings: SchedulerSettings
    register: Callable[[Executor], None]  # puts the handlers on an executor
    name: str = "serve"
    biz_codes: Sequence[str] = ()  # empty: every business in the store, looked for again every few seconds
    concurrency: int = 16
    discover_every: float = 5.0
    fence_every: float = 0.25  # seconds between reads of the store's fences (see the module's docstring)
    metrics: SchedulerMetrics = field(default_factory=SchedulerMetrics)
    bus: InProcessBus = field(init=False)
    executors: dict[str, tuple[Executor, threading.Thread]] = field(default_factory=dict, init=False)
    # the business's other lanes (issue 29): an executor each, on the lane's own topic
    lane_executors: dict[tuple[str, Lane], tuple[Executor, threading.Thread]] = field(default_factory=dict, init=False)
    republished: int = field(default=0, init=False)
    # the process's executor identity: its executors' results name it, its heartbeat's row has it
    instance_id: str = field(default_factory=new_instance_id)

    def __post_init__(self) -> None:
        self.bus = InProcessBus(self.store.clock)
        self._exec_stop = threading.Event()
        self._results_stop = threading.Event()

    def _add_executor(self, biz_code: str) -> None:
        for lane in Lane:
            ex = Executor(self.bus, biz_code, concurrency=self.concurrency, lane=lane, instance_id=self.instance_id)
            self.register(ex)
            name = f"executor-{biz_code}" if lane is Lane.DEFAULT else f"executor-{biz_code}-{lane.value}"
            th = threading.Thread(target=ex.run, args=(self._exec_stop,), name=name, daemon=True)
            th.start()
            if lane is Lane.DEFAULT:
                self.executors[biz_code] = (ex, th)
            else:
                self.lane_executors[biz_code, lane] = (ex, th)
        log.info("executor for %s running (lanes %s)", biz_code, ", ".join(Lane))

    def _discover(self) -> None:
        wanted = set(self.biz_codes) if self.biz_codes else store_biz_codes(self.store)
        for biz_code in sorted(wanted - set(self.executors)):
            self._add_executor(biz_code)

    def _consume(self, consumer: ResultConsumer) -> None:
        quiet = 0  # polls in a row that changed nothing, once stopping
        try:
            while quiet < 3:
                try:
                    got = consumer.poll(timeout=timedelta(milliseconds=200))
                except Exception as exc:  # the store may be briefly locked or down: retry
                    self.metrics.errors.labels(component="results").inc()
                    log.warning("applying results failed (%s: %s); retrying", type(exc).__name__, exc)
                    self._results_stop.wait(1.0)
                    continue
                quiet = quiet + 1 if not got and self._results_stop.is_set() else 0
        finally:
            consumer.close()

    def _relay_fences(self, edits: SupersedeRelay, stops: StopRelay) -> None:
        while not self._exec_stop.wait(self.fence_every):
            try:
                stops.relay()  # stops (pause, cancel, freeze, a rollback's fence) written beside it
            except Exception as exc:  # the store briefly locked or down: the next read tries again
                self.metrics.errors.labels(component="fences").inc()
                log.warning("relaying the stops failed (%s: %s); retrying", type(exc).__name__, exc)
            try:
                edits.relay()  # schedule edits a `migrate stream` beside it wrote (scheduler_core.supersede)
            except Exception as exc:
                self.metrics.errors.labels(component="fences").inc()
                log.warning("relaying the schedule edits failed (%s: %s); retrying", type(exc).__name__, exc)

    def run(self, stop: threading.Event, on_started: Callable[[], None] | None = None) -> None:
        # 1. the fences, then the executors (each reads the control channel before it judges a command)
        # the results' subscription first: the in-process bus keeps messages only for subscriptions that exist
        consumer = threading.Thread(
            target=self._consume,
            args=(ResultConsumer(self.bus, self.store, self.metrics, stops=SqlStops(self.store)),),
            name="results",
            daemon=True,
        )
        stop_store = SqlStops(self.store)
        stops = StopRelay(
            stop_store, self.bus, name=f"serve {self.name}", settle=partial(operations.settle, self.store, stop_store)
        )
        fences = stops.relay()
        edits = supersede_relay(self.store, self.bus, self.settings, self.metrics)
        edits.relay()
        relay_thread = threading.Thread(target=self._relay_fences, args=(edits, stops), name="fence-relay", daemon=True)
        relay_thread.start()
        kills = threading.Thread(
            target=run_relays,
            args=(
                [kill_relay(self.store, self.bus).relay],
                self._exec_stop,
                self.metrics.errors.labels(component="kills").inc,
            ),
            name="kill-relay",
            daemon=True,
        )
        kills.start()  # `run kill` requests written to the store beside it (scheduler_core.kills)
        self._discover()
        consumer.start()
        # 2. what the last process published and nobody took
        # one read of the stops for both: what nobody took, and what a liftable stop marked
        index = standing_stops(self.store)
        untaken, _covered = without_stopped(self.store, untaken_commands(self.store), index)
        self.republished = republish(self.store, self.bus, untaken + marked_liftable(self.store, index))
        log.info(
            "serve %s: %d command(s) published again from the store, %d fence(s) broadcast, executors for %s",
            self.name,
            self.republished,
            fences,
            ", ".join(sorted(self.executors)) or "no business yet",
        )
        election = ContinuingElection(
            LocalElection(LocalElectionGroup(self.store.clock), self.name), int(self.store.current_epoch())
        )
        scheduler = Scheduler(
            self.store,
            self.bus,
            election,
            self.store.clock,  # type: ignore[arg-type]
            settings=self.settings,
            metrics=self.metrics,
            consume_results=False,
        )
        sched_stop = threading.Event()
        sched = threading.Thread(target=scheduler.run, args=(sched_stop,), name="scheduler", daemon=True)
        sched.start()
        if on_started is not None:
            on_started()
        try:
            while not stop.wait(self.discover_every):
                try:
                    self._discover()
                except Exception as exc:  # a store hiccup: the next round looks again
                    log.warning("looking for new businesses failed: %s: %s", type(exc).__name__, exc)
        finally:
            # 3. in order: no more fires; executors finish what they took; every result applied
            sched_stop.set()
            sched.join(timeout=60)
            election.close()
            self._exec_stop.set()
            relay_thread.join(timeout=10)
            kills.join(timeout=10)
            for ex, th in [*self.executors.values(), *self.lane_executors.values()]:
                th.join(timeout=60)
                ex.close()
            self._results_stop.set()
            consumer.join(timeout=60)
            self.bus.close()
            log.info("serve %s stopped after %d term(s)", self.name, scheduler.status.terms)
