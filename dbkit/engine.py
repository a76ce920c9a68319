"""Engines for the store URLs: SQLite (the embedded default) and MySQL-compatible servers,
and a server engine's AUTOCOMMIT twin.

Secrets in URLs are never rendered: use `safe_url` (dbkit.redact) whenever a URL is shown
or logged.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, event
from sqlalchemy.engine import Engine, make_url
from sqlalchemy.engine.url import URL
from sqlalchemy.exc import DisconnectionError, OperationalError

from dbkit.capabilities import MYSQL_DIALECTS
from dbkit.errors import BadStoreUrl
from dbkit.redact import safe_url
from dbkit.translate import lost_in_cut_packet, translated

DEFAULT_SQLITE_URL = "sqlite:///switchyard.db"
# A pooled connection idle longer than this is pinged before use. SQLAlchemy's
# pool_pre_ping pings on every checkout: one extra round trip per store call, which cost
# the acquire/fire hot path 30-40% of its rate. A connection reused within the second
# was just working; one idle longer may have been cut (server restart, idle timeout).
PING_IF_IDLE_S = 1.0
# The server's "a transaction is open" bit in the status of every OK/EOF packet (MySQL
# protocol SERVER_STATUS_IN_TRANS; PyMySQL keeps the last one in `server_status`).
SERVER_STATUS_IN_TRANS = 1


def missing_sqlite_file(url: str | URL) -> Path | None:
    """The file a SQLite URL names when it does not exist; None for any other URL (a
    server's, an in-memory or a "file:" URI database, or one that cannot be parsed)."""
    try:
        parsed = make_url(url)
    except Exception:
        return None  # make_engine reports the bad URL in its own words
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") and parsed.query.get("uri") == "true":
        return None
    path = Path(database).expanduser()
    return None if path.exists() else path


@translated  # a bad URL or a missing driver: BadStoreUrl
def make_engine(url: str, *, pool_size: int = 8, must_exist: bool = False) -> Engine:
    """An engine for `url`. SQLite creates a missing file (and its directory) on connect:
    `must_exist` refuses one instead (BadStoreUrl naming it), for the callers that only
    read or change a store `db init` made, so a typo'd path leaves nothing behind."""
    parsed = make_url(url)
    if must_exist and (missing := missing_sqlite_file(parsed)) is not None:
        raise BadStoreUrl(f"no store at {missing}", "the file does not exist (`switchyard db init` creates one)")
    try:
        return _engine(parsed, pool_size)
    except ModuleNotFoundError as exc:
        # SQLAlchemy's default MySQL driver is mysqlclient (MySQLdb), which is not a dependency
        if parsed.get_backend_name() in MYSQL_DIALECTS and parsed.get_driver_name() == "mysqldb":
            hint = f"use {parsed.get_backend_name()}+pymysql:// (the driver installed)"
            raise BadStoreUrl(f"no driver for {safe_url(parsed)}", hint) from None
        raise BadStoreUrl(f"no driver for {safe_url(parsed)}", str(exc)) from None


def _engine(parsed: URL, pool_size: int) -> Engine:
    kwargs: dict[str, Any] = {"future": True}
    if parsed.get_backend_name() == "sqlite":
        database = parsed.database or ""
        # A "file:" URI (uri=true) names an existing file, often read-only: creating its
        # "parent" would make a directory literally named "file:" in the working dir.
        is_uri = database.startswith("file:") and parsed.query.get("uri") == "true"
        if database and database != ":memory:" and not is_uri:
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # One file shared by threads: each thread gets its own connection from the pool.
        kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        engine = create_engine(parsed, **kwargs)

        @event.listens_for(engine, "connect")
        def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
            cur = dbapi_conn.cursor()
            # WAL lets readers run beside the one writer; NORMAL sync is durable across
            # process crashes (only an OS crash can lose the last commits).
            cur.execute("PRAGMA journal_mode=WAL")
            cur.execute("PRAGMA synchronous=NORMAL")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.close()

        return engine
    kwargs.update(
        pool_pre_ping=False,  # see _ping_if_idle
        pool_reset_on_return=None,  # see _rollback_if_open
        pool_recycle=1800,
        pool_size=pool_size,
        max_overflow=pool_size,
        # READ COMMITTED: the acquire loop's re-reads must see other transactions' commits,
        # and it keeps gap locks out of the hot path (TiDB supports it too).
        isolation_level="READ COMMITTED",
    )
    connect_args: dict[str, Any] = {"connect_timeout": 10}
    if parsed.get_backend_name() in MYSQL_DIALECTS:
        connect_args["charset"] = "utf8mb4"
    kwargs["connect_args"] = connect_args
    engine = create_engine(parsed, **kwargs)
    _ping_if_idle(engine)
    _rollback_if_open(engine)
    if parsed.get_backend_name() in MYSQL_DIALECTS:
        _cut_packets_are_lost_connections(engine)
    return engine


def autocommit_twin(engine: Engine) -> Engine:
    """A second pool on the same MySQL server whose connections commit each statement as
    it ends (AUTOCOMMIT), disposed with `engine`. For a statement that must not leave a
    lock held across a client round trip: a scheduler paused (SIGSTOP, a VM stall) between
    such a statement and its COMMIT would hold the lock for as long as it is paused."""
    pool_size = engine.pool.size() if hasattr(engine.pool, "size") else 8
    twin = create_engine(
        engine.url,
        future=True,
        pool_pre_ping=False,
        pool_reset_on_return=None,  # nothing to reset: no statement leaves a transaction open
        pool_recycle=1800,
        pool_size=pool_size,
        max_overflow=pool_size,
        isolation_level="AUTOCOMMIT",
        connect_args={
            "connect_timeout": 10,
            "charset": "utf8mb4",
            # as the store's own pool (see make_engine): no gap locks, each read sees the
            # commits before it
            "init_command": "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
        },
    )
    _ping_if_idle(twin)
    _cut_packets_are_lost_connections(twin)
    # Every statement has committed as it ended: the COMMIT or ROLLBACK that SQLAlchemy sends
    # when a Connection ends would be a round trip that does nothing (PyMySQL sends it anyway).
    twin.dialect.do_commit = _nothing_to_end  # type: ignore[method-assign,assignment]
    twin.dialect.do_rollback = _nothing_to_end  # type: ignore[method-assign,assignment]

    @event.listens_for(engine, "engine_disposed")
    def _dispose_twin(_engine: Engine) -> None:
        twin.dispose()

    return twin


def _nothing_to_end(_dbapi_connection: Any) -> None:
    return None


def _rollback_if_open(engine: Engine) -> None:
    """The pool's reset on return, without its round trip after a commit. SQLAlchemy
    rolls back every connection it gets back unless the Connection itself just rolled back,
    so each `engine.begin()` block cost COMMIT + ROLLBACK: a third of the fire path's round
    trips. Here the rollback is skipped only when the server's last answer on the connection
    said no transaction is open and no statement failed since (an error packet carries no
    status, so after one the last status is stale); otherwise it rolls back as before. A
    failing rollback raises, and the pool discards the connection, as it does by default."""

    @event.listens_for(engine, "handle_error")
    def _failed(ctx: Any) -> None:
        conn = ctx.connection
        if conn is None:
            return
        try:
            conn.info["status_stale"] = True
        except Exception:  # noqa: BLE001 - an invalidated connection is discarded anyway
            pass

    @event.listens_for(engine, "reset")
    def _reset(dbapi_conn: Any, record: Any, state: Any) -> None:
        if state.transaction_was_reset or not state.asyncio_safe:
            return  # SQLAlchemy has just rolled back, or may not touch the connection
        info = record.info if record is not None else {}
        stale = info.pop("status_stale", False)
        status = getattr(dbapi_conn, "server_status", None)
        if not stale and isinstance(status, int) and not status & SERVER_STATUS_IN_TRANS:
            return
        dbapi_conn.rollback()


def _cut_packets_are_lost_connections(engine: Engine) -> None:
    """A packet cut short is a lost connection (MySQL error 2013), as the server's restart
    that cut it is: the connection is discarded and the caller gets the OperationalError
    every store path already treats as "unreachable, try again". The chaos soak saw a
    `migrate stream` exit 1 on the bare AssertionError while MariaDB restarted."""

    @event.listens_for(engine, "handle_error")
    def _cut(ctx: Any) -> BaseException | None:
        lost = lost_in_cut_packet(ctx.original_exception)
        if lost is None:
            return None
        ctx.is_disconnect = True  # the pool discards it (and checks the others)
        return OperationalError(ctx.statement, ctx.parameters, lost, connection_invalidated=True)


def _ping_if_idle(engine: Engine) -> None:
    """Pessimistic disconnect handling for idle connections only: a failed ping raises
    DisconnectionError, on which the pool discards the connection and hands out a new one.
    A connection cut while in steady use fails its statement once; SQLAlchemy then
    invalidates the whole pool, so the caller's next attempt gets fresh connections."""

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        if record is not None:
            record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        since = record.info.get("idle_since")
        if since is not None and time.monotonic() - since < PING_IF_IDLE_S:
            return
        try:
            if hasattr(dbapi_conn, "ping"):
                dbapi_conn.ping(False)  # PyMySQL / mysqlclient: no silent reconnect
            else:  # pragma: no cover - other DBAPIs
                cur = dbapi_conn.cursor()
                cur.execute("SELECT 1")
                cur.close()
        except Exception as exc:  # noqa: BLE001 - any failure means: not usable
            raise DisconnectionError(f"stale pooled connection: {exc}") from exc
