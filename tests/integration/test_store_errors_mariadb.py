"""Driver errors of the real MariaDB leave the SQL store as the port's errors: a wrong port
or a cut connection is StoreUnavailable, a wrong password StoreAccessDenied, a duplicate
key StoreConflict, a dropped table SchemaError; each with the server's own line (password
masked) and the driver's error as the cause. SQLite's in tests/unit/test_store_errors.py."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from dbkit import engine as engine_mod
from dbkit.translate import store_errors
from scheduler_core.clock import SystemClock
from scheduler_core.errors import SchemaError, StoreAccessDenied, StoreConflict, StoreUnavailable
from scheduler_core.model import Job, JobCode, ShardingItem, TriggerId
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard import exitcodes
from switchyard.cli import cli
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb


def _free_port() -> int:
    """A port nothing listens on (bound, then released: nothing else takes it at once)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_real_servers_url_on_a_wrong_port_is_unavailable_with_the_servers_line() -> None:
    with mariadb_database("err") as url:
        parsed = make_url(url)
        wrong = parsed.set(port=_free_port()).render_as_string(hide_password=False)
        with pytest.raises(StoreUnavailable) as caught:
            SqlTriggerStore(make_engine(wrong), SystemClock())
        message = str(caught.value)
        assert message.startswith("cannot reach the database: (2003, \"Can't connect to MySQL server on '127.0.0.1'")
        assert parsed.password and parsed.password not in message
        assert isinstance(caught.value.__cause__, SQLAlchemyError)
        result = CliRunner().invoke(cli, ["scheduler", "stats", "--url", wrong])
        assert result.exit_code == exitcodes.UNREACHABLE, result.output
        assert "Error: cannot reach the database: (2003" in result.output and "Traceback" not in result.output


def test_a_wrong_password_is_access_denied() -> None:
    with mariadb_database("err") as url:
        wrong = make_url(url).set(password="not-the-password").render_as_string(hide_password=False)
        with pytest.raises(StoreAccessDenied) as caught:
            SqlTriggerStore(make_engine(wrong), SystemClock())
        assert str(caught.value).startswith("access denied: (1045, ")
        assert "not-the-password" not in str(caught.value)


def test_a_connection_cut_while_held_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "PING_IF_IDLE_S", 3600.0)  # the held connection is used as is
    with mariadb_database("err") as url:
        engine = make_engine(url, pool_size=1)
        killer = make_engine(url)
        try:
            with pytest.raises(StoreUnavailable) as caught, store_errors(), engine.connect() as conn:
                cid = int(conn.execute(text("SELECT CONNECTION_ID()")).scalar_one())
                with killer.connect() as k:
                    k.execute(text(f"KILL CONNECTION {cid}"))
                conn.execute(text("SELECT 1"))
            assert str(caught.value).startswith("cannot reach the database: (")
        finally:
            killer.dispose()
            engine.dispose()


def test_a_duplicate_key_is_a_conflict_and_a_dropped_table_a_schema_error() -> None:
    with mariadb_database("err") as url:
        engine = make_engine(url)
        try:
            init_schema(engine, 2)
            store = SqlTriggerStore(engine, SystemClock())
            store.put_job(Job(job_code=JobCode("j"), biz_code="b", handler="h", shard_total=2, explicit_items=True))
            twice = [ShardingItem(job_code=JobCode("j"), index=0, param=p) for p in ("a", "b")]
            with pytest.raises(StoreConflict) as conflict:
                store.put_sharding_items(JobCode("j"), twice)
            assert str(conflict.value).startswith('the database refused the write: (1062, "Duplicate entry')
            with engine.begin() as conn:
                conn.execute(text("DROP TABLE dus_job_trigger"))
            with pytest.raises(SchemaError) as missing:
                store.get_trigger(TriggerId(1))
            assert "(1146, " in str(missing.value) and "dus_job_trigger" in str(missing.value)
        finally:
            engine.dispose()
