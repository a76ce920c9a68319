"""The console as the admin (issue 28): how long its pages and API take over 20
businesses, 5,000 jobs and 1,000,000 run-log rows (quick profile: 100,000 rows), and the
run log's purge of those rows while a scheduler fires a steady load.

Set-up (not measured): a fresh MariaDB database; 20 native businesses registered as
`switchyard job add` registers them; 5,000 jobs with one fixed-rate trigger each, due a
day ahead (they never fire here); the run-log rows as fired records spread over the last
60 days (about 90 % final, the rest pending or received; half older than 30 days), loaded
with INSERT ... SELECT FROM seq_1_to_N without the binlog, plus a log-lines row per 50 runs.

Pages: the console's Starlette app in this process, driven by httpx (`TestClient`, no
network): each page fetched once to warm, then REPEAT times; the row gives the p95 (goal
<= 300 ms). Pages a branch does not have (a job list, the executors) are left out, said so.
The run-log business page renders its charts on the first fetch and keeps them a minute:
its cold fetch is its own row.

Purge: a threaded Scheduler (leader, lookahead 0: each occurrence is acquired and published
once due, so its publication time minus its T is the fire lag the store's contention would
show; with a lookahead the runs are published ahead and wait on the broker) fires STEADY
fixed-rate 1 s triggers on a bus that records that lag per message. p99 over BEFORE_S
seconds alone (the peer), then while `runs purge --older-than 30d` (SqlPurge, batches
of 5,000, 250 to a transaction, a pause after each transaction twice as long as it took) deletes the old final
rows; ratio during / before (goal: within 1.5x, the noise on this shared box).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from bench.harness import Deadline, Goal, Row, Section, StackEnv, fresh_database, lag_summary, percentile
from bench.workload import ThreadedScheduler, make_store, now_ms, pymysql_connect, skip_binlog
from scheduler_core.model import Job, JobCode, MisfirePolicy, Trigger, TriggerKind
from scheduler_core.ports import BusMessage, MessageBus, Received, Subscription
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.purge import SqlPurge
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms

NAME = "admin"
TITLE = "Console pages and API over 20 businesses / 5,000 jobs / the run log; the run-log purge under load"
BUSINESSES = 20
JOBS = 5000
ROWS_FULL = 1_000_000
ROWS_QUICK = 100_000
DAY_MS = 86_400_000
PAGE_GOAL_MS = 300.0
STEADY = 200  # fixed-rate 1 s triggers: 200 fires/s
LOAD_CHUNK = 250_000


class LagBus(MessageBus):
    """Publishes nowhere; records per command message its publication time minus its T
    (a packed message: its earliest run's, the most late of its runs)."""

    def __init__(self) -> None:
        self.lags: list[tuple[int, float]] = []  # (published ms, lag s)
        self._lock = threading.Lock()

    def publish(self, messages: Sequence[BusMessage]) -> None:
        now = now_ms()
        with self._lock:
            for m in messages:
                t = m.properties.get("scheduled_at")  # a packed message's: its earliest run's
                if t is not None:
                    self.lags.append((now, (now - int(t)) / 1000))

    def between(self, start_ms: int, end_ms: int) -> list[float]:
        with self._lock:
            return [lag for at, lag in self.lags if start_ms <= at < end_ms]

    def subscribe(self, topic: str, subscription: str) -> Subscription:
        return _Nothing()

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        pass

    def close(self) -> None:
        pass


class _Nothing(Subscription):
    def receive(self, max_messages: int, timeout: timedelta) -> list[Received]:
        time.sleep(min(timeout.total_seconds(), 0.05))
        return []

    def ack(self, received: Received) -> None:
        pass

    def nack(self, received: Received) -> None:
        pass

    def close(self) -> None:
        pass


def _load_jobs(url: str, now: int) -> None:
    conn = pymysql_connect(url)
    try:
        with conn.cursor() as cur:
            skip_binlog(cur)
            cur.execute(
                "INSERT INTO dus_job (job_code, biz_code, handler, params, shard_total, timeout_ms, max_retry,"
                " priority, envelope_size, explicit_items, shadow, created_at, updated_at)"
                f" SELECT CONCAT('biz', LPAD(MOD(seq, {BUSINESSES}), 2, '0'), '-job', seq),"
                f" CONCAT('biz', LPAD(MOD(seq, {BUSINESSES}), 2, '0')), 'bench', '', 1, 0, 0, 5, 1, 0, 0, %s, %s"
                f" FROM seq_1_to_{JOBS}",
                (now, now),
            )
            cur.execute(
                "INSERT INTO dus_job_trigger (job_id, job_code, biz_code, kind, cron_expr, interval_ms, time_zone,"
                " end_at, next_fire_at, state, priority, misfire_policy, version, created_at, updated_at)"
                " SELECT id, job_code, biz_code, 'fixed_rate', NULL, 60000, 'UTC', NULL, %s, 'waiting', 5,"
                " 'fire_once_now', 0, %s, %s FROM dus_job",
                (now + DAY_MS, now, now),
            )
        conn.commit()
    finally:
        conn.close()


def _load_runs(url: str, rows: int, now: int) -> float:
    """`rows` fired records over the last 60 days (trigger ids of the 5,000 jobs), ~90 %
    final; a log-lines row per 50. Returns rows/s."""
    conn = pymysql_connect(url)
    span = 60 * DAY_MS
    started = time.perf_counter()
    try:
        with conn.cursor() as cur:
            skip_binlog(cur)
            done = 0
            while done < rows:
                n = min(LOAD_CHUNK, rows - done)
                # seq spreads evenly over the span; the trigger (1..JOBS) picks the job and business
                at = f"({now} - {span} + FLOOR(({done} + seq) * {span} / {rows}))"
                tid = f"(1 + MOD({done} + seq, {JOBS}))"
                state = (
                    f"CASE WHEN MOD({done} + seq, 20) = 0 THEN 'failed' WHEN MOD({done} + seq, 20) = 1 THEN 'pending'"
                    f" WHEN MOD({done} + seq, 50) = 7 THEN 'received' ELSE 'succeeded' END"
                )
                cur.execute(
                    "INSERT INTO dus_fired_record (command_id, trigger_id, job_code, biz_code, scheduled_at,"
                    " item_index, item_total, state, state_rank, epoch, fired_at, received_at, started_at, result_at,"
                    " attempt, misfired, message, item_count, succeeded_items, failed_items)"
                    f" SELECT CONCAT({tid}, '-', {at}, '-0'), {tid},"
                    f" CONCAT('biz', LPAD(MOD({tid}, {BUSINESSES}), 2, '0'), '-job', {tid}),"
                    f" CONCAT('biz', LPAD(MOD({tid}, {BUSINESSES}), 2, '0')), {at}, 0, 1, {state},"
                    f" CASE {state} WHEN 'pending' THEN 0 WHEN 'received' THEN 2 ELSE 3 END, 1,"
                    f" {at} - 5, {at} + MOD(seq, 40), {at} + MOD(seq, 40) + 1, {at} + 200, 0, 0, '', 1, 0, 0"
                    f" FROM seq_1_to_{n}"
                )
                cur.execute(
                    "INSERT INTO dus_run_log (command_id, attempt, fired_id, item_index, logged_at, truncated, log_text)"
                    f" SELECT CONCAT({tid}, '-', {at}, '-0'), 0, CONCAT({tid}, '-', {at}, '-0'), 0, {at} + 200, 0,"
                    f" 'INFO handler.bench one line of the handler' FROM seq_1_to_{n} WHERE MOD(seq, 50) = 3"
                )
                conn.commit()
                done += n
            cur.execute("ANALYZE TABLE dus_fired_record, dus_run_log")
            cur.fetchall()
    finally:
        conn.close()
    return rows / max(1e-9, time.perf_counter() - started)


def _register_businesses(store: SqlTriggerStore) -> None:
    from migrator.business import BusinessRegistry
    from switchyard.wiring import migrator_store

    reg = BusinessRegistry(migrator_store(store))
    for i in range(BUSINESSES):
        reg.register_native(f"biz{i:02d}", actor="bench", reason="bench admin section")


def _measure_pages(store: SqlTriggerStore, now: int, repeat: int) -> tuple[dict[str, dict[str, Any]], list[str]]:
    from starlette.testclient import TestClient

    from switchyard.console.app import make_app
    from switchyard.console.data import Sources

    client = TestClient(make_app(Sources(store)))
    deep = f"{now - 50 * DAY_MS}:z"  # 50 days back: most of the table above it
    pages = {
        "businesses (/)": "/",
        "API /api/businesses": "/api/businesses",
        "a business (/business/biz03)": "/business/biz03",
        "job list (/jobs)": "/jobs",
        "API job list (/api/jobs)": "/api/jobs",
        "executors (/executors)": "/executors",
        "run log, first page (/runs)": "/runs",
        "run log, a deep page (50 days back)": f"/runs?window=90d&before={deep}",
        "API run log, first page": "/api/runs?window=90d",
        "API run log, a deep page": f"/api/runs?window=90d&before={deep}",
        "API run log, one business's failures": "/api/runs?business=biz03&state=failed&window=30d",
        "run log of a business with charts (cached)": "/runs?business=biz03&window=30d",
        "API daily runs and lag (14 days)": "/api/runs/daily?business=biz05&days=14",
        "a run with its log lines": None,  # filled below
    }
    rows = client.get("/api/runs", params={"window": "90d", "limit": "1"}).json()["runs"]
    pages["a run with its log lines"] = f"/runs/{rows[0]['id']}" if rows else "/runs"
    out: dict[str, dict[str, Any]] = {}
    missing: list[str] = []
    cold = time.perf_counter()
    client.get("/runs?business=biz07&window=30d")
    out["run log of a business with charts (cold: charts drawn)"] = {
        "p95_ms": (time.perf_counter() - cold) * 1000,
        "median_ms": None,
        "n": 1,
    }
    for name, path in pages.items():
        assert path is not None
        first = client.get(path)
        if first.status_code == 404 and path.split("?")[0] in ("/jobs", "/api/jobs", "/executors"):
            missing.append(path)
            continue
        if first.status_code != 200:
            raise RuntimeError(f"{path}: {first.status_code} {first.text[:300]}")
        times = []
        for _ in range(repeat):
            t = time.perf_counter()
            r = client.get(path)
            times.append((time.perf_counter() - t) * 1000)
            assert r.status_code == 200, (path, r.status_code)
        out[name] = {"p95_ms": percentile(times, 95), "median_ms": statistics.median(times), "n": repeat}
    return out, missing


def _steady_job(store: SqlTriggerStore, now: int) -> None:
    job = store.put_job(Job(job_code=JobCode("steady"), biz_code="steady", handler="bench", timeout=timedelta(0)))
    store.add_triggers(
        [
            Trigger(
                job_code=job.job_code,
                biz_code="steady",
                kind=TriggerKind.FIXED_RATE,
                interval=timedelta(seconds=1),
                time_zone="UTC",
                next_fire_at=from_ms(now + 2000 + (i * 1000) // STEADY),
                misfire_policy=MisfirePolicy.FIRE_ONCE_NOW,
            )
            for i in range(STEADY)
        ]
    )


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = bool(profile["quick"])
    rows = ROWS_QUICK if quick else ROWS_FULL
    repeat = 5 if quick else 30
    before_s = 6.0 if quick else 20.0
    sec = Section(NAME, TITLE)
    sec.settings = {
        "businesses": BUSINESSES,
        "jobs": JOBS,
        "run_log_rows": rows,
        "profile_rows_note": "quick profile: 100,000 run-log rows (full: 1,000,000)" if quick else "full",
        "repeat": repeat,
        "client": "httpx TestClient against the Starlette app in this process (no network)",
        "steady_load": f"{STEADY} fixed-rate 1 s triggers, lookahead 0, a bus that records publish - T",
        "purge": "older than 30 days, batch 5,000 (250 per transaction), pause >= twice the batch's time",
    }
    with fresh_database(env.mariadb_url, "bench_admin") as url:
        store = make_store(url, 8)
        now = now_ms()
        t = time.perf_counter()
        _register_businesses(store)
        _load_jobs(url, now)
        rate = _load_runs(url, rows, now)
        sec.raw["load"] = {"seconds": time.perf_counter() - t, "run_rows_per_s": rate}
        t = time.perf_counter()
        pages, missing = _measure_pages(store, now, repeat)
        sec.raw["pages_seconds"] = time.perf_counter() - t
        sec.raw["pages"] = pages
        for name, p in pages.items():
            sec.rows.append(
                Row(
                    f"{name}, p95 of {p['n']}",
                    p["p95_ms"],
                    unit="ms",
                    goal=Goal("value_max", PAGE_GOAL_MS, "ms"),
                    note="" if p["median_ms"] is None else f"median {p['median_ms']:.0f} ms",
                )
            )
        if missing:
            sec.notes.append(f"not on this branch (404, left out): {', '.join(missing)}")

        # the purge while a scheduler fires a steady load
        _steady_job(store, now_ms())
        bus = LagBus()
        settings = SchedulerSettings(lookahead=timedelta(0))
        ts = ThreadedScheduler(store, bus, settings)
        ts.start()
        try:
            warm = Deadline(30)
            while len(bus.lags) < STEADY * 3 and not warm.expired():
                time.sleep(0.1)
            b0 = now_ms()
            time.sleep(before_s)
            b1 = now_ms()
            purge_store = make_store(url, 8, pool_size=2)
            p0 = now_ms()
            done = SqlPurge(purge_store).run(now_ms() - 30 * DAY_MS, batch=5000, pause_s=0.05)
            p1 = now_ms()
            purge_store.close()
            time.sleep(1.0)  # the fires due during the purge's last batch
        finally:
            ts.close()
        before = lag_summary(bus.between(b0, b1))
        during = lag_summary(bus.between(p0, p1))
        purge_s = (p1 - p0) / 1000
        sec.raw["purge"] = {**done.as_dict(), "seconds": purge_s, "lag_before_s": before, "lag_during_s": during}
        sec.rows.append(
            Row(
                f"purge: fired records deleted (older than 30 d, final; {done.batches} batches)",
                done.fired / max(purge_s, 1e-9),
                unit="/s",
                note=f"{done.fired:,} records + {done.run_logs:,} log rows in {purge_s:.1f} s; "
                f"slowest batch {done.as_dict()['slowest_batch_ms']} ms",
            )
        )
        b99, d99 = before["p99"], during["p99"]
        sec.rows.append(
            Row(
                "fire lag p99 during the purge (peer: the same scheduler just before it)",
                None if d99 is None else d99 * 1000,
                None if b99 is None else b99 * 1000,
                unit="ms",
                goal=Goal("ratio_max", 1.5),
                note=f"{during['count']} fires during, {before['count']} before; p50 "
                f"{(during['p50'] or 0) * 1000:.0f} vs {(before['p50'] or 0) * 1000:.0f} ms",
            )
        )
        store.close()
    if quick:
        sec.notes.append("quick profile: 100,000 run-log rows, not the issue's 1,000,000")
    return sec


__all__ = ["NAME", "TITLE", "run"]
