"""Binlog apply: row events/s applied to the target, and apply lag at 2K events/s.

A batch-center legacy database on the real MariaDB, snapshotted into a fresh target;
then row updates in 10-row transactions. Switchyard: `migrator.stream.StreamMigrator`
applying committed transactions from their row images (mapping, ledger, checkpoint, one
target transaction per group of transactions). The ceiling: the bare
`BinlogChangeStream` decoding the very same events with no apply. Lag: a writer holds 2K row events/s while the
stream applies live; each row carries its write time, the lag is apply commit minus it.
"""
from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import make_url

from bench.harness import Goal, Row, StackEnv, fresh_database, percentile

RATE_GOAL = Goal("value_min", 10_000, "/s")
LAG_GOAL = Goal("value_max", 1.0, "s")
ROWS_PER_TX = 10


def _conn(url: str) -> dict[str, Any]:
    u = make_url(url)
    return {"host": u.host or "127.0.0.1", "port": u.port or 3306, "user": u.username, "password": u.password or ""}


def run(env: StackEnv, profile: dict[str, Any], options: Any) -> list[Row]:
    from migrator.apply import Migrator
    from migrator.stream import StreamMigrator
    from migrator.target import TargetWriter
    from readers.batchcenter.reader import BatchCenterReader
    from readers.legacy_ddl.loader import create_legacy_schema
    from readers.seed import seed_batchcenter
    from readers.streams import BinlogChangeStream, consistent_snapshot, current_position
    from scheduler_core.clock import SystemClock
    from scheduler_core.store.admin import init_schema
    from scheduler_core.store.engine import make_engine
    from scheduler_core.store.sql import SqlTriggerStore

    quick = bool(profile.get("quick"))
    tasks, events = (300, 3_000) if quick else (2_000, 20_000)
    lag_seconds = 4 if quick else 10
    cdc = env.values.get("SWITCHYARD_MARIADB_CDC_URL") or env.mariadb_url
    with fresh_database(env.mariadb_url, "bench_binlog_legacy") as legacy_url, \
            fresh_database(env.mariadb_url, "bench_binlog_target") as target_url:
        legacy = make_engine(legacy_url)
        create_legacy_schema(legacy, "batch-center")
        seed_batchcenter(legacy, businesses=4, tasks_per_business=tasks // 4, bad_rows=0, malformed_crons=0)
        target = make_engine(target_url)
        init_schema(target, 16)
        clock = SystemClock()
        store = SqlTriggerStore(target, clock)
        reader = BatchCenterReader(legacy)
        writer = TargetWriter(store)
        sm = StreamMigrator(reader, writer, Migrator(reader, writer, clock), "bench")
        with consistent_snapshot(legacy) as (conn, pos):
            sm.snapshot(BatchCenterReader(conn), pos)
        with legacy.connect() as c:
            ids = [i for (i,) in c.execute(text("SELECT id FROM bc_task ORDER BY id"))]
        schema = make_url(legacy_url).database
        settings = _conn(make_url(cdc).set(database=schema).render_as_string(hide_password=False))

        def write(n_events: int, pace_per_s: float | None = None) -> None:
            done = 0
            started = time.perf_counter()
            while done < n_events:
                with legacy.begin() as c:
                    for k in range(ROWS_PER_TX):
                        c.execute(text("UPDATE bc_task SET task_name = :n, max_retry = (max_retry + 1) % 4 "
                                       "WHERE id = :id"),
                                  {"n": f"t{time.time_ns() // 1_000_000}", "id": ids[(done + k) % len(ids)]})
                done += ROWS_PER_TX
                if pace_per_s:
                    ahead = done / pace_per_s - (time.perf_counter() - started)
                    if ahead > 0:
                        time.sleep(ahead)

        # 1. a backlog of events, then the ceiling (decode only) and the apply over it
        start = sm.checkpoint()
        assert start is not None
        write(events)
        end = current_position(legacy)

        def stream(from_pos: Any, server_id: int) -> Any:
            return BinlogChangeStream(settings, server_id=server_id, schemas=[schema], tables=["bc_task", "bc_biz"],
                                      start=from_pos)

        t0 = time.perf_counter()
        decoded = 0
        s = stream(start, 9101)
        for batch in s.batches(idle_timeout_s=2.0):
            decoded += len(batch.changes)
            if (batch.position.log_file, batch.position.log_pos) >= (end.log_file, end.log_pos):
                break
        s.close()
        decode_s = time.perf_counter() - t0

        def until_end(batches: Any) -> Any:
            for batch in batches:
                yield batch
                if (batch.position.log_file, batch.position.log_pos) >= (end.log_file, end.log_pos):
                    return

        t0 = time.perf_counter()
        s = stream(start, 9102)
        sm.follow(until_end(s.batches(idle_timeout_s=2.0)))  # grouped apply, as `migrate stream` runs
        s.close()
        apply_s = time.perf_counter() - t0
        applied = sm.stats.changes

        # 2. lag at 2K events/s, applied live. The stream is connected and idle (its first
        # heartbeat seen) before the writer starts, as a running `migrate stream` is: the lag
        # is the steady state's, not the connect and preflight of a process just started
        lags: list[float] = []
        stop = threading.Event()
        live_from = sm.checkpoint()
        writer_thread = threading.Thread(target=write, args=(2_000 * lag_seconds, 2_000.0), daemon=True)
        s = BinlogChangeStream(settings, server_id=9103, schemas=[schema], tables=["bc_task", "bc_biz"],
                               start=live_from, heartbeat_s=1.0)
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

        sm.apply_group = timed_apply  # type: ignore[method-assign]
        failed: list[BaseException] = []

        def follow() -> None:
            try:
                sm.follow(s.batches(stop=stop), stop)
            except BaseException as exc:  # raised on the bench's thread below
                failed.append(exc)

        follower = threading.Thread(target=follow, daemon=True)
        follower.start()
        connected_by = time.monotonic() + 10.0
        while s.heartbeats == 0 and time.monotonic() < connected_by and follower.is_alive():
            time.sleep(0.05)
        writer_thread.start()
        writer_thread.join()
        time.sleep(2.0)
        stop.set()
        follower.join(timeout=30.0)
        if failed:
            raise failed[0]
        s.close()
        legacy.dispose()
        target.dispose()
    lags.sort()
    rate = applied / apply_s if apply_s else None
    ceiling = decoded / decode_s if decode_s else None
    return [
        Row(f"binlog events applied/s ({applied:,} row events, {ROWS_PER_TX} per transaction)", rate, ceiling, "/s",
            RATE_GOAL, note="ceiling: the bare BinlogChangeStream decoding the same events, no apply"),
        Row("binlog apply lag p99 at 2K events/s", percentile(lags, 99), None, "s", LAG_GOAL,
            note=f"p50 {percentile(lags, 50)} s over {len(lags):,} row events"),
    ]
