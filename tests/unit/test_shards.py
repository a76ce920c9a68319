"""Shard registry members on the embedded default (SQLite, in-process bus, the local
registry on a driven clock): ownership, handover on a join, a lost lease, fencing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.clock import ManualClock
from scheduler_core.election.local_registry import LocalRegistry, LocalRegistryGroup
from scheduler_core.model import Lane, TriggerState, command_id
from scheduler_core.ports import partition_fence
from scheduler_core.shards import ShardedScheduler
from tests.harness import Harness, make_harness

TTL = timedelta(seconds=10)


@pytest.fixture
def h(tmp_path: Path, clock: ManualClock) -> Harness:
    return make_harness(tmp_path, clock, partitions=8, acquire_deadline=timedelta(seconds=30))


def _member(h: Harness, group: LocalRegistryGroup, name: str) -> ShardedScheduler:
    m = ShardedScheduler(
        h.store, h.bus, LocalRegistry(group, name), h.clock, h.settings, consume=False, inline=True, run_loops=False
    )
    m._join(threading.Event())
    return m


def test_one_member_owns_every_partition_and_fires_them(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    solo = _member(h, group, "solo")
    job = h.job("j")
    triggers = [h.once(job, i) for i in range(16)]
    h.listen("biz-a")
    solo.step(threading.Event())
    assert sorted(solo.status.owned) == list(range(8)), "one member is the single leader's case: it owns all"
    for index, epoch in solo.status.owned.items():
        assert h.store.current_epoch(partition_fence(solo.partitions[index])) == epoch
    solo.core.tick_all()
    h.clock.advance(timedelta(seconds=20))
    got = {c.command_id for c in h.delivered("biz-a")}
    assert got == {command_id(t.id, t.next_fire_at, 0) for t in triggers}  # type: ignore[arg-type]
    recs = h.store.fired_between(None, h.clock.now() - timedelta(hours=1), h.clock.now() + timedelta(hours=1))
    assert {r.epoch for r in recs} == set(solo.status.owned.values()), "records carry their partition's epoch"


def test_a_join_moves_only_released_partitions_with_newer_epochs(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a = _member(h, group, "a")
    a.step(stop)
    before = dict(a.status.owned)
    b = _member(h, group, "b")
    b.step(stop)
    assert b.status.owned == {}, "the joiner waits: a still owns what is now assigned to it"
    a.step(stop)  # a sees b, finishes and releases b's share
    b.step(stop)
    moved = set(b.status.owned)
    assert moved and moved.isdisjoint(a.status.owned) and moved | set(a.status.owned) == set(range(8))
    for index in moved:
        assert b.status.owned[index] > before[index], "a partition's epoch strictly increases per handover"
        fence = partition_fence(b.partitions[index])
        assert h.store.current_epoch(fence) == b.status.owned[index]
    assert {i: e for i, e in a.status.owned.items()} == {i: before[i] for i in a.status.owned}, (
        "partitions that did not move keep their ownership"
    )
    assert a.status.rebalances == len(moved) and b.metrics.partitions_owned._value.get() == len(moved)


def test_a_member_past_its_lease_admits_and_publishes_nothing_and_its_rows_are_reclaimed(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a, b = _member(h, group, "a"), _member(h, group, "b")
    a.step(stop)
    b.step(stop)
    job = h.job("j")
    triggers = [h.once(job, 1 + i * 0.1) for i in range(16)]  # all due within the pause
    h.listen("biz-a")
    # a acquires its rows, then hangs before firing them (its chunks held back)
    held: list[object] = []

    def hold(biz_code: str, size: int, work: Callable[[], object], lane: Lane = Lane.DEFAULT) -> bool:
        held.append(work)
        return True

    a.core.pool.try_submit = hold  # type: ignore[method-assign]
    a.core.tick_all()
    a_rows = [t for t in h.store.get_triggers([t.id for t in triggers]) if t.state is TriggerState.ACQUIRED]  # type: ignore[misc]
    assert a_rows, "a acquired its partitions' rows"
    stale_acqs = list(a.core.acquirers)
    a.registry.pause_keepalive()  # type: ignore[attr-defined]  # the test registry's own switch
    h.clock.advance(TTL + timedelta(seconds=1))
    # before anyone took over (the store's fences are still a's), a's lease is gone: the
    # chunk writes its fired records but publishes nothing
    held.pop(0)()  # type: ignore[operator]
    assert h.delivered("biz-a") == [], "a member past its lease published a chunk"
    b.step(stop)
    assert sorted(b.status.owned) == list(range(8)), "b took a's partitions once a's lease expired"
    # a resumes: its queued chunks publish nothing, its acquirers are fenced
    for work in held:
        work()  # type: ignore[operator]
    assert h.delivered("biz-a") == [], "a member that lost its lease published a chunk"
    for acq in stale_acqs:
        assert acq.tick().acquired == 0
    a.step(stop)  # a notices, drops everything and rejoins as a new incarnation
    assert a.status.owned == {} and a.status.incarnations == 2
    # b fires its own rows, and reclaims a's after their deadline, with the same command ids
    h.clock.advance(timedelta(seconds=31))
    b.core.reclaim()
    b.core.tick_all()
    h.clock.advance(timedelta(seconds=30))
    got = [c.command_id for c in h.delivered("biz-a")]
    assert sorted(got) == sorted(command_id(t.id, t.next_fire_at, 0) for t in triggers)  # type: ignore[arg-type]
    assert {t.state for t in h.store.get_triggers([t.id for t in triggers])} == {TriggerState.COMPLETED}  # type: ignore[misc]


def test_a_clean_leave_frees_every_partition_at_once(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a, b = _member(h, group, "a"), _member(h, group, "b")
    a.step(stop)
    b.step(stop)
    a.step(stop)
    b.step(stop)
    assert a.status.owned and b.status.owned
    a._leave()
    b.step(stop)
    assert sorted(b.status.owned) == list(range(8)), "no TTL to wait for after a clean stop"
