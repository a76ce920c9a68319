"""Wake-ups for short delays on the embedded default (SQLite, in-process bus, local
election and registry, system clock): a trigger added due soon is admitted at once by its
partition's loop, not after the loop's idle wait, which these tests set far longer than
anything they wait for."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest

from scheduler_core.acquire import PartitionLoop, TickResult
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.election.local_registry import LocalRegistry, LocalRegistryGroup
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind, TriggerState
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.shards import ShardedScheduler
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from scheduler_core.wakeup import LocalWakeups, notify_added, partitions_to_wake
from tests.waiting import stays, until

PARTITIONS = 4
# the loops' wait when idle: far longer than any wait below, so only a wake-up admits in time
IDLE = timedelta(seconds=120)
SETTINGS = SchedulerSettings(
    idle_wait=IDLE, max_wait=IDLE, jitter=timedelta(0), busy_wait=IDLE, reclaim_interval=timedelta(seconds=60)
)
BOUND_S = 30.0  # how long a test waits for what it expects: a quarter of the idle wait


@dataclass
class Embedded:
    store: SqlTriggerStore
    bus: InProcessBus
    job: Job

    def add(self, due_in_s: float) -> Trigger:
        (t,) = self.store.add_triggers(
            [
                Trigger(
                    job_code=self.job.job_code,
                    biz_code=self.job.biz_code,
                    kind=TriggerKind.ONCE,
                    next_fire_at=self.store.clock.now() + timedelta(seconds=due_in_s),
                )
            ]
        )
        return t

    def state(self, t: Trigger) -> TriggerState:
        got = self.store.get_trigger(t.id)  # type: ignore[arg-type]
        assert got is not None
        return got.state


@pytest.fixture
def embedded(tmp_path: Path) -> Iterator[Embedded]:
    engine = make_engine(f"sqlite:///{tmp_path / 'wake.db'}")
    init_schema(engine, PARTITIONS)
    store = SqlTriggerStore(engine, SystemClock())
    job = store.put_job(Job(job_code=JobCode("wake"), biz_code="biz-w", handler="h"))
    bus = InProcessBus(store.clock)
    try:
        yield Embedded(store, bus, job)
    finally:
        bus.close()
        engine.dispose()


def _wait(cond: Callable[[], bool], bound_s: float = BOUND_S) -> bool:
    return until(cond, bound_s, every_s=0.02)


def _t(tid: int, due: datetime) -> Trigger:
    return Trigger(id=tid, job_code=JobCode("j"), biz_code="b", kind=TriggerKind.ONCE, next_fire_at=due)  # type: ignore[arg-type]


def test_the_partitions_woken_are_the_new_triggers_due_within_the_horizon() -> None:
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)
    soon, far = now + timedelta(seconds=1), now + timedelta(hours=1)
    sooner = now + timedelta(milliseconds=300)
    got = partitions_to_wake([_t(5, soon), _t(6, soon), _t(10, sooner), _t(7, far)], 4, now)
    assert got == {1: to_ms(soon), 2: to_ms(sooner)}, (
        "id mod the partition count, the earliest T of each; 7 is due past the horizon"
    )
    assert partitions_to_wake([_t(9, soon)], 1, now) == {0: to_ms(soon)}, "an unpartitioned table is one slice"


def test_local_wakeups_reach_listeners_until_they_stop() -> None:
    wake = LocalWakeups()
    heard: list[Mapping[int, int]] = []
    stop = wake.listen(heard.append)
    now = datetime(2026, 12, 5, tzinfo=timezone.utc)
    notify_added(wake, [_t(3, now), _t(4, now + timedelta(hours=2))], 4, now)
    notify_added(wake, [_t(8, now + timedelta(hours=2))], 4, now)  # nothing due soon: no wake-up
    stop()
    notify_added(wake, [_t(2, now)], 4, now)
    assert heard == [{3: to_ms(now)}]


def test_a_listener_that_raises_does_not_fail_the_insert(embedded: Embedded) -> None:
    def broken(_: Mapping[int, int]) -> None:
        raise RuntimeError("listener bug")

    assert embedded.store.wakeups is not None
    embedded.store.wakeups.listen(broken)
    t = embedded.add(0.5)
    assert embedded.state(t) is TriggerState.WAITING


def test_a_wakeup_ticks_by_the_triggers_T_minus_the_lead_never_before() -> None:
    """The loop's wait (60 s here) ends at the new trigger's T minus wake_lead, not at
    once: a loop is not made to tick per added batch when the trigger is due later."""
    settings = SchedulerSettings(max_wait=timedelta(seconds=60), wake_lead=timedelta(milliseconds=500))
    clock = SystemClock()
    acq = SimpleNamespace(settings=settings, clock=clock, partition=SimpleNamespace(name="p0"))
    ticks: list[float] = []

    def tick(_: object) -> TickResult:
        ticks.append(time.monotonic())
        return TickResult(wait=timedelta(seconds=60))

    loop = PartitionLoop(acq, tick, threading.Event(), lambda: True, SchedulerMetrics())  # type: ignore[arg-type]
    loop.start()
    try:
        assert _wait(lambda: len(ticks) == 1)
        woken_at = time.monotonic()
        loop.wake(clock.now_ms() + 1500)
        loop.wake(clock.now_ms() + 600_000)  # a later T does not push the earlier one back
        assert _wait(lambda: len(ticks) == 2), "the wake-up's time ended the 60 s wait"
        assert ticks[1] - woken_at >= 0.9, "not before T minus the lead"
        loop.wake(clock.now_ms() + 600_000)
        assert stays(lambda: len(ticks) == 2, 1.0), "a trigger due in 10 minutes is left to the regular ticks"
        loop.wake(clock.now_ms() - 10)
        assert _wait(lambda: len(ticks) == 3), "T minus the lead has passed: at once"
        assert loop.wakeups == 2
    finally:
        loop.halt()
        loop.join(10)


def _scheduler(embedded: Embedded) -> Scheduler:
    """A scheduler alone on the embedded store and bus (no result consumer)."""
    return Scheduler(
        embedded.store,
        embedded.bus,
        LocalElection(LocalElectionGroup(embedded.store.clock)),
        embedded.store.clock,
        SETTINGS,
        consume_results=False,
    )


def _start(run: Callable[[threading.Event], None]) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    th = threading.Thread(target=run, args=(stop,), daemon=True)
    th.start()
    return stop, th


def test_the_leader_admits_a_trigger_due_soon_at_once_not_after_its_idle_wait(embedded: Embedded) -> None:
    sched = _scheduler(embedded)
    stop, th = _start(sched.run)
    try:
        # every loop has ticked once and found nothing: each now waits IDLE
        assert _wait(lambda: sched.status.stats.ticks >= PARTITIONS)
        triggers = [embedded.add(0.2) for _ in range(PARTITIONS * 2)]
        started = time.monotonic()
        assert _wait(lambda: all(embedded.state(t) is not TriggerState.WAITING for t in triggers)), (
            "a trigger due soon waited for its loop's idle wait"
        )
        took = time.monotonic() - started
        assert took < IDLE.total_seconds() / 4
        assert _wait(lambda: sched.status.stats.fired == len(triggers)), "admitted, then fired at T"
        assert time.monotonic() - started < IDLE.total_seconds() / 4
    finally:
        stop.set()
        th.join(timeout=30)


def test_without_wakeups_the_same_trigger_waits_for_the_idle_wait(embedded: Embedded) -> None:
    """The control of the test above: the same set-up with the store's wake-ups off
    leaves the trigger waiting (it would be admitted IDLE after the last tick)."""
    embedded.store.wakeups = None
    sched = _scheduler(embedded)
    stop, th = _start(sched.run)
    try:
        assert _wait(lambda: sched.status.stats.ticks >= PARTITIONS)
        ticks = sched.status.stats.ticks
        t = embedded.add(0.2)
        assert stays(lambda: sched.status.stats.ticks == ticks, 2.0, every_s=0.05), (
            "no loop ticked during its idle wait"
        )
        assert embedded.state(t) is TriggerState.WAITING
    finally:
        stop.set()
        th.join(timeout=30)


def test_only_the_owner_of_the_triggers_partition_is_woken(embedded: Embedded) -> None:
    """Two shard-registry members: a trigger's wake-up wakes the loop of its partition on
    the member that owns it, and no loop of the other member."""
    group = LocalRegistryGroup(embedded.store.clock, timedelta(seconds=10))
    members = [
        ShardedScheduler(
            embedded.store, embedded.bus, LocalRegistry(group, name), embedded.store.clock, SETTINGS, consume=False
        )
        for name in ("m1", "m2")
    ]
    runs = [_start(m.run) for m in members]
    try:
        assert _wait(
            lambda: (
                sorted(p for m in members for p in m.status.owned) == list(range(PARTITIONS))
                and all(m.status.owned for m in members)
            )
        ), "the members split the partitions"
        assert _wait(lambda: sum(m.core.stats.ticks for m in members) >= PARTITIONS)
        loops = {i: (m, o.loop) for m in members for i, o in m._owned.items()}
        before = {i: lp.wakeups for i, (_, lp) in loops.items()}
        t = embedded.add(0.2)
        mine = int(t.id) % PARTITIONS  # type: ignore[arg-type]
        owner = loops[mine][0]
        assert _wait(lambda: embedded.state(t) is not TriggerState.WAITING)
        assert loops[mine][1].wakeups > before[mine], "the owner's loop of the trigger's partition was woken"
        others = {i: lp.wakeups - before[i] for i, (_, lp) in loops.items() if i != mine}
        assert others == {i: 0 for i in others}, "no other partition's loop was woken"
        assert _wait(lambda: owner.core.stats.fired == 1)
        assert sum(m.core.stats.fired for m in members if m is not owner) == 0
    finally:
        for stop, _ in runs:
            stop.set()
        for _, th in runs:
            th.join(timeout=30)
