"""The stream applies changes from their row images (no re-read of the legacy rows), many
transactions per target transaction, with the checkpoint; deletes cancel; businesses cut
over or not selected are skipped; bad images are quarantined and the rest go on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import text

from legacy_sim.seed import seed_batchcenter
from migrator.holds import LegacyHolds
from migrator.stream import StreamMigrator
from readers.records import ChangeBatch, ChangeOp, RowChange, StreamPosition
from scheduler_core.model import JobCode, TriggerState
from tests.migration_env import MigrationEnv, make_env


def _setup(tmp_path: Path, biz_codes: set[str] | None = None) -> tuple[MigrationEnv, StreamMigrator]:
    env = make_env(f"sqlite:///{tmp_path / 'l.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=2, tasks_per_business=6, bad_rows=0, malformed_crons=0, rng_seed=2)
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "s", biz_codes)
    sm.snapshot(env.reader, StreamPosition("bin.000001", 4))
    return env, sm


def _rows(env: MigrationEnv) -> dict[int, dict[str, Any]]:
    with env.legacy.connect() as conn:
        return {r["id"]: dict(r) for r in conn.execute(text("SELECT * FROM bc_task ORDER BY id")).mappings()}


def _up(before: dict[str, Any], **after: Any) -> RowChange:
    return RowChange(op=ChangeOp.UPDATE, schema="l", table="bc_task", before=before, after={**before, **after})


def _job(env: MigrationEnv, row: dict[str, Any]) -> Any:
    return env.store.get_job(JobCode(f"bc:{row['biz_code']}:{row['id']}"))


def test_changes_apply_from_their_images_in_one_target_transaction(tmp_path: Path, monkeypatch: Any) -> None:
    env, sm = _setup(tmp_path)
    rows = _rows(env)
    a, b, c = (rows[k] for k in sorted(rows)[:3])
    monkeypatch.setattr(env.reader, "definitions_by_keys", lambda keys: (_ for _ in ()).throw(AssertionError(keys)))
    group = [
        ChangeBatch(changes=(_up(a, max_retry=3),), position=StreamPosition("bin.000001", 100)),
        ChangeBatch(changes=(_up(a, max_retry=7), _up(b, priority=42)), position=StreamPosition("bin.000001", 200)),
        ChangeBatch(
            changes=(RowChange(op=ChangeOp.DELETE, schema="l", table="bc_task", before=c, after=None),),
            position=StreamPosition("bin.000001", 300),
        ),
    ]
    sm.apply_group(group)
    assert sm.checkpoint() == StreamPosition("bin.000001", 300)
    assert _job(env, a).max_retry == 7  # the last image of the group wins; the legacy row was never re-read
    with env.store.engine.connect() as conn:
        ledger: dict[Any, Any] = dict(conn.execute(text("SELECT source_key, status FROM dus_migration_ledger")).all())
        field = conn.execute(
            text("SELECT field FROM dus_migration_ledger WHERE source_key = :k"), {"k": str(b["id"])}
        ).scalar_one()
    assert ledger[str(b["id"])] == "quarantined" and field == "priority"  # bad image: quarantined, rest go on
    assert ledger[str(c["id"])] == "deleted"
    assert {t.state for t in env.store.triggers_of(job_code=JobCode(f"bc:{c['biz_code']}:{c['id']}"))} == {
        TriggerState.CANCELLED
    }
    # replaying the same group (a restart before the checkpoint moved would do that) writes nothing new
    before = sm.stats.applied
    sm.apply_group(group[:2])
    assert sm.stats.applied == before


def test_unselected_businesses_are_skipped_and_cut_over_ones_take_definitions_only(tmp_path: Path) -> None:
    env, _ = _setup(tmp_path)
    rows = _rows(env)
    bizs = sorted({r["biz_code"] for r in rows.values()})
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "s2", {bizs[0], bizs[1]})
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_business SET state = 'cutover' WHERE biz_code = :b"), {"b": bizs[1]})
    one = next(r for r in rows.values() if r["biz_code"] == bizs[0])
    cut = next(r for r in rows.values() if r["biz_code"] == bizs[1])
    sm.apply_group(
        [
            ChangeBatch(
                changes=(_up(one, max_retry=9), _up(cut, max_retry=9)), position=StreamPosition("bin.000001", 500)
            )
        ]
    )
    assert _job(env, one).max_retry == 9
    assert _job(env, cut).max_retry == 9  # an edit in the legacy admin after cutover follows
    assert sm.stats.cut_over_edits >= 1
    # the cutover's own stop of that job (held) read back from the binlog pauses nothing
    code = JobCode(f"bc:{cut['biz_code']}:{cut['id']}")
    before = {t.id: t.state for t in env.store.triggers_of(job_code=code)}
    LegacyHolds(env.own).add("batch-center", bizs[1], [str(cut["id"])])
    sm.apply_group([ChangeBatch(changes=(_up(cut, status=5),), position=StreamPosition("bin.000001", 600))])
    assert {t.id: t.state for t in env.store.triggers_of(job_code=code)} == before
    assert sm.checkpoint() == StreamPosition("bin.000001", 600)


def test_an_image_of_an_altered_table_reloads_the_schema(tmp_path: Path, monkeypatch: Any) -> None:
    """DDL on the definition table: an image with a column the reader never inspected makes
    it inspect again and decode with the new shape; an image older than the table now (the
    stream is behind a later DDL) is read by key instead of being decoded with a wrong
    column list."""
    env, sm = _setup(tmp_path)
    rows = _rows(env)
    a, b = (rows[k] for k in sorted(rows)[:2])
    with env.legacy.begin() as conn:
        conn.execute(text("ALTER TABLE bc_task ADD COLUMN note VARCHAR(32) NULL"))
        conn.execute(text("UPDATE bc_task SET note = 'n', max_retry = 4 WHERE id = :id"), {"id": b["id"]})
    reread: list[list[str]] = []
    real = env.reader.definitions_by_keys

    def by_keys(keys: list[str]) -> Any:
        reread.append(list(keys))
        return real(keys)

    monkeypatch.setattr(env.reader, "definitions_by_keys", by_keys)
    sm.apply_group(
        [
            ChangeBatch(
                changes=(_up({**a, "note": None}, note="x", max_retry=5),), position=StreamPosition("bin.000001", 600)
            )
        ]
    )
    assert _job(env, a).max_retry == 5 and reread == []  # decoded from the image, new shape
    assert "note" in env.reader._shape("bc_task")[0]  # type: ignore[attr-defined]
    # an image written before the ALTER: the row is read as it is now
    sm.apply_group([ChangeBatch(changes=(_up(b, max_retry=2),), position=StreamPosition("bin.000001", 700))])
    assert reread == [[str(b["id"])]] and _job(env, b).max_retry == 4
    assert sm.checkpoint() == StreamPosition("bin.000001", 700)


def test_bookkeeping_images_are_recognised_from_their_digest_and_not_mapped(tmp_path: Path, monkeypatch: Any) -> None:
    """The batch center's own update at a fire (a recurring task's fire_time and version)
    changes nothing the target holds: the image's digest equals the ledger's, so it is
    neither mapped nor written. A one-shot's fire_time is content, an edit is content, and
    a row whose legacy `migrated` flag is still 0 goes the full way (the flag is repaired)."""
    from datetime import datetime, timedelta

    env, sm = _setup(tmp_path)
    rows = _rows(env)
    recurring = [r for r in rows.values() if r["task_type"] in (2, 3) and r["status"] == 0]
    delay = next(r for r in rows.values() if r["task_type"] == 1 and r["status"] == 0)
    tick, edit, unflagged = recurring[0], recurring[1], recurring[2]
    decided: list[str] = []
    plain_decide = sm.migrator.decide

    def decide(defs: Any, *a: Any, **k: Any) -> Any:
        decided.extend(d.source_key for d in defs)
        return plain_decide(defs, *a, **k)

    monkeypatch.setattr(sm.migrator, "decide", decide)
    job_before = _job(env, tick)

    def later(row: dict[str, Any]) -> str:  # SQLite hands DATETIME columns over as text
        return str(datetime.fromisoformat(str(row["fire_time"])) + timedelta(minutes=5))

    def fired(row: dict[str, Any], **more: Any) -> RowChange:
        return _up({**row, "migrated": 1}, fire_time=later(row), version=row["version"] + 1, **more)

    sm.apply_group(
        [
            ChangeBatch(
                changes=(
                    fired(tick),
                    fired(edit, max_retry=(edit["max_retry"] + 1) % 4),
                    fired(delay),
                    _up(unflagged, fire_time=later(unflagged), migrated=0),
                ),
                position=StreamPosition("bin.000001", 500),
            )
        ]
    )

    assert sm.stats.unchanged == 1
    assert str(tick["id"]) not in decided
    assert sorted(decided) == sorted(str(r["id"]) for r in (edit, delay, unflagged))
    assert _job(env, tick) == job_before  # nothing written for it
    assert _job(env, edit).max_retry == (edit["max_retry"] + 1) % 4
    assert sm.checkpoint() == StreamPosition("bin.000001", 500)


def test_xxljob_schedule_updates_are_recognised_from_their_digest(tmp_path: Path, monkeypatch: Any) -> None:
    """xxl-job's schedule thread rewrites trigger_last_time / trigger_next_time of a job at
    every fire: the stream sees the content it holds and maps nothing; an edit of the same
    job's parameters in a later group is mapped and written."""
    from legacy_sim.seed import seed_xxljob

    env = make_env(f"sqlite:///{tmp_path / 'x.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=3)
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "x")
    sm.snapshot(env.reader, StreamPosition("bin.000001", 4))
    with env.legacy.connect() as conn:
        rows = [
            dict(r)
            for r in conn.execute(text("SELECT * FROM xxl_job_info WHERE trigger_status = 1 ORDER BY id")).mappings()
        ]
    job = rows[0]
    decided: list[str] = []
    plain_decide = sm.migrator.decide

    def decide(defs: Any, *a: Any, **k: Any) -> Any:
        decided.extend(d.source_key for d in defs)
        return plain_decide(defs, *a, **k)

    monkeypatch.setattr(sm.migrator, "decide", decide)

    def up(before: dict[str, Any], **after: Any) -> RowChange:
        return RowChange(op=ChangeOp.UPDATE, schema="l", table="xxl_job_info", before=before, after={**before, **after})

    fired = up(job, trigger_last_time=job["trigger_next_time"], trigger_next_time=job["trigger_next_time"] + 60_000)
    sm.apply_group([ChangeBatch(changes=(fired,), position=StreamPosition("bin.000001", 600))])
    assert (sm.stats.unchanged, decided) == (1, [])
    edited = up(fired.after or {}, executor_param="p=2")
    sm.apply_group([ChangeBatch(changes=(edited,), position=StreamPosition("bin.000001", 700))])
    assert (sm.stats.unchanged, decided) == (1, [str(job["id"])])
    with env.legacy.connect() as conn:
        app = conn.execute(
            text("SELECT app_name FROM xxl_job_group WHERE id = :g"), {"g": job["job_group"]}
        ).scalar_one()
    target = env.store.get_job(JobCode(f"xxl:{app}:{job['id']}"))
    assert target is not None and "p=2" in target.params
