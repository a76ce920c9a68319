"""A content digest of one legacy row, the same whichever way the row was read.

The migrator stores it in the ledger and compares it before mapping: an unchanged
legacy row is recognised from a hash of its stored values alone, without mapping it
again. It is defined on the row *as decoded by the reader* (text decoded to str,
DATETIMEs naive wall time, integers int), which is what a SQL read and a binlog row image
both come to (see `readers.images`), so the snapshot and the change stream agree on it.

A MySQL-compatible server computes the very same digest itself (`digest_sql`), so an
unchanged re-run reads one short hash per row instead of the row. The two definitions
must stay in step (tests/integration/test_image_decoding.py checks them on the server);
where they ever differ the only cost is speed: a digest that does not match the ledger
sends the row through the full read and mapping.

Columns the legacy scheduler rewrites as it runs are left out (`skip`), and `masked`
columns count only under a condition (the batch center's fire_time: content of a
one-shot only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import date, datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import DateTime, Integer, String, cast, column, func, literal_column
from sqlalchemy.sql.elements import ColumnElement

DIGEST_CHARS = 32  # 128 bits: half of the ledger's 64-character content_hash column
NULL, MASKED = "~", "-"  # neither can be a value's encoding below (hex digits, decimal, dates)


def _text(value: str) -> str:
    return value.encode("utf-8", "surrogatepass").hex().upper()


def _stamp(value: datetime) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


# by exact type first: one dict lookup per value instead of a chain of isinstance (the
# digest is computed for every row read and every row image, so this is a hot path)
_BY_TYPE: dict[type, Callable[[Any], str]] = {
    type(None): lambda _: NULL,
    bool: lambda v: str(int(v)),
    int: str,
    str: _text,
    bytes: lambda v: v.hex().upper(),
    datetime: _stamp,
    date: date.isoformat,
}


def _encode(value: Any) -> str:
    fast = _BY_TYPE.get(type(value))
    if fast is not None:
        return fast(value)
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex().upper()
    if isinstance(value, datetime):
        return _stamp(value)
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _names(columns: Collection[str], skip: Collection[str]) -> tuple[str, ...]:
    return tuple(k for k in sorted(columns) if k not in skip)


@lru_cache(maxsize=64)
def _header(names: tuple[str, ...]) -> str:
    # the column names count too: a renamed column (another xxl-job lineage) is another row
    return hashlib.sha256(",".join(names).encode("utf-8", "surrogatepass")).hexdigest()[:16]


def row_digest(values: Mapping[str, Any], skip: Collection[str] = (), masked: Collection[str] = ()) -> str:
    """Hex digest of the row's column names and values in name order, leaving out `skip`,
    `masked` as a mark."""
    names = _names(values, skip)
    body = "|".join([_header(names), *(MASKED if k in masked else _encode(values[k]) for k in names)])
    return hashlib.sha256(body.encode("ascii")).hexdigest()[:DIGEST_CHARS]


def digest_sql(
    columns: Sequence[str],
    kinds: Mapping[str, str],
    skip: Collection[str] = (),
    masks: Mapping[str, ColumnElement[bool]] | None = None,
) -> ColumnElement[str]:
    """The same digest computed by MySQL / MariaDB. `kinds`: column -> text | int | time
    (anything else is compared as its CHAR cast); `masks`: column -> condition under which
    the column counts as MASKED."""
    names = _names(columns, skip)
    parts: list[ColumnElement[Any]] = [literal_column(f"'{_header(names)}'")]  # hex: nothing to quote
    for name in names:
        col: ColumnElement[Any] = column(name)
        kind = kinds.get(name)
        if kind == "text":
            expr: ColumnElement[Any] = func.hex(col)
        elif kind == "time":
            expr = func.date_format(col, literal_column("'%Y-%m-%d %H:%i:%s.%f'"))
        else:
            expr = cast(col, String)
        expr = func.ifnull(expr, literal_column(f"'{NULL}'"))
        if masks and name in masks:
            expr = func.if_(masks[name], literal_column(f"'{MASKED}'"), expr)
        parts.append(expr)
    return func.left(func.sha2(func.concat_ws(literal_column("'|'"), *parts), 256), DIGEST_CHARS)


def column_kinds(columns: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Each inspected column's kind as `digest_sql` encodes it (SQLAlchemy inspector rows)."""
    out: dict[str, str] = {}
    for c in columns:
        t = c["type"]
        if isinstance(t, String):
            out[str(c["name"])] = "text"
        elif isinstance(t, Integer):
            out[str(c["name"])] = "int"
        elif isinstance(t, DateTime):
            out[str(c["name"])] = "time"
    return out
