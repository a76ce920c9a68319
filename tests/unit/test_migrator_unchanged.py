"""The cheap "unchanged" path: a re-run recognises unchanged rows by the source digest in
the ledger, without mapping them; anything the mapping depends on still gets mapped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

import migrator.apply as apply_mod
import migrator.ledger_hash as ledger_hash
import migrator.mapping as mapping_mod
from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.mapping import MappingOptions
from migrator.model import Action
from readers.records import LegacyBusiness, SourceSystem
from tests.migration_env import MigrationEnv, make_env


def _env(tmp_path: Path, system: str) -> MigrationEnv:
    env = make_env(f"sqlite:///{tmp_path / 'l.db'}", f"sqlite:///{tmp_path / 't.db'}", system, "3.4")
    if system == "xxl-job":
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=10, rng_seed=7)
    else:
        seed_batchcenter(env.legacy, businesses=2, tasks_per_business=10, rng_seed=7)
    return env


def _count_mapping(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    mapped: list[str] = []
    real = apply_mod.map_definition

    def counting(defn: Any, *a: Any, **kw: Any) -> Any:
        mapped.append(defn.source_key)
        return real(defn, *a, **kw)

    monkeypatch.setattr(apply_mod, "map_definition", counting)
    return mapped


@pytest.mark.parametrize("system", ["xxl-job", "batch-center"])
def test_an_unchanged_rerun_maps_only_the_quarantined_rows(
    tmp_path: Path, system: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path, system)
    first = env.migrator.run()
    mapped = _count_mapping(monkeypatch)
    again = env.migrator.run()
    assert again.rows_written == 0 and again.counts["unchanged"] == first.counts["create"]
    # only quarantined rows are mapped again (their reason is re-derived, never trusted)
    assert len(mapped) == first.counts["quarantine"]


def test_a_volatile_column_is_no_change_but_a_content_column_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = _env(tmp_path, "xxl-job")
    env.migrator.run()
    with env.store.engine.connect() as conn:
        key = conn.execute(
            text("SELECT source_key FROM dus_migration_ledger WHERE status='migrated' ORDER BY source_key LIMIT 1")
        ).scalar_one()
    with env.legacy.begin() as conn:  # what xxl-job itself rewrites on every scan
        conn.execute(
            text(
                "UPDATE xxl_job_info SET trigger_next_time = trigger_next_time + 60000, "
                "trigger_last_time = 1 WHERE id = :id"
            ),
            {"id": int(key)},
        )
    mapped = _count_mapping(monkeypatch)
    assert env.migrator.run().rows_written == 0
    assert key not in mapped
    with env.legacy.begin() as conn:
        conn.execute(
            text("UPDATE xxl_job_info SET executor_timeout = executor_timeout + 5 WHERE id = :id"), {"id": int(key)}
        )
    run = env.migrator.run(keep_rows=True)
    assert key in mapped
    assert [(r.source_key, r.action) for r in run.rows if r.action is not Action.QUARANTINE] == [(key, Action.UPDATE)]


def test_a_business_change_the_mapping_reads_is_noticed(tmp_path: Path) -> None:
    env = _env(tmp_path, "batch-center")
    env.migrator.run()
    with env.legacy.begin() as conn:  # every task's bridge params carry it
        biz = conn.execute(text("SELECT biz_code FROM bc_biz ORDER BY biz_code LIMIT 1")).scalar_one()
        conn.execute(
            text("UPDATE bc_biz SET callback_base_url = 'http://moved.example:8080/' WHERE biz_code = :b"), {"b": biz}
        )
    with env.store.engine.connect() as conn:
        migrated = conn.execute(
            text("SELECT COUNT(*) FROM dus_migration_ledger WHERE business = :b AND status = 'migrated'"), {"b": biz}
        ).scalar_one()
    run = env.migrator.run()
    assert run.counts["update"] == migrated > 0


def test_an_old_single_hash_ledger_row_still_counts_as_unchanged(tmp_path: Path) -> None:
    env = _env(tmp_path, "batch-center")
    env.migrator.run()
    # a ledger written before the two-half format held the full mapped hash only
    defs = list(env.reader.definitions())
    biz = {b.biz_code: b for b in env.reader.businesses()}
    from migrator.mapping import Mapped, map_definition

    full = {}
    for d in defs:
        m = map_definition(d, biz.get(d.biz_code), env.migrator.clock.now())
        if isinstance(m, Mapped):
            full[d.source_key] = m.content_hash
    with env.store.engine.begin() as conn:
        for k, h in full.items():
            conn.execute(
                text("UPDATE dus_migration_ledger SET content_hash = :h WHERE source_key = :k AND status = 'migrated'"),
                {"h": h, "k": k},
            )
    jobs = _jobs(env)
    first = env.migrator.run()
    # unchanged, and the target untouched; the ledger rows alone take the two-half format
    assert first.counts["unchanged"] == len(full) and first.counts["update"] == 0
    assert first.rows_written == len(full) and _jobs(env) == jobs
    assert env.migrator.run().rows_written == 0


def _jobs(env: MigrationEnv) -> dict[str, Any]:
    with env.store.engine.connect() as conn:
        return {r[0]: tuple(r) for r in conn.execute(text("SELECT job_code, handler, params, updated_at FROM dus_job"))}


def test_a_mapping_code_change_invalidates_the_digests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mapping version is part of every digest: a new mapping is applied to every row
    (else the cheap path would keep the old targets for ever), and a new version that maps
    the same rows the same writes the ledger once and no target row."""
    env = _env(tmp_path, "xxl-job")
    first = env.migrator.run()
    jobs = _jobs(env)
    monkeypatch.setattr(ledger_hash, "mapping_version", lambda: "another build, same mapping")
    mapped = _count_mapping(monkeypatch)
    same = env.migrator.run()
    assert len(mapped) == first.counts["create"] + first.counts["quarantine"]
    assert same.counts["unchanged"] == first.counts["create"] and _jobs(env) == jobs
    assert same.rows_written == first.counts["create"]  # ledger digests only
    mapped.clear()
    assert env.migrator.run().rows_written == 0 and len(mapped) == first.counts["quarantine"]
    # a build that maps differently: every target follows it
    monkeypatch.setattr(ledger_hash, "mapping_version", lambda: "a build with a new handler name")
    monkeypatch.setitem(mapping_mod.BRIDGE_HANDLER, SourceSystem.XXL_JOB, "xxl-job-bridge-v2")
    moved = env.migrator.run()
    assert moved.counts["update"] == first.counts["create"]
    assert {h for _, h, _, _ in _jobs(env).values()} == {"xxl-job-bridge-v2"}


def test_the_mapping_version_follows_the_mapping_source(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tmp_path / "fake_mapping_mod.py"
    module.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(ledger_hash, "MAPPING_MODULES", ("fake_mapping_mod",))
    ledger_hash.mapping_version.cache_clear()
    try:
        one = ledger_hash.mapping_version()
        module.write_text("X = 2\n")
        ledger_hash.mapping_version.cache_clear()
        assert ledger_hash.mapping_version() != one
    finally:
        monkeypatch.undo()
        ledger_hash.mapping_version.cache_clear()


def test_executor_addresses_count_only_for_broadcast_jobs() -> None:
    one = LegacyBusiness(source=SourceSystem.XXL_JOB, biz_code="app", name="app", executor_addresses=("a:1",))
    two = LegacyBusiness(source=SourceSystem.XXL_JOB, biz_code="app", name="app", executor_addresses=("a:1", "b:2"))
    opts = MappingOptions()

    def digest(b: LegacyBusiness, broadcast: bool) -> str:
        return ledger_hash.context_digest("d" * 32, "xxl-job", "app", "Asia/Shanghai", b, opts, broadcast=broadcast)

    assert digest(one, False) == digest(two, False)  # executors coming and going: no re-mapping
    assert digest(one, True) != digest(two, True)  # a broadcast job's sharding items follow them
    assert digest(one, True) != digest(one, False)


def test_a_migrated_flag_lost_after_the_commit_is_repaired_by_the_next_run(tmp_path: Path) -> None:
    """Batch center: `migrated = 1` is set only after the target commit. A run that died in
    between leaves rows migrated in the target with the flag still 0: the next run writes no
    target row for them but hands them to after_commit again, so the flag gets set."""
    from readers.batchcenter.flag import set_migrated

    env = _env(tmp_path, "batch-center")
    first = env.migrator.run(after_commit=lambda writes: None)  # died before setting any flag
    handed: list[Any] = []

    def mark(writes: Any) -> None:
        handed.extend(writes)
        set_migrated(
            env.legacy,
            [int(w.source_key) for w in writes if w.action in (Action.CREATE, Action.UPDATE) or w.flag_pending],
            True,
        )

    again = env.migrator.run(after_commit=mark)
    assert again.rows_written == 0
    assert len({w.source_key for w in handed if w.flag_pending}) == first.counts["create"] > 0
    with env.legacy.connect() as conn:
        unflagged = conn.execute(text("SELECT COUNT(*) FROM bc_task WHERE migrated = 0")).scalar_one()
    assert unflagged == first.counts["quarantine"]  # only the rows that never migrated
    handed.clear()
    env.migrator.run(after_commit=mark)
    assert [w for w in handed if w.flag_pending] == []
