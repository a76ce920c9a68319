"""The readers' MySQL fast path, and its one dialect decision (`fast`).

On a MySQL-compatible server (MariaDB, MySQL, TiDB through PyMySQL) the readers compute
content digests in SQL and read hot pages as the driver's plain tuples (`driver_rows`):
SQLAlchemy's result rows and their mappings cost about as much CPU per row as mapping
the row. Elsewhere (SQLite) they take the plain SQLAlchemy Core path, which gives the
same values. The readers may not import the scheduler core, so this side of the
readers/core boundary has its own module (the core's: scheduler_core.store.fastpath).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from pymysql.constants import FIELD_TYPE
from pymysql.converters import convert_datetime
from sqlalchemy import Connection, Engine

MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})
_DATETIME_TYPES = (FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP)


def fast(bind: Connection | Engine) -> bool:
    """Whether this connection or engine takes the fast path (a MySQL-compatible server)."""
    return bind.dialect.name in MYSQL_DIALECTS


def driver_rows(conn: Connection, sql: str, args: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The rows of one statement (`%s` placeholders for `args`) as dicts straight from
    the driver's tuples, on the connection's own PyMySQL connection (fast path only):
    the values are the ones a Core read gives (binary text as bytes, DATETIMEs as
    datetimes)."""
    dbapi = conn.connection.dbapi_connection
    cursor = dbapi.cursor()  # type: ignore[union-attr]
    with _fast_datetimes(dbapi):
        try:
            cursor.execute(sql, tuple(args))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()


def driver_tuples(conn: Connection, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    """`driver_rows` as plain tuples (pages of digests: no names needed)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, tuple(args))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def _datetime(value: str) -> Any:
    """PyMySQL's `convert_datetime`, the server's canonical text first: a job row has
    three DATETIMEs, and the driver's regular expression and int() calls for them cost
    more than the rest of the row's decoding. The same datetime for the same text; any
    other text (a zero date, an invalid one) goes to the driver's own converter."""
    if (len(value) == 19 or len(value) == 26) and value[13] == ":" and value[16] == ":":
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            pass
    return convert_datetime(value)


@contextmanager
def _fast_datetimes(dbapi: Any) -> Iterator[None]:
    """`_datetime` as the connection's DATETIME/TIMESTAMP decoder for one read of
    `driver_rows` only (the decoders are the connection's own, put back after the read;
    a connection whose decoders were customised is left alone)."""
    decoders = getattr(dbapi, "decoders", None)
    if not isinstance(decoders, dict) or any(decoders.get(t) is not convert_datetime for t in _DATETIME_TYPES):
        yield
        return
    for t in _DATETIME_TYPES:
        decoders[t] = _datetime
    try:
        yield
    finally:
        for t in _DATETIME_TYPES:
            decoders[t] = convert_datetime
