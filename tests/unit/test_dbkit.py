"""The database kit on SQLite: capabilities decided once per engine without a connection,
and connect() / begin() that turn the driver's errors into the database's (a database that
cannot be opened: StoreUnavailable; a duplicate key: StoreConflict), at the connect and
inside the block, with the driver's error as the cause. The real MariaDB's in
tests/integration/test_dbkit_mariadb.py."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import QueuePool

from dbkit import Capabilities, Database, begin, capabilities, connect
from dbkit.capabilities import decide, for_dialect
from dbkit.errors import BadStoreUrl, StoreConflict, StoreError, StoreUnavailable
from dbkit.redact import redact, safe_url
from dbkit.translate import driver_message


def _idle(engine: Engine) -> int:
    """The connections the engine's pool holds open, idle."""
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedin()


def _engine(tmp_path: Path) -> Engine:
    engine = create_engine(f"sqlite:///{tmp_path / 'kit.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY, v TEXT NOT NULL)"))
    return engine


def test_sqlite_capabilities_are_decided_once_per_engine_without_a_connection(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'fresh.db'}")
    caps = capabilities(engine)
    assert _idle(engine) == 0, "deciding SQLite's capabilities opened a connection"
    assert caps.dialect == "sqlite"
    assert not caps.driver_fast_path and not caps.mysql_sql and not caps.binlog
    assert caps.upsert == "on_conflict"
    assert caps.ignore_prefix == "OR IGNORE"
    assert not caps.joined_update and not caps.autocommit_twin and not caps.shared_lock_reads
    assert not caps.server_partitions and not caps.table_charset and not caps.enforces_text_columns
    assert not caps.drop_index_on_table
    assert caps.update_time_by_trigger and caps.datetime_as_text
    assert caps.default_schema == "main"
    assert caps.returning_in_order == engine.dialect.insert_executemany_returning_sort_by_parameter_order
    # the same object for the engine and for each of its connections
    assert capabilities(engine) is caps
    with engine.connect() as conn:
        assert capabilities(conn) is caps
    # another engine decides its own
    assert capabilities(create_engine("sqlite://")) is not caps
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.upsert = "portable"  # type: ignore[misc]


def test_the_clock_capabilities_run_on_sqlite(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    caps = capabilities(engine)
    assert caps.now_ms_sql is not None and caps.utc_now_sql is not None
    with connect(engine) as conn:
        now_ms = conn.execute(text(f"SELECT {caps.now_ms_sql}")).scalar_one()
        utc = conn.execute(text(caps.utc_now_sql)).scalar_one()
    assert isinstance(now_ms, int) and now_ms > 1_700_000_000_000
    assert str(utc).startswith("20")


def test_a_server_family_and_a_dialect_it_does_not_know() -> None:
    mariadb = decide("mariadb", "10.11.6-MariaDB-log")
    assert mariadb.driver_fast_path and mariadb.upsert == "on_duplicate_key" and mariadb.ignore_prefix == "IGNORE"
    assert mariadb.shared_lock_reads and mariadb.server_partitions and mariadb.table_charset
    assert mariadb.default_schema is None and not mariadb.datetime_as_text
    # TiDB speaks as "mysql" and refuses LOCK IN SHARE MODE
    tidb = decide("mysql", "8.0.11-TiDB-v7.5.1")
    assert not tidb.shared_lock_reads and tidb.driver_fast_path
    assert decide("mysql", "8.0.36").shared_lock_reads
    other = for_dialect("postgresql")
    assert other.upsert == "portable" and not other.driver_fast_path and other.now_ms_sql is None


def test_connect_and_begin_turn_a_database_that_cannot_be_opened_into_unavailable(tmp_path: Path) -> None:
    # a file in a directory that does not exist: sqlite3 cannot open it (SQLITE_CANTOPEN)
    engine = create_engine(f"sqlite:///{tmp_path / 'missing' / 'kit.db'}")
    for opening in (connect, begin):
        with pytest.raises(StoreUnavailable) as caught, opening(engine):
            pytest.fail("the block ran without a connection")
        assert "unable to open database file" in str(caught.value)
        assert isinstance(caught.value.__cause__, OperationalError)


def test_a_duplicate_key_is_a_conflict_inside_begin_and_the_transaction_is_rolled_back(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with begin(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (1, 'one')"))
    with pytest.raises(StoreConflict) as caught, begin(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (2, 'two')"))
        conn.execute(text("INSERT INTO t VALUES (1, 'again')"))
    assert "UNIQUE constraint failed: t.k" in str(caught.value)
    assert isinstance(caught.value.__cause__, IntegrityError)
    with connect(engine) as conn:
        assert conn.execute(text("SELECT k FROM t ORDER BY k")).scalars().all() == [1]


def test_a_duplicate_key_is_a_conflict_inside_connect(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with connect(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (1, 'one')"))
        conn.commit()
    with pytest.raises(StoreConflict), connect(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (1, 'again')"))


def test_other_errors_pass_unchanged_and_still_roll_back(tmp_path: Path) -> None:
    engine = _engine(tmp_path)
    with pytest.raises(KeyError), begin(engine) as conn:
        conn.execute(text("INSERT INTO t VALUES (3, 'three')"))
        raise KeyError("not the database's")
    with connect(engine) as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM t")).scalar_one() == 0


def test_a_database_closes_its_pool_and_opens_it_again(tmp_path: Path) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'db' / 'kit.db'}")
    assert isinstance(db.capabilities, Capabilities)
    assert db.autocommit is db.engine  # SQLite has no AUTOCOMMIT twin
    with db.begin() as conn:
        conn.execute(text("CREATE TABLE t (k INTEGER PRIMARY KEY)"))
    assert _idle(db.engine) == 1
    db.close()
    assert _idle(db.engine) == 0
    with db.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM t")).scalar_one() == 0


def test_open_refuses_a_missing_sqlite_file_when_it_must_exist(tmp_path: Path) -> None:
    with pytest.raises(BadStoreUrl, match="no store at"):
        Database.open(f"sqlite:///{tmp_path / 'nowhere.db'}", must_exist=True)
    assert not (tmp_path / "nowhere.db").exists()
    with pytest.raises(StoreError):
        Database.open("notaurl")


def test_one_redaction_for_urls_messages_and_driver_lines() -> None:
    url = "mysql+pymysql://app:s3cret@127.0.0.1:3306/sy"
    assert safe_url(url) == "mysql+pymysql://app:***@127.0.0.1:3306/sy"
    assert safe_url("::not a url") == "<unparsable url>"
    assert (
        redact(f"cannot reach {url}; token=abc123")
        == "cannot reach mysql+pymysql://app:***@127.0.0.1:3306/sy; token=***"
    )
    assert redact("mysql://app:s3/cret@127.0.0.1/sy") == "mysql://app:***@127.0.0.1/sy"
    assert redact('(1045, "Access denied (using password: YES)")') == '(1045, "Access denied (using password: YES)")'
    said = OperationalError("SELECT 1", {}, Exception(f"(2003, 'no route to {url}')\nsecond line"))
    assert driver_message(said) == "(2003, 'no route to mysql+pymysql://app:***@127.0.0.1:3306/sy')"
