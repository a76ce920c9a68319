"""XxlJobReader on SQLite: every lineage, every schedule type, problems, paging, log rows,
and the documented `trigger_status` switch."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import StaticPool

from legacy_sim.seed import seed_xxljob
from readers.errors import MissingTables, UnknownLineage
from readers.legacy_ddl import XxlJobLineage, create_legacy_schema, xxljob_metadata
from readers.ports import LegacyReader
from readers.records import ExecStatus, MisfireRule, ScheduleKind, SourceSystem
from readers.xxljob import XxlJobReader
from readers.xxljob.control import read_trigger_state, set_trigger_status
from readers.xxljob.logs import TriggerType, message_trigger_type

UTC = timezone.utc
LINEAGES = [lin.value for lin in XxlJobLineage]
NEXT_MS = 1_796_169_600_000  # 2026-12-02T00:00:00Z
WINDOW = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))


def _engine(lineage: str) -> Engine:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "xxl-job", lineage)
    return engine


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = _engine("3.4")
    yield e
    e.dispose()


def _insert(engine: Engine, lineage: str, table: str, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(xxljob_metadata(lineage).tables[table].insert(), list(rows))


def _group(lineage: str = "3.4", **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {"id": 1, "app_name": "sop-audience-executor", "address_type": 0,
                           "address_list": "http://b:9999/,http://a:9999/"}  # fmt: skip
    row["name" if lineage == "master" else "title"] = "SOP"
    if lineage != "2.2":
        row["update_time"] = datetime(2026, 12, 2, 8, 0)
    return row | over


def _job(lineage: str = "3.4", **over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 1, "job_group": 1, "executor_route_strategy": "FIRST", "executor_handler": "demoHandler",
        "executor_param": "p=1", "executor_block_strategy": "SERIAL_EXECUTION", "executor_timeout": 30,
        "executor_fail_retry_count": 2, "glue_type": "BEAN", "glue_updatetime": datetime(2026, 1, 1, 8, 0),
        "trigger_status": 1, "trigger_last_time": 0, "trigger_next_time": NEXT_MS,
    }  # fmt: skip
    row["name" if lineage == "master" else "job_desc"] = "daily report"
    if lineage == "2.2":
        row["job_cron"] = "0 0 8 * * ?"
    else:
        row |= {"schedule_type": "CRON", "schedule_conf": "0 0 8 * * ?", "misfire_strategy": "DO_NOTHING"}
    return row | over


def _one(engine: Engine, lineage: str = "3.4", **over: Any) -> Any:
    _insert(engine, lineage, "xxl_job_group", _group(lineage))
    _insert(engine, lineage, "xxl_job_info", _job(lineage, **over))
    (defn,) = XxlJobReader(engine).definitions()
    return defn


# -- lineage ------------------------------------------------------------------------------


@pytest.mark.parametrize("lineage", LINEAGES)
def test_each_lineage_is_detected_from_its_columns(lineage: str) -> None:
    assert XxlJobReader(_engine(lineage)).lineage().value == lineage


def test_tables_matching_no_lineage_raise_unknown_lineage() -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE xxl_job_info (id INTEGER PRIMARY KEY, job_group INT, cron TEXT)"))
        conn.execute(text("CREATE TABLE xxl_job_group (id INTEGER PRIMARY KEY, app_name TEXT)"))
    with pytest.raises(UnknownLineage, match="neither job_cron nor schedule_type"):
        XxlJobReader(engine).lineage()


def test_a_database_without_xxl_job_tables_raises_missing_tables() -> None:
    with pytest.raises(MissingTables, match="xxl_job_group, xxl_job_info"):
        XxlJobReader(create_engine("sqlite://", poolclass=StaticPool)).lineage()


def test_the_reader_is_a_legacy_reader() -> None:
    assert LegacyReader in XxlJobReader.__mro__  # explicit subclass: mypy checks every member
    assert XxlJobReader.system is SourceSystem.XXL_JOB


# -- definitions --------------------------------------------------------------------------


@pytest.mark.parametrize("lineage", LINEAGES)
def test_a_cron_job_reads_completely_in_every_lineage(lineage: str) -> None:
    defn = _one(_engine(lineage), lineage)
    assert defn.ok, defn.problems
    assert (defn.source, defn.source_key, defn.biz_code, defn.name) == (
        SourceSystem.XXL_JOB, "1", "sop-audience-executor", "daily report"
    )  # fmt: skip
    assert (defn.schedule, defn.cron, defn.interval_seconds) == (ScheduleKind.CRON, "0 0 8 * * ?", None)
    assert defn.next_fire_at == datetime(2026, 12, 2, tzinfo=UTC)  # epoch ms, no zone involved
    assert defn.time_zone == "Asia/Shanghai"
    assert defn.misfire is MisfireRule.SKIP and defn.enabled and defn.status == "RUNNING"
    assert (defn.handler, defn.params, defn.route_strategy, defn.broadcast) == ("demoHandler", "p=1", "FIRST", False)
    assert (defn.timeout_seconds, defn.max_retry) == (30, 2)
    assert defn.raw["executor_block_strategy"] == "SERIAL_EXECUTION"
    assert defn.raw["glue_updatetime"] == "2026-01-01 08:00:00"


def test_fix_rate_reads_whole_seconds(engine: Engine) -> None:
    defn = _one(engine, schedule_type="FIX_RATE", schedule_conf="300")
    assert defn.ok and (defn.schedule, defn.interval_seconds, defn.cron) == (ScheduleKind.FIXED_RATE, 300, None)


def test_none_is_a_schedule_not_a_problem(engine: Engine) -> None:
    defn = _one(engine, schedule_type="NONE", schedule_conf=None, trigger_status=0, trigger_next_time=0)
    assert defn.ok and defn.schedule is ScheduleKind.NONE
    assert (defn.enabled, defn.status, defn.next_fire_at) == (False, "STOPPED", None)


def test_fire_once_now_and_sharding_broadcast_map(engine: Engine) -> None:
    defn = _one(engine, misfire_strategy="FIRE_ONCE_NOW", executor_route_strategy="SHARDING_BROADCAST")
    assert defn.ok and defn.misfire is MisfireRule.FIRE_ONCE_NOW and defn.broadcast


def test_a_glue_job_is_named_for_the_bridge_and_keeps_its_source(engine: Engine) -> None:
    defn = _one(engine, glue_type="GLUE_SHELL", executor_handler="", glue_source="echo hi")
    assert defn.ok and defn.handler == "glue:GLUE_SHELL:1"
    assert (defn.raw["glue_type"], defn.raw["glue_source"]) == ("GLUE_SHELL", "echo hi")


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        ({"schedule_type": "FIX_DELAY"}, "schedule_type", "unknown value 'FIX_DELAY'"),
        ({"schedule_type": "cron"}, "schedule_type", "unknown value 'cron'"),
        ({"misfire_strategy": "RUN_TWICE"}, "misfire_strategy", "unknown value"),
        ({"executor_route_strategy": "WEIGHTED"}, "executor_route_strategy", "unknown value"),
        ({"executor_route_strategy": None}, "executor_route_strategy", "missing"),
        ({"schedule_conf": ""}, "schedule_conf", "empty"),
        ({"schedule_conf": None}, "schedule_conf", "empty"),
        ({"schedule_conf": "0 " * 70}, "schedule_conf", "too long"),
        ({"schedule_type": "FIX_RATE", "schedule_conf": "0"}, "schedule_conf", "not positive"),
        ({"schedule_type": "FIX_RATE", "schedule_conf": "-5"}, "schedule_conf", "not positive"),
        ({"schedule_type": "FIX_RATE", "schedule_conf": " 30"}, "schedule_conf", "not an integer"),
        ({"schedule_type": "FIX_RATE", "schedule_conf": None}, "schedule_conf", "not an integer"),
        ({"glue_type": "GLUE_RUBY"}, "glue_type", "unknown value"),
        ({"executor_handler": None}, "executor_handler", "missing"),
        ({"glue_type": "GLUE_PYTHON", "glue_updatetime": None}, "glue_updatetime", "missing"),
        ({"glue_type": "GLUE_PYTHON", "glue_updatetime": datetime(1960, 1, 1)}, "glue_updatetime", "out of range"),
        ({"trigger_next_time": 9_999_999_999_999}, "trigger_next_time", "out of range"),
        ({"trigger_next_time": -1}, "trigger_next_time", "out of range"),
        ({"trigger_status": 2}, "trigger_status", "out of range"),
        ({"executor_timeout": -1}, "executor_timeout", "out of range"),
        ({"executor_fail_retry_count": -3}, "executor_fail_retry_count", "out of range"),
        ({"executor_param": "x" * (64 * 1024 + 1)}, "executor_param", "too long: 65537 bytes"),
        ({"executor_param": b'{"k": "\xff"}'}, "executor_param", "invalid UTF-8 at byte 7"),
        ({"job_desc": b"caf\xe9"}, "job_desc", "invalid UTF-8"),
        ({"job_group": 42}, "job_group", "no executor group with id 42"),
    ],
)
def test_each_bad_value_is_one_problem_with_field_and_reason(
    engine: Engine, overrides: dict[str, Any], field: str, reason: str
) -> None:
    defn = _one(engine, **overrides)
    assert [p.field for p in defn.problems] == [field]
    assert reason in defn.problems[0].reason
    assert defn.source_key == "1"  # decoded as far as possible, never dropped


def test_an_empty_2_2_job_cron_names_job_cron() -> None:
    defn = _one(_engine("2.2"), "2.2", job_cron="  ")
    assert [(p.field, p.reason.split(":")[0]) for p in defn.problems] == [("job_cron", "empty")]


def test_invalid_utf8_is_decoded_with_replacement_characters(engine: Engine) -> None:
    defn = _one(engine, executor_param=b"ok\xff")
    assert defn.params == "ok\ufffd"


@pytest.mark.parametrize("lineage", LINEAGES)
def test_seeded_bad_rows_are_exactly_the_rows_with_problems(lineage: str) -> None:
    engine = _engine(lineage)
    summary = seed_xxljob(engine, lineage, groups=4, jobs_per_group=15, malformed_crons=2)
    defs = list(XxlJobReader(engine, batch_size=9).definitions())
    assert len(defs) == summary.total == 60
    problems = {d.source_key: [p.field for p in d.problems] for d in defs if d.problems}
    assert problems == {k: [f] for k, f in summary.bad_keys.items()}
    assert all(p.reason for d in defs for p in d.problems)
    # malformed crons pass the reader: the migrator's cron rejects them
    by_key = {d.source_key: d for d in defs}
    assert len(summary.malformed_cron_keys) == 2 and all(by_key[k].ok for k in summary.malformed_cron_keys)
    assert {d.schedule for d in defs if d.ok} >= (
        {ScheduleKind.CRON} if lineage == "2.2" else {ScheduleKind.CRON, ScheduleKind.FIXED_RATE, ScheduleKind.NONE}
    )


def test_definitions_filter_by_business_and_definition_reads_one(engine: Engine) -> None:
    summary = seed_xxljob(engine, "3.4", groups=3, jobs_per_group=5, bad_rows=0)
    reader = XxlJobReader(engine)
    reminder = list(reader.definitions(["reminder-executor"]))
    assert [d.source_key for d in reminder] == ["6", "7", "8", "9", "10"]
    assert list(reader.definitions(["nobody"])) == []
    assert list(reader.definitions([])) == []
    assert reader.definition("7") == reminder[1]
    assert reader.definition("999") is None and reader.definition("seven") is None
    assert summary.biz_codes[1] == "reminder-executor"


def test_definitions_page_by_keyset_in_bounded_batches(engine: Engine) -> None:
    seed_xxljob(engine, "3.4", groups=5, jobs_per_group=20, bad_rows=0)
    statements: list[tuple[str, Any]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def capture(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if "FROM xxl_job_info" in statement:
            statements.append((statement, params))

    keys = [int(d.source_key) for d in XxlJobReader(engine, batch_size=7).definitions()]
    assert keys == list(range(1, 101))
    pages = [s for s in statements if "LIMIT" in s[0]]
    assert len(pages) == 15  # ceil(100 / 7): the last page is short, so no empty extra query
    assert all("id > ?" in s and "ORDER BY id" in s for s, _ in pages)
    # the keyset is the last id seen; SQLite's compiler spells a zero OFFSET, never more
    assert [(p[-3], p[-2], p[-1]) for _, p in pages][:3] == [(-1, 7, 0), (7, 7, 0), (14, 7, 0)]


# -- businesses ---------------------------------------------------------------------------


def _registry(engine: Engine, *rows: tuple[str, str, str, datetime]) -> None:
    keys = ("registry_group", "registry_key", "registry_value", "update_time")
    _insert(engine, "3.4", "xxl_job_registry", *(dict(zip(keys, r, strict=True)) for r in rows))


def test_live_registry_addresses_are_sorted_deduplicated_and_exclude_dead_and_admin_rows() -> None:
    # Given (2.4: no unique registry key) executors heartbeating around 08:00 Shanghai,
    # a duplicate row, one dead executor and an admin row
    engine = _engine("2.4")
    now = datetime(2026, 12, 2, 0, 1, tzinfo=UTC)  # 08:01 Shanghai
    app = "sop-audience-executor"
    _insert(engine, "2.4", "xxl_job_group", _group("2.4"))
    _registry(
        engine,
        ("EXECUTOR", app, "http://10.0.0.9:9999/", datetime(2026, 12, 2, 8, 0, 30)),
        ("EXECUTOR", app, "http://10.0.0.10:9999/", datetime(2026, 12, 2, 8, 0, 0)),
        ("EXECUTOR", app, "http://10.0.0.10:9999/", datetime(2026, 12, 2, 8, 0, 5)),  # pre-2.5 duplicate
        ("EXECUTOR", app, "http://10.0.0.11:9999/", datetime(2026, 12, 2, 7, 59, 30)),  # exactly 90 s: dead
        ("ADMIN", app, "http://admin:8080/", datetime(2026, 12, 2, 8, 0, 30)),
    )
    (biz,) = XxlJobReader(engine).businesses(as_of=now)
    # Then the addresses are the admin's lexicographic order of the live ones
    assert biz.executor_addresses == ("http://10.0.0.10:9999/", "http://10.0.0.9:9999/")
    assert (biz.biz_code, biz.name, biz.source_id, biz.enabled) == ("sop-audience-executor", "SOP", 1, True)


def test_without_live_registry_rows_the_group_address_list_is_used(engine: Engine) -> None:
    _insert(engine, "3.4", "xxl_job_group", _group())
    _registry(engine, ("EXECUTOR", "sop-audience-executor", "http://x:9999/", datetime(2026, 12, 2, 8, 0)))
    (biz,) = XxlJobReader(engine).businesses(as_of=datetime(2026, 12, 3, tzinfo=UTC))
    assert biz.executor_addresses == ("http://b:9999/", "http://a:9999/")


def test_a_manual_group_keeps_its_typed_list_even_with_live_registry_rows(engine: Engine) -> None:
    _insert(engine, "3.4", "xxl_job_group", _group(address_type=1))
    _registry(engine, ("EXECUTOR", "sop-audience-executor", "http://x:9999/", datetime(2026, 12, 2, 8, 0)))
    (biz,) = XxlJobReader(engine).businesses(as_of=datetime(2026, 12, 2, 0, 0, 10, tzinfo=UTC))
    assert biz.executor_addresses == ("http://b:9999/", "http://a:9999/")


def test_seeded_registry_is_judged_by_the_database_clock() -> None:
    engine = _engine("master")
    seed_xxljob(engine, "master", groups=2, jobs_per_group=2, bad_rows=0, executors_per_group=3)
    businesses = XxlJobReader(engine).businesses()
    assert len(businesses) == 2 and all(b.executor_addresses for b in businesses)
    assert all(not any("254.254" in a for a in b.executor_addresses) for b in businesses)  # the dead ones
    assert all(b.access_token and b.access_token not in repr(b) for b in businesses)


def test_duplicate_app_names_before_master_give_one_business(engine: Engine) -> None:
    _insert(engine, "3.4", "xxl_job_group", _group(), _group(id=2, title="again"))
    assert [(b.biz_code, b.source_id) for b in XxlJobReader(engine).businesses()] == [("sop-audience-executor", 1)]


# -- executions ---------------------------------------------------------------------------


def _log(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "job_group": 1, "job_id": 1, "executor_address": "http://a:9999/", "executor_fail_retry_count": 2,
        "trigger_time": datetime(2026, 12, 2, 8, 0, 0), "trigger_code": 200,
        "trigger_msg": "任务触发类型：Cron触发<br>调度机器：10.0.0.1", "handle_time": datetime(2026, 12, 2, 8, 0, 3),
        "handle_code": 200, "handle_msg": None,
    }  # fmt: skip
    return row | over


def _executions(engine: Engine, *logs: dict[str, Any], batch_size: int = 1000) -> list[Any]:
    _insert(engine, "3.4", "xxl_job_group", _group())
    _insert(engine, "3.4", "xxl_job_info", _job(executor_fail_retry_count=3))
    _insert(engine, "3.4", "xxl_job_log", *logs)
    return list(XxlJobReader(engine, batch_size=batch_size).executions("sop-audience-executor", *WINDOW_2))


WINDOW_2 = (datetime(2026, 12, 1, 23, tzinfo=UTC), datetime(2026, 12, 2, 1, tzinfo=UTC))


def test_a_log_row_reads_times_in_utc_status_and_trigger_type(engine: Engine) -> None:
    (ex,) = _executions(engine, _log())
    assert (ex.source, ex.biz_code, ex.source_key, ex.log_id) == (SourceSystem.XXL_JOB, "sop-audience-executor", "1", 1)
    assert ex.scheduled_at is None  # xxl-job does not store the nominal fire time
    assert ex.triggered_at == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)
    assert ex.finished_at == datetime(2026, 12, 2, 0, 0, 3, tzinfo=UTC)
    assert (ex.status, ex.shard_index, ex.shard_total, ex.attempt) == (ExecStatus.SUCCESS, 0, 1, 1)
    assert message_trigger_type(ex.message) is TriggerType.CRON


@pytest.mark.parametrize(
    ("trigger_code", "handle_code", "status"),
    [
        (200, 200, ExecStatus.SUCCESS),
        (200, 500, ExecStatus.FAIL),
        (200, 502, ExecStatus.TIMEOUT),
        (200, 404, ExecStatus.FAIL),
        (200, 0, ExecStatus.RUNNING),
        (0, 0, ExecStatus.NOT_DISPATCHED),
        (500, 0, ExecStatus.FAIL),
    ],
)
def test_trigger_and_handle_codes_map_to_a_status(
    engine: Engine, trigger_code: int, handle_code: int, status: ExecStatus
) -> None:
    handle_time = None if handle_code == 0 else datetime(2026, 12, 2, 8, 0, 9)
    (ex,) = _executions(engine, _log(trigger_code=trigger_code, handle_code=handle_code, handle_time=handle_time))
    assert ex.status is status
    if status in (ExecStatus.RUNNING, ExecStatus.NOT_DISPATCHED):
        assert ex.finished_at is None
    elif trigger_code == 500:
        assert ex.finished_at == ex.triggered_at  # a failed trigger ends when it is tried


def test_broadcast_shards_retries_and_the_retry_banner(engine: Engine) -> None:
    banner = '<br><br><span style="color:#F39C12;" > >>>>>>>>>>>失败重试触发<<<<<<<<<<< </span><br>'
    rows = _executions(
        engine,
        _log(executor_sharding_param="2/5", executor_fail_retry_count=3, handle_code=500,
             handle_msg="boom", trigger_msg="任务触发类型：Cron触发<br>x" + banner),
        _log(executor_sharding_param="2/5", executor_fail_retry_count=2, trigger_msg="任务触发类型：失败重试触发<br>x",
             trigger_time=datetime(2026, 12, 2, 8, 0, 10)),
        _log(executor_sharding_param="oops", trigger_msg="Job trigger type：Manual trigger<br>",
             trigger_time=datetime(2026, 12, 2, 8, 0, 20)),
    )  # fmt: skip
    assert [(e.shard_index, e.shard_total, e.attempt) for e in rows] == [(2, 5, 0), (2, 5, 1), (0, 1, 1)]
    assert [message_trigger_type(e.message) for e in rows] == [TriggerType.CRON, TriggerType.RETRY, TriggerType.MANUAL]
    assert rows[0].message == "[CRON] boom"


def test_the_window_is_half_open_and_paging_through_equal_times_loses_nothing(engine: Engine) -> None:
    at = datetime(2026, 12, 2, 8, 0, 0)
    logs = [_log(trigger_time=at) for _ in range(11)] + [
        _log(trigger_time=datetime(2026, 12, 2, 7, 0, 0)),  # exactly `since`: in
        _log(trigger_time=datetime(2026, 12, 2, 9, 0, 0)),  # exactly `until`: out
        _log(trigger_time=datetime(2026, 12, 2, 6, 59, 59)),  # before: out
        _log(trigger_time=None),  # never triggered: out
    ]
    rows = _executions(engine, *logs, batch_size=3)
    assert [r.log_id for r in rows] == [12, *range(1, 12)]


def test_other_apps_and_empty_windows_yield_nothing(engine: Engine) -> None:
    _executions(engine, _log())
    reader = XxlJobReader(engine)
    assert list(reader.executions("nobody", *WINDOW_2)) == []
    assert list(reader.executions("sop-audience-executor", WINDOW_2[1], WINDOW_2[0])) == []


def test_naive_window_bounds_are_refused(engine: Engine) -> None:
    with pytest.raises(ValueError, match="aware"):
        list(XxlJobReader(engine).executions("x", datetime(2026, 1, 1), datetime(2026, 1, 2)))


def test_seeded_log_rows_are_all_read_per_business() -> None:
    engine = _engine("2.4")
    summary = seed_xxljob(engine, "2.4", groups=3, jobs_per_group=8, log_window=WINDOW, fires_per_job=5)
    reader = XxlJobReader(engine, batch_size=10)
    counts = {b: sum(1 for _ in reader.executions(b, *WINDOW)) for b in summary.biz_codes}
    assert counts == {b: summary.executions_by_business.get(b, 0) for b in summary.biz_codes}
    assert sum(counts.values()) == summary.executions > 0
    statuses = {e.status for b in summary.biz_codes for e in reader.executions(b, *WINDOW)}
    assert {ExecStatus.SUCCESS, ExecStatus.FAIL} <= statuses


def test_a_connection_bind_reads_inside_the_callers_transaction(engine: Engine) -> None:
    seed_xxljob(engine, "3.4", groups=1, jobs_per_group=3, bad_rows=0)
    with engine.connect() as conn:
        reader = XxlJobReader(conn, batch_size=2)
        assert len(list(reader.definitions())) == 3 and len(reader.businesses()) == 1


# -- the documented switch ----------------------------------------------------------------


def test_disabling_writes_only_trigger_status_and_keeps_the_next_time(engine: Engine) -> None:
    _insert(engine, "3.4", "xxl_job_group", _group())
    _insert(engine, "3.4", "xxl_job_info", _job(id=1), _job(id=2), _job(id=3, trigger_status=0))
    with engine.connect() as conn:
        before = [dict(r) for r in conn.execute(text("SELECT * FROM xxl_job_info ORDER BY id")).mappings()]
    assert set_trigger_status(engine, [1, 2, 3, 404], 0) == (1, 2)
    with engine.connect() as conn:
        after = [dict(r) for r in conn.execute(text("SELECT * FROM xxl_job_info ORDER BY id")).mappings()]
    assert [{k: v for k, v in a.items() if a[k] != b[k]} for a, b in zip(after, before, strict=True)] == [
        {"trigger_status": 0}, {"trigger_status": 0}, {}
    ]  # fmt: skip
    assert read_trigger_state(engine, [1])[1].trigger_next_time_ms == NEXT_MS


def test_enabling_sets_trigger_next_time_and_skips_none_jobs(engine: Engine) -> None:
    _insert(engine, "3.4", "xxl_job_group", _group())
    _insert(engine, "3.4", "xxl_job_info",
            _job(id=1, trigger_status=0), _job(id=2, trigger_status=0, schedule_type="NONE"), _job(id=3))  # fmt: skip
    assert set_trigger_status(engine, [1, 2, 3], 1, {1: NEXT_MS + 5000, 2: NEXT_MS, 3: NEXT_MS}) == (1,)
    state = read_trigger_state(engine, [1, 2, 3])
    assert (state[1].trigger_status, state[1].trigger_next_time_ms) == (1, NEXT_MS + 5000)
    assert state[2].trigger_status == 0 and state[3].trigger_next_time_ms == NEXT_MS
    with pytest.raises(ValueError, match="needs next_time_ms"):
        set_trigger_status(engine, [1], 1)
    with pytest.raises(ValueError):
        set_trigger_status(engine, [1], 2)


def test_enabling_a_2_2_job_works_without_schedule_types() -> None:
    engine = _engine("2.2")
    _insert(engine, "2.2", "xxl_job_group", _group("2.2"))
    _insert(engine, "2.2", "xxl_job_info", _job("2.2", trigger_status=0))
    assert set_trigger_status(engine, [1], 1, NEXT_MS) == (1,)
    assert XxlJobReader(engine).definition("1").enabled  # type: ignore[union-attr]


def test_time_window_of_seeded_runs_is_in_window() -> None:
    engine = _engine("3.4")
    seed_xxljob(engine, "3.4", groups=1, jobs_per_group=6, bad_rows=0, log_window=WINDOW, fires_per_job=3)
    runs = list(XxlJobReader(engine).executions("sop-audience-executor", *WINDOW))
    times = [r.triggered_at for r in runs if r.triggered_at is not None]
    assert runs and len(times) == len(runs) and all(WINDOW[0] <= t < WINDOW[1] + timedelta(minutes=1) for t in times)
    assert times == sorted(times)
