"""Child jobs during a dual-run (SQLite legacy and target, in-process bus, driven clock).

What a user expects: legacy keeps running its children after its own parent runs. In a
live dual-run the new side mirrors legacy, children included: after each successful
new-side run of a parent, it runs each child of the same business (live on the new side),
once; a child of another business (still on legacy) is never run by the new side. A
shadow dual-run links nothing; a rollback takes the links away; the next live dual-run
writes them again. The comparison leaves the new side's child runs out of the pairing,
as it leaves legacy's parent-triggered runs (no schedule explains either).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import text

from dualrun.collect import fetch_new
from dualrun.frames import JobIndex
from dualrun.model import Window
from migrator.cutover import BusinessSwitch
from scheduler_core.clock import ManualClock
from scheduler_core.codec import CALLBACK_TOPIC, encode_results
from scheduler_core.model import CommandId, FiredState, TriggerId
from scheduler_core.ports import BusMessage, FiredUpdate
from tests.harness import harness_on
from tests.migration_env import MigrationEnv, live_cron_bean_ids, migrated_xxljob, ready_switch


def _setup(tmp_path: Path) -> tuple[MigrationEnv, str, BusinessSwitch, list[str], str, ManualClock]:
    env, biz = migrated_xxljob(tmp_path)
    clock = env.migrator.clock
    assert isinstance(clock, ManualClock)
    sw = ready_switch(env)
    live = live_cron_bean_ids(env.legacy)
    mine = sorted((ln.source_key for ln in sw.links(biz) if ln.source_key in live), key=int)
    with env.store.engine.connect() as conn:
        other = next(
            k
            for k, b in conn.execute(
                text("SELECT source_key, business FROM dus_migration_ledger WHERE status = 'migrated'")
            )
            if b != biz
        )
    return env, biz, sw, mine, other, clock


def _children(env: MigrationEnv, parent: str, value: str) -> None:
    with env.legacy.begin() as conn:
        conn.execute(text("UPDATE xxl_job_info SET child_jobid = :c WHERE id = :i"), {"c": value, "i": int(parent)})
    env.migrator.run()


def _ids(sw: BusinessSwitch, biz: str) -> dict[str, TriggerId]:
    return {ln.source_key: ln.trigger.id for ln in sw.links(biz)}  # type: ignore[misc]


def test_a_live_dual_run_links_the_same_business_children_and_never_another_business(tmp_path: Path) -> None:
    env, biz, sw, mine, other, _ = _setup(tmp_path)
    parent, child, parent2 = mine[:3]
    _children(env, parent, child)
    _children(env, parent2, other)  # a child of another business, on legacy
    ids = _ids(sw, biz)
    assert env.store.followups_of([ids[parent], ids[parent2]]) == {}  # on legacy: none
    report = sw.start_dual_run(biz, shadow=False, actor="ops")
    assert env.store.followups_of([ids[parent], ids[parent2]]) == {ids[parent]: [ids[child]]}
    assert any(
        f"job {parent2} " in n and f"child job {other}: belongs to business" in n and "legacy runs it" in n
        for n in report.notes
    ), report.notes
    sw.rollback(biz, actor="ops")
    assert env.store.followups_of([ids[parent]]) == {}
    # a shadow dual-run invokes nothing: no links
    sw.start_dual_run(biz, shadow=True, actor="ops")
    assert env.store.followups_of([ids[parent]]) == {}
    sw.rollback(biz, actor="ops")
    # live again: written again
    sw.start_dual_run(biz, shadow=False, actor="ops")
    assert env.store.followups_of([ids[parent]]) == {ids[parent]: [ids[child]]}


def test_the_new_sides_live_parent_run_runs_the_child_once_and_the_comparison_leaves_it_out(tmp_path: Path) -> None:
    env, biz, sw, mine, other, clock = _setup(tmp_path)
    parent_key, child_key, parent2_key = mine[:3]
    _children(env, parent_key, child_key)
    _children(env, parent2_key, other)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    ids = _ids(sw, biz)
    h = harness_on(env.store, clock)
    h.listen(biz)
    core = h.core(epoch=3)
    consumer = h.results(core)
    start = clock.now()

    def run_of(key: str) -> CommandId:
        t = env.store.get_trigger(ids[key])
        assert t is not None
        clock.set(max(clock.now(), t.next_fire_at))
        ticks = core.tick_all()
        got = [c for c in h.delivered(biz) if c.trigger_id == ids[key]]
        assert len(got) == 1, (t.next_fire_at, clock.now(), [(x.selected, x.acquired, x.submitted) for x in ticks])
        return got[0].command_id

    def succeed(cid: CommandId) -> None:
        h.bus.publish(
            [BusMessage(CALLBACK_TOPIC, encode_results([FiredUpdate(cid, FiredState.SUCCEEDED, clock.now())]))]
        )
        consumer.poll()

    def due(key: str) -> datetime:
        t = env.store.get_trigger(ids[key])
        assert t is not None
        return t.next_fire_at

    kids = []
    for key in sorted((parent_key, parent2_key), key=due):  # in time order: neither is late
        cid = run_of(key)
        succeed(cid)
        if key == parent_key:
            kids = [c for c in h.delivered(biz) if c.trigger_id == ids[child_key]]
            assert len(kids) == 1
            succeed(cid)  # replayed: nothing again
            assert [c for c in h.delivered(biz) if c.trigger_id == ids[child_key]] == []
        else:  # its child is in another business: its success runs nothing on the new side
            assert h.delivered(biz) == []
    assert consumer.followups.fired == 1

    # the comparison's new side: the parent runs are there, the child's follow-up run is not
    # (no schedule explains it, as legacy's PARENT runs), so it is no extra fire
    window = Window(start=start - timedelta(hours=1), end=clock.now() + timedelta(hours=1))
    jobs = JobIndex()
    frame = fetch_new(env.store, biz, window, jobs)
    codes = {jobs.code(int(j)) for j in frame["job"]}
    by_key = {ln.source_key: ln.job_code for ln in sw.links(biz)}
    assert by_key[parent_key] in codes and by_key[parent2_key] in codes
    assert by_key[child_key] not in codes
    with env.store.engine.connect() as conn:  # the child's run is in the store all the same
        assert (
            conn.execute(
                text("SELECT COUNT(*) FROM dus_fired_record WHERE command_id = :c"), {"c": kids[0].command_id}
            ).scalar_one()
            == 1
        )
    consumer.close()
    core.shutdown()
