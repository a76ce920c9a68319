"""Versus the legacy execution model (what xxl-job's JobScheduleHelper and the batch
center do), built faithfully, against Switchyard with the same handlers.

Legacy, per scheduler instance (a process each; 1, 2 or 4 of them on one database):
    loop:
      BEGIN
      SELECT * FROM legacy_lock WHERE lock_name = 'schedule_lock' FOR UPDATE
      SELECT id, next_fire_time FROM legacy_task WHERE status = 1 AND next_fire_time <= now
        ORDER BY next_fire_time LIMIT 6000        -- xxl-job's pre-read: (200 + 100) * 20
      for each task: take a worker of a bounded pool (200 threads, xxl-job's fast pool
        maximum; the loop blocks while all are busy), which calls the business over HTTP
        and is held until the call returns; UPDATE the task's next_fire_time (+1 h)
      COMMIT; when nothing was due, sleep 1 s
The business is a local ThreadingHTTPServer (own process) that sleeps for the handler
latency. Dispatch = the worker starting the business call; dispatch rate = tasks
dispatched / time; fire-time lag = dispatch - the task's fire time. All N tasks are due
at the start (a burst), every run is bounded in time.

Switchyard: the same N one-shot triggers due at the start, the threaded Scheduler,
Pulsar, an Executor process (concurrency 200, default job timeout) whose handler makes
the same HTTP call. Its dispatch rate is commands published per second (the scheduler
never waits for a handler); executor completions/s are shown for reference.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from bench import cpu
from bench.executors import ExecutorHost, HostConfig
from bench.harness import (
    Deadline,
    Goal,
    Row,
    Section,
    StackEnv,
    bench_prefix,
    delete_topics,
    fresh_database,
    lag_summary,
    median,
    pymysql_connect,
)
from bench.workload import ThreadedScheduler, bench_job, load_triggers, make_store, now_ms
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

NAME = "vs_legacy"
TITLE = "versus the legacy execution model (lock row FOR UPDATE + bounded blocking pool)"
GOAL = Goal("ratio_min", 6.0)  # issue 19: dispatch vs the legacy model at 200 ms
POOL = 200
PRE_READ = 6000
LEGACY = "legacy instance process(es)"


# --- the business endpoint ---------------------------------------------------------------------


def _serve(q: Any) -> None:
    import urllib.parse
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.0"

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            qs = urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query)
            time.sleep(int(qs.get("ms", ["0"])[0]) / 1000)
            body = b"ok"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    class Server(ThreadingHTTPServer):
        request_queue_size = 2048
        daemon_threads = True

    srv = Server(("127.0.0.1", 0), H)
    q.put(srv.server_address[1])
    srv.serve_forever(poll_interval=0.2)


class BusinessEndpoint:
    """A local HTTP endpoint that sleeps `ms` per call (own process, loopback only)."""

    def __enter__(self) -> BusinessEndpoint:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        self.proc = ctx.Process(target=_serve, args=(q,), daemon=True)
        self.proc.start()
        self.port = int(q.get(timeout=30))
        return self

    @property
    def pid(self) -> int:
        pid = self.proc.pid
        assert pid is not None  # started in __enter__
        return pid

    def url(self, ms: int) -> str:
        return f"http://127.0.0.1:{self.port}/task?ms={ms}"

    def __exit__(self, *exc: Any) -> None:
        self.proc.terminate()
        self.proc.join(timeout=10)


# --- the legacy scheduler ---------------------------------------------------------------------------


LEGACY_DDL = (
    "CREATE TABLE legacy_lock (lock_name VARCHAR(50) NOT NULL PRIMARY KEY) ENGINE=InnoDB",
    "INSERT INTO legacy_lock VALUES ('schedule_lock')",
    "CREATE TABLE legacy_task (id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY, biz_code VARCHAR(64) NOT NULL,"
    " handler_url VARCHAR(255) NOT NULL, status TINYINT NOT NULL, next_fire_time BIGINT NOT NULL,"
    " last_fire_time BIGINT NULL, KEY idx_status_fire (status, next_fire_time)) ENGINE=InnoDB",
)


def legacy_load(url: str, n: int, fire_ms: int, handler_url: str) -> None:
    conn = pymysql_connect(url)
    try:
        with conn.cursor() as cur:
            for stmt in LEGACY_DDL:
                cur.execute(stmt)
            cur.execute(
                f"INSERT INTO legacy_task (biz_code, handler_url, status, next_fire_time)"
                f" SELECT 'legacy', %s, 1, %s FROM seq_1_to_{n}",
                (handler_url, fire_ms),
            )
        conn.commit()
    finally:
        conn.close()


def _call(url: str) -> bool:
    from bench.executors import _http_call

    try:
        return _http_call(url)
    except OSError:
        return False


def legacy_instance(url: str, expected: int, limit_s: float, start: Any, q: Any) -> None:
    """One legacy scheduler instance (runs in its own process)."""
    try:
        conn = pymysql_connect(url)
        pool = ThreadPoolExecutor(max_workers=POOL)
        slots = threading.Semaphore(POOL)
        dispatched: list[tuple[int, int]] = []  # (fire ms, dispatch ms)
        done = {"ok": 0, "failed": 0}
        lock = threading.Lock()
        cycles = lock_wait_ms = 0.0

        def work(fire_ms: int, target: str) -> None:
            try:
                started = now_ms()
                with lock:
                    dispatched.append((fire_ms, started))
                ok = _call(target)
                with lock:
                    done["ok" if ok else "failed"] += 1
            finally:
                slots.release()

        start.wait()
        end = time.monotonic() + limit_s
        with conn.cursor() as cur:
            while time.monotonic() < end:
                conn.begin()
                w0 = time.perf_counter()
                cur.execute("SELECT lock_name FROM legacy_lock WHERE lock_name = 'schedule_lock' FOR UPDATE")
                lock_wait_ms += (time.perf_counter() - w0) * 1000
                cur.execute(
                    "SELECT id, next_fire_time, handler_url FROM legacy_task WHERE status = 1"
                    " AND next_fire_time <= %s ORDER BY next_fire_time LIMIT %s",
                    (now_ms(), PRE_READ),
                )
                rows = cur.fetchall()
                for task_id, fire_ms, target in rows:
                    if time.monotonic() >= end:
                        break
                    slots.acquire()  # a bounded pool: the loop waits (holding the lock) for a free worker
                    pool.submit(work, fire_ms, target)
                    cur.execute(
                        "UPDATE legacy_task SET next_fire_time = %s, last_fire_time = %s WHERE id = %s",
                        (fire_ms + 3_600_000, fire_ms, task_id),
                    )
                conn.commit()
                cycles += 1
                if not rows:
                    # the burst is all taken (a dispatched task moves an hour ahead); xxl-job
                    # would sleep to the next second here and read again
                    break
        # the dispatch loop is over: the parent's CPU window ends when every instance is
        # here, with each instance's own CPU reading (one may have drained and exited by then)
        q.put({"looped": True, "cpu_s": time.process_time()})
        pool.shutdown(wait=True, cancel_futures=False)
        conn.close()
        q.put({"dispatched": dispatched, "done": done, "cycles": cycles, "lock_wait_ms": lock_wait_ms})
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        q.put({"error": f"{type(exc).__name__}: {exc}"})


def run_legacy(
    env: StackEnv, endpoint: BusinessEndpoint, instances: int, latency_ms: int, n: int, limit_s: float
) -> dict[str, Any]:
    with fresh_database(env.mariadb_url, "bench_leg") as url:
        t_fire = now_ms()
        legacy_load(url, n, t_fire, endpoint.url(latency_ms))
        ctx = mp.get_context("spawn")
        q, start = ctx.Queue(), ctx.Event()
        procs = [
            ctx.Process(target=legacy_instance, args=(url, n, limit_s, start, q), daemon=True) for _ in range(instances)
        ]
        for p in procs:
            p.start()
        time.sleep(1.5)  # interpreters up
        t_fire = now_ms()
        conn = pymysql_connect(url, autocommit=True)
        with conn.cursor() as cur:  # all due at the gun
            cur.execute("UPDATE legacy_task SET next_fire_time = %s", (t_fire,))
        conn.close()
        # CPU over the dispatch loops (until every instance has left its loop; the pool's
        # calls still running then are not counted): the instances, the endpoint, the
        # server; the broker and this process are idle here and only watched
        window = cpu.CpuWindow(
            {
                LEGACY: [p.pid for p in procs if p.pid is not None],
                cpu.ENDPOINT: [endpoint.pid],
                cpu.MARIADB: cpu.mariadb_pids(),
            },
            watch={cpu.PULSAR: cpu.pulsar_pids()},
        ).start()
        t0 = now_ms()
        start.set()
        results, looped, loop_cpu = [], 0, 0.0
        while looped < len(procs):
            msg = q.get(timeout=limit_s + 120)
            if "looped" in msg:
                looped += 1
                loop_cpu += msg["cpu_s"]
                continue
            results.append(msg)
            looped += "error" in msg  # a failed instance sends no "looped"
        window.stop().fill_missing({LEGACY: loop_cpu}, replace=True)
        while len(results) < len(procs):
            results.append(q.get(timeout=limit_s + 120))
        for p in procs:
            p.join(timeout=30)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    disp = [d for r in results for d in r["dispatched"]]
    lags = [(d - f) / 1000 for f, d in disp]
    last = max((d for _, d in disp), default=t0)
    secs = max(1e-3, (last - t0) / 1000)
    in_window = [d for _, d in disp if d - t0 <= limit_s * 1000]
    return {
        "instances": instances,
        "latency_ms": latency_ms,
        "tasks": n,
        "dispatched": len(disp),
        "rate": len(in_window) / min(secs, limit_s),
        "seconds": secs,
        "complete": len(disp) >= n,
        "lag_s": lag_summary(lags),
        "ok": sum(r["done"]["ok"] for r in results),
        "failed": sum(r["done"]["failed"] for r in results),
        "cycles": [r["cycles"] for r in results],
        "lock_wait_ms": [r["lock_wait_ms"] for r in results],
        "cpu": window.figures(len(disp), unit="dispatch"),
    }


# --- Switchyard with the same handlers -------------------------------------------------------------


def run_switchyard(
    env: StackEnv, endpoint: BusinessEndpoint, latency_ms: int, n: int, limit_s: float
) -> dict[str, Any]:
    prefix = bench_prefix("leg")
    with fresh_database(env.mariadb_url, "bench_legsy") as url:
        store = make_store(url, 16, pool_size=16)
        bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
        try:
            job = store.put_job(bench_job("legacy"))
            cfg = HostConfig(
                env.pulsar_url,
                prefix,
                ["legacy"],
                {"legacy": n},
                handler=f"http:{endpoint.url(latency_ms)}",
                concurrency=POOL,
                deadline_s=limit_s + 10,
                keep_lags=False,
            )
            with ExecutorHost(cfg) as host:
                t_fire = now_ms()
                load_triggers(url, job, n, first_ms=t_fire)
                ts = ThreadedScheduler(store, bus, SchedulerSettings())
                # CPU over the dispatch window (the scheduler's start until the N-th command
                # was published): this process, the executor making the HTTP calls, the
                # endpoint answering them (own process), the server and the broker
                window = cpu.CpuWindow.pipeline({cpu.EXECUTOR: host.pids, cpu.ENDPOINT: [endpoint.pid]}).start()
                t0 = time.time()
                ts.start()
                published = ts.wait_fired(n, Deadline(limit_s))
                window.stop()
                fired = ts.fired()
                ts.close()
                fig = host.wait(limit_s)["legacy"]
                window.fill_missing({cpu.EXECUTOR: fig.cpu_end_s})  # had it finished and exited
            conn = pymysql_connect(url, autocommit=True)
            with conn.cursor() as cur:
                # fire lag: the fired record written - T. The fire path stamps no publication
                # time (FiredState) and results are not consumed here, so no receipt time
                # either; the chunk's messages are published right after its records.
                cur.execute("SELECT fired_at - scheduled_at FROM dus_fired_record WHERE fired_at IS NOT NULL")
                fire_lags = [int(r[0]) / 1000 for r in cur.fetchall()]
            conn.close()
        finally:
            bus.close()
            store.close()
            delete_topics(env.pulsar_admin_url, prefix)
    secs = published if published is not None else limit_s
    handled_secs = ((fig.last_handled or time.time()) - t0) if fig.items else None
    return {
        "latency_ms": latency_ms,
        "triggers": n,
        "published": fired,
        "rate": fired / secs,
        "seconds": secs,
        "complete": published is not None,
        "fire_lag_s": lag_summary(fire_lags),
        "executor_items": fig.items,
        "executor_rate": (fig.items / handled_secs) if handled_secs else None,
        "executor_errors": fig.errors,
        "cpu": window.figures(fired, unit="command"),
    }


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    latencies = [10, 200] if quick else [10, 200, 2000]
    instances = [1, 2] if quick else [1, 2, 4]
    limit_s = 6.0 if quick else 12.0
    # enough tasks that the legacy model cannot finish early at any latency
    legacy_n = {10: 5000 if quick else 20000, 200: 3000 if quick else 10000, 2000: 3000}
    sy_n = 1500 if quick else 5000
    sec = Section(NAME, TITLE)
    sec.settings = {
        "legacy": {
            "instances": instances,
            "pool": f"{POOL} threads, blocking hand-off (no queue)",
            "pre_read": PRE_READ,
            "lock": "SELECT ... FOR UPDATE on one row per loop",
            "tasks": legacy_n,
            "window_s": limit_s,
        },
        "switchyard": {
            "triggers": sy_n,
            "scheduler": "threaded Scheduler, 16 partitions, defaults",
            "executor": f"1 process, concurrency {POOL}, default job timeout (30 s)",
            "limit_s": limit_s * 3,
        },
        "handler": "GET on a local ThreadingHTTPServer (own process) sleeping the latency; new connection per call",
        "latencies_ms": latencies,
        "cpu_accounting": cpu.SETTINGS
        | {
            "switchyard_window": "the scheduler's start until the N-th command was published",
            "legacy_window": "the gun until every instance left its dispatch loop",
            "roles": "Switchyard: this process (the scheduler), the executor process, the HTTP endpoint "
            "process, mariadbd, the Pulsar broker; legacy: its instance processes, the endpoint, mariadbd",
        },
    }
    legacy: list[dict[str, Any]] = []
    sy: list[dict[str, Any]] = []
    with BusinessEndpoint() as ep:
        for lat in latencies:
            for inst in instances:
                legacy.append(run_legacy(env, ep, inst, lat, legacy_n[lat], limit_s))
            sy.append(run_switchyard(env, ep, lat, sy_n, limit_s * 3))
    sec.raw = {"legacy": legacy, "switchyard": sy}
    for lat in latencies:
        s = next(r for r in sy if r["latency_ms"] == lat)
        for inst in instances:
            lg = next(r for r in legacy if r["latency_ms"] == lat and r["instances"] == inst)
            sec.rows.append(
                Row(
                    f"dispatch rate, handler {lat} ms, legacy x{inst}",
                    s["rate"],
                    lg["rate"],
                    "/s",
                    GOAL if lat == 200 else None,
                    note=f"legacy lag p50 {lg['lag_s']['p50'] or 0:.2f} s / p99 {lg['lag_s']['p99'] or 0:.2f} s, "
                    f"{lg['dispatched']:,}/{lg['tasks']:,} dispatched in {min(lg['seconds'], limit_s):.1f} s; "
                    f"Switchyard fire lag (record written - T) p99 {s['fire_lag_s']['p99'] or 0:.2f} s; "
                    f"Switchyard {cpu.describe(s['cpu'], lg['rate'], f'legacy x{inst}')}; "
                    f"legacy x{inst} {cpu.describe(lg['cpu'])} (what bounds it: the instance holding the lock "
                    f"dispatches through its pool, {POOL} workers / {lat} ms = {POOL * 1000 / lat:,.0f}/s)",
                )
            )
    rates = [r["rate"] for r in sy]
    sec.notes.append(
        "Switchyard dispatch rate by handler latency: "
        + ", ".join(f"{r['latency_ms']} ms: {r['rate']:,.0f}/s" for r in sy)
        + f" (spread {(max(rates) / min(rates) if min(rates) else 0):.2f}x); executor completions/s: "
        + ", ".join(f"{r['latency_ms']} ms: {(r['executor_rate'] or 0):,.0f}/s" for r in sy)
        + "."
    )
    sec.notes.append(
        "legacy median dispatch rate over instance counts: "
        + ", ".join(
            f"{lat} ms: {median(r['rate'] for r in legacy if r['latency_ms'] == lat):,.0f}/s" for lat in latencies
        )
        + "."
    )
    return sec
