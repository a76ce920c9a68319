"""xxl-job child jobs at cutover: each chain becomes the parent trigger's follow-ups, or
the cutover is refused naming the chain (SQLite legacy and target)."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from migrator.business import TransitionRefused
from migrator.child_jobs import child_ids
from migrator.cutover import BusinessSwitch
from tests.migration_env import MigrationEnv, migrated_xxljob, ready_switch


def _setup(tmp_path: Path) -> tuple[MigrationEnv, str, BusinessSwitch, list[str], str]:
    env, biz = migrated_xxljob(tmp_path)
    sw = ready_switch(env)
    with env.store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT source_key, business FROM dus_migration_ledger WHERE status = 'migrated'"
                " ORDER BY CAST(source_key AS INTEGER)"
            )
        ).all()
    mine = [k for k, b in rows if b == biz and k in {ln.source_key for ln in sw.links(biz)}]
    other = next(k for k, b in rows if b != biz)
    return env, biz, sw, mine, other


def _children(env: MigrationEnv, parent: str, value: str) -> None:
    with env.legacy.begin() as conn:
        conn.execute(text("UPDATE xxl_job_info SET child_jobid = :c WHERE id = :i"), {"c": value, "i": int(parent)})
    env.migrator.run()  # the re-migration carries child_jobid into the parent's params


def test_child_ids_are_read_as_xxl_job_reads_them() -> None:
    assert child_ids("3,4,,x, 5,7,0,-1", "7") == (["3", "4"], ["x", " 5", "0", "-1"])


def test_a_chain_into_the_same_business_becomes_the_parent_triggers_follow_ups(tmp_path: Path) -> None:
    env, biz, sw, mine, _ = _setup(tmp_path)
    parent, child, child2 = mine[:3]
    _children(env, parent, f"{child},{parent},{child2}")  # itself: skipped, as xxl-job does
    sw.start_dual_run(biz, shadow=False, actor="ops")
    report = sw.cutover(biz, actor="ops")
    links = {ln.source_key: ln.trigger.id for ln in sw.links(biz)}
    assert env.store.followups_of([links[parent]]) == {links[parent]: [links[child], links[child2]]}  # type: ignore[list-item]
    assert not any("skipped" in n for n in report.notes)  # the job itself is not an item to report
    # back to legacy, the child removed in the admin, cut over again: no follow-up left
    sw.rollback(biz, actor="ops")
    # legacy fires the children again: a later live dual-run must not fire them on the new side too
    assert env.store.followups_of([links[parent]]) == {}  # type: ignore[list-item]
    _children(env, parent, "")
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops")
    assert env.store.followups_of([links[parent]]) == {}  # type: ignore[list-item]


@pytest.mark.parametrize("which", ["other-business", "not-migrated"])
def test_a_chain_the_new_side_cannot_run_refuses_the_cutover_and_names_it(tmp_path: Path, which: str) -> None:
    env, biz, sw, mine, other = _setup(tmp_path)
    parent = mine[0]
    child = other if which == "other-business" else "99999"
    _children(env, parent, child)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    expected = "belongs to business" if which == "other-business" else "not migrated"
    with pytest.raises(TransitionRefused, match=rf"job {parent} \(.*\) -> child job {child}: {expected}"):
        sw.cutover(biz, actor="ops")
    with pytest.raises(TransitionRefused, match="child job chain"):
        sw.cutover(biz, actor="ops", force=True, reason="forced")  # a lost child run is never forced past
    # nothing changed: the legacy jobs still run, no follow-ups were written
    assert sw.registry.get(biz).state.value == "dual_run"  # type: ignore[union-attr]
    assert env.store.followups_of([ln.trigger.id for ln in sw.links(biz)]) == {}  # type: ignore[misc]


def test_a_quarantined_child_refuses_the_cutover(tmp_path: Path) -> None:
    env, biz, sw, mine, _ = _setup(tmp_path)
    parent, child = mine[:2]
    with env.legacy.begin() as conn:
        # a route strategy the admin does not know (a NONE child is no longer quarantined:
        # tests/unit/test_none_schedule_children.py)
        conn.execute(
            text("UPDATE xxl_job_info SET executor_route_strategy = 'WEIGHTED' WHERE id = :i"), {"i": int(child)}
        )
    _children(env, parent, child)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    with pytest.raises(TransitionRefused, match=rf"child job {child}: quarantined \(executor_route_strategy"):
        sw.cutover(biz, actor="ops")
