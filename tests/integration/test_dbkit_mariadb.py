"""The database kit on the real MariaDB: its capabilities are decided right there (each
one that says yes is used against the server, so a wrong answer fails a statement), and
connect() / begin() turn the server's errors into the database's. SQLite's in
tests/unit/test_dbkit.py."""

from __future__ import annotations

import socket
import time

import pytest
from sqlalchemy import Column, Integer, MetaData, String, Table, text
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.pool import QueuePool

from dbkit import Database, begin, capabilities, connect
from dbkit.capabilities import MYSQL_DIALECTS
from dbkit.errors import StoreConflict, StoreUnavailable
from dbkit.fastpath import fast, upsert
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb


def _idle(engine: Engine) -> int:
    """The connections the engine's pool holds open, idle."""
    pool = engine.pool
    assert isinstance(pool, QueuePool)
    return pool.checkedin()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_capabilities_of_the_real_mariadb_are_decided_once_and_hold() -> None:
    with mariadb_database("kit") as url:
        db = Database.open(url)
        try:
            caps = db.capabilities
            assert caps.dialect in MYSQL_DIALECTS
            assert caps.mysql_sql and caps.binlog and caps.driver_fast_path and fast(db.engine)
            assert caps.upsert == "on_duplicate_key" and caps.ignore_prefix == "IGNORE"
            assert caps.joined_update and caps.autocommit_twin and caps.server_partitions
            assert caps.table_charset and caps.enforces_text_columns and caps.drop_index_on_table
            assert caps.shared_lock_reads, "MariaDB has LOCK IN SHARE MODE (only TiDB refuses it)"
            assert not caps.update_time_by_trigger and not caps.datetime_as_text and caps.default_schema is None
            # asked of SQLAlchemy once the server is known (MariaDB 10.5+ has INSERT ... RETURNING)
            assert caps.returning_in_order == db.engine.dialect.insert_executemany_returning_sort_by_parameter_order
            with db.connect() as conn:
                assert capabilities(conn) is caps
                assert "mariadb" in str(conn.exec_driver_sql("SELECT VERSION()").scalar()).lower()

            t = Table("kit_t", MetaData(), Column("k", Integer, primary_key=True), Column("v", String(20)))
            t.metadata.create_all(db.engine)
            assert caps.now_ms_sql is not None and caps.utc_now_sql is not None
            with db.begin() as conn:
                # each capability's statement, as the stores send it
                upsert(conn, t, [{"k": 1, "v": "one"}, {"k": 2, "v": "two"}], ["k"], ["v"])
                upsert(conn, t, [{"k": 1, "v": "uno"}], ["k"], ["v"])
                conn.exec_driver_sql(f"INSERT {caps.ignore_prefix} INTO kit_t (k, v) VALUES (2, 'dup')")
                locked = conn.exec_driver_sql("SELECT v FROM kit_t WHERE k = 1 LOCK IN SHARE MODE").scalar_one()
                now_ms = conn.execute(text(f"SELECT {caps.now_ms_sql}")).scalar_one()
                conn.execute(text(caps.utc_now_sql)).scalar_one()
            assert locked == "uno"
            assert abs(int(now_ms) - time.time() * 1000) < 60_000
            with db.connect() as conn:
                assert conn.exec_driver_sql("SELECT k, v FROM kit_t ORDER BY k").all() == [(1, "uno"), (2, "two")]
            # the AUTOCOMMIT twin is its own pool, closed with the database
            assert db.autocommit is not db.engine
            with connect(db.autocommit) as conn:
                conn.exec_driver_sql("INSERT INTO kit_t (k, v) VALUES (3, 'three')")
            assert _idle(db.autocommit) >= 1
        finally:
            db.close()
        assert _idle(db.autocommit) == 0 and _idle(db.engine) == 0


def test_capabilities_asked_on_a_connection_neither_begin_a_transaction_nor_take_a_second_connection() -> None:
    with mariadb_database("kit") as url:
        db = Database.open(url)
        try:
            with db.connect() as conn:
                caps = capabilities(conn)
                assert not conn.in_transaction()
                pool = db.engine.pool
                assert isinstance(pool, QueuePool) and pool.checkedout() == 1
            assert caps.shared_lock_reads and capabilities(db.engine) is caps
        finally:
            db.close()


def test_the_real_servers_errors_come_out_of_connect_and_begin_as_ours() -> None:
    with mariadb_database("kit") as url:
        wrong = make_url(url).set(port=_free_port()).render_as_string(hide_password=False)
        nowhere = Database.open(wrong)
        for opening in (connect, begin):
            with pytest.raises(StoreUnavailable) as down, opening(nowhere.engine):
                pytest.fail("the block ran without a connection")
            assert "(2003" in str(down.value) and isinstance(down.value.__cause__, OperationalError)
        db = Database.open(url)
        try:
            with db.begin() as conn:
                conn.exec_driver_sql("CREATE TABLE kit_u (k INT PRIMARY KEY)")
                conn.exec_driver_sql("INSERT INTO kit_u VALUES (1)")
            with pytest.raises(StoreConflict) as dup, db.begin() as conn:
                conn.exec_driver_sql("INSERT INTO kit_u VALUES (2)")
                conn.exec_driver_sql("INSERT INTO kit_u VALUES (1)")
            assert "(1062" in str(dup.value) and isinstance(dup.value.__cause__, IntegrityError)
            with db.connect() as conn:
                assert conn.exec_driver_sql("SELECT k FROM kit_u").scalars().all() == [1]
        finally:
            db.close()
