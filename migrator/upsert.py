"""Set-based "insert or update" of many rows in one statement.

The migrator writes thousands of rows per transaction (a snapshot chunk, a group of
binlog transactions); a statement per row costs a round trip each, which is what bounded
the change stream's apply rate. MySQL/MariaDB get `INSERT ... ON DUPLICATE KEY UPDATE`
(PyMySQL sends the executemany as multi-row INSERTs), SQLite `INSERT ... ON CONFLICT DO
UPDATE`; any other dialect the portable read-then-update/insert.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Table, and_, bindparam, insert, select, tuple_, update
from sqlalchemy.dialects.mysql import insert as mysql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Connection

MYSQL = frozenset({"mysql", "mariadb"})


def upsert(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
           set_columns: Sequence[str], also: Mapping[str, Any] | None = None) -> None:
    """Insert `rows`; a row whose `keys` exist updates `set_columns` from the new row, plus
    `also` (column -> SQL expression over the existing row, e.g. version + 1; without bound
    parameters, which PyMySQL's multi-row executemany cannot carry after VALUES)."""
    if not rows:
        return
    extra = dict(also or {})
    name = conn.dialect.name
    if name in MYSQL:
        stmt = mysql_insert(table)
        conn.execute(stmt.on_duplicate_key_update({**{c: stmt.inserted[c] for c in set_columns}, **extra}), rows)
        return
    if name == "sqlite":
        lite = sqlite_insert(table)
        conn.execute(lite.on_conflict_do_update(index_elements=list(keys),
                                                set_={**{c: lite.excluded[c] for c in set_columns}, **extra}), rows)
        return
    _portable(conn, table, rows, keys, set_columns, extra)


def _portable(conn: Connection, table: Table, rows: Sequence[Mapping[str, Any]], keys: Sequence[str],
              set_columns: Sequence[str], extra: Mapping[str, Any]) -> None:
    cols = [table.c[k] for k in keys]
    have = {tuple(r) for r in conn.execute(select(*cols).where(tuple_(*cols).in_([tuple(r[k] for k in keys)
                                                                                     for r in rows])))}
    old = [r for r in rows if tuple(r[k] for k in keys) in have]
    new = [r for r in rows if tuple(r[k] for k in keys) not in have]
    if old:
        stmt = update(table).where(and_(*(table.c[k] == bindparam(f"k_{k}") for k in keys))).values(
            **{c: bindparam(f"v_{c}") for c in set_columns}, **extra)
        conn.execute(stmt, [{**{f"k_{k}": r[k] for k in keys}, **{f"v_{c}": r[c] for c in set_columns}}
                            for r in old])
    if new:
        conn.execute(insert(table), list(new))
