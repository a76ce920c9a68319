"""A legacy execution log read page by page in (time column, id) order, within a time
window: the keyset both readers use, and the per-page lookups they cache."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Select, bindparam, column
from sqlalchemy.engine import RowMapping
from sqlalchemy.sql.elements import ColumnClause

from readers.legacy_ddl.tables import WallTime
from readers.timezones import parse_wall

Cursor = tuple[datetime, int]  # the (time, id) of the last row of the page before


def window_page(
    stmt: Select[*tuple[Any, ...]],
    t: ColumnClause[Any],
    wall: WallTime,
    lo: datetime,
    hi: datetime,
    cursor: Cursor | None,
    limit: int,
) -> Select[*tuple[Any, ...]]:
    """`stmt` narrowed to one page: rows with `t` in [lo, hi) after `cursor` (the first
    page: from `lo`), by (t, id)."""
    stmt = stmt.where(t < bindparam("hi", hi, type_=wall)).order_by(t, column("id")).limit(limit)
    if cursor is None:
        return stmt.where(t >= bindparam("lo", lo, type_=wall))
    at = bindparam("at", cursor[0], type_=wall)
    return stmt.where(t >= at).where((t > at) | (column("id") > cursor[1]))


def pages(
    fetch: Callable[[Cursor | None], list[RowMapping]], time_column: str, batch: int
) -> Iterator[list[RowMapping]]:
    """Every page `fetch` gives, each after the last row of the one before, until a page
    shorter than `batch`."""
    cursor: Cursor | None = None
    while True:
        rows = fetch(cursor)
        yield rows
        if len(rows) < batch:
            return
        cursor = (parse_wall(rows[-1][time_column]), int(rows[-1]["id"]))


def uncached(rows: Sequence[RowMapping], key: str, cache: dict[int, int], limit: int) -> list[int]:
    """The ids under `key` in a page that `cache` lacks, to look up once each; the cache
    is cleared, not grown, past `limit`."""
    page = {int(r[key]) for r in rows}
    if len(cache) > limit and not page <= cache.keys():
        # cleared before the ids are worked out: a clear after it would drop ids this page
        # had cached and never look them up again (their rows read as unknown)
        cache.clear()
    return sorted(page - cache.keys())
