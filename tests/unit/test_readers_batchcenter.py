"""BatchCenterReader on SQLite (the contract: shared/legacy/batch_center.md), and the
documented flags in readers/batchcenter/flag.py."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.pool import StaticPool

from legacy_sim.seed import seed_batchcenter
from readers.batchcenter import BatchCenterReader
from readers.batchcenter.flag import pause_tasks, resume_tasks, set_business_enabled, set_migrated
from readers.errors import MissingTables
from readers.legacy_ddl import batch_center_metadata, create_legacy_schema
from readers.ports import LegacyReader
from readers.records import ExecStatus, MisfireRule, ScheduleKind, SourceSystem

UTC = timezone.utc
WINDOW = (datetime(2026, 12, 1, tzinfo=UTC), datetime(2026, 12, 2, tzinfo=UTC))
T0 = datetime(2026, 12, 2, 0, 0, tzinfo=UTC)  # = '2026-12-02 08:00:00' in Shanghai


@pytest.fixture
def engine() -> Iterator[Engine]:
    e = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(e, "batch-center")
    _insert(e, "bc_biz",
            {"biz_code": "sop", "biz_name": "SOP", "callback_base_url": "http://sop.svc:8080/bc/",
             "access_token": "s3cret-token", "enabled": 1},
            {"biz_code": "bare", "biz_name": None, "callback_base_url": None, "access_token": None,
             "enabled": 0})  # fmt: skip
    yield e
    e.dispose()


def _insert(engine: Engine, table: str, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(batch_center_metadata().tables[table].insert(), list(rows))


def _task(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": 1, "biz_code": "sop", "task_key": "k1", "task_name": "nightly", "task_type": 2,
        "cron_expr": "0 0 2 * * ?", "interval_sec": None, "fire_time": datetime(2026, 12, 2, 8, 0, 0),
        "end_time": None, "callback_url": "/cb/nightly", "http_method": "POST", "callback_timeout_ms": 2500,
        "payload": '{"page": 1}', "shard_total": 1, "shard_params": None, "priority": 3, "max_retry": 2,
        "misfire_policy": 2, "status": 0, "migrated": 0, "version": 7,
    }  # fmt: skip
    return row | over


def _one(engine: Engine, **over: Any) -> Any:
    _insert(engine, "bc_task", _task(**over))
    (defn,) = BatchCenterReader(engine).definitions()
    return defn


def _row(engine: Engine, task_id: int = 1) -> dict[str, Any]:
    with engine.connect() as conn:
        return dict(conn.execute(text("SELECT * FROM bc_task WHERE id = :i"), {"i": task_id}).mappings().one())


# -- businesses ---------------------------------------------------------------------------


def test_businesses_carry_enabled_base_url_and_a_token_kept_out_of_repr(engine: Engine) -> None:
    bare, sop = BatchCenterReader(engine).businesses()
    assert (sop.source, sop.biz_code, sop.name, sop.enabled) == (SourceSystem.BATCH_CENTER, "sop", "SOP", True)
    assert sop.callback_base_url == "http://sop.svc:8080/bc/" and sop.access_token == "s3cret-token"
    assert "s3cret" not in repr(sop)
    assert (bare.name, bare.enabled, bare.callback_base_url, bare.access_token) == ("bare", False, None, None)


def test_the_reader_is_a_legacy_reader_and_needs_the_three_tables() -> None:
    assert LegacyReader in BatchCenterReader.__mro__
    with pytest.raises(MissingTables, match="bc_biz, bc_task, bc_task_exec_log"):
        BatchCenterReader(create_engine("sqlite://", poolclass=StaticPool)).businesses()


# -- definitions --------------------------------------------------------------------------


def test_a_cron_task_reads_completely(engine: Engine) -> None:
    defn = _one(engine)
    assert defn.ok, defn.problems
    assert (defn.source_key, defn.biz_code, defn.name) == ("1", "sop", "nightly")
    assert (defn.schedule, defn.cron, defn.next_fire_at) == (ScheduleKind.CRON, "0 0 2 * * ?", T0)
    assert (defn.time_zone, defn.misfire, defn.enabled, defn.status) == (
        "Asia/Shanghai",
        MisfireRule.SKIP,
        True,
        "WAITING",
    )
    assert defn.handler == defn.callback_url == "http://sop.svc:8080/bc/cb/nightly"
    assert (defn.http_method, defn.callback_timeout_ms, defn.timeout_seconds) == ("POST", 2500, 3)
    assert (defn.params, defn.priority, defn.max_retry, defn.version, defn.migrated_flag) == (
        '{"page": 1}', 3, 2, 7, False
    )  # fmt: skip
    assert defn.raw["callback_url"] == "/cb/nightly" and defn.raw["fire_time"] == "2026-12-02 08:00:00"


def test_delay_is_once_at_its_fire_time(engine: Engine) -> None:
    defn = _one(engine, task_type=1, cron_expr=None, misfire_policy=1)
    assert defn.ok and (defn.schedule, defn.next_fire_at, defn.misfire) == (
        ScheduleKind.ONCE,
        T0,
        MisfireRule.FIRE_ONCE_NOW,
    )


def test_fixed_rate_is_anchored_at_fire_time_and_ends_at_end_time(engine: Engine) -> None:
    defn = _one(engine, task_type=3, cron_expr=None, interval_sec=900, end_time=datetime(2027, 1, 1, 8, 0))
    assert defn.ok and (defn.schedule, defn.interval_seconds, defn.next_fire_at) == (ScheduleKind.FIXED_RATE, 900, T0)
    assert defn.end_at == datetime(2027, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "enabled", "text_"),
    [(0, True, "WAITING"), (1, True, "RUNNING"), (2, False, "SUCCESS"), (3, False, "FAILED"),
     (4, False, "CANCELLED"), (5, False, "PAUSED")],
)  # fmt: skip
def test_status_decides_enabled_and_keeps_its_name(engine: Engine, status: int, enabled: bool, text_: str) -> None:
    defn = _one(engine, status=status)
    assert defn.ok and (defn.enabled, defn.status) == (enabled, text_)


def test_shard_params_override_shard_total(engine: Engine) -> None:
    defn = _one(engine, shard_total=9, shard_params='["a", {"page": 2}, 3]')
    assert defn.ok and defn.shard_total == 3 and defn.shard_params == ("a", '{"page":2}', "3")


def test_absolute_urls_and_get_are_kept(engine: Engine) -> None:
    defn = _one(engine, callback_url="https://other.svc/hook", http_method="get", payload=None)
    assert defn.ok and (defn.callback_url, defn.http_method, defn.params) == ("https://other.svc/hook", "GET", "")


@pytest.mark.parametrize(
    ("overrides", "field", "reason"),
    [
        ({"payload": '{"page": '}, "payload", "invalid JSON"),
        ({"payload": "[1, 2]"}, "payload", "not a JSON object: got list"),
        ({"payload": "null"}, "payload", "not a JSON object"),
        ({"payload": b'{"n": "\xff"}'}, "payload", "invalid UTF-8 at byte 7"),
        ({"payload": '{"a": "' + "x" * 70_000 + '"}'}, "payload", "too long"),
        ({"cron_expr": None}, "cron_expr", "empty"),
        ({"cron_expr": "x" * 129}, "cron_expr", "too long"),
        ({"task_type": 3, "cron_expr": None, "interval_sec": 0}, "interval_sec", "not positive"),
        ({"task_type": 3, "cron_expr": None, "interval_sec": None}, "interval_sec", "missing"),
        ({"task_type": 7}, "task_type", "unknown value 7"),
        ({"priority": 0}, "priority", "out of range: 0 (expected 1..9)"),
        ({"priority": 12}, "priority", "out of range"),
        ({"misfire_policy": 3}, "misfire_policy", "unknown value 3"),
        ({"status": 9}, "status", "unknown value 9"),
        ({"shard_params": '{"page": 1}'}, "shard_params", "not a JSON array: got dict"),
        ({"shard_params": "[]"}, "shard_params", "empty JSON array"),
        ({"shard_params": "[1,"}, "shard_params", "invalid JSON"),
        ({"shard_total": 0}, "shard_total", "out of range"),
        ({"max_retry": -1}, "max_retry", "out of range"),
        ({"callback_timeout_ms": 0}, "callback_timeout_ms", "out of range"),
        ({"http_method": "PUT"}, "http_method", "unknown value 'PUT'"),
        ({"callback_url": "  "}, "callback_url", "empty callback URL"),
        ({"callback_url": "ftp://x/y"}, "callback_url", "not an http(s) URL"),
        ({"biz_code": "bare", "callback_url": "/cb"}, "callback_url", "no callback_base_url"),
        ({"biz_code": "ghost"}, "biz_code", "unknown business 'ghost'"),
        ({"fire_time": datetime(2150, 1, 1)}, "fire_time", "out of range"),
        ({"fire_time": datetime(1969, 7, 20)}, "fire_time", "out of range"),
        ({"end_time": datetime(2150, 1, 1)}, "end_time", "out of range"),
        ({"migrated": 3}, "migrated", "out of range"),
    ],
)
def test_each_contract_violation_is_one_problem_with_field_and_reason(
    engine: Engine, overrides: dict[str, Any], field: str, reason: str
) -> None:
    defn = _one(engine, **overrides)
    assert [p.field for p in defn.problems] == [field]
    assert reason in defn.problems[0].reason
    assert defn.source_key == "1"


def test_a_null_fire_time_on_a_lax_database_is_a_problem(engine: Engine) -> None:
    with engine.begin() as conn:  # SQLite lets a hand-made table break NOT NULL: recreate it lax
        conn.execute(text("DROP TABLE bc_task"))
        conn.execute(text("CREATE TABLE bc_task (id INTEGER PRIMARY KEY, biz_code TEXT, task_key TEXT, task_name TEXT,"
                          " task_type INT, cron_expr TEXT, interval_sec INT, fire_time DATETIME, end_time DATETIME,"
                          " callback_url TEXT, http_method TEXT, callback_timeout_ms INT, payload TEXT,"
                          " shard_total INT, shard_params TEXT, priority INT, max_retry INT, misfire_policy INT,"
                          " status INT, migrated INT, version INT)"))  # fmt: skip
        conn.execute(text("INSERT INTO bc_task VALUES (1, 'sop', 'k', '', 1, NULL, NULL, NULL, NULL, '/cb', 'POST',"
                          " 30000, NULL, 1, NULL, 5, 'two', 1, 0, 0, 0)"))  # fmt: skip
    (defn,) = BatchCenterReader(engine).definitions()
    assert [(p.field, p.reason.split(":")[0]) for p in defn.problems] == [
        ("fire_time", "missing"), ("max_retry", "not an integer")
    ]  # fmt: skip


def test_seeded_bad_rows_are_exactly_the_rows_with_problems() -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "batch-center")
    summary = seed_batchcenter(engine, businesses=4, tasks_per_business=12, malformed_crons=2)
    defs = list(BatchCenterReader(engine, batch_size=5).definitions())
    assert len(defs) == summary.total == 48
    assert {d.source_key: [p.field for p in d.problems] for d in defs if d.problems} == {
        k: [f] for k, f in summary.bad_keys.items()
    }
    by_key = {d.source_key: d for d in defs}
    assert all(by_key[k].ok and by_key[k].cron for k in summary.malformed_cron_keys)
    kinds = {d.schedule for d in defs if d.ok}
    assert kinds == {ScheduleKind.ONCE, ScheduleKind.CRON, ScheduleKind.FIXED_RATE}
    assert any(d.shard_params for d in defs) and any(d.shard_total > 1 and not d.shard_params for d in defs)
    assert {b.biz_code: b.enabled for b in BatchCenterReader(engine).businesses()}["report"] is False  # the last of 4


def test_definitions_filter_by_business_page_by_keyset_and_read_one(engine: Engine) -> None:
    _insert(engine, "bc_task", *(_task(id=i, task_key=f"k{i}", biz_code="sop" if i % 2 else "bare",
                                       callback_url="http://x/cb") for i in range(1, 24)))  # fmt: skip
    pages: list[Any] = []

    @event.listens_for(engine, "before_cursor_execute")
    def capture(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if "FROM bc_task" in statement and "LIMIT" in statement:
            pages.append(params)

    reader = BatchCenterReader(engine, batch_size=4)
    assert [d.source_key for d in reader.definitions(["sop"])] == [str(i) for i in range(1, 24, 2)]
    assert [p[0] for p in pages] == [-1, 7, 15, 23]  # keyset on id; the third page of 4 ends at 23
    assert len(list(reader.definitions())) == 23 and list(reader.definitions([])) == []
    assert reader.definition("4").biz_code == "bare"  # type: ignore[union-attr]
    assert reader.definition("99") is None and reader.definition("x") is None


# -- executions ---------------------------------------------------------------------------


def _exec(**over: Any) -> dict[str, Any]:
    row: dict[str, Any] = {
        "task_id": 1, "biz_code": "sop", "shard_index": 0, "attempt": 0,
        "scheduled_time": datetime(2026, 12, 2, 8, 0, 0), "start_time": datetime(2026, 12, 2, 8, 0, 0, 120_000),
        "end_time": datetime(2026, 12, 2, 8, 0, 1, 500_000), "status": 1, "http_status": 200,
        "worker_host": "w1", "error_msg": None,
    }  # fmt: skip
    return row | over


def test_an_exec_log_row_reads_with_millisecond_utc_times(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(shard_params='["a","b","c"]'))
    _insert(
        engine, "bc_task_exec_log", _exec(shard_index=2, attempt=1, start_time=datetime(2026, 12, 2, 8, 0, 0, 120_999))
    )
    (ex,) = BatchCenterReader(engine).executions("sop", *WINDOW_2)
    assert (ex.source, ex.biz_code, ex.source_key, ex.log_id) == (SourceSystem.BATCH_CENTER, "sop", "1", 1)
    assert ex.scheduled_at == T0
    assert ex.triggered_at == datetime(2026, 12, 2, 0, 0, 0, 120_000, tzinfo=UTC)  # DATETIME(3)
    assert ex.finished_at == datetime(2026, 12, 2, 0, 0, 1, 500_000, tzinfo=UTC)
    assert (ex.status, ex.shard_index, ex.shard_total, ex.attempt, ex.message) == (
        ExecStatus.SUCCESS,
        2,
        3,
        1,
        "http 200",
    )


WINDOW_2 = (datetime(2026, 12, 1, 23, tzinfo=UTC), datetime(2026, 12, 2, 1, tzinfo=UTC))


@pytest.mark.parametrize(
    ("over", "status"),
    [
        ({"status": 0, "end_time": None}, ExecStatus.RUNNING),
        ({"status": 1}, ExecStatus.SUCCESS),
        ({"status": 2, "http_status": 500, "error_msg": "boom"}, ExecStatus.FAIL),
        ({"status": 3, "http_status": None}, ExecStatus.TIMEOUT),
        ({"start_time": None, "end_time": None, "status": 0}, ExecStatus.NOT_DISPATCHED),
        ({"start_time": None, "end_time": None, "status": 2}, ExecStatus.NOT_DISPATCHED),
        ({"status": 7}, ExecStatus.FAIL),
    ],
)
def test_exec_status_codes_map(engine: Engine, over: dict[str, Any], status: ExecStatus) -> None:
    _insert(engine, "bc_task", _task())
    _insert(engine, "bc_task_exec_log", _exec(**over))
    (ex,) = BatchCenterReader(engine).executions("sop", *WINDOW_2)
    assert ex.status is status
    if over.get("error_msg"):
        assert ex.message == "http 500; boom"
    if over.get("status") == 7:
        assert ex.message.startswith("unknown status 7")


def test_the_exec_window_is_half_open_ordered_and_pages_through_equal_times(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(), _task(id=2, task_key="k2", biz_code="bare", callback_url="http://x/"))
    at = datetime(2026, 12, 2, 8, 0, 0)
    _insert(engine, "bc_task_exec_log",
            *[_exec(shard_index=i) for i in range(7)],
            _exec(scheduled_time=datetime(2026, 12, 2, 7, 0, 0)),  # == since: in
            _exec(scheduled_time=datetime(2026, 12, 2, 9, 0, 0)),  # == until: out
            _exec(scheduled_time=datetime(2026, 12, 2, 7, 59, 59, 999_000)),
            _exec(task_id=2, biz_code="bare", scheduled_time=at))  # fmt: skip
    rows = list(BatchCenterReader(engine, batch_size=2).executions("sop", *WINDOW_2))
    assert [r.log_id for r in rows] == [8, 10, *range(1, 8)]
    assert [r.scheduled_at for r in rows] == sorted(r.scheduled_at for r in rows)  # type: ignore[type-var]


def test_seeded_exec_logs_are_all_read_per_business() -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "batch-center")
    summary = seed_batchcenter(engine, businesses=3, tasks_per_business=10, log_window=WINDOW, fires_per_task=4)
    reader = BatchCenterReader(engine, batch_size=7)
    counts = {b: sum(1 for _ in reader.executions(b, *WINDOW)) for b in summary.biz_codes}
    assert counts == {b: summary.executions_by_business.get(b, 0) for b in summary.biz_codes}
    assert sum(counts.values()) == summary.executions > 0


# -- the documented flags -----------------------------------------------------------------


def _writes(engine: Engine) -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []

    @event.listens_for(engine, "before_cursor_execute")
    def capture(conn: Any, cursor: Any, statement: str, params: Any, context: Any, executemany: bool) -> None:
        if statement.lstrip().upper().startswith(("UPDATE", "INSERT", "DELETE")):
            out.append((" ".join(statement.split()), params))

    return out


def test_set_migrated_writes_only_migrated_and_version_with_bound_parameters(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(), _task(id=2, task_key="k2", migrated=1))
    before = _row(engine)
    writes = _writes(engine)
    outcome = set_migrated(engine, [1, 2, 404], True)
    assert (outcome.changed, outcome.unchanged, outcome.missing, outcome.conflicts) == ((1,), (2,), (404,), ())
    after = _row(engine)
    assert {k for k in after if after[k] != before[k]} <= {"migrated", "version", "update_time"}
    assert (after["migrated"], after["version"]) == (1, before["version"] + 1)
    # one statement, bound parameters only (no task id or version in the SQL text)
    (sql, params), *rest = writes
    assert sql.startswith("UPDATE bc_task SET") and "migrated=?" in sql and "version=(bc_task.version + ?)" in sql
    assert "WHERE bc_task.id = ? AND bc_task.version = ?" in sql
    assert all(s.startswith("UPDATE bc_task SET update_time") for s, _ in rest)  # SQLite's ON UPDATE trigger body
    assert [p for p in params] == [1, 1, 1, 7]


def test_set_migrated_twice_writes_nothing_the_second_time(engine: Engine) -> None:
    _insert(engine, "bc_task", _task())
    set_migrated(engine, [1], True)
    version = _row(engine)["version"]
    assert set_migrated(engine, [1], True).unchanged == (1,)
    assert _row(engine)["version"] == version
    assert set_migrated(engine, [1], False).changed == (1,) and _row(engine)["migrated"] == 0


def test_a_stale_expected_version_is_a_conflict_and_writes_nothing(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(version=7))
    assert set_migrated(engine, {1: 6}, True).conflicts == (1,)
    assert _row(engine)["migrated"] == 0
    assert set_migrated(engine, {1: 7}, True).changed == (1,)


def test_a_lost_race_is_retried_from_a_fresh_read(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(version=7))
    raced: list[int] = []

    @event.listens_for(engine, "before_cursor_execute")
    def batch_center_wins_once(conn: Any, cursor: Any, statement: str, params: Any, context: Any, em: bool) -> None:
        if statement.startswith("UPDATE bc_task SET migrated") and not raced:
            raced.append(1)
            cursor.execute("UPDATE bc_task SET version = version + 1, fire_time = fire_time WHERE id = 1")

    outcome = set_migrated(engine, [1], True)
    assert outcome.changed == (1,) and raced
    assert (_row(engine)["migrated"], _row(engine)["version"]) == (1, 9)


def test_pause_and_resume_are_version_checked_and_state_guarded(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(id=1), _task(id=2, task_key="k2", status=1), _task(id=3, task_key="k3", status=2))
    outcome = pause_tasks(engine, [1, 2, 3])
    assert (outcome.changed, outcome.refused) == ((1,), (2, 3))
    assert (_row(engine)["status"], _row(engine)["version"]) == (5, 8)
    assert pause_tasks(engine, [1]).unchanged == (1,)
    # resume with the next fire time (aware), stored as Shanghai wall time
    next_at = datetime(2026, 12, 3, 1, 30, 15, 999_000, tzinfo=UTC)
    outcome = resume_tasks(engine, {1: next_at, 2: next_at})
    assert (outcome.changed, outcome.refused) == ((1,), (2,))
    row = _row(engine)
    assert (row["status"], row["fire_time"], row["version"]) == (0, "2026-12-03 09:30:15", 9)
    assert resume_tasks(engine, {1: next_at}).unchanged == (1,)
    assert resume_tasks(engine, {1: next_at}, expected_versions={1: 3}).conflicts == (1,)


def test_the_business_switch_flips_bc_biz_enabled_only(engine: Engine) -> None:
    assert set_business_enabled(engine, ["sop", "bare", "ghost"], False) == ("sop",)
    assert [b.enabled for b in BatchCenterReader(engine).businesses()] == [False, False]
    assert set_business_enabled(engine, ["sop"], True) == ("sop",)


def test_flags_bump_update_time_through_the_on_update_emulation(engine: Engine) -> None:
    _insert(engine, "bc_task", _task(update_time=datetime(2000, 1, 1)))
    set_migrated(engine, [1], True)
    assert _row(engine)["update_time"] != "2000-01-01 00:00:00"
