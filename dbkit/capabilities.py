"""What a database can do, decided once per engine: every question the code would ask of
the dialect's name is one named capability here.

The stores run on MySQL-compatible servers (MariaDB, MySQL, TiDB through PyMySQL) and on
SQLite (the embedded default); any other dialect gets the portable answers. A caller asks
`capabilities(bind).upsert`, never `bind.dialect.name in (...)`: the set of dialects that
can do a thing is written down once, beside the others, instead of at each use.
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, replace
from typing import Literal

from sqlalchemy.engine import Connection, Engine

from dbkit.translate import store_errors

# the SQLAlchemy dialect names of MySQL-compatible servers (TiDB speaks as "mysql")
MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})

Upsert = Literal["on_duplicate_key", "on_conflict", "portable"]


@dataclass(frozen=True)
class Capabilities:
    """One engine's answers. `dialect` is for messages only: decide on the fields."""

    dialect: str
    # MySQL's SQL: the legacy systems' own DDL files run as they are
    mysql_sql: bool
    # a binlog to follow a source's changes, and a consistent snapshot to start it at
    binlog: bool
    # the driver's plain tuples (PyMySQL): multi-row statements rendered here, rows read
    # as tuples, digests computed in SQL (dbkit.fastpath); elsewhere SQLAlchemy Core
    driver_fast_path: bool
    # "insert or update": ON DUPLICATE KEY UPDATE, ON CONFLICT DO UPDATE, or read-then-write
    upsert: Upsert
    # what makes an INSERT skip a duplicate key: INSERT <ignore_prefix> INTO ...
    ignore_prefix: str
    # UPDATE ... JOIN a derived table: per-row values for many rows in one statement
    joined_update: bool
    # a second pool whose connections commit each statement (`dbkit.engine.autocommit_twin`):
    # saves the COMMIT round trip of a one-statement transaction on a server
    autocommit_twin: bool
    # SELECT ... LOCK IN SHARE MODE (MariaDB/MySQL; TiDB refuses it, SQLite writes one at a
    # time and needs none)
    shared_lock_reads: bool
    # tables HASH-partitioned by the server (else a computed column slices them)
    server_partitions: bool
    # tables declare a character set (SQLite's text is Unicode whatever a table says)
    table_charset: bool
    # a text column refuses a value longer than its length or outside its character set
    # (SQLite stores any text in any column)
    enforces_text_columns: bool
    # DROP INDEX names its table (DROP INDEX i ON t)
    drop_index_on_table: bool
    # ON UPDATE CURRENT_TIMESTAMP has to be emulated by a trigger (SQLite)
    update_time_by_trigger: bool
    # DATETIME is stored as text in a format the table chooses (SQLite)
    datetime_as_text: bool
    # the database's own clock: epoch milliseconds, and UTC wall time (None: no known spelling)
    now_ms_sql: str | None
    utc_now_sql: str | None
    # the schema a table lives in when the URL names none ("main"), else the URL's database
    default_schema: str | None
    # a multi-row INSERT ... RETURNING gives the rows in the order of its parameters
    # (SQLAlchemy's answer for the engine's dialect and driver: known only with an engine)
    returning_in_order: bool = False


_MYSQL_NOW_MS = "CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) * 1000 AS SIGNED)"
_SQLITE_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


@functools.cache
def for_dialect(name: str) -> Capabilities:
    """The capabilities every server of dialect `name` shares (what needs no server:
    table definitions are built from this). `capabilities(bind)` is an engine's own."""
    if name in MYSQL_DIALECTS:
        return Capabilities(
            dialect=name,
            mysql_sql=True,
            binlog=True,
            driver_fast_path=True,
            upsert="on_duplicate_key",
            ignore_prefix="IGNORE",
            joined_update=True,
            autocommit_twin=True,
            shared_lock_reads=True,
            server_partitions=True,
            table_charset=True,
            enforces_text_columns=True,
            drop_index_on_table=True,
            update_time_by_trigger=False,
            datetime_as_text=False,
            now_ms_sql=_MYSQL_NOW_MS,
            utc_now_sql="SELECT UTC_TIMESTAMP(6)",
            default_schema=None,
        )
    sqlite = name == "sqlite"
    return Capabilities(
        dialect=name,
        mysql_sql=False,
        binlog=False,
        driver_fast_path=False,
        upsert="on_conflict" if sqlite else "portable",
        ignore_prefix="OR IGNORE" if sqlite else "IGNORE",
        joined_update=False,
        autocommit_twin=False,
        shared_lock_reads=False,
        server_partitions=False,
        table_charset=False,
        enforces_text_columns=False,
        drop_index_on_table=False,
        update_time_by_trigger=sqlite,
        datetime_as_text=sqlite,
        now_ms_sql=_SQLITE_NOW_MS if sqlite else None,
        utc_now_sql="SELECT strftime('%Y-%m-%d %H:%M:%f', 'now')" if sqlite else None,
        default_schema="main" if sqlite else None,
    )


def decide(name: str, server_version: str = "") -> Capabilities:
    """The capabilities of a server of dialect `name` that calls itself `server_version`
    (its `SELECT VERSION()`)."""
    caps = for_dialect(name)
    if caps.shared_lock_reads and "tidb" in server_version.lower():
        return replace(caps, shared_lock_reads=False)
    return caps


_decided: weakref.WeakKeyDictionary[Engine, Capabilities] = weakref.WeakKeyDictionary()


def capabilities(bind: Engine | Connection) -> Capabilities:
    """The capabilities of `bind`'s engine, decided on the first call for that engine and
    the same object after. A MySQL-compatible server's answers depend on what it calls
    itself, which its driver keeps from the handshake: read from `bind` when it is a
    connection (no statement, no second connection), else from a connection of the
    engine's own (a driver error then comes out as the database's error)."""
    engine = bind.engine
    caps = _decided.get(engine)
    if caps is None:
        caps = decide(engine.dialect.name, _server_version(bind))
        # asked after the server's version: a server dialect answers it once connected
        ordered = bool(getattr(engine.dialect, "insert_executemany_returning_sort_by_parameter_order", False))
        caps = replace(caps, returning_in_order=ordered)
        _decided[engine] = caps
    return caps


def _server_version(bind: Engine | Connection) -> str:
    if not for_dialect(bind.engine.dialect.name).mysql_sql:
        return ""  # only a MySQL-compatible server's answers depend on its version
    with store_errors():
        if isinstance(bind, Connection):
            return _handshake_version(bind)
        with bind.connect() as conn:
            return _handshake_version(conn)


def _handshake_version(conn: Connection) -> str:
    dbapi = conn.connection.dbapi_connection
    version = getattr(dbapi, "server_version", None)  # PyMySQL's, from the handshake
    if isinstance(version, bytes):
        version = version.decode("utf-8", "replace")
    if isinstance(version, str):
        return version
    return str(conn.exec_driver_sql("SELECT VERSION()").scalar() or "")  # another driver
