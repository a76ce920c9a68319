"""The control channel's relays under the shard registry (scheduler_core.control), on the
embedded default (SQLite, in-process bus, the local registry on a driven clock): a
schedule edit is relayed by the owner of its trigger's partition, under that
partition's epoch, and by that member only; a handover moves the relaying with the
partition; a member whose ownership moved writes nothing; the stored rollback fences are
relayed by exactly one member, the owner of the lowest partition."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest

from migrator.model import Action
from migrator.target import TargetWriter
from scheduler_core.clock import ManualClock
from scheduler_core.control import RelayScope, relay_round
from scheduler_core.election.local_registry import LocalRegistry, LocalRegistryGroup
from scheduler_core.executor.fences import FenceView
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.ports import partition_fence, partition_of
from scheduler_core.shards import ShardedScheduler
from scheduler_core.stops import StopRelay
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes, supersede_relay
from scheduler_core.times import to_ms
from switchyard.wiring import migrator_store
from tests.cron_writes import cron_write
from tests.harness import Harness, make_harness

TTL = timedelta(seconds=10)
PARTITIONS = 4


@pytest.fixture
def h(tmp_path: Path, clock: ManualClock) -> Harness:
    return make_harness(
        tmp_path, clock, partitions=PARTITIONS, acquire_deadline=timedelta(seconds=30), lookahead=timedelta(seconds=60)
    )


def _member(h: Harness, group: LocalRegistryGroup, name: str) -> ShardedScheduler:
    def relays(scope: RelayScope) -> list[object]:
        return [
            supersede_relay(h.store, h.bus, h.settings, SchedulerMetrics(), scope).relay,
            StopRelay(SqlStops(h.store), h.bus, scope).relay,
        ]

    m = ShardedScheduler(
        h.store,
        h.bus,
        LocalRegistry(group, name),
        h.clock,
        h.settings,
        consume=False,
        inline=True,
        run_loops=False,
        relays=relays,  # type: ignore[arg-type]
    )
    m._join(threading.Event())
    return m


def _relay(*members: ShardedScheduler) -> None:
    for m in members:
        relay_round(m.relays, lambda: pytest.fail("a relay failed"))


def _settle(stop: threading.Event, *members: ShardedScheduler) -> None:
    for _ in range(4):
        for m in members:
            m.step(stop)


def _edited(h: Harness, stop: threading.Event, *members: ShardedScheduler) -> tuple[int, int]:
    """Every 10 s, published 60 s ahead by the members; then edited to every 7 s. Returns
    the trigger id and E (ms)."""
    writer = TargetWriter(h.store, migrator_store(h.store))
    first = h.clock.now().replace(microsecond=0) + timedelta(seconds=10 - h.clock.now().second % 10)
    writer.apply([cron_write("0/10 * * * * ?", Action.CREATE, first)])
    (t,) = h.store.triggers_of(biz_code="biz-a")
    assert t.id is not None
    for m in members:
        for _ in range(10):
            m.core.tick_all()
    assert len(h.store.fired_between("biz-a", first, first + timedelta(minutes=2))) >= 5
    writer.apply([cron_write("0/7 * * * * ?", Action.UPDATE, first)])
    return int(t.id), to_ms(h.clock.now() + writer.supersede_margin)


def test_the_owner_of_the_triggers_partition_relays_the_edit_under_its_epoch(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a, b = _member(h, group, "a"), _member(h, group, "b")
    _settle(stop, a, b)
    assert a.status.owned and b.status.owned
    view = FenceView(h.bus)
    tid, e_ms = _edited(h, stop, a, b)
    owner, other = (a, b) if partition_of(tid, PARTITIONS) in a.status.owned else (b, a)
    (edit,) = SqlSupersedes(h.store).supersedes()
    assert edit.pending_ms, "the new schedule has runs to publish before the old next_fire_at"
    h.listen("biz-a")
    h.delivered("biz-a")  # what the scheduler published before the edit is not under test
    _relay(other)
    assert SqlSupersedes(h.store).supersedes()[0].pending_ms == edit.pending_ms, (
        "a member that does not own the trigger's partition published its edit's runs"
    )
    _relay(owner)
    # the superseded times: the trigger's stop, relayed by the member owning the lowest
    # partition (the business-wide relays, scheduler_core.control)
    assert view.superseded_ms(tid) == set(edit.skipped_ms) and edit.skipped_ms, "the edit reached the executors"
    assert SqlSupersedes(h.store).supersedes()[0].pending_ms == ()
    h.clock.advance(timedelta(minutes=2))
    runs = Counter(int(c.scheduled_at.timestamp() * 1000) for c in h.delivered("biz-a"))
    assert sorted(runs) == sorted(edit.pending_ms) and set(runs.values()) == {1}, "each pending run published once"
    epoch = owner.status.owned[partition_of(tid, PARTITIONS)]
    recs = {to_ms(r.scheduled_at): r for r in h.store.fired_between("biz-a", h.clock.now() - TTL * 30, h.clock.now())}
    assert {recs[t].epoch for t in edit.pending_ms} == {epoch}, "the runs carry the partition's ownership epoch"
    assert h.store.current_epoch(partition_fence(owner.partitions[partition_of(tid, PARTITIONS)])) == epoch
    _relay(owner, other)
    assert h.delivered("biz-a") == [], "a relay round again publishes nothing"
    assert e_ms == edit.effective_ms


def test_a_handover_moves_the_relaying_and_a_stale_owner_writes_nothing(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a = _member(h, group, "a")
    _settle(stop, a)
    assert sorted(a.status.owned) == list(range(PARTITIONS))
    tid, _e = _edited(h, stop, a)
    index = partition_of(tid, PARTITIONS)
    stale = a.owner(tid)
    assert stale is not None and stale.epoch == a.status.owned[index]
    # a hangs before its relay ran: its lease expires and b takes every partition
    a.registry.pause_keepalive()  # type: ignore[attr-defined]  # the test registry's own switch
    h.clock.advance(TTL + timedelta(seconds=1))
    b = _member(h, group, "b")
    _settle(stop, b)
    assert sorted(b.status.owned) == list(range(PARTITIONS)) and b.status.owned[index] > stale.epoch
    (edit,) = SqlSupersedes(h.store).supersedes()
    view = FenceView(h.bus)
    h.listen("biz-a")
    h.delivered("biz-a")
    # a resumes: its relays see the lease gone, and its ownership is refused by the store
    assert a.owner(tid) is None and not a.business_wide()
    _relay(a)
    assert view.superseded_ms(tid) == set()
    assert not SqlSupersedes(h.store).claim_pending(edit, [], stale), "a stale ownership claimed pending runs"
    # b relays what a never did: b took the partition, so its relay reads the store whole
    _relay(b)
    assert view.superseded_ms(tid) == set(edit.skipped_ms)
    h.clock.advance(timedelta(minutes=2))
    runs = Counter(to_ms(c.scheduled_at) for c in h.delivered("biz-a"))
    assert sorted(runs) == sorted(edit.pending_ms) and set(runs.values()) == {1}
    recs = {to_ms(r.scheduled_at): r for r in h.store.fired_between("biz-a", h.clock.now() - TTL * 30, h.clock.now())}
    assert {recs[t].epoch for t in edit.pending_ms} == {b.status.owned[index]}


def test_the_stored_fences_are_relayed_by_the_owner_of_the_lowest_partition_only(h: Harness) -> None:
    group = LocalRegistryGroup(h.clock, TTL)
    stop = threading.Event()
    a, b = _member(h, group, "a"), _member(h, group, "b")
    _settle(stop, a, b)
    heard: list[bytes] = []
    h.bus.follow_control(heard.append)
    view = FenceView(h.bus)
    at = h.clock.now() + timedelta(seconds=5)
    fence, _marked = h.store.raise_business_fence("biz-a", to_ms(at))  # no broadcast
    _relay(a, b)
    _relay(a, b)
    assert view.by_business.get("biz-a") == fence, "a member relayed the stored fence"
    assert len(heard) == 1, "exactly one member relays the fences"
    first = a if 0 in a.status.owned else b
    assert first.business_wide() and not (b if first is a else a).business_wide()
    # the lowest partition moves (its owner stops cleanly): the other relays from then on
    first._leave()
    rest = b if first is a else a
    _settle(stop, rest)
    assert rest.business_wide()
    lifted = h.store.lift_business_fence("biz-a", to_ms(at + timedelta(minutes=1)))
    _relay(rest)
    assert lifted is not None and view.by_business.get("biz-a") == lifted
