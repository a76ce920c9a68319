"""Pooled connections on the real MariaDB: pinged only when idle, replaced when cut."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from dbkit import engine as engine_mod
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb


def _kill(url: str, connection_id: int) -> None:
    killer = make_engine(url)
    try:
        with killer.connect() as conn:
            conn.execute(text(f"KILL CONNECTION {int(connection_id)}"))
    finally:
        killer.dispose()


def _connection_id(engine: object) -> int:
    with engine.connect() as conn:  # type: ignore[attr-defined]
        return int(conn.execute(text("SELECT CONNECTION_ID()")).scalar_one())


def test_an_idle_connection_cut_by_the_server_is_replaced_without_an_error() -> None:
    with mariadb_database("ping") as url:
        engine = make_engine(url, pool_size=1)
        try:
            first = _connection_id(engine)
            _kill(url, first)
            time.sleep(engine_mod.PING_IF_IDLE_S + 0.2)
            assert _connection_id(engine) != first  # the ping found it dead: a new connection
        finally:
            engine.dispose()


def test_a_connection_cut_while_busy_fails_once_then_the_pool_recovers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(engine_mod, "PING_IF_IDLE_S", 3600.0)  # never idle long enough to be pinged
    with mariadb_database("ping") as url:
        engine = make_engine(url, pool_size=1)
        try:
            first = _connection_id(engine)
            _kill(url, first)
            with pytest.raises(OperationalError), engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            assert _connection_id(engine) != first  # the disconnect invalidated the pool
        finally:
            engine.dispose()


def test_connections_in_steady_use_are_not_pinged() -> None:
    with mariadb_database("ping") as url:
        engine = make_engine(url, pool_size=1)
        pings = 0
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            raw = engine.pool._pool.queue[0].dbapi_connection  # type: ignore[attr-defined]
            original = raw.ping

            def counting(*args: object) -> None:
                nonlocal pings
                pings += 1
                original(*args)

            raw.ping = counting
            for _ in range(50):
                with engine.connect() as conn:
                    conn.execute(text("SELECT 1"))
            assert pings == 0
            time.sleep(engine_mod.PING_IF_IDLE_S + 0.2)
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
            assert pings == 1
        finally:
            engine.dispose()


def test_a_packet_cut_short_is_a_lost_connection_that_the_pool_discards() -> None:
    """PyMySQL asserts a packet's length; a server restarting mid-packet makes it raise a
    bare AssertionError, which crashed a `migrate stream` in the chaos soak."""
    from dbkit.errors import StoreUnavailable
    from dbkit.translate import translate

    with mariadb_database("ping") as url:
        engine = make_engine(url, pool_size=1)
        try:
            first = _connection_id(engine)
            with engine.connect() as conn:
                raw = conn.connection.dbapi_connection

                def cut(*_a: object, **_k: object) -> None:
                    raise AssertionError("Result length not requested length:\nExpected=4.  Actual=1.")

                raw.query = cut  # type: ignore[union-attr]
                with pytest.raises(OperationalError) as caught:
                    conn.execute(text("SELECT 1"))
                assert caught.value.orig.args[0] == 2013  # type: ignore[union-attr]
                assert caught.value.connection_invalidated
                assert isinstance(translate(caught.value), StoreUnavailable)
            assert _connection_id(engine) != first  # the cut connection was discarded
        finally:
            engine.dispose()
