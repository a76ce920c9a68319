"""xxl-job child jobs whose own schedule is NONE, end to end on the embedded default
(SQLite legacy and store, in-process bus, driven clock): such a job migrates as a trigger
with no schedule (never due), the parent's business cuts over, and after each successful
parent run on the new side the child runs once; the parent's result replayed runs it no
second time (the same child command id is kept)."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import text

from migrator.cutover import BusinessSwitch
from migrator.mapping import Mapped, map_definition
from readers.records import ScheduleKind
from scheduler_core.clock import ManualClock
from scheduler_core.codec import CALLBACK_TOPIC, encode_results
from scheduler_core.model import (
    CommandId,
    FiredState,
    TriggerKind,
    TriggerState,
    parse_command_id,
)
from scheduler_core.occurrences import next_after
from scheduler_core.ports import BusMessage, FiredUpdate
from tests.harness import harness_on
from tests.legacy_rows import xxl_bean_row
from tests.migration_env import NOW, MigrationEnv, live_cron_bean_ids, migrated_xxljob, ready_switch


def _none_child(env: MigrationEnv, child: str, parent: str) -> None:
    """The child as xxl-job keeps a NONE job (never started: status 0, no next time), and the
    parent's child_jobid pointing at it; migrated again."""
    with env.legacy.begin() as conn:
        conn.execute(
            text(
                "UPDATE xxl_job_info SET schedule_type = 'NONE', schedule_conf = NULL, trigger_status = 0,"
                " trigger_next_time = 0 WHERE id = :i"
            ),
            {"i": int(child)},
        )
        conn.execute(text("UPDATE xxl_job_info SET child_jobid = :c WHERE id = :i"), {"c": child, "i": int(parent)})
    env.migrator.run()


def _cron_jobs(env: MigrationEnv, sw: BusinessSwitch, biz: str) -> list[str]:
    """The business's migrated cron jobs that run on legacy (parents to be)."""
    live = live_cron_bean_ids(env.legacy)
    return sorted((ln.source_key for ln in sw.links(biz) if ln.source_key in live), key=int)


def test_a_none_row_migrates_as_a_trigger_that_is_never_due() -> None:
    row = xxl_bean_row(
        None,
        source_key="9",
        name="child",
        handler="childHandler",
        schedule=ScheduleKind.NONE,
        enabled=False,
        status="STOPPED",
    )
    mapped = map_definition(row, None, NOW, active=True)
    assert isinstance(mapped, Mapped) and mapped.trigger is not None
    t = mapped.trigger
    assert (t.kind, t.state, t.cron, t.interval) == (TriggerKind.NONE, TriggerState.COMPLETED, None, None)
    assert next_after(t, NOW) is None
    # a business that opted into API-only jobs keeps them without a trigger
    from migrator.mapping import MappingOptions

    api = map_definition(row, None, NOW, MappingOptions(api_only_businesses=("billing",)))
    assert isinstance(api, Mapped) and api.trigger is None


def test_a_parent_with_a_none_child_cuts_over_and_the_child_runs_once_per_parent_run(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path)
    clock = env.migrator.clock
    assert isinstance(clock, ManualClock)
    sw = ready_switch(env)
    parent_key, child_key = _cron_jobs(env, sw, biz)[:2]
    _none_child(env, child_key, parent_key)
    with env.store.engine.connect() as conn:
        status = conn.execute(
            text("SELECT status FROM dus_migration_ledger WHERE source_key = :k"), {"k": child_key}
        ).scalar_one()
    assert status == "migrated"  # was: quarantined, and the parent's cutover refused
    links = {ln.source_key: ln for ln in sw.links(biz)}
    child = links[child_key].trigger
    assert (child.kind, child.state) == (TriggerKind.NONE, TriggerState.COMPLETED)

    sw.start_dual_run(biz, shadow=False, actor="ops")
    report = sw.cutover(biz, actor="ops")
    parent = env.store.get_trigger(links[parent_key].trigger.id)  # type: ignore[arg-type]
    assert parent is not None and parent.state is TriggerState.WAITING
    assert env.store.followups_of([parent.id]) == {parent.id: [child.id]}  # type: ignore[list-item, dict-item]
    assert env.store.get_trigger(child.id).state is TriggerState.COMPLETED  # type: ignore[arg-type, union-attr]
    assert child_key not in report.handover  # nothing to hand over: it has no schedule

    h = harness_on(env.store, clock)
    h.listen(biz)
    core = h.core(epoch=7)
    consumer = h.results(core)

    def parent_run() -> CommandId:
        nxt = env.store.get_trigger(parent.id)  # type: ignore[arg-type]
        assert nxt is not None
        clock.set(nxt.next_fire_at)
        core.tick_all()
        mine = [c for c in h.delivered(biz) if c.trigger_id == parent.id]
        assert len(mine) == 1, mine
        return mine[0].command_id

    def result(cid: CommandId, state: FiredState = FiredState.SUCCEEDED) -> None:
        h.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([FiredUpdate(cid, state, clock.now())]))])
        consumer.poll()

    runs: list[tuple[CommandId, CommandId]] = []
    for _ in range(2):  # two parent runs: one child run each
        cid = parent_run()
        result(cid)
        kids = [c for c in h.delivered(biz) if c.trigger_id == child.id]
        assert [c.job_code for c in kids] == [child.job_code]
        assert parse_command_id(kids[0].command_id)[1] - parse_command_id(cid)[1] in range(1, 1000)
        runs.append((cid, kids[0].command_id))
        for _ in range(2):  # replayed: nothing runs again, the claim keeps the first child id
            result(cid)
            assert [c for c in h.delivered(biz) if c.trigger_id == child.id] == []
        claims = env.store.followup_claims([(cid, child.id)])  # type: ignore[list-item]
        assert claims == {(cid, child.id): kids[0].command_id}
    assert len({k for _, k in runs}) == 2
    assert consumer.followups.fired == 2
    # a failed parent run fires no child
    failed = parent_run()
    result(failed, FiredState.FAILED)
    assert [c for c in h.delivered(biz) if c.trigger_id == child.id] == []
    # the child's trigger is never due on its own: still completed, nothing of it acquired
    got = env.store.get_trigger(child.id)  # type: ignore[arg-type]
    assert got is not None and got.state is TriggerState.COMPLETED
    consumer.close()
    core.shutdown()


def test_a_none_job_given_a_schedule_later_takes_it(tmp_path: Path) -> None:
    """Its trigger is stored completed, yet an edit in the admin (NONE -> CRON) migrates."""
    env, biz = migrated_xxljob(tmp_path)
    sw = env.xxl_switch()
    parent_key, child_key = _cron_jobs(env, sw, biz)[:2]
    _none_child(env, child_key, parent_key)
    with env.legacy.begin() as conn:
        conn.execute(
            text(
                "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = '0 0 3 * * ?',"
                " trigger_status = 1 WHERE id = :i"
            ),
            {"i": int(child_key)},
        )
    env.migrator.run()
    (t,) = [ln.trigger for ln in sw.links(biz) if ln.source_key == child_key]
    assert (t.kind, t.cron, t.state) == (TriggerKind.CRON, "0 0 3 * * ?", TriggerState.CREATED)
