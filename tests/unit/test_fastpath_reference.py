"""The migrator's MySQL fast path (dbkit.fastpath: multi-row statements
rendered here, rows rendered ahead, driver reads) against its reference, the plain
SQLAlchemy Core path the same code takes when `fastpath.fast` says no: the same legacy
rows migrated both ways, then changed and migrated again, leave the same target rows."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from dbkit import fastpath
from legacy_sim.seed import seed_xxljob
from migrator.apply import Migrator
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from switchyard.wiring import target_writer
from tests.backends import mariadb_database
from tests.migration_env import make_env
from tests.unit.test_migrator_rendered import _tables


@pytest.fixture
def urls() -> Iterator[tuple[str, str, str]]:
    with mariadb_database("fpl") as legacy, mariadb_database("fpf") as fast, mariadb_database("fpp") as plain:
        yield legacy, fast, plain


@pytest.mark.mariadb
def test_the_fast_path_writes_what_the_plain_core_path_writes(
    urls: tuple[str, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy_url, fast_url, plain_url = urls
    env = make_env(legacy_url, fast_url, "xxl-job", "3.4")
    plain_engine = make_engine(plain_url)
    real_fast = fastpath.fast
    bulk: list[str] = []  # which run sent the fast path's own statements
    real_send = fastpath._send

    def counted_send(cursor: Any, head: str, tail: str, literals: Any) -> int:
        bulk.append(head.split("(")[0].strip())
        return real_send(cursor, head, tail, literals)

    monkeypatch.setattr(fastpath, "_send", counted_send)

    def plain_run(m: Migrator) -> Any:
        monkeypatch.setattr(fastpath, "fast", lambda conn: False)
        try:
            return m.run()
        finally:
            monkeypatch.setattr(fastpath, "fast", real_fast)

    try:
        init_schema(plain_engine, 4)
        plain = Migrator(env.reader, target_writer(SqlTriggerStore(plain_engine, env.store.clock)), env.migrator.clock)
        seed_xxljob(env.legacy, "3.4", groups=3, jobs_per_group=30, rng_seed=5)

        first_fast = env.migrator.run()
        assert bulk, "the fast run sent no bulk statement: it did not take the fast path"
        bulk.clear()
        first_plain = plain_run(plain)
        assert not bulk, f"the plain run took the fast path: {bulk[:3]}"
        assert first_fast.counts == first_plain.counts and first_fast.counts["quarantine"] > 0
        got, want = _tables(env.store.engine), _tables(plain_engine)
        assert all(got[t] for t in ("dus_job", "dus_job_trigger", "dus_sharding_item", "dus_migration_ledger"))
        assert got == want

        # changed legacy rows: an edit (updates of jobs and triggers) and a delete (a cancel)
        with env.legacy.begin() as conn:
            ids = [r[0] for r in conn.execute(text("SELECT id FROM xxl_job_info ORDER BY id LIMIT 3"))]
            conn.execute(
                text("UPDATE xxl_job_info SET executor_param = 'changed, it''s \\\\ new' WHERE id = :i"), {"i": ids[0]}
            )
            conn.execute(text("DELETE FROM xxl_job_info WHERE id = :i"), {"i": ids[1]})
        again_fast = env.migrator.run()
        again_plain = plain_run(plain)
        assert again_fast.counts == again_plain.counts
        assert again_fast.counts["update"] >= 1 and again_fast.counts["delete"] >= 1
        assert _tables(env.store.engine) == _tables(plain_engine)

        # and an unchanged re-run writes nothing either way
        assert env.migrator.run().rows_written == 0
        assert plain_run(plain).rows_written == 0
    finally:
        env.legacy.dispose()
        env.store.engine.dispose()
        plain_engine.dispose()
