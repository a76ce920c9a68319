"""Scale: cost per admitted trigger (µs) and peak RSS as the trigger table grows and as
the partition count changes. Only a fixed-size due set is ever in the window; the rest
of the table is waiting far beyond the lookahead (1..30 days out).

Table-size curve (16 partitions): one database grows 100K -> 1M -> 5M rows (quick: 10K
-> 100K); at each size a fresh due set of D one-shot triggers is inserted and admitted
by `SchedulerCore` inline with a no-op bus, in a child process of its own, so its
peak RSS (VmHWM) is that measurement's alone. Partition curve: 4, 16 and 64
partitions at the 1M size (quick: 100K), one database each.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from typing import Any

from bench.harness import Deadline, Goal, Row, Section, StackEnv, fresh_database, peak_rss_mb
from bench.workload import CountingBus, analyze, bench_job, drive_inline, load_triggers, make_store, now_ms

NAME = "scale"
TITLE = "cost per trigger and peak memory vs table size and partitions"
DAY_MS = 86_400_000
FLATNESS = Goal("ratio_max", 1.5)  # largest / smallest table: cost ratio


def _measure(url: str, partitions: int, due: int, limit_s: float, q: Any) -> None:
    try:
        from scheduler_core.settings import SchedulerSettings

        store = make_store(url, partitions)
        rss0 = peak_rss_mb()
        t0 = time.process_time()
        d = drive_inline(store, CountingBus(), SchedulerSettings(), due, Deadline(limit_s))
        cpu = time.process_time() - t0
        rss1 = peak_rss_mb()
        store.close()
        q.put(
            {
                "seconds": d.seconds,
                "fired": d.fired,
                "ticks": d.ticks,
                "complete": d.complete,
                "us_per_trigger": d.seconds / max(1, d.fired) * 1e6,
                "cpu_us_per_trigger": cpu / max(1, d.fired) * 1e6,
                "rss_before_mb": rss0,
                "peak_rss_mb": rss1,
            }
        )
    except Exception as exc:  # noqa: BLE001
        q.put({"error": f"{type(exc).__name__}: {exc}"})


def measure(url: str, partitions: int, due: int, limit_s: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_measure, args=(url, partitions, due, limit_s, q), daemon=True)
    p.start()
    r = q.get(timeout=limit_s + 120)
    p.join(timeout=30)
    if "error" in r:
        raise RuntimeError(r["error"])
    return r


def _combine(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median cost, highest peak, and the single runs."""
    from bench.harness import median

    return {
        "us_per_trigger": median(r["us_per_trigger"] for r in runs),
        "cpu_us_per_trigger": median(r["cpu_us_per_trigger"] for r in runs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in runs),
        "rss_before_mb": min(r["rss_before_mb"] for r in runs),
        "complete": all(r["complete"] for r in runs),
        "runs": runs,
    }


def _add_due(url: str, job: Any, due: int) -> None:
    load_triggers(url, job, due, first_ms=now_ms() - 60_000, spread_ms=60_000)
    analyze(url)


def _table_rows(url: str) -> int:
    from bench.harness import pymysql_connect

    conn = pymysql_connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM dus_job_trigger")
            return int(cur.fetchone()[0])
    finally:
        conn.close()


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    sizes = [10_000, 100_000] if quick else [100_000, 1_000_000, 5_000_000]
    part_size = sizes[-1] if quick else 1_000_000
    partitions = [4, 16, 64]
    due = 2_000 if quick else 10_000
    reps = 1 if quick else 2
    limit_s = 120.0 if quick else 300.0
    sec = Section(NAME, TITLE)
    sec.settings = {
        "sizes": sizes,
        "partition_sweep_at": part_size,
        "partitions": partitions,
        "due_set": due,
        "driver": "SchedulerCore inline, no-op bus, child process per point",
        "far_rows": "waiting, next_fire_at 1..30 days ahead (outside the 30-min lookahead)",
        "load": "INSERT ... SELECT FROM seq_1_to_N, 500K rows per statement, not binlogged",
        "repetitions": reps,
    }
    size_points: list[dict[str, Any]] = []
    part_points: list[dict[str, Any]] = []
    with fresh_database(env.mariadb_url, "bench_scale") as url:
        store = make_store(url, 16)
        far = store.put_job(bench_job("far"))
        job = store.put_job(bench_job("scale"))
        store.close()
        have = 0
        for size in sizes:
            t = time.perf_counter()
            load_triggers(url, far, max(0, size - have - due), first_ms=now_ms() + DAY_MS, spread_ms=29 * DAY_MS)
            load_s = time.perf_counter() - t
            runs = []
            for _ in range(reps):
                _add_due(url, job, due)
                rows = _table_rows(url)
                runs.append(measure(url, 16, due, limit_s))
            r = _combine(runs)
            r.update(table_rows=rows, partitions=16, load_seconds=load_s)
            size_points.append(r)
            have = rows
            if size == part_size:
                part_points.append(dict(r))
    for p in partitions:
        if p == 16 and part_points:
            continue
        with fresh_database(env.mariadb_url, "bench_scalep") as url:
            store = make_store(url, p)
            far = store.put_job(bench_job("far"))
            job = store.put_job(bench_job("scale"))
            store.close()
            load_triggers(url, far, part_size - due, first_ms=now_ms() + DAY_MS, spread_ms=29 * DAY_MS)
            runs = []
            for _ in range(reps):
                _add_due(url, job, due)
                rows = _table_rows(url)
                runs.append(measure(url, p, due, limit_s))
            r = _combine(runs)
            r.update(table_rows=rows, partitions=p)
            part_points.append(r)
    part_points.sort(key=lambda r: r["partitions"])
    sec.raw = {"by_size": size_points, "by_partitions": part_points}
    base = size_points[0]
    for r in size_points:
        sec.rows.append(
            Row(
                f"{r['table_rows']:,} rows, 16 partitions: µs per trigger",
                r["us_per_trigger"],
                base["us_per_trigger"],
                "µs",
                FLATNESS if r is size_points[-1] else None,
                note=f"peak RSS {r['peak_rss_mb']:.0f} MB (start {r['rss_before_mb']:.0f} MB), "
                f"CPU {r['cpu_us_per_trigger']:.0f} µs/trigger; ratio vs smallest table",
            )
        )
    pbase = next((r for r in part_points if r["partitions"] == 16), part_points[0])
    for r in part_points:
        sec.rows.append(
            Row(
                f"{r['table_rows']:,} rows, {r['partitions']} partitions: µs per trigger",
                r["us_per_trigger"],
                pbase["us_per_trigger"],
                "µs",
                note=f"peak RSS {r['peak_rss_mb']:.0f} MB; ratio vs 16 partitions",
            )
        )
    sec.notes.append(
        f"due set D = {due:,} triggers per point, median of {reps}; µs per trigger = wall time to admit "
        "and fire D / D (CPU = this process's CPU time / D). Goal: the largest table costs <= 1.5x "
        "the smallest (flat curve). A later size's table also holds the earlier due sets, completed."
    )
    return sec
