"""Chunks admitted shortly before their T are held and fired at T (published when due, so
the broker's delayed-delivery tick adds nothing), bounded per broker tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.hold import HeldChunks
from scheduler_core.model import FiredRecord, Job, JobCode, Trigger, TriggerKind
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms

T0 = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)


def _wait(cond: Callable[[], bool], bound_s: float = 30.0) -> bool:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_the_hold_takes_chunks_due_within_it_up_to_its_bound_per_broker_tick() -> None:
    clock = ManualClock(T0)
    offered: list[str] = []

    def offer(biz_code: str, n: int, fire: Callable[[], object]) -> bool:
        offered.append(biz_code)
        return True

    held = HeldChunks(clock, offer, within_ms=2000, per_window=150, window_ms=100)
    now = to_ms(T0)
    try:
        assert not held.hold(now - 1, "late", 10, lambda: None), "due already: fired now"
        assert not held.hold(now + 2001, "far", 10, lambda: None), "beyond the hold: deliver-at as before"
        assert held.hold(now + 1000, "a", 100, lambda: None)
        assert not held.hold(now + 1050, "b", 100, lambda: None), "the same broker tick is full: fired now"
        assert held.hold(now + 1150, "c", 100, lambda: None), "the next tick has room"
        assert held.pending() == 200
        time.sleep(0.3)
        assert offered == [], "nothing is handed to the pool before its T"
        clock.advance(timedelta(milliseconds=1000))
        assert _wait(lambda: offered == ["a"])
        clock.advance(timedelta(milliseconds=200))
        assert _wait(lambda: offered == ["a", "c"])
        assert held.wait_empty(5)
    finally:
        held.stop(cancel=True)


def test_a_refused_chunk_is_offered_again_and_a_stop_can_drop_or_hand_over() -> None:
    clock = ManualClock(T0)
    answers = iter([False, False, True])
    offered: list[str] = []

    def submit(biz_code: str, n: int, work: Callable[[], object]) -> bool:
        ok = next(answers, True)
        if ok:
            offered.append(biz_code)
        return ok

    held = HeldChunks(clock, submit, within_ms=2000, per_window=1000, window_ms=100)
    now = to_ms(T0)
    assert held.hold(now + 500, "a", 10, lambda: None)
    clock.advance(timedelta(seconds=1))
    assert _wait(lambda: offered == ["a"]), "refused twice at T (the pool full), taken on the third offer"
    assert held.hold(to_ms(clock.now()) + 500, "kept", 10, lambda: None)
    held.stop(cancel=False)
    assert offered == ["a", "kept"], "a clean stop hands what is held to the pool"
    dropped = HeldChunks(clock, submit, within_ms=2000, per_window=1000, window_ms=100)
    assert dropped.hold(to_ms(clock.now()) + 500, "lost", 10, lambda: None)
    dropped.stop(cancel=True)
    assert "lost" not in offered, "a deposed owner's held chunks are left to be reclaimed"


def _fired_records(
    tmp_path: Path, settings: SchedulerSettings, lead_s: float, recurring: bool = False
) -> list[FiredRecord]:
    """Triggers due lead_s after they are added, on a running embedded scheduler."""
    engine = make_engine(f"sqlite:///{tmp_path / 'hold.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    bus = InProcessBus(store.clock)
    job = store.put_job(Job(job_code=JobCode("h"), biz_code="biz-h", handler="h"))
    sched = Scheduler(
        store, bus, LocalElection(LocalElectionGroup(store.clock)), store.clock, settings, consume_results=False
    )
    stop = threading.Event()
    th = threading.Thread(target=sched.run, args=(stop,), daemon=True)
    th.start()
    try:
        assert _wait(lambda: sched.status.stats.ticks >= 2)
        due = store.clock.now() + timedelta(seconds=lead_s)
        kind = (
            {"kind": TriggerKind.FIXED_RATE, "interval": timedelta(minutes=10)}
            if recurring
            else {"kind": TriggerKind.ONCE}
        )
        added = store.add_triggers(
            [Trigger(job_code=job.job_code, biz_code=job.biz_code, next_fire_at=due, **kind) for _ in range(20)]
        )  # type: ignore[arg-type]
        assert _wait(lambda: sched.status.stats.fired >= len(added))
        return store.fired_between(None, due - timedelta(seconds=1), due + timedelta(seconds=1))
    finally:
        stop.set()
        th.join(timeout=30)
        bus.close()
        engine.dispose()


def test_triggers_due_shortly_are_fired_at_their_T_not_at_admission(tmp_path: Path) -> None:
    records = _fired_records(tmp_path, SchedulerSettings(hold_within=timedelta(seconds=5)), lead_s=1.5)
    assert len(records) == 20
    assert all(to_ms(r.fired_at) >= to_ms(r.scheduled_at) for r in records if r.fired_at is not None), (
        "a held chunk fires at T, never ahead of it"
    )


def test_with_the_hold_off_they_fire_at_admission_with_deliver_at(tmp_path: Path) -> None:
    records = _fired_records(tmp_path, SchedulerSettings(hold_within=timedelta(0)), lead_s=1.5)
    assert len(records) == 20
    assert all(r.fired_at is not None and r.fired_at < r.scheduled_at for r in records), (
        "admitted (woken) at once and fired ahead of T: the broker holds the message"
    )


def test_recurring_triggers_are_not_held_their_occurrences_stay_published_ahead(tmp_path: Path) -> None:
    records = _fired_records(tmp_path, SchedulerSettings(hold_within=timedelta(seconds=5)), lead_s=1.5, recurring=True)
    assert len(records) == 20
    assert all(r.fired_at is not None and r.fired_at < r.scheduled_at for r in records), (
        "a recurring trigger's occurrence is fired ahead with deliver-at, as rollback fences expect"
    )
