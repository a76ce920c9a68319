"""The polling stream's delete detection (migrator.stream.KeyCompare / polling_batches):
the ledger's migrated keys compared with the legacy table's, a bounded page per pass,
round-robin, every delete found within one round."""

from __future__ import annotations

import threading
from pathlib import Path

from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from migrator.stream import KeyCompare, StreamMigrator, polling_batches
from readers.records import ChangeOp, SourceSystem, StreamPosition
from readers.streams import PollingChangeStream
from tests.migration_env import make_env


def _env(tmp_path: Path):  # type: ignore[no-untyped-def]
    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=3)
    env.migrator.run()
    with env.store.engine.connect() as conn:
        migrated = sorted(
            conn.execute(text("SELECT source_key FROM dus_migration_ledger WHERE status = 'migrated'")).scalars()
        )
    return env, migrated


def test_each_pass_reads_a_bounded_page_and_a_round_covers_every_migrated_key(tmp_path: Path) -> None:
    env, migrated = _env(tmp_path)
    compare = KeyCompare(every_s=0, keys_per_pass=4)
    seen: list[list[str]] = []
    while compare.rounds < 2:
        seen.append(compare.next_keys(env.writer, SourceSystem.XXL_JOB))
        assert len(seen) < 50
    assert all(len(page) <= 4 for page in seen)
    per_round = -(-len(migrated) // 4) + (1 if len(migrated) % 4 == 0 else 0)
    first_round = [k for page in seen[:per_round] for k in page]
    assert first_round == migrated  # each key once, in order
    assert [k for page in seen[per_round:] for k in page] == migrated  # the next round starts over


def test_polling_batches_turn_keys_gone_from_the_table_into_deletes(tmp_path: Path) -> None:
    env, migrated = _env(tmp_path)
    gone = {migrated[0], migrated[-1]}
    with env.legacy.begin() as conn:
        for key in gone:
            conn.execute(text("DELETE FROM xxl_job_info WHERE id = :id"), {"id": int(key)})
    poller = PollingChangeStream(env.legacy, table="xxl_job_info", key_columns=("id",), tz="Asia/Shanghai")
    stop = threading.Event()
    compare = KeyCompare(every_s=0, keys_per_pass=3)
    deleted: set[str] = set()
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "poll-test")
    for batch in polling_batches(
        poller, env.writer, SourceSystem.XXL_JOB, stop, interval_s=0, compare=compare, start=StreamPosition("poll", 0)
    ):
        sm.apply(batch)
        deleted |= {str(ch.before["id"]) for ch in batch.changes if ch.op is ChangeOp.DELETE and ch.before}
        if deleted == gone or compare.passes > 20:
            stop.set()
    assert deleted == gone
    assert compare.passes <= -(-len(migrated) // 3) + 1  # found within one round
    with env.store.engine.connect() as conn:
        status = dict(conn.execute(text("SELECT source_key, status FROM dus_migration_ledger")).all())
    assert {k for k, s in status.items() if s == "deleted"} == gone
