"""Driver errors leave the SQL store as the port's errors (scheduler_core.errors), each
kind for what a caller decides on, with the driver's own line in the message and the
driver's exception kept as the cause. SQLite here; the same on the real MariaDB in
tests/integration/test_store_errors_mariadb.py."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from dbkit.translate import store_errors, translate
from scheduler_core.clock import SystemClock
from scheduler_core.errors import (
    BadStoreUrl,
    SchemaError,
    StoreAccessDenied,
    StoreConflict,
    StoreRefused,
    StoreUnavailable,
)
from scheduler_core.model import Job, JobCode, ShardingItem, TriggerId
from scheduler_core.ports import FenceStore, TriggerStore
from scheduler_core.store.admin import check_schema, init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard import exitcodes
from switchyard.cli import cli


def _store(tmp_path: Path) -> SqlTriggerStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    init_schema(engine, 2)
    return SqlTriggerStore(engine, SystemClock())


def test_a_store_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path}")  # a directory, not a database file
    with pytest.raises(StoreUnavailable) as caught:
        SqlTriggerStore(engine, SystemClock())
    assert str(caught.value) == "cannot reach the database: unable to open database file"
    assert isinstance(caught.value.__cause__, SQLAlchemyError)  # the driver's error stays the cause


def test_a_duplicate_key_written_through_the_store_is_a_conflict(tmp_path: Path) -> None:
    store = _store(tmp_path)
    store.put_job(Job(job_code=JobCode("j"), biz_code="b", handler="h", shard_total=2, explicit_items=True))
    twice = [
        ShardingItem(job_code=JobCode("j"), index=0, param="a"),
        ShardingItem(job_code=JobCode("j"), index=0, param="b"),
    ]
    with pytest.raises(StoreConflict) as caught:
        store.put_sharding_items(JobCode("j"), twice)
    assert "UNIQUE constraint failed: dus_sharding_item" in str(caught.value)
    assert store.sharding_page(JobCode("j"), 0, 10) == []  # the transaction rolled back


def test_a_dropped_table_is_a_schema_error_naming_it(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with store.engine.begin() as conn:
        conn.execute(text("DROP TABLE dus_job_trigger"))
    with pytest.raises(SchemaError) as caught:
        store.get_trigger(TriggerId(1))
    assert "no such table: dus_job_trigger" in str(caught.value)
    assert "switchyard db init" in str(caught.value)


def test_a_statement_the_database_cannot_run_is_refused(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with pytest.raises(StoreRefused) as caught, store_errors(), store.engine.connect() as conn:
        conn.execute(text("SELEKT 1"))
    assert str(caught.value).startswith('database error: near "SELEKT": syntax error')


def test_a_write_to_a_read_only_store_is_access_denied(tmp_path: Path) -> None:
    _store(tmp_path).engine.dispose()
    read_only = make_engine(f"sqlite:///file:{tmp_path / 'store.db'}?mode=ro&uri=true")
    store = SqlTriggerStore(read_only, SystemClock())  # reading works
    with pytest.raises(StoreAccessDenied) as caught:
        store.put_job(Job(job_code=JobCode("j"), biz_code="b", handler="h"))
    assert "readonly database" in str(caught.value)


def test_a_bad_url_or_a_missing_driver_is_a_bad_store_url() -> None:
    with pytest.raises(BadStoreUrl, match=r"^bad URL: Could not parse"):
        make_engine("notaurl")
    with pytest.raises(BadStoreUrl, match=r"^bad URL: Can't load plugin: sqlalchemy\.dialects:nosuchdb"):
        make_engine("nosuchdb://h/x")


def test_the_schema_functions_translate_too(tmp_path: Path) -> None:
    with pytest.raises(StoreUnavailable):
        check_schema(make_engine(f"sqlite:///{tmp_path}"))


def test_a_password_in_the_driver_message_is_masked() -> None:
    from sqlalchemy.exc import OperationalError

    exc = OperationalError("SELECT 1", {}, Exception("cannot connect to mysql://u:hunter2@h/x"))
    assert str(translate(exc)) == "cannot reach the database: cannot connect to mysql://u:***@h/x"


def test_every_port_method_of_the_sql_store_is_at_the_boundary() -> None:
    """A method added to the port later is translated too (the class decorator wraps all)."""
    names = {
        n
        for port in (TriggerStore, FenceStore)
        for n, v in vars(port).items()
        if inspect.isfunction(v) and not n.startswith("_")
    }
    assert len(names) > 20
    unwrapped = sorted(n for n in names if not hasattr(inspect.getattr_static(SqlTriggerStore, n), "__wrapped__"))
    assert unwrapped == []


def test_a_port_error_passes_the_boundary_unchanged(tmp_path: Path) -> None:
    with pytest.raises(SchemaError, match="has no schema"):  # raised inside, not re-translated
        SqlTriggerStore(make_engine(f"sqlite:///{tmp_path / 'empty.db'}"), SystemClock())


def test_the_cli_shows_the_port_error_as_one_line_with_its_exit_code(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["scheduler", "stats", "--url", f"sqlite:///{tmp_path}"])
    assert result.exit_code == exitcodes.UNREACHABLE, result.output
    assert "cannot reach the database: unable to open database file" in result.output
    assert "Traceback" not in result.output
