"""Binlog apply: row events/s at three levels over the same events, and apply lag at 2K events/s.

A batch-center legacy database on the real MariaDB, snapshotted into a fresh target; then a
backlog of row updates in 10-row transactions, read three times from the same start position:

(a) the library alone: a bare `pymysqlreplication.BinLogStreamReader` with only_tables /
    only_schemas / only_events (row events only), every row decoded (`event.rows`), nothing
    else. The ceiling of anything built on the library.
(b) our `BinlogChangeStream` (readers/streams/binlog.py): transactions, positions, traps.
(c) applied: `migrator.stream.StreamMigrator.follow` over (b), as `migrate stream` runs it
    (mapping, ledger, checkpoint, one target transaction per group of transactions).

Two backlogs, each read at the three levels:
- definition edits: every event changes what a task maps to (task_name, max_retry), so every
  event is mapped and written (a job upsert and a ledger row per changed task);
- scheduler bookkeeping: what the batch center itself writes at every fire of a recurring
  task (fire_time moved on, version + 1): columns outside the content digest, so the stream
  recognises the content it already holds from the image's digest and writes nothing but the
  checkpoint. In production most binlog traffic on bc_task is of this kind.

The ratios to read: (c)/(a) is the whole pipeline against the library; (b)/(a) is what the
stream costs on top of the library. Lag: a writer holds 2K row events/s while the stream
applies live; each row carries its write time, the lag is apply commit minus it.

The pieces (`rig`, `bare_library`, `bare_stream`, `applied`, `live_lag`) are importable so a
profile can run one level under cProfile on the same set-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

from bench.cpu import server_cpu_s
from bench.harness import Goal, Row, StackEnv, fresh_database, percentile

RATE_GOAL = Goal("value_min", 10_000, "/s")
LAG_GOAL = Goal("value_max", 1.0, "s")
ROWS_PER_TX = 10
TABLES = ("bc_task", "bc_biz")


def _conn(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {"host": u.host or "127.0.0.1", "port": u.port or 3306, "user": u.username, "password": u.password or ""}


@dataclass(frozen=True)
class Level:
    """One level's figures over the backlog: row events, wall seconds, and this process's CPU
    seconds (all its threads; the servers' CPU is not in it). CPU per event moves less than
    the wall rate when the shared box is loaded."""

    rows: int
    seconds: float
    cpu_s: float
    server_cpu_s: float | None = None  # the MariaDB server's CPU over the same interval

    @property
    def rate(self) -> float | None:
        return self.rows / self.seconds if self.seconds else None

    @property
    def cpu_us(self) -> float | None:
        return self.cpu_s / self.rows * 1e6 if self.rows else None


def _server_cpu_s() -> float | None:
    """CPU seconds the stack's MariaDB has used (bench/cpu.py): what each applied event
    costs the server beside our process. None when it cannot be read."""
    return server_cpu_s()


class _Timer:
    def __init__(self) -> None:
        self.t0, self.c0, self.s0 = time.perf_counter(), time.process_time(), _server_cpu_s()

    def level(self, rows: int) -> Level:
        s1 = _server_cpu_s()
        server = s1 - self.s0 if s1 is not None and self.s0 is not None else None
        return Level(rows, time.perf_counter() - self.t0, time.process_time() - self.c0, server)


@dataclass
class Rig:
    """A snapshotted legacy + target pair, a backlog of `events` row events between `start` and `end`."""

    legacy: Engine
    target: Engine
    sm: Any  # migrator.stream.StreamMigrator
    settings: dict[str, Any]  # the CDC user's connection settings
    schema: str
    ids: list[int]
    recurring: list[int]  # CRON / FIXED_RATE tasks: the ones the batch center reschedules at every fire
    legacy_url: str = ""
    start: Any = None  # readers.records.StreamPosition
    end: Any = None
    events: int = 0

    def write(self, n_events: int, pace_per_s: float | None = None, bookkeeping: bool = False) -> float:
        """Row updates in ROWS_PER_TX-row transactions, paced when asked; returns the rate reached.
        `bookkeeping`: the batch center's own update at a recurring task's fire, else a
        definition edit."""
        done = 0
        started = time.perf_counter()
        ids = self.recurring if bookkeeping else self.ids
        sql = text(
            _BOOKKEEPING
            if bookkeeping
            else "UPDATE bc_task SET task_name = :n, max_retry = (max_retry + 1) % 4 WHERE id = :id"
        )
        while done < n_events:
            with self.legacy.begin() as c:
                for k in range(ROWS_PER_TX):
                    c.execute(sql, {"n": f"t{time.time_ns() // 1_000_000}", "id": ids[(done + k) % len(ids)]})
            done += ROWS_PER_TX
            if pace_per_s:
                ahead = done / pace_per_s - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        return done / (time.perf_counter() - started)

    def next_backlog(self, events: int, bookkeeping: bool) -> None:
        """A new backlog after everything applied so far: [start, end) are its events."""
        from readers.streams import current_position

        self.start = self.sm.checkpoint()
        assert self.start is not None
        self.write(events, bookkeeping=bookkeeping)
        self.end = current_position(self.legacy)
        self.events = events

    def past_end(self, position: Any) -> bool:
        return (position.log_file, position.log_pos) >= (self.end.log_file, self.end.log_pos)


@contextmanager
def rig(env: StackEnv, tasks: int, events: int) -> Iterator[Rig]:
    from legacy_sim.seed import seed_batchcenter
    from migrator.apply import Migrator
    from migrator.stream import StreamMigrator
    from readers.batchcenter.reader import BatchCenterReader
    from readers.legacy_ddl.loader import create_legacy_schema
    from readers.streams import consistent_snapshot
    from scheduler_core.clock import SystemClock
    from scheduler_core.store.engine import make_engine
    from scheduler_core.store.sql import SqlTriggerStore
    from switchyard.schema import init_schema
    from switchyard.wiring import target_writer

    cdc = env.values.get("SWITCHYARD_MARIADB_CDC_URL") or env.mariadb_url
    with (
        fresh_database(env.mariadb_url, "bench_binlog_legacy") as legacy_url,
        fresh_database(env.mariadb_url, "bench_binlog_target") as target_url,
    ):
        legacy = make_engine(legacy_url)
        target = make_engine(target_url)
        try:
            create_legacy_schema(legacy, "batch-center")
            seed_batchcenter(legacy, businesses=4, tasks_per_business=tasks // 4, bad_rows=0, malformed_crons=0)
            init_schema(target, 16)
            clock = SystemClock()
            store = SqlTriggerStore(target, clock)
            reader = BatchCenterReader(legacy)
            writer = target_writer(store)
            sm = StreamMigrator(reader, writer, Migrator(reader, writer, clock), "bench")
            with consistent_snapshot(legacy) as (conn, pos):
                sm.snapshot(BatchCenterReader(conn), pos)
            with legacy.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
                # what `migrate stream`'s flag hook (switchyard/cli/migrate.py) leaves after the
                # snapshot, set here without a binlog entry so that the backlogs hold only their own events
                c.execute(text("SET SESSION sql_log_bin = 0"))
                c.execute(text("UPDATE bc_task SET migrated = 1"))
                c.execute(text("SET SESSION sql_log_bin = 1"))
                ids = [i for (i,) in c.execute(text("SELECT id FROM bc_task ORDER BY id"))]
                recurring = [
                    i
                    for (i,) in c.execute(
                        text("SELECT id FROM bc_task WHERE task_type IN (2, 3) AND status IN (0, 5) ORDER BY id")
                    )
                ]
            schema = make_url(legacy_url).database
            assert schema
            settings = _conn(make_url(cdc).set(database=schema).render_as_string(hide_password=False))
            r = Rig(legacy, target, sm, settings, schema, ids, recurring, legacy_url)
            r.next_backlog(events, bookkeeping=False)
            yield r
        finally:
            legacy.dispose()
            target.dispose()


def bare_library(r: Rig, server_id: int, freeze_schema: bool = False) -> Level:
    """(a) row events decoded by the library alone from `start` to `end`, and the seconds.
    `freeze_schema`: the library's option that skips re-parsing the TableMap of a known table
    id; MariaDB writes one TableMap per statement, so without it every row event of a
    10-statement transaction pays a full TableMap parse (FULL metadata: names, charsets)."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    timer = _Timer()
    reader = BinLogStreamReader(
        connection_settings=dict(r.settings),
        server_id=server_id,
        blocking=False,
        resume_stream=True,
        log_file=r.start.log_file,
        log_pos=r.start.log_pos,
        is_mariadb=False,
        only_schemas=[r.schema],
        only_tables=list(TABLES),
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        enable_logging=False,
        freeze_schema=freeze_schema,
    )
    rows = 0
    try:
        for event in reader:  # non-blocking: ends at the binlog's end at the latest
            rows += len(event.rows)
            if rows >= r.events:  # the backlog is the only writer to these tables
                break
    finally:
        reader.close()
    return timer.level(rows)


def bare_stream(r: Rig, server_id: int) -> Level:
    """(b) row events through `BinlogChangeStream` (no apply) from `start` to `end`, and the seconds."""
    from readers.streams import BinlogChangeStream

    timer = _Timer()
    s = BinlogChangeStream(r.settings, server_id=server_id, schemas=[r.schema], tables=TABLES, start=r.start)
    rows = 0
    try:
        for batch in s.batches(idle_timeout_s=2.0):
            rows += len(batch.changes)
            if r.past_end(batch.position):
                break
    finally:
        s.close()
    return timer.level(rows)


def applied(r: Rig, server_id: int) -> Level:
    """(c) row events applied to the target from `start` to `end` (grouped, as `migrate stream`
    runs), and the seconds. Run it once per rig: it moves the target and its checkpoint."""
    from readers.streams import BinlogChangeStream

    def until_end(batches: Iterator[Any]) -> Iterator[Any]:
        for batch in batches:
            yield batch
            if r.past_end(batch.position):
                return

    before = r.sm.stats.changes
    timer = _Timer()
    s = BinlogChangeStream(r.settings, server_id=server_id, schemas=[r.schema], tables=TABLES, start=r.start)
    try:
        r.sm.follow(until_end(s.batches(idle_timeout_s=2.0)))
    finally:
        s.close()
    return timer.level(r.sm.stats.changes - before)


_BOOKKEEPING = "UPDATE bc_task SET fire_time = fire_time + INTERVAL 1 MINUTE, version = version + 1 WHERE id = :id"
_UPDATE = "UPDATE bc_task SET task_name = %s, max_retry = (max_retry + 1) %% 4 WHERE id = %s"


def _paced_writer(legacy_url: str, ids: list[int], n_events: int, pace_per_s: float, out: Any) -> None:
    """The live writer, in a process of its own: in the bench's process it would share the
    GIL with the stream it measures and fall far short of its pace on a loaded box. The
    same statements as `Rig.write`, over plain PyMySQL; sends back the rate it reached."""
    from bench.harness import pymysql_connect

    conn = pymysql_connect(legacy_url)
    try:
        done = 0
        started = time.perf_counter()
        with conn.cursor() as cur:
            while done < n_events:
                for k in range(ROWS_PER_TX):
                    cur.execute(_UPDATE, (f"t{time.time_ns() // 1_000_000}", ids[(done + k) % len(ids)]))
                conn.commit()
                done += ROWS_PER_TX
                ahead = done / pace_per_s - (time.perf_counter() - started)
                if ahead > 0:
                    time.sleep(ahead)
        out.send(done / (time.perf_counter() - started))
    finally:
        conn.close()
        out.close()


def live_lag(r: Rig, server_id: int, seconds: int) -> tuple[list[float], float | None]:
    """Apply lag (s) of each row event while a writer holds 2K row events/s. The stream is
    connected and idle (its first heartbeat seen) before the writer starts, as a running
    `migrate stream` is: the lag is the steady state's, not a fresh process's connect.
    Returns the lags and the write rate the writer (its own process) reached: on a loaded
    box it can fall short of 2K/s, and the row says so."""
    import multiprocessing

    from readers.streams import BinlogChangeStream

    sm = r.sm
    lags: list[float] = []
    stop = threading.Event()
    ctx = multiprocessing.get_context("spawn")  # no fork of a process with live threads and pools
    rate_in, rate_out = ctx.Pipe(duplex=False)
    writer = ctx.Process(
        target=_paced_writer, args=(r.legacy_url, r.ids, 2_000 * seconds, 2_000.0, rate_out), daemon=True
    )
    s = BinlogChangeStream(
        r.settings, server_id=server_id, schemas=[r.schema], tables=TABLES, start=sm.checkpoint(), heartbeat_s=1.0
    )
    plain_apply = sm.apply_group

    def timed_apply(group: Any) -> None:
        plain_apply(group)
        now_ms = time.time_ns() // 1_000_000
        for batch in group:
            for ch in batch.changes:
                name = (ch.after or {}).get("task_name") or ""
                if isinstance(name, bytes):
                    name = name.decode()
                if name.startswith("t") and name[1:].isdigit():
                    lags.append((now_ms - int(name[1:])) / 1000)

    sm.apply_group = timed_apply
    failed: list[BaseException] = []

    def follow() -> None:
        try:
            sm.follow(s.batches(stop=stop), stop)
        except BaseException as exc:  # raised on the bench's thread below
            failed.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    try:
        follower.start()
        connected_by = time.monotonic() + 10.0
        while s.heartbeats == 0 and time.monotonic() < connected_by and follower.is_alive():
            time.sleep(0.05)
        writer.start()
        rate_out.close()
        writer.join(timeout=seconds * 20 + 60)  # bounded: a stuck writer is killed below
        reached = rate_in.recv() if rate_in.poll(0) else None
        time.sleep(2.0)
    finally:
        if writer.is_alive():
            writer.kill()
            writer.join()
        rate_in.close()
        stop.set()
        follower.join(timeout=30.0)
        s.close()
        sm.apply_group = plain_apply
    if failed:
        raise failed[0]
    return lags, reached


def _rate(rows: int, seconds: float) -> float | None:
    return rows / seconds if seconds else None


def _cpu(level: Level) -> str:
    if level.cpu_us is None:
        return "no events"
    server = (
        f" + {level.server_cpu_s / level.rows * 1e6:,.0f} µs of the server's" if level.server_cpu_s is not None else ""
    )
    return f"{level.cpu_us:,.0f} µs CPU per event{server}"


def run(env: StackEnv, profile: dict[str, Any], options: Any) -> list[Row]:
    quick = bool(profile.get("quick"))
    tasks, events = (300, 3_000) if quick else (2_000, 20_000)
    lag_seconds = 4 if quick else 10
    with rig(env, tasks, events) as r:
        lib = bare_library(r, 9100)
        frozen = bare_library(r, 9104, freeze_schema=True)
        stream = bare_stream(r, 9101)
        apply = applied(r, 9102)
        r.next_backlog(events, bookkeeping=True)
        bk_lib = bare_library(r, 9105, freeze_schema=True)
        bk_apply = applied(r, 9106)
        bk_unchanged = r.sm.stats.unchanged
        lags, reached = live_lag(r, 9103, lag_seconds)
    rates = [x for x in (lib.rate, frozen.rate) if x is not None]
    ceiling = max(rates) if rates else None
    lags.sort()
    per_tx = f"{ROWS_PER_TX} per transaction"
    return [
        Row(
            f"binlog events applied/s, scheduler bookkeeping ({bk_apply.rows:,} row events, {per_tx})",
            bk_apply.rate,
            bk_lib.rate,
            "/s",
            RATE_GOAL,
            note="fire_time + 1 min and version + 1 of recurring tasks, as the batch center writes at each fire: "
            f"{bk_unchanged:,} images recognised unchanged by their digest, nothing mapped or written but the "
            f"checkpoint; ceiling: the bare library (freeze_schema) over the same events; {_cpu(bk_apply)}",
        ),
        Row(
            f"binlog events applied/s, definition edits ({apply.rows:,} row events, {per_tx})",
            apply.rate,
            ceiling,
            "/s",
            RATE_GOAL,
            note="ceiling: the bare library (pymysqlreplication BinLogStreamReader, only_tables/only_events, "
            f"rows decoded; the faster of its two rows below) over the same events; {_cpu(apply)}",
        ),
        Row(
            f"binlog events decoded/s by BinlogChangeStream, no apply ({stream.rows:,} row events)",
            stream.rate,
            ceiling,
            "/s",
            note=f"ceiling: the bare library over the same events; {_cpu(stream)}",
        ),
        Row(
            f"binlog events decoded/s by the bare library ({lib.rows:,} row events)",
            lib.rate,
            None,
            "/s",
            note=f"BinLogStreamReader with only_schemas/only_tables/only_events, every event.rows decoded; {_cpu(lib)}",
        ),
        Row(
            f"binlog events decoded/s by the bare library, freeze_schema ({frozen.rows:,} row events)",
            frozen.rate,
            None,
            "/s",
            note="the same with freeze_schema=True (a known table id's TableMap is not parsed again); " + _cpu(frozen),
        ),
        Row(
            "binlog apply lag p99 at 2K events/s",
            percentile(lags, 99),
            None,
            "s",
            LAG_GOAL,
            note=f"p50 {percentile(lags, 50)} s over the {len(lags):,} of {2_000 * lag_seconds:,} row events "
            "applied by 2 s after the writer ended (a stream behind leaves the latest out); the writer "
            "(own process) reached " + (f"{reached:,.0f} events/s" if reached else "?"),
        ),
    ]
