"""xxl-job child jobs on the new side, on the real MariaDB (legacy and target) and the
real Pulsar: the cutover links each parent to its child's migrated trigger, a parent's
success (a result on the real callback topic) fires the child once, a redelivered result
fires nothing again, a failed parent fires nothing, and a chain into a business still on
legacy refuses the cutover."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta

import pytest
from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from migrator.business import TransitionRefused
from migrator.cutover import BusinessSwitch
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_commands, encode_results
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, Epoch, ExecutionCommand, FiredRecord, FiredState, TriggerId, command_id
from scheduler_core.ports import BusMessage, FiredUpdate, Subscription
from tests.backends import mariadb_database
from tests.migration_env import MigrationEnv, live_cron_bean_ids, make_env, ready_switch
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]


@dataclass
class Env:
    env: MigrationEnv
    switch: BusinessSwitch
    jobs: dict[str, list[str]]  # business -> migrated legacy job ids with a trigger


@pytest.fixture
def env() -> Iterator[Env]:
    with mariadb_database("cjl") as legacy_url, mariadb_database("cjt") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=5)
        env.migrator.run()
        switch = ready_switch(env)
        with env.store.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT source_key, business FROM dus_migration_ledger WHERE status = 'migrated'"
                    " ORDER BY CAST(source_key AS UNSIGNED)"
                )
            ).all()
        jobs: dict[str, list[str]] = {}
        for key, biz in rows:
            if key in {ln.source_key for ln in switch.links(biz)}:
                jobs.setdefault(biz, []).append(key)
        try:
            yield Env(env, switch, jobs)
        finally:
            env.legacy.dispose()
            env.store.engine.dispose()


def _children(e: Env, parent: str, value: str) -> None:
    with e.env.legacy.begin() as conn:
        conn.execute(text("UPDATE xxl_job_info SET child_jobid = :c WHERE id = :i"), {"c": value, "i": int(parent)})
    e.env.migrator.run()


def _drain(sub: Subscription, seconds: float) -> list[ExecutionCommand]:
    out: list[ExecutionCommand] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for r in sub.receive(100, timedelta(milliseconds=300)):
            out += decode_commands(r.message.payload)
            sub.ack(r)
    return out


def test_a_chain_into_a_business_still_on_legacy_refuses_the_cutover(env: Env) -> None:
    (biz, mine), (_other_biz, theirs) = sorted(env.jobs.items())[:2]
    _children(env, mine[0], theirs[0])
    env.switch.start_dual_run(biz, shadow=False, actor="ops")
    with pytest.raises(TransitionRefused, match=rf"job {mine[0]} \(.*\) -> child job {theirs[0]}: belongs to business"):
        env.switch.cutover(biz, actor="ops", force=True, reason="even forced")
    assert env.env.store.followups_of([ln.trigger.id for ln in env.switch.links(biz)]) == {}  # type: ignore[misc]


def test_a_parent_success_fires_the_child_once_over_the_real_bus(env: Env) -> None:
    biz, mine = sorted(env.jobs.items())[0]
    parent_key, child_key = mine[0], mine[1]
    _children(env, parent_key, child_key)
    env.switch.start_dual_run(biz, shadow=False, actor="ops")
    env.switch.cutover(biz, actor="ops")
    links = {ln.source_key: ln for ln in env.switch.links(biz)}
    parent, child = links[parent_key].trigger, links[child_key].trigger
    assert parent.id is not None and child.id is not None
    store = env.env.store
    assert store.followups_of([parent.id]) == {parent.id: [child.id]}

    bus = PulsarBus(server_url("pulsar"), topic_prefix=f"cj{uuid.uuid4().hex[:6]}")
    executor = bus.subscribe(command_topic(biz), "test-executor")  # before anything is published
    consumer = ResultConsumer(bus, store, SchedulerMetrics())
    try:
        now = env.env.migrator.clock.now()
        ok_cid, failed_cid, sentinel = (command_id(parent.id, now + timedelta(minutes=m), 0) for m in (0, 1, 2))
        store.put_fired(
            [
                FiredRecord(
                    command_id=c,
                    trigger_id=TriggerId(parent.id),
                    job_code=parent.job_code,
                    biz_code=biz,
                    scheduled_at=now,
                    epoch=Epoch(1),
                    fired_at=now,
                )
                for c in (ok_cid, failed_cid, sentinel)
            ]
        )

        def result(cid: CommandId, state: FiredState) -> None:
            bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([FiredUpdate(cid, state, now)]))])

        def state(cid: CommandId) -> FiredState:
            return store.get_fired([cid])[cid].state

        result(ok_cid, FiredState.SUCCEEDED)
        result(failed_cid, FiredState.FAILED)  # a failed parent run: no child
        _poll_until(consumer, lambda: state(failed_cid) is FiredState.FAILED)
        first = _drain(executor, 3.0)
        assert [(c.trigger_id, c.job_code) for c in first] == [(child.id, child.job_code)]
        claimed = store.followup_claims([(ok_cid, child.id)])[(ok_cid, child.id)]
        assert first[0].command_id == claimed and claimed != ok_cid
        assert state(claimed) is FiredState.PUBLISHED

        for _ in range(3):  # the same result, redelivered
            result(ok_cid, FiredState.SUCCEEDED)
        result(sentinel, FiredState.FAILED)  # applied after the three (one producer, in order)
        _poll_until(consumer, lambda: state(sentinel) is FiredState.FAILED)
        assert _drain(executor, 3.0) == []
        assert consumer.followups.fired == 1
    finally:
        consumer.close()
        executor.close()
        bus.close()


def _poll_until(consumer: ResultConsumer, done, timeout: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        consumer.poll(timeout=timedelta(milliseconds=300))
        if done():
            consumer.poll(timeout=timedelta(milliseconds=300))
            return
    raise AssertionError(f"not done within {timeout:.0f}s")


def test_a_none_schedule_child_runs_once_per_parent_run_fired_by_the_scheduler(env: Env) -> None:
    """A child whose own schedule is NONE (xxl-job runs it only as a child) migrates as a
    trigger with no schedule; the parent's business cuts over, the scheduler fires the
    parent over the real Pulsar, and each successful parent run fires the child once,
    the replayed result nothing (same child command id)."""
    from scheduler_core.clock import ManualClock
    from scheduler_core.model import Epoch, TriggerKind, TriggerState
    from scheduler_core.scheduler import SchedulerCore
    from scheduler_core.settings import SchedulerSettings

    biz, mine = sorted(env.jobs.items())[0]
    live = live_cron_bean_ids(env.env.legacy)
    parent_key, child_key = [k for k in mine if k in live][:2]
    with env.env.legacy.begin() as conn:
        conn.execute(
            text(
                "UPDATE xxl_job_info SET schedule_type = 'NONE', schedule_conf = NULL, trigger_status = 0,"
                " trigger_next_time = 0 WHERE id = :i"
            ),
            {"i": int(child_key)},
        )
        # every minute: its runs are due at the driven clock's times, which lie in the
        # past of the real Pulsar's clock (a command is held until its deliver-at)
        conn.execute(
            text("UPDATE xxl_job_info SET schedule_conf = '0 * * * * ?' WHERE id = :i"), {"i": int(parent_key)}
        )
    _children(env, parent_key, child_key)
    env.switch.start_dual_run(biz, shadow=False, actor="ops")
    env.switch.cutover(biz, actor="ops")
    links = {ln.source_key: ln for ln in env.switch.links(biz)}
    parent, child = links[parent_key].trigger, links[child_key].trigger
    assert (child.kind, child.state) == (TriggerKind.NONE, TriggerState.COMPLETED)
    store = env.env.store
    assert store.followups_of([parent.id]) == {parent.id: [child.id]}  # type: ignore[list-item, dict-item]

    clock = env.env.migrator.clock
    assert isinstance(clock, ManualClock)
    bus = PulsarBus(server_url("pulsar"), topic_prefix=f"cn{uuid.uuid4().hex[:6]}")
    executor = bus.subscribe(command_topic(biz), "test-executor")
    settings = SchedulerSettings(idle_wait=timedelta(seconds=1), jitter=timedelta(0), busy_wait=timedelta(0))
    assert store.claim_epoch(Epoch(9))
    core = SchedulerCore(store, bus, clock, Epoch(9), settings, inline=True)
    consumer = ResultConsumer(bus, store, SchedulerMetrics(), clock=clock, settings=settings)
    try:

        def result(cid: CommandId, state: FiredState = FiredState.SUCCEEDED) -> None:
            bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([FiredUpdate(cid, state, clock.now())]))])

        children: list[CommandId] = []
        for _ in range(2):
            t = store.get_trigger(parent.id)  # type: ignore[arg-type]
            assert t is not None
            clock.set(t.next_fire_at)
            core.tick_all()
            got = _drain(executor, 3.0)
            (run,) = [c for c in got if c.trigger_id == parent.id]
            assert not [c for c in got if c.trigger_id == child.id]  # never due on its own
            result(run.command_id)
            _poll_until(consumer, lambda cid=run.command_id: store.get_fired([cid])[cid].state is FiredState.SUCCEEDED)
            (kid,) = [c for c in _drain(executor, 3.0) if c.trigger_id == child.id]
            assert kid.job_code == child.job_code
            claimed = store.followup_claims([(run.command_id, child.id)])  # type: ignore[list-item]
            assert claimed == {(run.command_id, child.id): kid.command_id}
            result(run.command_id)  # replayed
            sentinel = command_id(parent.id, clock.now() + timedelta(days=400), 0)  # type: ignore[arg-type]
            store.put_fired(
                [
                    FiredRecord(
                        command_id=sentinel,
                        trigger_id=TriggerId(parent.id),  # type: ignore[arg-type]
                        job_code=parent.job_code,
                        biz_code=biz,
                        scheduled_at=clock.now(),
                        epoch=Epoch(9),
                        fired_at=clock.now(),
                    )
                ]
            )
            result(sentinel, FiredState.FAILED)  # applied after the replay (one producer, in order)
            _poll_until(consumer, lambda s=sentinel: store.get_fired([s])[s].state is FiredState.FAILED)
            assert [c for c in _drain(executor, 2.0) if c.trigger_id == child.id] == []
            children.append(kid.command_id)
        assert len(set(children)) == 2 and consumer.followups.fired == 2
    finally:
        core.shutdown()
        consumer.close()
        executor.close()
        bus.close()


def test_a_live_dual_run_links_same_business_children_only_and_a_rollback_unlinks(env: Env) -> None:
    (biz, mine), (_other_biz, theirs) = sorted(env.jobs.items())[:2]
    parent, child, parent2 = mine[:3]
    _children(env, parent, child)
    _children(env, parent2, theirs[0])  # into a business still on legacy: never linked
    ids = {ln.source_key: ln.trigger.id for ln in env.switch.links(biz)}
    store = env.env.store
    env.switch.start_dual_run(biz, shadow=True, actor="ops")
    assert store.followups_of([ids[parent], ids[parent2]]) == {}  # type: ignore[list-item]
    env.switch.rollback(biz, actor="ops")
    env.switch.start_dual_run(biz, shadow=False, actor="ops")
    assert store.followups_of([ids[parent], ids[parent2]]) == {ids[parent]: [ids[child]]}  # type: ignore[list-item]
    env.switch.rollback(biz, actor="ops")
    assert store.followups_of([ids[parent], ids[parent2]]) == {}  # type: ignore[list-item]
