"""Binlog row images shaped as the SQL read returns the same row.

The change stream decodes a changed row from its FULL after-image instead of reading it
again by key; the reader then maps it exactly as it maps a row it selected. Two
differences between the paths are removed here:

- columns: the image carries every column the table had when the row was written; the
  reader selects the columns it inspected. They must be the same set (`shaped_decoder`
  refuses another one: DDL since the inspection, see ImageShapeChanged).
- TIMESTAMP: the binlog stores the UTC instant, which the stream hands on as an aware
  UTC datetime; the SQL read returns it as wall time in the reading session's time zone
  (the server's, unless set), whatever the legacy zone. The instant is turned into the
  wall time that session shows (`session_zone`, read from the server as its current UTC
  offset: exact for zones without daylight saving, which a legacy server set to a DST
  zone would make an hour off around a switch). DATETIME values are naive wall
  time on both paths, and text is decoded by the reader the same way whether the driver
  gave bytes (SQL: cast to binary) or str (binlog: decoded by the column charset).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone, tzinfo
from typing import Any, TypeVar

from sqlalchemy import Connection, text

from dbkit.fastpath import fast

T = TypeVar("T")


def session_zone(conn: Connection) -> tzinfo:
    """The zone a SQL read of this server shows TIMESTAMP values in."""
    if not fast(conn):
        return timezone.utc  # SQLite has no TIMESTAMP type: nothing is converted
    seconds = conn.execute(text("SELECT TIMESTAMPDIFF(SECOND, UTC_TIMESTAMP(), NOW())")).scalar_one()
    return timezone(timedelta(seconds=round(int(seconds) / 60) * 60))


def sql_shaped(image: Mapping[str, Any], columns: Sequence[str], zone: tzinfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in columns:
        value = image.get(name)
        if isinstance(value, datetime) and value.tzinfo is not None:  # a TIMESTAMP (readers.streams.binlog)
            value = value.astimezone(zone).replace(tzinfo=None)
        out[name] = value
    return out


class ImageShapeChanged(Exception):
    """A row image whose columns are not the ones the reader inspected: the table was
    altered (DDL) since. The caller reloads the reader's schema and decodes again, or
    reads the row by key when the image predates the table as it is now."""


def shaped_decoder(
    columns: Sequence[str], zone: tzinfo, decode: Callable[[dict[str, Any]], T]
) -> Callable[[Mapping[str, Any]], T]:
    """`decode` (the mapping, or the content digest) of images shaped by `sql_shaped`,
    refusing an image of another table shape (FULL images carry every column the table had
    when the row was written: one more or one less than inspected means DDL, and decoding it
    with the old column list would drop or NULL a column silently)."""
    expected = frozenset(columns)

    def run(image: Mapping[str, Any]) -> T:
        if image.keys() != expected:
            raise ImageShapeChanged(f"image columns {sorted(image)} are not the inspected {sorted(expected)}")
        return decode(sql_shaped(image, columns, zone))

    return run
