"""Is the change stream of a business caught up? The cutover waits for it (Ghostferry's rule:
switch only once the target holds every source edit up to a recent position).

A business's edits reach the target through a change stream (`switchyard migrate stream`),
whose checkpoint row (`dus_stream_checkpoint`) is written in the same target transaction as
the changes it applied. So "the target holds every legacy edit up to X" is "the checkpoint
is at or past X". A cutover made while the stream lags would hand the new side definitions
that legacy had already changed.

- Binlog stream: the legacy server's head now (`SHOW MASTER STATUS`) against the checkpoint.
  A stream that is idle but at the head is caught up; so is one whose checkpoint trails only
  by foreign transactions (an idle stream reports foreign progress only every few seconds,
  readers/streams/binlog.py): what counts is the *pending changes*, the row events of the
  stream's tables between the checkpoint and the head (`SHOW BINLOG EVENTS`). Caught up:
  at most `max_pending` (default 0) of them, waiting up to `wait` (default 5 s) for the
  stream to apply them.
- Polling stream (checkpoint file "poll", position = the high-water update time in epoch
  ms): the pending changes are the definition rows updated after the high water; the last
  pass is the checkpoint's `updated_at`.

No checkpoint for the source system: no stream follows it, nothing to wait for (None).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from sqlalchemy import select, text
from sqlalchemy.engine import Engine

from dbkit.connections import connect
from dbkit.errors import StoreError
from dbkit.translate import store_errors
from migrator.store import MigratorStore
from migrator.stream import BUSINESS_TABLE, DEFINITION_TABLE
from readers.records import SourceSystem, StreamPosition
from readers.streams.binlog import current_position
from readers.streams.errors import StreamError
from scheduler_core.times import from_ms

POLL_FILE = "poll"
SCAN_LIMIT = 100_000  # binlog events read per check at most; beyond it the count is a lower bound
_TABLE_MAP = re.compile(r"\(`?([^`.()]+)`?\.`?([^`.()]+)`?\)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    stream_id: str
    position: StreamPosition
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class CatchupState:
    """The stream of a business when the gate looked at it."""

    stream_id: str
    caught_up: bool
    pending: int  # changes of the stream's tables not yet applied (a lower bound when `capped`)
    checkpoint: str  # "file:pos" or "poll:<high water>"
    head: str  # the legacy server's head ("" for polling)
    behind_bytes: int | None  # binlog bytes between checkpoint and head (same file), else None
    last_advanced_s: float  # seconds since the checkpoint last moved
    waited_s: float
    max_pending: int
    capped: bool = False
    error: str = ""  # the legacy binlog could not be read (privileges, purged file)

    @property
    def sentence(self) -> str:
        if self.error:
            return (
                f"change stream {self.stream_id}: whether it is caught up is unknown ({self.error}); its "
                f"checkpoint {self.checkpoint} last advanced {self.last_advanced_s:.0f} s ago"
            )
        pending = f"{'at least ' if self.capped else ''}{self.pending:,} pending change(s)"
        where = f"checkpoint {self.checkpoint}" + (f", legacy head {self.head}" if self.head else "")
        bytes_ = f", {self.behind_bytes:,} binlog bytes behind" if self.behind_bytes else ""
        if self.caught_up:
            return (
                f"change stream {self.stream_id} is caught up ({pending}, at most {self.max_pending} allowed; "
                f"{where}{bytes_}; checkpoint last advanced {self.last_advanced_s:.1f} s ago)"
            )
        return (
            f"change stream {self.stream_id} is behind: {pending} of the legacy tables not yet on the new side "
            f"after waiting {self.waited_s:.1f} s (at most {self.max_pending} allowed; {where}{bytes_}; "
            f"checkpoint last advanced {self.last_advanced_s:.0f} s ago): start or fix `switchyard migrate "
            f"stream` and retry"
        )

    def as_dict(self) -> dict[str, object]:
        return {
            "stream_id": self.stream_id,
            "caught_up": self.caught_up,
            "pending": self.pending,
            "capped": self.capped,
            "checkpoint": self.checkpoint,
            "head": self.head,
            "behind_bytes": self.behind_bytes,
            "last_advanced_s": round(self.last_advanced_s, 3),
            "waited_s": round(self.waited_s, 3),
            "max_pending": self.max_pending,
            "error": self.error,
            "sentence": self.sentence,
        }


def checkpoints_of(own: MigratorStore, source: str, biz_code: str) -> list[Checkpoint]:
    """The checkpoints of the streams that follow `business`: stream ids `<source>@<url>`
    (every business) or `<source>@<url>#b1,b2` (listing it), freshest first."""
    ck = own.t.checkpoint
    with connect(own.engine) as conn:
        rows = conn.execute(
            select(ck.c.stream_id, ck.c.log_file, ck.c.log_pos, ck.c.gtid, ck.c.updated_at).where(
                ck.c.stream_id.like(f"{source}@%")
            )
        ).all()
    out = []
    for sid, f, pos, gtid, upd in rows:
        _, _, only = sid.partition("#")
        if only and biz_code not in only.split(","):
            continue
        if f is None or pos is None:
            continue
        out.append(
            Checkpoint(
                stream_id=sid,
                position=StreamPosition(f, int(pos), gtid),
                updated_at=from_ms(int(upd)),
            )
        )
    return sorted(out, key=lambda c: c.updated_at, reverse=True)


def _binlog_files(legacy: Engine) -> list[tuple[str, int]]:
    with connect(legacy) as conn:
        return [(str(r[0]), int(r[1])) for r in conn.exec_driver_sql("SHOW BINARY LOGS").fetchall()]


def pending_binlog_changes(
    legacy: Engine, start: StreamPosition, head: StreamPosition, schema: str, tables: Sequence[str]
) -> tuple[int, bool]:
    """(row-event groups of `schema`.`tables` between `start` and `head`, capped): one per
    Table_map event, i.e. per table a transaction changed. Reads at most SCAN_LIMIT events."""
    files = [f for f, _size in _binlog_files(legacy)]
    if start.log_file not in files:
        raise StreamError(
            f"the checkpoint's binlog file {start.log_file} is no longer on the legacy server "
            "(purged): the stream cannot catch up; re-run the migration"
        )
    if (
        head.log_file not in files
        or files.index(start.log_file) > files.index(head.log_file)
        or (start.log_file == head.log_file and start.log_pos >= head.log_pos)
    ):
        return 0, False  # at or past the head taken when the check began
    wanted = {(schema, t) for t in tables}
    found, scanned = 0, 0
    with connect(legacy) as conn:
        for f in files[files.index(start.log_file) :]:
            pos = start.log_pos if f == start.log_file else 4
            while scanned < SCAN_LIMIT:
                if f == head.log_file and pos >= head.log_pos:
                    break
                n = min(10_000, SCAN_LIMIT - scanned)
                rows = conn.exec_driver_sql(f"SHOW BINLOG EVENTS IN '{f}' FROM {int(pos)} LIMIT {n}").fetchall()
                if not rows:
                    break
                for _log, at, kind, _sid, _end, info in rows:
                    if f == head.log_file and int(at) >= head.log_pos:
                        break
                    if kind == "Table_map":
                        m = _TABLE_MAP.search(str(info))
                        if m is not None and (m.group(1), m.group(2)) in wanted:
                            found += 1
                scanned += len(rows)
                if len(rows) < n:
                    break
                pos = int(rows[-1][4])  # End_log_pos of the last event read: where the next one starts
            if f == head.log_file or scanned >= SCAN_LIMIT:
                break
    return found, scanned >= SCAN_LIMIT


def pending_polled_changes(legacy: Engine, high_water_ms: int, table: str, tz: str) -> int:
    """Definition rows updated after the polling stream's high water (legacy DATETIMEs are
    naive wall-clock times in `tz`)."""
    local = from_ms(high_water_ms).astimezone(ZoneInfo(tz)).replace(tzinfo=None)
    with connect(legacy) as conn:
        return int(
            conn.execute(
                text(f"SELECT COUNT(*) FROM {table} WHERE update_time > :hw"),  # noqa: S608 - fixed name
                {"hw": local},
            ).scalar_one()
        )


class StreamCatchup:
    """The cutover gate's check (`BusinessSwitch(catchup=...)`)."""

    def __init__(
        self,
        own: MigratorStore,
        legacy: Engine,
        *,
        wait: timedelta = timedelta(seconds=5),
        max_pending: int = 0,
        tz: str = "Asia/Shanghai",
        poll_every: timedelta = timedelta(milliseconds=200),
        now: Callable[[], datetime] | None = None,
    ) -> None:
        self.own, self.legacy = own, legacy
        self.wait, self.max_pending, self.tz, self.poll_every = wait, max_pending, tz, poll_every
        self._now = now or own.clock.now

    def check(self, biz_code: str, source: str) -> CatchupState | None:
        """The catch-up state of the freshest stream following `business`, after waiting up
        to `wait` for it to apply what is pending; None when no stream follows it."""
        if not checkpoints_of(self.own, source, biz_code):
            return None
        system = SourceSystem(source)
        tables = (DEFINITION_TABLE[system], BUSINESS_TABLE[system])
        first = checkpoints_of(self.own, source, biz_code)[0]
        started = time.monotonic()
        try:
            with store_errors():  # the readers' position read lets the driver's errors through
                head = None if first.position.log_file == POLL_FILE else current_position(self.legacy)
        except (StreamError, StoreError) as exc:
            return self._unknown(first, exc)
        deadline = started + self.wait.total_seconds()
        while True:
            ck = checkpoints_of(self.own, source, biz_code)[0]
            try:
                with store_errors():
                    state = self._state(ck, head, tables, time.monotonic() - started)
            except (StreamError, StoreError) as exc:
                return self._unknown(ck, exc)
            if state.caught_up:
                return state
            now = time.monotonic()
            if now >= deadline:
                # the wait as measured after this last check, not before it: on a loaded machine
                # reading the binlog took long enough that the earlier figure fell short of `wait`
                return replace(state, waited_s=now - started)
            time.sleep(self.poll_every.total_seconds())

    def _unknown(self, ck: Checkpoint, exc: Exception) -> CatchupState:
        """The stream's state could not be read: not caught up, as far as the gate knows."""
        return CatchupState(
            stream_id=ck.stream_id,
            caught_up=False,
            pending=0,
            checkpoint=f"{ck.position.log_file}:{ck.position.log_pos}",
            head="",
            behind_bytes=None,
            last_advanced_s=(self._now() - ck.updated_at).total_seconds(),
            waited_s=0.0,
            max_pending=self.max_pending,
            error=str(exc),
        )

    def _state(self, ck: Checkpoint, head: StreamPosition | None, tables: Sequence[str], waited: float) -> CatchupState:
        advanced = (self._now() - ck.updated_at).total_seconds()
        if ck.position.log_file == POLL_FILE or head is None:
            pending = pending_polled_changes(self.legacy, ck.position.log_pos, tables[0], self.tz)
            hw = from_ms(ck.position.log_pos).isoformat()
            return CatchupState(
                stream_id=ck.stream_id,
                caught_up=pending <= self.max_pending,
                pending=pending,
                checkpoint=f"poll:{hw}",
                head="",
                behind_bytes=None,
                last_advanced_s=advanced,
                waited_s=waited,
                max_pending=self.max_pending,
            )
        schema = self.legacy.url.database or ""
        pending, capped = pending_binlog_changes(self.legacy, ck.position, head, schema, tables)
        same_file = ck.position.log_file == head.log_file
        return CatchupState(
            stream_id=ck.stream_id,
            caught_up=pending <= self.max_pending and not capped,
            pending=pending,
            capped=capped,
            checkpoint=f"{ck.position.log_file}:{ck.position.log_pos}",
            head=f"{head.log_file}:{head.log_pos}",
            behind_bytes=max(0, head.log_pos - ck.position.log_pos) if same_file else None,
            last_advanced_s=advanced,
            waited_s=waited,
            max_pending=self.max_pending,
        )
