"""Chunks admitted shortly before their T are held and fired at T (published when due, so
the broker's delayed-delivery tick adds nothing), bounded per broker tick."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import command_topic, decode_commands
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.hold import HeldChunks, by_due
from scheduler_core.model import FiredRecord, Job, JobCode, Trigger, TriggerKind, TriggerState
from scheduler_core.ports import BusMessage
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from tests.waiting import stays, until

T0 = datetime(2026, 12, 5, 3, 0, tzinfo=timezone.utc)


def _wait(cond: Callable[[], bool], bound_s: float = 30.0) -> bool:
    return until(cond, bound_s, every_s=0.01)


def _ts(n: int, due_ms: int = 0) -> list[Trigger]:
    at = datetime.fromtimestamp(due_ms / 1000, timezone.utc) if due_ms else T0
    return [Trigger(job_code=JobCode("j"), biz_code="b", kind=TriggerKind.ONCE, next_fire_at=at) for _ in range(n)]


def _hold(held: HeldChunks, due_ms: int, name: str, n: int, key: object = None) -> bool:
    """Hold n triggers under `name` (also the owner key unless given); firing does nothing."""
    return held.hold(due_ms, name if key is None else key, name, n, name, lambda _due, _parts: None)


def test_the_hold_takes_chunks_due_within_it_up_to_its_bound_per_broker_tick() -> None:
    clock = ManualClock(T0)
    offered: list[str] = []

    def offer(biz_code: str, n: int, fire: Callable[[], object]) -> bool:
        offered.append(biz_code)
        return True

    held = HeldChunks(clock, offer, within_ms=2000, per_window=150, window_ms=100)
    now = to_ms(T0)
    try:
        assert not _hold(held, now - 1, "late", 10), "due already: fired now"
        assert not _hold(held, now + 2001, "far", 10), "beyond the hold: deliver-at as before"
        assert _hold(held, now + 1000, "a", 100)
        assert not _hold(held, now + 1050, "b", 100), "the same broker tick is full: fired now"
        assert _hold(held, now + 1150, "c", 100), "the next tick has room"
        assert held.pending() == 200
        assert stays(lambda: offered == [], 0.3), "nothing is handed to the pool before its T"
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
    assert _hold(held, now + 500, "a", 10)
    clock.advance(timedelta(seconds=1))
    assert _wait(lambda: offered == ["a"]), "refused twice at T (the pool full), taken on the third offer"
    assert _hold(held, to_ms(clock.now()) + 500, "kept", 10)
    held.stop(cancel=False)
    assert offered == ["a", "kept"], "a clean stop hands what is held to the pool"
    dropped = HeldChunks(clock, submit, within_ms=2000, per_window=1000, window_ms=100)
    assert _hold(dropped, to_ms(clock.now()) + 500, "lost", 10)
    dropped.stop(cancel=True)
    assert "lost" not in offered, "a deposed owner's held chunks are left to be reclaimed"


def test_chunks_held_for_the_same_T_by_the_same_owner_fire_as_one() -> None:
    clock = ManualClock(T0)
    now = to_ms(T0)
    fired: list[tuple[str, list[str]]] = []
    submitted: list[int] = []

    def submit(biz_code: str, n: int, work: Callable[[], object]) -> bool:
        submitted.append(n)
        work()
        return True

    def fire_as(owner: str) -> Callable[[int, list[str]], None]:
        return lambda _due, parts: fired.append((owner, parts))

    held = HeldChunks(clock, submit, within_ms=2000, per_window=1000, window_ms=100, merge_max=25)
    try:
        due = now + 500
        assert held.accepts(due, 10) and not held.accepts(now - 1, 1) and not held.accepts(due, 1001)
        assert held.hold(due, ("b", 1, None), "b", 10, "p1", fire_as("first"))
        assert held.hold(due, ("b", 1, None), "b", 10, "p2", fire_as("second"))
        assert held.hold(due, ("b", 2, None), "b", 3, "p3", fire_as("newer epoch"))
        assert held.hold(due, ("b", 1, None), "b", 10, "p4", fire_as("over merge_max"))
        assert held.hold(due + 1, ("b", 1, None), "b", 4, "p5", fire_as("a ms later"))
        assert held.merged == 1 and held.pending() == 37
        clock.advance(timedelta(milliseconds=501))
        assert _wait(lambda: len(fired) == 4 and held.pending() == 0), fired
        assert ("first", ["p1", "p2"]) in fired, "merged: one fire at T with both parts, by the first one's fire"
        assert ("newer epoch", ["p3"]) in fired, "another owner (epoch, fence) is never merged in"
        assert ("over merge_max", ["p4"]) in fired, "a merge never grows past merge_max"
        assert fired[-1] == ("a ms later", ["p5"])
        assert sorted(submitted) == [3, 4, 10, 20]
    finally:
        held.stop(cancel=True)


def test_a_held_chunk_is_handed_over_early_ms_before_its_T_with_its_T() -> None:
    clock = ManualClock(T0)
    now = to_ms(T0)
    got: list[tuple[int, list[str]]] = []

    def submit(biz_code: str, n: int, work: Callable[[], object]) -> bool:
        work()
        return True

    held = HeldChunks(clock, submit, within_ms=2000, per_window=1000, window_ms=100, early_ms=10)
    try:
        assert held.hold(now + 500, "k", "b", 1, "p", lambda due, parts: got.append((due, parts)))
        clock.advance(timedelta(milliseconds=489))
        assert stays(lambda: got == [], 0.3), "not before T - early_ms"
        clock.advance(timedelta(milliseconds=1))
        assert _wait(lambda: got == [(now + 500, ["p"])]), "at T - early_ms, told its T (it publishes at T)"
    finally:
        held.stop(cancel=True)


def test_a_chunk_is_cut_by_T_each_group_fired_at_its_last_T() -> None:
    base = to_ms(T0)
    chunk = _ts(1, base + 100) + _ts(2, base) + _ts(1, base + 4) + _ts(1, base + 104) + _ts(1, base + 9)
    groups = by_due(chunk, 5)
    assert [(due - base, len(g)) for due, g in groups] == [(4, 3), (9, 1), (104, 2)]
    assert all(to_ms(t.next_fire_at) <= due for due, g in groups for t in g), "no trigger is fired before its T"
    assert all(due - to_ms(g[0].next_fire_at) <= 5 for due, g in groups), "none more than the spread after it"
    assert sum(len(g) for _d, g in groups) == len(chunk)
    assert by_due([], 5) == []


def _fired_records(
    tmp_path: Path, settings: SchedulerSettings, lead_s: float, recurring: bool = False
) -> tuple[list[FiredRecord], list[tuple[int, int]]]:
    """Triggers due lead_s after they are added, on a running embedded scheduler: their
    fired records, and (published at, deliver-at) in ms of each message the bus took."""
    engine = make_engine(f"sqlite:///{tmp_path / 'hold.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    bus = InProcessBus(store.clock)
    published: list[tuple[int, int]] = []
    bus_publish = bus.publish

    def publish(messages: Sequence[BusMessage]) -> None:
        bus_publish(messages)
        published.extend((store.clock.now_ms(), m.deliver_at_ms or 0) for m in messages)

    bus.publish = publish  # type: ignore[method-assign]
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
        return store.fired_between(None, due - timedelta(seconds=1), due + timedelta(seconds=1)), published
    finally:
        stop.set()
        th.join(timeout=30)
        bus.close()
        engine.dispose()


def test_triggers_due_shortly_are_published_at_their_T_with_records_written_at_admission(tmp_path: Path) -> None:
    records, published = _fired_records(tmp_path, SchedulerSettings(hold_within=timedelta(seconds=5)), lead_s=1.5)
    assert len(records) == 20 and len(published) == 20
    assert all(at >= deliver_at for at, deliver_at in published), "a held chunk is published at T, never ahead of it"
    assert all(r.fired_at is not None and r.fired_at < r.scheduled_at for r in records), (
        "its fired records were written when it was admitted (prepared): at T only the publication is left"
    )


def test_with_the_hold_off_they_fire_at_admission_with_deliver_at(tmp_path: Path) -> None:
    records, published = _fired_records(tmp_path, SchedulerSettings(hold_within=timedelta(0)), lead_s=1.5)
    assert len(records) == 20 and all(at < deliver_at for at, deliver_at in published)
    assert all(r.fired_at is not None and r.fired_at < r.scheduled_at for r in records), (
        "admitted (woken) at once and fired ahead of T: the broker holds the message"
    )


def test_recurring_triggers_are_not_held_their_occurrences_stay_published_ahead(tmp_path: Path) -> None:
    records, published = _fired_records(
        tmp_path, SchedulerSettings(hold_within=timedelta(seconds=5)), lead_s=1.5, recurring=True
    )
    assert len(records) == 20 and all(at < deliver_at for at, deliver_at in published)
    assert all(r.fired_at is not None and r.fired_at < r.scheduled_at for r in records), (
        "a recurring trigger's occurrence is fired ahead with deliver-at, as rollback fences expect"
    )


def test_a_held_chunk_whose_owner_is_deposed_is_reclaimed_and_fired_once_with_its_prepared_ids(
    tmp_path: Path,
) -> None:
    """Prepared at admission (records written) and held, then the leader stops renewing its
    lease (a hung process): nothing of the chunk is published by it; the next leader
    reclaims the rows after their deadline and publishes each run once, with the command
    ids of the records written at admission."""
    engine = make_engine(f"sqlite:///{tmp_path / 'deposed.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    bus = InProcessBus(store.clock)
    group = LocalElectionGroup(store.clock, ttl=timedelta(seconds=1))
    settings = SchedulerSettings(
        hold_within=timedelta(seconds=10),
        acquire_deadline=timedelta(seconds=2),
        reclaim_interval=timedelta(milliseconds=200),
    )
    job = store.put_job(Job(job_code=JobCode("d"), biz_code="biz-d", handler="h"))
    probe = bus.subscribe(command_topic(job.biz_code), "probe")
    first = Scheduler(store, bus, LocalElection(group, "first"), store.clock, settings, consume_results=False)
    second = Scheduler(store, bus, LocalElection(group, "second"), store.clock, settings, consume_results=False)
    stops = [threading.Event(), threading.Event()]
    threads = [
        threading.Thread(target=s.run, args=(stop,), daemon=True)
        for s, stop in zip((first, second), stops, strict=True)
    ]
    published: list[str] = []

    def drain() -> None:
        while got := probe.receive(1000, timedelta(0)):
            for r in got:
                published.extend(c.command_id for c in decode_commands(r.message.payload))
                probe.ack(r)

    try:
        threads[0].start()
        assert _wait(lambda: first.status.leader and first.status.stats.ticks >= 2)
        due = store.clock.now() + timedelta(seconds=4)
        added = store.add_triggers(
            [Trigger(job_code=job.job_code, biz_code=job.biz_code, kind=TriggerKind.ONCE, next_fire_at=due)] * 5
        )
        core = first.core
        assert core is not None and core.held is not None
        held = core.held
        assert _wait(lambda: held.pending() == 5), "admitted and held for its T"
        window = (due - timedelta(seconds=1), due + timedelta(seconds=1))
        prepared = {r.command_id for r in store.fired_between(job.biz_code, *window)}
        assert len(prepared) == 5, "its fired records were written when it was admitted"
        assert first.election.is_leader()
        first.election.pause_keepalive()  # type: ignore[attr-defined]
        # the lease runs out: that term ends (the first may lead again at once, under a new
        # epoch, as a restarted process would; leader=False lasts only between the terms)
        assert _wait(lambda: not first.status.leader or first.status.terms >= 2), "the first leader is deposed"
        threads[1].start()
        ids = [t.id for t in added if t.id is not None]
        assert _wait(lambda: {t.state for t in store.get_triggers(ids)} == {TriggerState.COMPLETED}, 60)
        time.sleep(max(0.0, (due - store.clock.now()).total_seconds()) + 0.3)  # the deliver-at has passed
        drain()
        assert sorted(published) == sorted(prepared), "each run published once, with the ids written at admission"
        assert core.stats.fired == 0, "the deposed term published nothing of its held chunk"
        # the next leader (the second, or the first again under a new epoch, as a restarted
        # process would be) reclaimed the rows
        assert first.status.stats.reclaimed + second.status.stats.reclaimed >= 5
    finally:
        for stop in stops:
            stop.set()
        for th in threads:
            if th.is_alive():
                th.join(timeout=30)
        bus.close()
        engine.dispose()
