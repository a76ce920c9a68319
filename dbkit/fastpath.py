"""The MySQL fast path of bulk writes and reads, and its one decision (`fast`): the
stores' and the readers' in one place.

Set-based "insert or update" of many rows in one statement.

The migrator writes thousands of rows per transaction (a snapshot chunk, a group of
binlog transactions); a statement per row costs a round trip each, which is what bounded
the change stream's apply rate. MySQL/MariaDB get `INSERT ... ON DUPLICATE KEY UPDATE`
(PyMySQL sends the executemany as multi-row INSERTs), SQLite `INSERT ... ON CONFLICT DO
UPDATE`; any other dialect the portable read-then-update/insert.

`insert_rows` is the MySQL bulk path of the snapshot: rows as tuples, the multi-row
statements built here and sent on the transaction's own DBAPI connection. Through
SQLAlchemy Core each row costs its parameter processing and PyMySQL's per-value escape
chain (five calls a value); that was about half the CPU of a snapshot's writes.

Callers ask `fast(conn)` once and otherwise take the plain SQLAlchemy Core path
(`upsert`, Core inserts and selects): that path is the reference the fast path is tested
against (tests/unit/test_fastpath_reference.py). One renderer (`_render`) serves the rows
rendered ahead without a connection (`render_plain`) and those rendered on one
(`_renderer`); the escapes are PyMySQL's own (`escape_string`), not a copy of its table.

The readers compute content digests in SQL and read hot pages as the driver's plain
tuples (`driver_rows`, `driver_tuples`): SQLAlchemy's result rows and their mappings cost
about as much CPU per row as mapping the row. Elsewhere (SQLite) they take the plain
SQLAlchemy Core path, which gives the same values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any

import pymysql.converters
from pymysql.constants import FIELD_TYPE
from pymysql.converters import convert_datetime
from sqlalchemy import Table, and_, bindparam, insert, select, tuple_, update
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection, Engine

from dbkit.capabilities import capabilities

# one statement's size bound: PyMySQL's own executemany bound, far under the servers'
# default max_allowed_packet (16-64 MiB)
MAX_STATEMENT_BYTES = 1_000_000
_NO_BACKSLASH_ESCAPES = 512  # SERVER_STATUS_NO_BACKSLASH_ESCAPES (the MySQL protocol's status flag)


_DATETIME_TYPES = (FIELD_TYPE.DATETIME, FIELD_TYPE.TIMESTAMP)


def fast(bind: Connection | Engine) -> bool:
    """Whether this connection or engine takes the fast path (the engine's
    `driver_fast_path` capability). The one decision for every caller of this module (the
    migrator's writer and reads, the store's definitions, the readers)."""
    return capabilities(bind).driver_fast_path


def upsert(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    set_columns: Sequence[str],
    also: Mapping[str, Any] | None = None,
) -> None:
    """Insert `rows`; a row whose `keys` exist updates `set_columns` from the new row, plus
    `also` (column -> SQL expression over the existing row, e.g. version + 1; without bound
    parameters, which PyMySQL's multi-row executemany cannot carry after VALUES)."""
    if not rows:
        return
    extra = dict(also or {})
    style = capabilities(conn).upsert
    if style == "on_duplicate_key":  # the dialect's own upsert (the plain path too)
        stmt = mysql_insert(table)
        conn.execute(stmt.on_duplicate_key_update({**{c: stmt.inserted[c] for c in set_columns}, **extra}), rows)
        return
    if style == "on_conflict":
        lite = sqlite_insert(table)
        conn.execute(
            lite.on_conflict_do_update(
                index_elements=list(keys), set_={**{c: lite.excluded[c] for c in set_columns}, **extra}
            ),
            rows,
        )
        return
    _portable(conn, table, rows, keys, set_columns, extra)


def insert_rows(
    conn: Connection,
    table: Table,
    columns: Sequence[str],
    rows: Sequence[Sequence[Any]],
    update_columns: Sequence[str] = (),
    also_sql: Mapping[str, str] | None = None,
) -> int:
    """MySQL/MariaDB only: insert `rows` (tuples in `columns` order) in multi-row
    statements; with `update_columns` / `also_sql` (column -> raw SQL over the existing
    row) a duplicate key updates instead. Returns the server's affected-row count: 1 per
    inserted row, 2 per updated row that changed."""
    if not fast(conn):
        raise ValueError(f"insert_rows is the MySQL bulk path, not for {conn.dialect.name}")
    if not rows:
        return 0
    head, tail = _head_tail(conn, table, columns, update_columns, also_sql)
    dbapi = conn.connection.dbapi_connection
    cursor = dbapi.cursor()  # type: ignore[union-attr]
    try:
        render = _renderer(dbapi)
        if render is None:  # another driver: its own executemany does the escaping
            cursor.executemany(f"{head}({', '.join(['%s'] * len(columns))}){tail}", [tuple(r) for r in rows])
            return int(cursor.rowcount or 0)
        return _send(cursor, head, tail, (render(r) for r in rows))
    finally:
        cursor.close()


def driver_tuples(conn: Connection, sql: str, args: Sequence[Any]) -> list[tuple[Any, ...]]:
    """The rows of one statement (`%s` placeholders for `args`) sent on the transaction's
    own PyMySQL connection, as plain tuples: no Core rendering of long IN lists and no Row objects, which cost more
    than the reads themselves on the migration's hot paths (MySQL-compatible servers only)."""
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        cursor.execute(sql, tuple(args))
        return list(cursor.fetchall())
    finally:
        cursor.close()


def insert_rendered(
    conn: Connection,
    table: Table,
    columns: Sequence[str],
    literals: Sequence[str],
    update_columns: Sequence[str] = (),
    also_sql: Mapping[str, str] | None = None,
) -> int:
    """`insert_rows` for rows already rendered by `render_plain` (only on a connection
    for which `takes_rendered` is true)."""
    if not literals:
        return 0
    head, tail = _head_tail(conn, table, columns, update_columns, also_sql)
    cursor = conn.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
    try:
        return _send(cursor, head, tail, literals)
    finally:
        cursor.close()


def render_plain(row: Sequence[Any]) -> str | None:
    """One row as a SQL tuple literal, escaped as PyMySQL escapes on a server with
    backslash escapes (the default), without a connection: so a chunk's rows can be
    rendered while the previous chunk is written. None when a value is not an int, text
    or NULL (the writer renders that row through its connection)."""
    try:
        return _render(row, _ESCAPES, _not_plain)
    except _NotPlain:
        return None


class _NotPlain(Exception):
    pass


def _not_plain(_value: Any) -> str:
    raise _NotPlain


def _render(row: Sequence[Any], table: list[str], other: Callable[[Any], str]) -> str:
    """One row as a SQL tuple literal: ints, text and NULL inline (one expression a value,
    not PyMySQL's chain of calls), text escaped by `table`, anything else by `other`.
    Exactly int: a bool goes to `other` (the driver renders it 1/0 as well)."""
    return (
        "("
        + ",".join(
            [
                str(v)
                if (t := type(v)) is int
                else "'" + v.translate(table) + "'"
                if t is str
                else "NULL"
                if v is None
                else other(v)
                for v in row
            ]
        )
        + ")"
    )


def takes_rendered(conn: Connection) -> bool:
    """Whether `render_plain`'s literals are what this connection's renderer would give:
    PyMySQL on a MySQL-compatible server without NO_BACKSLASH_ESCAPES."""
    if not fast(conn):
        return False
    dbapi = conn.connection.dbapi_connection
    status = getattr(dbapi, "server_status", None)
    return getattr(dbapi, "escape", None) is not None and isinstance(status, int) and not status & _NO_BACKSLASH_ESCAPES


def _head_tail(
    conn: Connection,
    table: Table,
    columns: Sequence[str],
    update_columns: Sequence[str],
    also_sql: Mapping[str, str] | None,
) -> tuple[str, str]:
    q = conn.dialect.identifier_preparer.quote
    head = f"INSERT INTO {q(table.name)} ({', '.join(q(c) for c in columns)}) VALUES "
    sets = [f"{q(c)} = VALUES({q(c)})" for c in update_columns]
    sets += [f"{q(c)} = {expr}" for c, expr in (also_sql or {}).items()]
    return head, f" ON DUPLICATE KEY UPDATE {', '.join(sets)}" if sets else ""


def _send(cursor: Any, head: str, tail: str, literals: Any) -> int:
    affected = 0
    for sql in _statements(head, tail, literals):
        affected += int(cursor.execute(sql) or 0)
    return affected


def _statements(head: str, tail: str, tuples: Any) -> Any:
    """Multi-row statements of at most MAX_STATEMENT_BYTES characters (at least one row)."""
    parts: list[str] = []
    size = len(head) + len(tail)
    for t in tuples:
        if parts and size + len(t) + 1 > MAX_STATEMENT_BYTES:
            yield head + ",".join(parts) + tail
            parts, size = [], len(head) + len(tail)
        parts.append(t)
        size += len(t) + 1
    if parts:
        yield head + ",".join(parts) + tail


# A list by code point: str.translate indexes it (twice as fast as a dict); a code point
# past its end stays as it is. The escapes are what PyMySQL's `escape_string` gives each
# ASCII character (it escapes nothing else), asked of the driver, not copied from it.
_ESCAPES = [pymysql.converters.escape_string(chr(i)) for i in range(128)]
# NO_BACKSLASH_ESCAPES: a quote is doubled, nothing else
_QUOTE_ONLY = [("''" if i == ord("'") else chr(i)) for i in range(128)]


def _renderer(dbapi: Any) -> Callable[[Sequence[Any]], str] | None:
    """A function rendering one row as a SQL tuple literal, escaping as PyMySQL does
    (`Connection.escape`); None for a connection that is not PyMySQL's. Ints, text and
    NULL inline (one expression a value, not PyMySQL's chain of calls), the rest by the
    driver."""
    escape = getattr(dbapi, "escape", None)
    status = getattr(dbapi, "server_status", None)
    if escape is None or not isinstance(status, int):
        return None
    table = _QUOTE_ONLY if status & _NO_BACKSLASH_ESCAPES else _ESCAPES

    def render(row: Sequence[Any]) -> str:
        return _render(row, table, escape)

    return render


def _portable(
    conn: Connection,
    table: Table,
    rows: Sequence[Mapping[str, Any]],
    keys: Sequence[str],
    set_columns: Sequence[str],
    extra: Mapping[str, Any],
) -> None:
    cols = [table.c[k] for k in keys]
    have = {
        tuple(r)
        for r in conn.execute(select(*cols).where(tuple_(*cols).in_([tuple(r[k] for k in keys) for r in rows])))
    }
    old = [r for r in rows if tuple(r[k] for k in keys) in have]
    new = [r for r in rows if tuple(r[k] for k in keys) not in have]
    if old:
        stmt = (
            update(table)
            .where(and_(*(table.c[k] == bindparam(f"k_{k}") for k in keys)))
            .values(**{c: bindparam(f"v_{c}") for c in set_columns}, **extra)
        )
        conn.execute(stmt, [{**{f"k_{k}": r[k] for k in keys}, **{f"v_{c}": r[c] for c in set_columns}} for r in old])
    if new:
        conn.execute(insert(table), list(new))


def write_rows(
    conn: Connection,
    table: Table,
    rows: list[dict[str, Any]],
    keys: Sequence[str] = (),
    set_columns: Sequence[str] = (),
    also: Mapping[str, Any] | None = None,
    mysql_also: Mapping[str, str] | None = None,
) -> int | None:
    """Insert (with `set_columns`: upsert by `keys`) dict rows that share one key order.
    Fast path: the bulk statements, returning the affected rows (`mysql_also` replaces
    columns of the update with raw SQL); plain path: SQLAlchemy Core, returning None."""
    if not rows:
        return 0
    if fast(conn):
        sql = dict(mysql_also or {})
        return insert_rows(
            conn, table, list(rows[0]), [tuple(r.values()) for r in rows], [c for c in set_columns if c not in sql], sql
        )
    if set_columns:
        upsert(conn, table, rows, keys, set_columns, also)
    else:
        conn.execute(insert(table), rows)
    return None


def write_rendered(
    conn: Connection,
    table: Table,
    columns: Sequence[str],
    literals: list[str],
    set_columns: Sequence[str] = (),
    mysql_also: Mapping[str, str] | None = None,
) -> int:
    """`write_rows` for rows rendered ahead by `render_plain` (fast path only: see
    `takes_rendered`)."""
    if not literals:
        return 0
    sql = dict(mysql_also or {})
    return insert_rendered(conn, table, columns, literals, [c for c in set_columns if c not in sql], sql)


def driver_rows(conn: Connection, sql: str, args: Sequence[Any]) -> list[Mapping[str, Any]]:
    """The rows of one statement (`%s` placeholders for `args`) as dicts straight from
    the driver's tuples, on the connection's own PyMySQL connection (fast path only):
    the values are the ones a Core read gives (binary text as bytes, DATETIMEs as
    datetimes). `driver_tuples` for pages that need no names."""
    dbapi = conn.connection.dbapi_connection
    cursor = dbapi.cursor()  # type: ignore[union-attr]
    with _fast_datetimes(dbapi):
        try:
            cursor.execute(sql, tuple(args))
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
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
