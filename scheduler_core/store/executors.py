"""The executor registry in the store (`dus_executor`): every executor process's heartbeat,
and what an operator reads of it (`switchyard executors`, the console's /executors).

One row per process, keyed by an instance id the process makes at start, upserted by
its heartbeat thread (scheduler_core.executor.heartbeat) and marked stopped by a clean
stop. Live or lost is decided on one clock, the database's: each beat stamps
`last_seen_at` with the server's time, and the reader compares it with the server's time
too, so a host whose clock is off neither looks lost nor keeps a dead process live.
A process is lost once `LOST_AFTER_BEATS` of its own intervals passed without a beat.

The upsert is an UPDATE, then an INSERT when no row matched: portable to SQLite, MariaDB
and TiDB alike (no ON CONFLICT / ON DUPLICATE KEY), and race-free because only the
process that made an instance id ever writes its row.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from sqlalchemy import BigInteger, MetaData, Table, delete, insert, inspect, literal_column, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.sql.elements import ColumnElement

from scheduler_core.errors import SchemaError
from scheduler_core.store.driver_errors import translated_methods
from scheduler_core.store.schema import MYSQL_DIALECTS, executor_table
from scheduler_core.times import from_ms

LOST_AFTER_BEATS = 3  # beats missed in a row before a process is called lost
RETENTION = timedelta(days=7)  # stopped and lost rows are kept this long after their last beat
PRUNE_BATCH = 500  # rows one prune deletes at most: a backlog goes over several beats

# The database server's clock as epoch milliseconds, inside the statement that uses it.
_MYSQL_NOW_MS = "CAST(UNIX_TIMESTAMP(CURRENT_TIMESTAMP(3)) * 1000 AS SIGNED)"
_SQLITE_NOW_MS = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)"


class ExecutorState(StrEnum):
    LIVE = "live"
    LOST = "lost"  # no beat for LOST_AFTER_BEATS of its intervals: killed, hung or cut off
    STOPPED = "stopped"  # said goodbye: a clean stop


def compute_state(
    *, last_seen_ms: int, interval_ms: int, stopped_at_ms: int | None, now_ms: int, lost_after: int = LOST_AFTER_BEATS
) -> ExecutorState:
    """Stopped if it said goodbye; lost once more than `lost_after` of its intervals passed
    since its last beat (times on the database's clock); live otherwise."""
    if stopped_at_ms is not None:
        return ExecutorState.STOPPED
    if now_ms - last_seen_ms > lost_after * max(interval_ms, 1):
        return ExecutorState.LOST
    return ExecutorState.LIVE


@dataclass(frozen=True, kw_only=True)
class ExecutorBeat:
    """What one executor process reports at each beat."""

    instance_id: str
    name: str
    biz_codes: tuple[str, ...]
    host: str
    pid: int
    version: str
    concurrency: int
    in_flight: int
    interval: timedelta


@dataclass(frozen=True, kw_only=True)
class ExecutorEntry:
    """A registry row as an operator sees it; `age` is how long ago its last beat was."""

    instance_id: str
    name: str
    biz_codes: tuple[str, ...]
    host: str
    pid: int
    version: str
    concurrency: int
    in_flight: int
    interval: timedelta
    started_at: datetime
    last_seen_at: datetime
    stopped_at: datetime | None
    age: timedelta
    state: ExecutorState


def now_ms_sql(dialect: str) -> ColumnElement[Any]:
    """The database's clock in epoch ms, as an SQL expression of `dialect`."""
    if dialect in MYSQL_DIALECTS:
        return literal_column(_MYSQL_NOW_MS, BigInteger())
    if dialect == "sqlite":
        return literal_column(_SQLITE_NOW_MS, BigInteger())
    raise SchemaError(f"the executor registry does not know the clock of a {dialect} store")


def _joined(biz_codes: tuple[str, ...]) -> str:
    return ",".join(sorted(set(biz_codes)))


@translated_methods
class SqlExecutorRegistry:
    """The registry's reads and writes on one store engine."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.t: Table = executor_table(MetaData())
        self._now = now_ms_sql(engine.dialect.name)

    # -- the heartbeat's writes ---------------------------------------------------------

    def beat(self, beat: ExecutorBeat) -> None:
        """Upsert this process's row, stamped with the database's time."""
        c = self.t.c
        values = {
            "name": beat.name[:191],
            "biz_codes": _joined(beat.biz_codes)[:2048],
            "host": beat.host[:255],
            "pid": beat.pid,
            "version": beat.version[:64],
            "concurrency": beat.concurrency,
            "in_flight": beat.in_flight,
            "interval_ms": round(beat.interval.total_seconds() * 1000),
        }
        with self.engine.begin() as conn:
            done = conn.execute(
                update(self.t).where(c.instance_id == beat.instance_id).values(last_seen_at=self._now, **values)
            )
            if done.rowcount == 0:
                conn.execute(
                    insert(self.t).values(
                        instance_id=beat.instance_id, started_at=self._now, last_seen_at=self._now, **values
                    )
                )

    def goodbye(self, instance_id: str) -> None:
        """A clean stop: the row says stopped from now on (kept until the retention)."""
        c = self.t.c
        with self.engine.begin() as conn:
            conn.execute(
                update(self.t)
                .where(c.instance_id == instance_id)
                .values(stopped_at=self._now, last_seen_at=self._now, in_flight=0)
            )

    def prune(self, retention: timedelta = RETENTION, limit: int = PRUNE_BATCH) -> int:
        """Delete at most `limit` rows last heard of more than `retention` ago (stopped or
        lost: a live process beats far more often); returns how many."""
        c = self.t.c
        cutoff = self._now - round(retention.total_seconds() * 1000)
        with self.engine.begin() as conn:
            ids = list(
                conn.execute(select(c.instance_id).where(c.last_seen_at < cutoff).order_by(c.last_seen_at).limit(limit))
                .scalars()
                .all()
            )
            if ids:
                conn.execute(delete(self.t).where(c.instance_id.in_(ids)))
        return len(ids)

    # -- the operator's read ------------------------------------------------------------

    def require_table(self) -> None:
        """A store `db init` made before the registry existed: said plainly, with the fix."""
        if not inspect(self.engine).has_table(self.t.name):
            raise SchemaError(
                f"the store has no executor registry ({self.t.name}): run `switchyard db init --url ...` "
                "(it adds what is missing, keeping every row)"
            )

    def entries(self, *, biz_code: str | None = None, include_stopped: bool = False) -> list[ExecutorEntry]:
        """The registry's rows, newest beat first, with their state on the database's clock:
        live and lost ones (and stopped ones with `include_stopped`), of `biz_code` only if
        given. Rows past the retention are left out (a beat prunes them)."""
        self.require_table()
        c = self.t.c
        with self.engine.connect() as conn:
            now_ms = self.db_now_ms(conn)
            floor = now_ms - round(RETENTION.total_seconds() * 1000)
            stmt = select(self.t).where(c.last_seen_at >= floor).order_by(c.last_seen_at.desc(), c.instance_id)
            if not include_stopped:
                stmt = stmt.where(c.stopped_at.is_(None))
            rows = conn.execute(stmt).mappings().all()
        out = [_entry(r, now_ms) for r in rows]
        return [e for e in out if biz_code is None or biz_code in e.biz_codes]

    def names(self, instance_ids: Iterable[str]) -> dict[str, str]:
        """The registry names of these instance ids (a run log page's executors), as far
        as the registry still has them: a row past the retention, or a store without the
        table, names nothing (the run log then shows the bare id)."""
        ids = sorted({i for i in instance_ids if i})
        if not ids or not inspect(self.engine).has_table(self.t.name):
            return {}
        c = self.t.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(c.instance_id, c.name).where(c.instance_id.in_(ids))).all()
        return {str(i): str(n) for i, n in rows}

    def db_now_ms(self, conn: Connection) -> int:
        return int(conn.execute(select(self._now)).scalar_one())


def _entry(r: Any, now_ms: int) -> ExecutorEntry:
    last = int(r["last_seen_at"])
    stopped = None if r["stopped_at"] is None else int(r["stopped_at"])
    interval_ms = int(r["interval_ms"])
    return ExecutorEntry(
        instance_id=r["instance_id"],
        name=r["name"],
        biz_codes=tuple(b for b in str(r["biz_codes"]).split(",") if b),
        host=r["host"],
        pid=int(r["pid"]),
        version=r["version"],
        concurrency=int(r["concurrency"]),
        in_flight=int(r["in_flight"]),
        interval=timedelta(milliseconds=interval_ms),
        started_at=from_ms(int(r["started_at"])),
        last_seen_at=from_ms(last),
        stopped_at=None if stopped is None else from_ms(stopped),
        age=timedelta(milliseconds=max(now_ms - last, 0)),
        state=compute_state(last_seen_ms=last, interval_ms=interval_ms, stopped_at_ms=stopped, now_ms=now_ms),
    )
