"""legacy_sim.seed: deterministic, realistic legacy data with exactly known bad rows."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import StaticPool

from legacy_sim.seed import bc_bad_kinds, seed_batchcenter, seed_xxljob, xxl_bad_kinds
from readers.batchcenter import BatchCenterReader
from readers.legacy_ddl import create_legacy_schema
from readers.xxljob import XxlJobReader

UTC = timezone.utc
WINDOW = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 1, 12, tzinfo=UTC))


def _db(system: str, lineage: str | None = None) -> Engine:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, system, lineage)
    return engine


def _dump(engine: Engine, table: str) -> list[tuple[Any, ...]]:
    # update_time of the executor groups is the wall clock at seeding (legacy_sim.seed: the
    # executors must look alive now), not the seed's: two seeds a second apart differ there
    with engine.connect() as conn:
        return [
            tuple(v for k, v in r.items() if k != "update_time")
            for r in conn.execute(text(f"SELECT * FROM {table} ORDER BY id")).mappings()
        ]


def test_the_same_seed_gives_the_same_rows() -> None:
    a, b = _db("xxl-job", "3.4"), _db("xxl-job", "3.4")
    for e in (a, b):
        seed_xxljob(e, "3.4", groups=3, jobs_per_group=20, log_window=WINDOW, fires_per_job=3, rng_seed=7)
    for table in ("xxl_job_group", "xxl_job_info", "xxl_job_log"):
        assert _dump(a, table) == _dump(b, table)
    c = _db("xxl-job", "3.4")
    seed_xxljob(c, "3.4", groups=3, jobs_per_group=20, rng_seed=8)
    assert _dump(a, "xxl_job_info") != _dump(c, "xxl_job_info")


def test_the_same_seed_gives_the_same_batch_center() -> None:
    a, b = _db("batch-center"), _db("batch-center")
    for e in (a, b):
        seed_batchcenter(e, businesses=3, tasks_per_business=15, log_window=WINDOW, fires_per_task=2, rng_seed=3)
    for table in ("bc_task", "bc_task_exec_log"):
        assert _dump(a, table) == _dump(b, table)


@pytest.mark.parametrize("lineage", ["2.2", "master"])
def test_more_bad_rows_than_kinds_cycle_through_the_kinds(lineage: str) -> None:
    engine = _db("xxl-job", lineage)
    summary = seed_xxljob(engine, lineage, groups=2, jobs_per_group=25, bad_rows=30, malformed_crons=0)
    assert (summary.bad, summary.good, len(summary.bad_keys)) == (30, 20, 30)
    assert set(summary.bad_keys.values()) == {f for _, f in xxl_bad_kinds(lineage, sqlite=True)}
    problems = {d.source_key: d.problems[0].field for d in XxlJobReader(engine).definitions() if d.problems}
    assert problems == dict(summary.bad_keys)


def test_no_bad_rows_means_every_definition_reads_ok() -> None:
    engine = _db("batch-center")
    summary = seed_batchcenter(engine, businesses=2, tasks_per_business=30, bad_rows=0, malformed_crons=0)
    assert summary.bad == 0 and all(d.ok for d in BatchCenterReader(engine).definitions())


def test_bad_kinds_follow_what_the_database_can_hold() -> None:
    assert "schedule_type" not in {f for _, f in xxl_bad_kinds("2.2", sqlite=True)}
    assert "job_cron" in {f for _, f in xxl_bad_kinds("2.2", sqlite=True)}
    assert {k for k, _ in xxl_bad_kinds("3.4", sqlite=False)}.isdisjoint({"invalid_utf8", "oversize_param"})
    assert "invalid_utf8" not in {k for k, _ in bc_bad_kinds(sqlite=False, businesses=3)}


def test_thousands_of_rows_stream_lazily_page_by_page() -> None:
    engine = _db("xxl-job", "2.4")
    summary = seed_xxljob(engine, "2.4", groups=10, jobs_per_group=500, bad_rows=5, chunk_size=700)
    pages: list[str] = []

    @event.listens_for(engine, "before_cursor_execute")
    def count(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if "FROM xxl_job_info" in statement and "LIMIT" in statement:
            pages.append(statement)

    stream = XxlJobReader(engine, batch_size=250).definitions()
    first = next(stream)
    assert first.source_key == "1" and len(pages) == 1  # nothing beyond the first page is read yet
    rest = sum(1 for _ in stream)
    assert 1 + rest == summary.total == 5000 and len(pages) == 21  # 20 full pages + the empty check


def test_a_summary_counts_execution_rows_per_business() -> None:
    engine = _db("batch-center")
    summary = seed_batchcenter(engine, businesses=3, tasks_per_business=10, log_window=WINDOW, fires_per_task=3)
    with engine.connect() as conn:
        rows: dict[str, int] = dict(
            conn.execute(text("SELECT biz_code, COUNT(*) FROM bc_task_exec_log GROUP BY biz_code")).all()
        )
    assert rows == dict(summary.executions_by_business) and summary.executions == sum(rows.values())
