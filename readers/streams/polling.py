"""Polling change stream: the fallback for legacy servers where we have no REPLICATION grants.

It reads rows whose `update_column` is at or after (high water - overlap), page by page in
(update_column, key) order, and emits a row when its content hash differs from the one it saw
last within the overlap window. The overlap catches a row updated again within the same
second (DATETIME has whole seconds), and commits whose update time lags their commit by less
than `overlap_s`.

This is the WEAKER mode, know its limits:

* deletes are invisible to it: run `full_compare(known_keys)` every N polls; it returns a
  DELETE for each key that is gone (N sets how late a delete is seen);
* a row whose update time is not bumped by the writer, or is NULL, is never seen;
* a transaction that commits more than `overlap_s` after it set `update_time` (a long
  transaction) can be missed: choose `overlap_s` above the legacy's longest write transaction;
* there are no before images (`before` is None) and no transaction grouping: a ChangeBatch is
  one page of rows; `op` is INSERT for a key this stream instance has not seen (seed it with
  `known_keys=`), UPDATE otherwise: advisory only, the apply must upsert;
* after a restart the rows of the last overlap window are emitted again (the hashes are kept in
  memory only): the idempotent apply turns them into no-ops.

The position is StreamPosition("poll", high water in epoch milliseconds). Naive DATETIME values
are wall time in `tz` (the legacy's Asia/Shanghai by default); aware values are used as they
are; integer update columns are taken as epoch milliseconds.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dbkit.capabilities import capabilities
from dbkit.connections import connect
from readers.records import ChangeBatch, ChangeOp, RowChange, StreamPosition

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MS = timedelta(milliseconds=1)


def _canon(value: Any) -> Any:
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"b": bytes(value).hex()}
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value


def content_hash(row: dict[str, Any]) -> str:
    """A stable hash of a row's content (every column, update column included)."""
    payload = json.dumps({k: _canon(v) for k, v in sorted(row.items())}, sort_keys=True, default=str)
    return hashlib.blake2b(payload.encode(), digest_size=16).hexdigest()


class PollingChangeStream:
    def __init__(
        self,
        engine: Engine,
        *,
        table: str,
        key_columns: Sequence[str],
        update_column: str = "update_time",
        overlap_s: float = 5,
        tz: str = "Asia/Shanghai",
        batch_size: int = 1000,
        schema: str | None = None,
        start: StreamPosition | None = None,
        known_keys: Collection[tuple[Any, ...]] = (),
    ) -> None:
        if not key_columns:
            raise ValueError("key_columns: name the columns that identify a row")
        if start is not None and start.log_file != "poll":
            raise ValueError(f"a polling stream resumes from a StreamPosition('poll', ms), got {start!r}")
        self.engine = engine
        self.table_name = table
        self.key_columns = tuple(key_columns)
        self.update_column = update_column
        self.overlap_ms = round(float(overlap_s) * 1000)
        self.tz = ZoneInfo(tz)
        self.batch_size = int(batch_size)
        self._table = sa.Table(table, sa.MetaData(), autoload_with=engine, schema=schema)
        missing = [c for c in (*self.key_columns, update_column) if c not in self._table.c]
        if missing:
            raise ValueError(f"table {table!r} has no column(s) {missing}")
        if schema:
            self.schema = schema
        else:
            self.schema = capabilities(engine).default_schema or engine.url.database or ""
        self._ucol = self._table.c[update_column]
        self._kcols = [self._table.c[k] for k in self.key_columns]
        self._numeric_update = isinstance(self._ucol.type, (sa.Integer, sa.Numeric))
        self._hw: int | None = start.log_pos if start is not None else None
        self._seen: dict[tuple[Any, ...], tuple[str, int]] = {}  # key -> (hash, update ms) in the overlap
        self._known: set[tuple[Any, ...]] = {tuple(k) for k in known_keys}
        self.polls = 0

    # ------------------------------------------------------------------ conversions

    def _to_ms(self, value: Any) -> int | None:
        if value is None:
            return None
        if isinstance(value, datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=self.tz)
            return (value - _EPOCH) // _MS
        if isinstance(value, date):
            return (datetime(value.year, value.month, value.day, tzinfo=self.tz) - _EPOCH) // _MS
        if isinstance(value, (int, float, Decimal)):
            return int(value)
        if isinstance(value, str):
            return self._to_ms(datetime.fromisoformat(value))
        raise TypeError(f"cannot read {self.update_column}={value!r} as a time")

    def _bound(self, ms: int) -> Any:
        """The update-column value for epoch ms, in the column's own terms (floored to the second)."""
        ms -= ms % 1000
        if self._numeric_update:
            return ms
        moment = _EPOCH + timedelta(milliseconds=ms)
        if getattr(self._ucol.type, "timezone", False):
            return moment
        return moment.astimezone(self.tz).replace(tzinfo=None)

    def _low_ms(self) -> int | None:
        if self._hw is None:
            return None
        low = self._hw - self.overlap_ms
        return low - low % 1000

    # ------------------------------------------------------------------ public

    @property
    def position(self) -> StreamPosition | None:
        return StreamPosition("poll", self._hw) if self._hw is not None else None

    def poll(self) -> list[ChangeBatch]:
        """One pass over the rows updated since (high water - overlap). One ChangeBatch per page
        that changed something or moved the high water; [] when nothing is new."""
        self.polls += 1
        low = self._low_ms()
        cursor: tuple[Any, ...] | None = None
        out: list[ChangeBatch] = []
        while True:
            query = sa.select(self._table).where(self._ucol.is_not(None))
            if low is not None:
                query = query.where(self._ucol >= self._bound(low))
            if cursor is not None:
                query = query.where(sa.tuple_(self._ucol, *self._kcols) > sa.tuple_(*cursor))
            query = query.order_by(self._ucol, *self._kcols).limit(self.batch_size)
            with connect(self.engine) as conn:
                rows = conn.execute(query).all()
            before_hw = self._hw
            changes: list[RowChange] = []
            for r in rows:
                row = dict(r._mapping)
                key = tuple(row[k] for k in self.key_columns)
                ms = self._to_ms(row[self.update_column])
                assert ms is not None
                digest = content_hash(row)
                seen = self._seen.get(key)
                if seen is None or seen[0] != digest:
                    op = ChangeOp.UPDATE if key in self._known else ChangeOp.INSERT
                    changes.append(RowChange(op=op, schema=self.schema, table=self.table_name, before=None, after=row))
                    self._known.add(key)
                self._seen[key] = (digest, ms)
                if self._hw is None or ms > self._hw:
                    self._hw = ms
            if rows:
                last = rows[-1]._mapping
                cursor = (last[self.update_column], *(last[k] for k in self.key_columns))
            if changes or (self._hw is not None and self._hw != before_hw):
                assert self._hw is not None
                out.append(ChangeBatch(changes=tuple(changes), position=StreamPosition("poll", self._hw)))
            if len(rows) < self.batch_size:
                break
        floor = self._low_ms()
        if floor is not None:  # rows below the next pass's lower bound are never re-read
            self._seen = {k: v for k, v in self._seen.items() if v[1] >= floor}
        return out

    def batches(
        self,
        stop: threading.Event | None = None,
        max_batches: int | None = None,
        idle_timeout_s: float | None = None,
        interval_s: float = 1.0,
    ) -> Iterator[ChangeBatch]:
        """Poll every `interval_s` and yield the batches; ends on `stop`, after `max_batches`, or
        when `idle_timeout_s` pass without a batch."""
        emitted = 0
        last = time.monotonic()
        while True:
            if stop is not None and stop.is_set():
                return
            got = self.poll()
            for batch in got:
                yield batch
                emitted += 1
                last = time.monotonic()
                if max_batches is not None and emitted >= max_batches:
                    return
                if stop is not None and stop.is_set():
                    return
            if idle_timeout_s is not None and time.monotonic() - last >= idle_timeout_s:
                return
            if stop is not None:
                if stop.wait(interval_s):
                    return
            else:
                time.sleep(interval_s)

    def full_compare(self, known_keys: Collection[tuple[Any, ...]], chunk: int = 500) -> list[RowChange]:
        """DELETE changes for the `known_keys` (the keys the target holds) no longer in the table.

        The polling stream cannot see deletes; the caller runs this every N polls. Keys must be
        tuples in `key_columns` order, of the types the driver returns (int for INT columns)."""
        keys = list(dict.fromkeys(tuple(k) for k in known_keys))
        present: set[tuple[Any, ...]] = set()
        with connect(self.engine) as conn:
            for i in range(0, len(keys), chunk):
                part = keys[i : i + chunk]
                if len(self._kcols) == 1:
                    cond = self._kcols[0].in_([k[0] for k in part])
                else:
                    cond = sa.tuple_(*self._kcols).in_(part)
                present.update(tuple(r) for r in conn.execute(sa.select(*self._kcols).where(cond)))
        out: list[RowChange] = []
        for key in keys:
            if key in present:
                continue
            self._seen.pop(key, None)
            self._known.discard(key)
            out.append(
                RowChange(
                    op=ChangeOp.DELETE,
                    schema=self.schema,
                    table=self.table_name,
                    before=dict(zip(self.key_columns, key, strict=True)),
                    after=None,
                )
            )
        return out
