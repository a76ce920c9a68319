"""Idempotent per-business migration with quarantine, on SQLite legacy databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import text

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.model import Action
from scheduler_core.model import JobCode, TriggerState
from tests.migration_env import make_env

LINEAGES = ["2.2", "2.4", "3.4", "master"]


@pytest.mark.parametrize("lineage", LINEAGES)
def test_xxljob_every_lineage_migrates_good_rows_and_quarantines_bad_ones(tmp_path: Path, lineage: str) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", lineage)
    seed = seed_xxljob(env.legacy, lineage, groups=3, jobs_per_group=12, rng_seed=3)
    plan = env.migrator.plan()
    assert plan.rows_written == 0
    with env.store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM dus_job")).scalar_one() == 0, "a plan writes nothing"
    quarantined = {r.source_key: r for r in plan.rows if r.action is Action.QUARANTINE}
    for key in seed.bad_keys:
        assert key in quarantined, f"bad row {key} ({seed.bad_keys[key]}) not quarantined"
        assert quarantined[key].field and quarantined[key].reason
    for key in seed.malformed_cron_keys:
        assert quarantined[key].field == "cron" and "invalid Quartz cron" in (quarantined[key].reason or "")
    run = env.migrator.run()
    assert run.counts == plan.counts
    assert run.counts["create"] + run.counts["quarantine"] == seed.good + seed.bad
    # quarantined rows are listed with field and reason, and wrote no target rows
    listed = {r["source_key"]: r for r in env.writer.quarantined()}
    assert set(listed) == set(quarantined)
    assert all(env.store.get_job(f"xxl:{r.biz_code}:{k}") is None for k, r in quarantined.items())  # type: ignore[arg-type]


@pytest.mark.parametrize("system", ["xxl-job", "batch-center"])
def test_second_run_writes_nothing_and_a_changed_row_updates_exactly_its_target(tmp_path: Path, system: str) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'l.db'}", f"sqlite:///{tmp_path / 't.db'}", system, "3.4")
    if system == "xxl-job":
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=10, rng_seed=5)
    else:
        seed_batchcenter(env.legacy, businesses=3, tasks_per_business=10, rng_seed=5)
    first = env.migrator.run()
    assert first.rows_written > 0
    again = env.migrator.run()
    assert again.rows_written == 0 and again.counts["create"] == again.counts["update"] == 0
    # change one good, recurring row at the source
    migrated = [r for r in env.writer.quarantined()]  # noqa: F841 (quarantine untouched)
    table, col = ("xxl_job_info", "executor_timeout") if system == "xxl-job" else ("bc_task", "max_retry")
    with env.store.engine.connect() as conn:
        key, code = conn.execute(
            text(
                "SELECT source_key, target_job_code FROM dus_migration_ledger WHERE status='migrated' "
                "ORDER BY source_key LIMIT 1"
            )
        ).one()
    before = {j.job_code: j for j in (env.store.get_job(c) for c in _codes(env)) if j}
    with env.legacy.begin() as conn:
        conn.execute(text(f"UPDATE {table} SET {col} = {col} + 3 WHERE id = :id"), {"id": int(key)})
    third = env.migrator.run(keep_rows=True)
    assert third.counts["update"] == 1 and third.counts["create"] == 0
    (row,) = [r for r in third.rows if r.action is Action.UPDATE]
    assert row.source_key == key and row.job_code == code
    after = {j.job_code: j for j in (env.store.get_job(c) for c in _codes(env)) if j}
    changed = [c for c in after if after[c] != before[c]]
    assert changed == [code]


def test_batch_center_states_and_sharding(tmp_path: Path) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=3, tasks_per_business=15, rng_seed=9)
    env.migrator.run()
    with env.legacy.connect() as conn:
        tasks = {
            str(r.id): r
            for r in conn.execute(text("SELECT id, status, shard_total, shard_params, biz_code FROM bc_task"))
        }
    for t in env.store.triggers_of():
        key = t.job_code.split(":")[-1]
        src = tasks[key]
        expected = {
            0: TriggerState.CREATED,
            1: TriggerState.CREATED,
            5: TriggerState.PAUSED,
            2: TriggerState.COMPLETED,
            3: TriggerState.COMPLETED,
            4: TriggerState.CANCELLED,
        }[src.status]
        assert t.state is expected, f"task {key} status {src.status} -> {t.state}"
    sharded = [j for j in (env.store.get_job(c) for c in _codes(env)) if j and j.explicit_items]
    assert sharded, "seed has shard_params tasks"
    for job in sharded:
        items = env.store.sharding_page(job.job_code, 0, 10_000)
        assert len(items) == job.shard_total


def test_a_source_row_deleted_by_hand_cancels_its_target(tmp_path: Path) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=2, tasks_per_business=5, bad_rows=0, rng_seed=1)
    env.migrator.run()
    with env.store.engine.connect() as conn:
        key, code = conn.execute(
            text(
                "SELECT source_key, target_job_code FROM dus_migration_ledger "
                "WHERE status='migrated' ORDER BY source_key LIMIT 1"
            )
        ).one()
    with env.legacy.begin() as conn:
        conn.execute(text("DELETE FROM bc_task WHERE id = :id"), {"id": int(key)})
    out = env.migrator.run(keep_rows=True)
    assert [(r.action, r.source_key) for r in out.rows if r.action is Action.DELETE] == [(Action.DELETE, key)]
    (trig,) = env.store.triggers_of(job_code=code)
    assert trig.state is TriggerState.CANCELLED
    assert env.migrator.run().rows_written == 0


def _codes(env) -> list[JobCode]:  # type: ignore[no-untyped-def]
    with env.store.engine.connect() as conn:
        return [c for (c,) in conn.execute(text("SELECT job_code FROM dus_job ORDER BY job_code"))]
