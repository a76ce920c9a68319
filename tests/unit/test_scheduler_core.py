"""The scheduler core on the embedded default with a driven clock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler_core.acquire import BEGINNING, plan_window
from scheduler_core.clock import ManualClock
from scheduler_core.codec import command_topic
from scheduler_core.errors import PublishError
from scheduler_core.model import (
    Epoch,
    FiredState,
    MisfirePolicy,
    ShardingItem,
    TriggerId,
    TriggerKind,
    TriggerState,
    command_id,
)
from scheduler_core.ports import Transition
from scheduler_core.settings import SchedulerSettings
from tests.harness import make_harness, state_of, stored_id, trigger_of

UTC = timezone.utc


@pytest.fixture
def h(tmp_path: Path, clock: ManualClock):  # type: ignore[no-untyped-def]
    return make_harness(tmp_path, clock)


def test_window_floors() -> None:
    s = SchedulerSettings()
    now = datetime(2026, 12, 2, 12, tzinfo=UTC)
    start = plan_window(now, None, s)
    assert start.start == now - timedelta(days=7) and start.end == now + timedelta(minutes=30)
    steady = plan_window(now, now + timedelta(minutes=20), s)
    assert steady.start == now - timedelta(hours=2)
    behind = plan_window(now, now - timedelta(hours=5), s)
    assert behind.start == now - timedelta(hours=5), "a partition behind its threshold keeps its last seen floor"
    assert plan_window(now, now, s, sweep=True).start == BEGINNING


def test_admits_within_lookahead_only_and_delivers_at_T(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    soon = h.once(job, 60)
    later = h.once(job, 31 * 60)
    h.listen("biz-a")
    core = h.core()
    core.tick_all()
    assert h.store.get_trigger(soon.id).state is TriggerState.COMPLETED
    assert h.store.get_trigger(later.id).state is TriggerState.WAITING
    assert h.delivered("biz-a") == [], "published with deliver-at = T, not the acquire time"
    h.clock.advance(timedelta(seconds=59))
    assert h.delivered("biz-a") == []
    h.clock.advance(timedelta(seconds=1))
    (cmd,) = h.delivered("biz-a")
    assert cmd.command_id == command_id(soon.id, soon.next_fire_at, 0)
    assert cmd.scheduled_at == soon.next_fire_at


def test_limit_is_min_of_batch_and_free_pool(h, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    for i in range(50):
        h.once(job, i)
    core = h.core(batch_size=10, fire_pool_capacity=1000)
    results = core.tick_all()
    assert all(r.selected <= 10 for r in results)
    core2 = h.core(epoch=2, batch_size=300, fire_pool_capacity=3, chunk_size=3)
    results2 = core2.tick_all()
    assert all(r.selected <= 3 for r in results2)


def test_priority_breaks_ties_of_equal_fire_time_only(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1)
    job = h.job("j")
    low_early = h.once(job, 5, priority=9)
    high_late = h.once(job, 6, priority=1)
    low_same = h.once(job, 10, priority=9)
    high_same = h.once(job, 10, priority=1)
    (part,) = h.store.partitions()
    due = h.store.select_due(part, clock.now(), clock.now() + timedelta(minutes=1), 10)
    assert [t.id for t in due] == [low_early.id, high_late.id, high_same.id, low_same.id]


def test_cron_fixed_rate_and_end_at(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    t0 = h.clock.now()
    (cron, rate, ending) = h.store.add_triggers(
        [
            trigger_of(job, TriggerKind.CRON, t0 + timedelta(minutes=10), cron="0 0/10 * * * ?"),
            trigger_of(job, TriggerKind.FIXED_RATE, t0 + timedelta(minutes=1), interval=timedelta(minutes=7)),
            trigger_of(
                job,
                TriggerKind.FIXED_RATE,
                t0 + timedelta(minutes=1),
                interval=timedelta(minutes=5),
                end_at=t0 + timedelta(minutes=12),
            ),
        ]
    )
    core = h.core()
    for _ in range(10):
        core.tick_all()
    fired = h.store.fired_between("biz-a", t0, t0 + timedelta(hours=1))
    by_trigger: dict[int, list[int]] = {}
    for r in fired:
        by_trigger.setdefault(r.trigger_id, []).append(int((r.scheduled_at - t0).total_seconds() // 60))
    assert by_trigger[cron.id] == [10, 20, 30]
    assert by_trigger[rate.id] == [1, 8, 15, 22, 29], "fixed rate is anchored, within the 30 min lookahead"
    assert by_trigger[ending.id] == [1, 6, 11]
    assert h.store.get_trigger(ending.id).state is TriggerState.COMPLETED
    assert h.store.get_trigger(cron.id).next_fire_at == t0 + timedelta(minutes=40)


def test_misfire_fire_once_now_and_skip_are_recorded(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    t0 = h.clock.now()
    (now_t, skip_t) = h.store.add_triggers(
        [
            trigger_of(job, TriggerKind.CRON, t0 - timedelta(hours=3), cron="0 0 * * * ?", misfire_policy=policy)
            for policy in (MisfirePolicy.FIRE_ONCE_NOW, MisfirePolicy.SKIP)
        ]
    )
    h.listen("biz-a")
    core = h.core()
    core.tick_all()
    assert core.stats.misfired == 2 and core.stats.skipped == 1
    recs = {r.trigger_id: r for r in h.store.fired_between("biz-a", t0 - timedelta(hours=4), t0 - timedelta(hours=2))}
    assert recs[now_t.id].misfired and recs[now_t.id].state is FiredState.PENDING
    # published: no stamp on the record, the trigger's recorded outcome says so
    assert h.store.outcome_recorded([recs[now_t.id]]) == {recs[now_t.id].command_id}
    assert "fired once now" in recs[now_t.id].message and "2 later occurrence" in recs[now_t.id].message
    assert recs[skip_t.id].state is FiredState.SKIPPED and recs[skip_t.id].misfired
    # the misfired fire is delivered now, not 3 hours ago's deliver-at nor skipped
    cmds = h.delivered("biz-a")
    assert [c.trigger_id for c in cmds if c.scheduled_at == t0 - timedelta(hours=3)] == [now_t.id]
    # both continue from the next occurrence after now
    assert h.store.get_trigger(skip_t.id).next_fire_at == t0 + timedelta(hours=1)


def test_rows_below_every_floor_are_swept_not_stranded(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1, stale_sweep_every=3)
    job = h.job("j")
    core = h.core()
    core.tick_all()  # start-up tick: sees nothing, so last_seen stays empty
    h.once(job, 10)
    core.tick_all()  # last_seen = now + 10 s: floor is now - 2 h from here on
    stranded = h.once(job, -30 * 24 * 3600)  # 30 days old: below the floor
    core.tick_all()
    assert state_of(h.store, stranded) is TriggerState.WAITING
    core.tick_all()  # the sweep tick
    assert state_of(h.store, stranded) is TriggerState.COMPLETED
    (rec,) = [r for r in h.store.fired_between("biz-a", BEGINNING, clock.now()) if r.trigger_id == stranded.id]
    assert rec.misfired


def test_sharding_pages_and_envelopes(h) -> None:  # type: ignore[no-untyped-def]
    big = h.job("big", shard_total=650, envelope_size=100)
    t = h.once(big, 1)
    h.listen("biz-a")
    core = h.core(sharding_page=300)
    core.tick_all()
    assert core.stats.commands == 650
    assert core.stats.messages == 7  # pages of 300, 300, 50 -> envelopes of 100,100,100,100,100,100,50
    h.clock.advance(timedelta(seconds=1))
    cmds = h.delivered("biz-a")
    assert sorted(c.item_index for c in cmds) == list(range(650))
    assert len({c.command_id for c in cmds}) == 650
    assert all(c.item_total == 650 and c.trigger_id == t.id for c in cmds)


def test_explicit_sharding_items_carry_their_params(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("pages", shard_total=3, explicit_items=True)
    h.store.put_sharding_items(
        job.job_code, [ShardingItem(job_code=job.job_code, index=i, param=f"page-{i}") for i in range(3)]
    )
    h.once(job, 0)
    h.listen("biz-a")
    h.core().tick_all()
    assert sorted((c.item_index, c.item_param) for c in h.delivered("biz-a")) == [
        (0, "page-0"),
        (1, "page-1"),
        (2, "page-2"),
    ]


def test_a_burst_in_one_business_does_not_starve_another(tmp_path: Path, clock: ManualClock) -> None:
    import threading

    from scheduler_core.scheduler import SchedulerCore

    h = make_harness(tmp_path, clock, partitions=1)
    sop = h.job("sop", biz="sop")
    small = h.job("small", biz="small")
    for _ in range(200):
        h.once(sop, 5)
    late_small = h.once(small, 6)  # behind the whole burst in fire-time order
    settings = SchedulerSettings(
        fire_pool_capacity=100,
        biz_share=0.5,
        chunk_size=10,
        batch_size=300,
        submit_retries=0,
        idle_wait=timedelta(0),
        jitter=timedelta(0),
    )
    h.store.claim_epoch(Epoch(1))
    core = SchedulerCore(h.store, h.bus, clock, Epoch(1), settings)  # a threaded pool
    release = threading.Event()
    real_fire = core.pipeline.fire

    def slow_for_sop(chunk, epoch, **kw):  # type: ignore[no-untyped-def]
        if chunk[0].biz_code == "sop":
            release.wait(10)  # the burst's publication is slow: it holds its slots
        return real_fire(chunk, epoch, **kw)

    core.pipeline.fire = slow_for_sop  # type: ignore[method-assign, assignment]
    try:
        (acq,) = core.acquirers
        first = acq.tick()
        assert first.selected == 100, "limit = min(batch, free pool capacity)"
        assert core.pool.in_flight("sop") == 50, "the burst holds at most its budget"
        assert first.released == 50, "the rest of the burst goes back to waiting, not lost"
        assert core.pool.saturated_biz_codes() == {"sop"}
        second = acq.tick()  # the saturated business is left out: the small one is admitted
        assert second.selected == 1
        for _ in range(100):
            if state_of(h.store, late_small) is TriggerState.COMPLETED:
                break
            threading.Event().wait(0.05)
        assert state_of(h.store, late_small) is TriggerState.COMPLETED, "small business fired past the burst"
        assert core.pool.in_flight("sop") == 50, "while the burst is still publishing"
    finally:
        release.set()
        core.drain(10)
        core.shutdown()
    sop_done = [t for t in h.store.triggers_of(biz_code="sop") if t.state is TriggerState.COMPLETED]
    assert len(sop_done) == 50


def test_pool_refusal_releases_rows_to_waiting(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    t = h.once(job, 1)
    core = h.core(submit_retries=1, submit_retry_wait=timedelta(0))
    core.pool.try_submit = lambda *_a, **_k: False  # type: ignore[method-assign]
    core.tick_all()
    after = h.store.get_trigger(t.id)
    assert after.state is TriggerState.WAITING and after.owner_epoch is None
    assert core.metrics.released._value.get() == 1


def test_publish_failure_releases_and_the_refire_reuses_command_ids(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j", shard_total=2)
    t = h.once(job, 1)
    h.listen("biz-a")
    core = h.core()
    real_publish = h.bus.publish

    def failing(_messages):  # type: ignore[no-untyped-def]
        raise PublishError("broker down", failed=2)

    h.bus.publish = failing  # type: ignore[method-assign]
    core.tick_all()
    assert h.store.get_trigger(t.id).state is TriggerState.WAITING
    pending = h.store.fired_between("biz-a", t.next_fire_at, t.next_fire_at + timedelta(seconds=1))
    assert [r.state for r in pending] == [FiredState.PENDING, FiredState.PENDING]
    assert h.store.outcome_recorded(pending) == set(), "released: nothing says they were published"
    h.bus.publish = real_publish  # type: ignore[method-assign]
    core.tick_all()
    assert h.store.outcome_recorded(pending) == {r.command_id for r in pending}
    h.clock.advance(timedelta(seconds=1))
    cmds = h.delivered("biz-a")
    assert sorted(c.command_id for c in cmds) == sorted(r.command_id for r in pending)


def test_dead_epoch_is_reclaimed_after_its_deadline_with_the_same_command_ids(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    t = h.once(job, 5)
    h.store.claim_epoch(Epoch(1))
    # epoch 1 acquires and dies before firing
    h.store.cas(
        Transition(
            ids=[t.id],
            from_state=TriggerState.WAITING,
            to_state=TriggerState.ACQUIRED,
            epoch=Epoch(1),
            deadline=h.clock.now() + timedelta(seconds=60),
            fence_epoch=Epoch(1),
        )
    )
    core2 = h.core(epoch=2)
    assert core2.reclaim() == 0, "not before the deadline"
    h.clock.advance(timedelta(seconds=61))
    assert core2.reclaim() == 1
    (rec,) = h.store.fired_between("biz-a", t.next_fire_at, t.next_fire_at + timedelta(seconds=1))
    assert rec.command_id == command_id(t.id, t.next_fire_at, 0) and rec.epoch == 2
    assert h.store.get_trigger(t.id).state is TriggerState.COMPLETED


def test_a_deposed_leader_cannot_record_outcomes(h) -> None:  # type: ignore[no-untyped-def]
    job = h.job("j")
    t = h.once(job, 5)
    old = h.core(epoch=1)
    (acq,) = [a for a in old.acquirers if a.partition.index == t.id % 4]
    h.store.claim_epoch(Epoch(2))  # a new leader fences the store
    result = acq.tick()
    assert result.acquired == 0, "a fenced epoch cannot even acquire"
    assert h.store.get_trigger(t.id).state is TriggerState.WAITING


def test_results_are_idempotent_by_command_id(h) -> None:  # type: ignore[no-untyped-def]
    from scheduler_core.codec import CALLBACK_TOPIC, encode_results
    from scheduler_core.ports import BusMessage, FiredUpdate

    job = h.job("j")
    t = h.once(job, 0)
    core = h.core()
    consumer = h.results(core)
    core.tick_all()
    cid = command_id(t.id, t.next_fire_at, 0)
    ok = FiredUpdate(cid, FiredState.SUCCEEDED, h.clock.now(), 0, "ok", received_at=h.clock.now())
    stale = FiredUpdate(cid, FiredState.RECEIVED, h.clock.now(), 0, "", received_at=h.clock.now())
    h.bus.publish(
        [
            BusMessage(CALLBACK_TOPIC, encode_results([ok])),
            BusMessage(CALLBACK_TOPIC, encode_results([ok, stale])),
            BusMessage(CALLBACK_TOPIC, b"not json"),
        ]
    )
    assert consumer.poll(timeout=timedelta(0)) == 1
    assert consumer.malformed == 1
    assert h.store.get_fired([cid])[cid].state is FiredState.SUCCEEDED


def test_operations_pause_resume_cancel(h) -> None:  # type: ignore[no-untyped-def]
    from scheduler_core import operations
    from scheduler_core.stops import StopService
    from scheduler_core.store.stops import SqlStops
    from scheduler_core.store.supersedes import SqlSupersedes

    stops = StopService(SqlStops(h.store))
    now = h.clock.now()
    job = h.job("j")
    a, b = h.once(job, 3600), h.once(job, 3600)
    rep = operations.pause(h.store, stops, [a.id, b.id], now)
    assert sorted(rep.changed) == sorted([a.id, b.id])
    assert operations.pause(h.store, stops, [a.id], now).unchanged == {a.id: "already paused"}
    assert operations.resume(h.store, stops, SqlSupersedes(h.store), [a.id], now).changed == [a.id]
    h.store.cas(
        Transition(
            ids=[a.id],
            from_state=TriggerState.WAITING,
            to_state=TriggerState.ACQUIRED,
            epoch=Epoch(1),
            deadline=h.clock.now(),
        )
    )
    rep = operations.cancel(h.store, stops, [stored_id(a), stored_id(b), TriggerId(999)], now)
    # an acquired trigger is cancelled too (its stop covers what its fire published)
    assert sorted(rep.changed) == sorted([a.id, b.id]) and not rep.still_acquired
    assert rep.unchanged == {999: "no such trigger"}
    assert state_of(h.store, a) is TriggerState.CANCELLED


def test_commands_fired_before_any_executor_connects_wait_for_it(h) -> None:  # type: ignore[no-untyped-def]
    from scheduler_core.codec import EXECUTOR_SUBSCRIPTION, decode_commands

    job = h.job("j", biz="late-biz")
    t = h.once(job, 1)
    core = h.core()
    core.tick_all()  # published while nobody is subscribed to the business's topic
    assert h.store.get_trigger(t.id).state is TriggerState.COMPLETED
    h.clock.advance(timedelta(seconds=2))
    executor = h.bus.subscribe(command_topic("late-biz"), EXECUTOR_SUBSCRIPTION)  # the executor starts late
    got = executor.receive(10, timedelta(0))
    assert [c.command_id for r in got for c in decode_commands(r.message.payload)] == [
        command_id(t.id, t.next_fire_at, 0)
    ], "the broker must have kept the command for the executors"


def test_a_subscription_that_cannot_be_made_releases_the_chunk(h) -> None:  # type: ignore[no-untyped-def]
    from scheduler_core.errors import BusError

    job = h.job("j")
    t = h.once(job, 1)
    core = h.core()

    def refuse(_topic: str, _subscription: str) -> None:
        raise BusError("admin refused")

    h.bus.ensure_subscription = refuse  # type: ignore[method-assign]
    core.tick_all()
    assert h.store.get_trigger(t.id).state is TriggerState.WAITING, "released for the next tick, not lost"
    assert h.bus.published == 0
