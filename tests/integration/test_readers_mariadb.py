"""The readers against the real MariaDB: each lineage's DDL from its .sql file, seeded,
read back; the batch center's contract DDL (indexes, ON UPDATE) and its flags."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone

import pytest
from sqlalchemy import Engine, bindparam, inspect, text

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from readers.batchcenter import BatchCenterReader
from readers.batchcenter.flag import pause_tasks, pause_together, resume_tasks, set_business_enabled, set_migrated
from readers.legacy_ddl import XxlJobLineage, batch_center_metadata, create_legacy_schema, xxljob_metadata
from readers.records import ExecStatus, ScheduleKind
from readers.xxljob import XxlJobReader
from readers.xxljob.control import read_trigger_state, set_trigger_status
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb

UTC = timezone.utc
WINDOW = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))


@pytest.fixture
def engine() -> Iterator[Engine]:
    with mariadb_database("rd") as url:
        e = make_engine(url)
        try:
            yield e
        finally:
            e.dispose()


def _indexes(engine: Engine, table: str) -> set[str]:
    insp = inspect(engine)
    names = {i["name"] for i in insp.get_indexes(table)} | {u["name"] for u in insp.get_unique_constraints(table)}
    return {n for n in names if n is not None}


@pytest.mark.parametrize("lineage", [lin.value for lin in XxlJobLineage])
def test_each_lineage_from_its_sql_file_is_detected_seeded_and_read(engine: Engine, lineage: str) -> None:
    # Given the lineage's own DDL file run on the server
    create_legacy_schema(engine, "xxl-job", lineage)
    md = xxljob_metadata(lineage)
    for table in md.tables.values():
        assert {c["name"] for c in inspect(engine).get_columns(table.name)} == set(table.columns.keys())
    assert _indexes(engine, "xxl_job_log") == {i.name for i in md.tables["xxl_job_log"].indexes}
    summary = seed_xxljob(engine, lineage, groups=3, jobs_per_group=12, malformed_crons=2,
                          log_window=WINDOW, fires_per_job=4)  # fmt: skip
    reader = XxlJobReader(engine, batch_size=5)
    # Then the lineage is detected and exactly the seeded bad rows carry problems
    assert reader.lineage().value == lineage
    defs = list(reader.definitions())
    assert len(defs) == summary.total
    assert {d.source_key: [p.field for p in d.problems] for d in defs if d.problems} == {
        k: [f] for k, f in summary.bad_keys.items()
    }
    # live executors come from the registry by the server's clock, never the dead ones
    businesses = reader.businesses()
    assert [b.biz_code for b in businesses] == list(summary.biz_codes)
    assert all(b.executor_addresses and not any("254.254" in a for a in b.executor_addresses) for b in businesses)
    assert all(bool(b.access_token) is (lineage == "master") for b in businesses)
    # and every log row of the window is read, per business
    for biz in summary.biz_codes:
        runs = list(reader.executions(biz, *WINDOW))
        assert len(runs) == summary.executions_by_business.get(biz, 0)
        assert all(WINDOW[0] <= r.triggered_at < WINDOW[1] for r in runs)  # type: ignore[operator]


def test_xxl_job_times_and_codes_read_exactly_on_the_server(engine: Engine) -> None:
    create_legacy_schema(engine, "xxl-job", "3.4")
    md = xxljob_metadata("3.4")
    with engine.begin() as conn:
        conn.execute(md.tables["xxl_job_group"].insert(), [{"id": 1, "app_name": "app", "title": "App"}])
        conn.execute(md.tables["xxl_job_info"].insert(), [{
            "id": 1, "job_group": 1, "job_desc": "d", "schedule_type": "FIX_RATE", "schedule_conf": "60",
            "misfire_strategy": "FIRE_ONCE_NOW", "executor_route_strategy": "SHARDING_BROADCAST",
            "executor_handler": "h", "executor_param": "x" * 60_000, "glue_type": "BEAN",
            "executor_fail_retry_count": 2,
            "trigger_status": 1, "trigger_next_time": 1_796_169_600_000,
        }])  # fmt: skip
        conn.execute(text(
            "INSERT INTO xxl_job_log (job_group, job_id, executor_sharding_param, executor_fail_retry_count,"
            " trigger_time, trigger_code, trigger_msg, handle_time, handle_code, handle_msg) VALUES"
            " (1, 1, '1/3', 1, '2026-12-02 08:00:00', 200, '任务触发类型：失败重试触发<br>',"
            " '2026-12-02 08:00:07', 502, 'timeout')"
        ))  # fmt: skip
    reader = XxlJobReader(engine)
    defn = reader.definition("1")
    assert defn is not None and defn.ok
    assert (defn.schedule, defn.interval_seconds, defn.broadcast, len(defn.params)) == (
        ScheduleKind.FIXED_RATE,
        60,
        True,
        60_000,
    )
    assert defn.next_fire_at == datetime(2026, 12, 2, tzinfo=UTC)
    (run,) = reader.executions("app", *WINDOW_2)
    assert (run.triggered_at, run.finished_at) == (
        datetime(2026, 12, 2, tzinfo=UTC),
        datetime(2026, 12, 2, 0, 0, 7, tzinfo=UTC),
    )
    assert (run.status, run.shard_index, run.shard_total, run.attempt) == (ExecStatus.TIMEOUT, 1, 3, 1)
    assert run.message == "[RETRY] timeout"


WINDOW_2 = (datetime(2026, 12, 1, 23, tzinfo=UTC), datetime(2026, 12, 2, 1, tzinfo=UTC))


def test_the_trigger_status_switch_on_the_server(engine: Engine) -> None:
    create_legacy_schema(engine, "xxl-job", "2.4")
    seed_xxljob(engine, "2.4", groups=1, jobs_per_group=8, bad_rows=0, malformed_crons=0)
    running = [int(d.source_key) for d in XxlJobReader(engine).definitions() if d.enabled]
    before = read_trigger_state(engine, running)
    assert set(set_trigger_status(engine, running, 0)) == set(running)
    after = read_trigger_state(engine, running)
    assert all(after[j].trigger_status == 0 and after[j].trigger_next_time_ms == before[j].trigger_next_time_ms
               for j in running)  # fmt: skip
    assert set(set_trigger_status(engine, running, 1, {j: before[j].trigger_next_time_ms for j in running})) == set(
        running
    )
    assert all(d.enabled for d in XxlJobReader(engine).definitions() if int(d.source_key) in running)


def test_a_connection_bind_reads_one_consistent_snapshot(engine: Engine) -> None:
    create_legacy_schema(engine, "xxl-job", "3.4")
    seed_xxljob(engine, "3.4", groups=1, jobs_per_group=6, bad_rows=0, malformed_crons=0)
    with engine.connect() as conn:
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        reader = XxlJobReader(conn, batch_size=2)
        first = [d.name for d in reader.definitions()]
        with engine.begin() as other:
            other.execute(text("UPDATE xxl_job_info SET job_desc = 'changed' WHERE id = 1"))
        assert [d.name for d in reader.definitions()] == first  # the snapshot holds
        conn.rollback()
    assert XxlJobReader(engine).definition("1").name == "changed"  # type: ignore[union-attr]


def test_batch_center_ddl_seed_read_and_flags_on_the_server(engine: Engine) -> None:
    # Given the contract DDL: its keys, and ON UPDATE CURRENT_TIMESTAMP on update_time
    create_legacy_schema(engine, "batch-center")
    assert _indexes(engine, "bc_task") >= {"idx_due", "idx_biz", "uk_biz_task_key"}
    assert _indexes(engine, "bc_task_exec_log") >= {"idx_task", "idx_biz_time"}
    md = batch_center_metadata()
    for table in md.tables.values():
        assert {c["name"] for c in inspect(engine).get_columns(table.name)} == set(table.columns.keys())
    summary = seed_batchcenter(engine, businesses=4, tasks_per_business=15, malformed_crons=2,
                               log_window=WINDOW, fires_per_task=3)  # fmt: skip
    reader = BatchCenterReader(engine, batch_size=6)
    defs = list(reader.definitions())
    assert len(defs) == summary.total
    assert {d.source_key: [p.field for p in d.problems] for d in defs if d.problems} == {
        k: [f] for k, f in summary.bad_keys.items()
    }
    for biz in summary.biz_codes:
        assert sum(1 for _ in reader.executions(biz, *WINDOW)) == summary.executions_by_business.get(biz, 0)
    # When the documented flags are used
    waiting = [d for d in defs if d.ok and d.status == "WAITING"][:3]
    ids = [int(d.source_key) for d in waiting]
    with engine.begin() as conn:
        stale = text("UPDATE bc_task SET update_time = '2000-01-01 00:00:00' WHERE id IN :ids")
        conn.execute(stale.bindparams(bindparam("ids", expanding=True)), {"ids": ids})
    assert set_migrated(engine, ids, True).changed == tuple(ids)
    assert set_migrated(engine, ids, True).unchanged == tuple(ids)
    assert pause_tasks(engine, ids).changed == tuple(ids)
    due = datetime(2026, 12, 3, 1, 0, tzinfo=UTC)
    assert resume_tasks(engine, dict.fromkeys(ids, due)).changed == tuple(ids)
    # Then each flag bumped the version once and the server kept update_time
    for d in waiting:
        now = reader.definition(d.source_key)
        assert now is not None and now.migrated_flag and now.status == "WAITING" and now.next_fire_at == due
        assert now.version == (d.version or 0) + 3
        assert now.raw["update_time"] != "2000-01-01 00:00:00"
    biz = summary.biz_codes[0]
    assert set_business_enabled(engine, [biz], False) == (biz,)
    assert not {b.biz_code: b for b in reader.businesses()}[biz].enabled


@pytest.mark.mariadb
def test_an_unchanged_rerun_on_the_server_maps_nothing_and_still_reports_each_quarantined_row(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With server-side digests, a re-run reads one digest per row: unchanged rows and rows
    the mapping rejected (same content, same mapping code) are counted without being read
    or mapped, with the field and reason the ledger keeps; a changed one is mapped again."""
    import migrator.apply as apply_mod
    from tests.migration_env import make_env

    with mariadb_database("lg") as legacy_url, mariadb_database("tg") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=15, rng_seed=11)
        first = env.migrator.run()
        assert first.counts["quarantine"] > 0 and first.counts["create"] > 0
        mapped: list[str] = []
        real = apply_mod.map_definition

        def counting(defn, *a, **kw):  # type: ignore[no-untyped-def]
            mapped.append(defn.source_key)
            return real(defn, *a, **kw)

        monkeypatch.setattr(apply_mod, "map_definition", counting)
        again = env.migrator.run()
        quarantined = {r.source_key: (r.field, r.reason) for r in first.rows if r.action.value == "quarantine"}
        assert again.rows_written == 0 and again.counts["unchanged"] == first.counts["create"]
        # only rows the reader itself found broken are read again (their digest is taken in
        # Python over every column, not on the server); rows the mapping rejected are not
        assert set(mapped) < set(quarantined)
        assert again.counts["quarantine"] == first.counts["quarantine"]
        assert {r.source_key: (r.field, r.reason) for r in again.rows if r.action.value == "quarantine"} == quarantined
        key = sorted(set(quarantined) - set(mapped))[0]
        mapped.clear()
        with env.legacy.begin() as conn:  # a quarantined row changes: it is looked at again
            conn.execute(
                text("UPDATE xxl_job_info SET job_desc = CONCAT(job_desc, ' (edited)') WHERE id = :id"),
                {"id": int(key)},
            )
        env.migrator.run()
        assert key in mapped
        env.legacy.dispose()
        env.store.engine.dispose()


def test_pause_together_on_the_server_pauses_all_at_one_instant_or_none(engine: Engine) -> None:
    """The cutover's switch-off of a batch-center business: with one task RUNNING no row is
    written (no version moves), with none every WAITING task is paused in one transaction
    and a claim the center prepared from the row as it was before loses its version check."""
    create_legacy_schema(engine, "batch-center")
    seed_batchcenter(engine, businesses=1, tasks_per_business=4, bad_rows=0, malformed_crons=0)
    with engine.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM bc_task ORDER BY id LIMIT 3"))]
        conn.execute(
            text("UPDATE bc_task SET status = 0 WHERE id IN :ids").bindparams(bindparam("ids", expanding=True)),
            {"ids": ids},
        )
        conn.execute(text("UPDATE bc_task SET status = 1 WHERE id = :id"), {"id": ids[2]})
    versions = text("SELECT id, version FROM bc_task WHERE id IN :ids").bindparams(bindparam("ids", expanding=True))
    with engine.connect() as conn:
        before: dict[int, int] = dict(conn.execute(versions, {"ids": ids}).all())  # type: ignore[arg-type]
    refused = pause_together(engine, ids)
    assert (refused.refused, refused.changed) == ((ids[2],), ())
    with engine.connect() as conn:
        assert dict(conn.execute(versions, {"ids": ids}).all()) == before, "a row was written though one ran"
    with engine.begin() as conn:  # the run ends
        conn.execute(text("UPDATE bc_task SET status = 0, version = version + 1 WHERE id = :id"), {"id": ids[2]})
        seen: dict[int, int] = dict(conn.execute(versions, {"ids": ids}).all())  # type: ignore[arg-type]
    done = pause_together(engine, ids)
    assert done.changed == tuple(ids)
    with engine.begin() as conn:  # the center's claim, from what it read before the pause
        claim = text(
            "UPDATE bc_task SET status = 1, version = version + 1 WHERE id = :id AND version = :v AND status = 0"
        )
        assert all(conn.execute(claim, {"id": i, "v": seen[i]}).rowcount == 0 for i in ids)
        assert {
            s
            for (s,) in conn.execute(
                text("SELECT status FROM bc_task WHERE id IN :ids").bindparams(bindparam("ids", expanding=True)),
                {"ids": ids},
            )
        } == {5}
