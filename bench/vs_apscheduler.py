"""Versus APScheduler 3.11 with its SQLAlchemy job store on the same MariaDB.

APScheduler is set up as its user guide shows ("Configuring the scheduler"):
BackgroundScheduler, jobstores={'default': SQLAlchemyJobStore(url=...)},
executors={'default': ThreadPoolExecutor(20)}, job_defaults={'coalesce': False,
'max_instances': 3}, plus misfire_grace_time=3600 so that no job is dropped as missed
(the 3.x default of 1 s would discard most of a 20K burst). N one-shot 'date' jobs
due now are added while the scheduler is paused (not timed); the clock starts at
resume() and stops when the N-th job function has run.

Switchyard: the same N one-shot triggers due now, the threaded Scheduler, real Pulsar,
an Executor process with a no-op handler; the clock starts with the scheduler and stops
when the executor has run the N-th command.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

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
)
from bench.workload import ThreadedScheduler, bench_job, load_triggers, make_store, now_ms

NAME = "vs_apscheduler"
TITLE = "versus APScheduler 3.11 (SQLAlchemyJobStore on the same MariaDB)"
GOAL = Goal("ratio_min", 20.0)
APS_THREADS = 20

_lock = threading.Lock()
_count = {"n": 0, "last": 0.0, "first": 0.0}


def fired() -> None:
    """The APScheduler job: count (module level, so the job store can reference it)."""
    now = time.perf_counter()
    with _lock:
        if _count["n"] == 0:
            _count["first"] = now
        _count["n"] += 1
        _count["last"] = now


def make_apscheduler(url: str) -> Any:
    """APScheduler as its user guide configures it (see the module docstring)."""
    from apscheduler.executors.pool import ThreadPoolExecutor
    from apscheduler.jobstores.sqlalchemy import SQLAlchemyJobStore
    from apscheduler.schedulers.background import BackgroundScheduler

    return BackgroundScheduler(
        jobstores={"default": SQLAlchemyJobStore(url=url)},
        executors={"default": ThreadPoolExecutor(APS_THREADS)},
        job_defaults={"coalesce": False, "max_instances": 3, "misfire_grace_time": 3600},
        timezone=timezone.utc,
    )


def run_apscheduler(url: str, n: int, limit_s: float) -> dict[str, Any]:
    import logging

    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    settings = {"jobstores": {"default": "SQLAlchemyJobStore(url=<same MariaDB, fresh database>)"},
                "executors": {"default": f"ThreadPoolExecutor({APS_THREADS})"},
                "job_defaults": {"coalesce": False, "max_instances": 3, "misfire_grace_time": 3600},
                "scheduler": "BackgroundScheduler(timezone=UTC)", "trigger": "date, run_date = now"}
    sched = make_apscheduler(url)
    with _lock:
        _count.update(n=0, last=0.0, first=0.0)
    sched.start(paused=True)
    try:
        t_add = time.perf_counter()
        run_date = datetime.now(timezone.utc) + timedelta(milliseconds=100)
        for i in range(n):
            sched.add_job(fired, "date", run_date=run_date, id=f"j{i}")
        add_s = time.perf_counter() - t_add
        t0 = time.perf_counter()
        sched.resume()
        dl = Deadline(limit_s)
        while not dl.expired():
            with _lock:
                if _count["n"] >= n:
                    break
            time.sleep(0.01)
        with _lock:
            done, last, first = _count["n"], _count["last"], _count["first"]
    finally:
        sched.shutdown(wait=False)
    secs = (last - t0) if done >= n else (time.perf_counter() - t0)
    return {"fired": done, "seconds": secs, "rate": done / secs if secs > 0 else 0.0, "add_seconds": add_s,
            "first_fire_after_s": (first - t0) if first else None, "complete": done >= n, "settings": settings}


def run_switchyard(env: StackEnv, url: str, n: int, limit_s: float) -> dict[str, Any]:
    prefix = bench_prefix("aps")
    store = make_store(url, 16, pool_size=16)
    bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
    try:
        job = store.put_job(bench_job("aps", timeout=timedelta(0)))
        with ExecutorHost(HostConfig(env.pulsar_url, prefix, ["aps"], {"aps": n}, deadline_s=limit_s + 30,
                                     keep_lags=False)) as host:
            load_triggers(url, job, n, first_ms=now_ms() - 1000, spread_ms=1000)
            ts = ThreadedScheduler(store, bus, SchedulerSettings())
            t0 = time.time()
            ts.start()
            published = ts.wait_fired(n, Deadline(limit_s))
            fig = host.wait(limit_s)["aps"]
            ts.close()
    finally:
        bus.close()
        store.engine.dispose()
        delete_topics(env.pulsar_admin_url, prefix)
    end = fig.last_handled or time.time()
    secs = end - t0
    return {"fired": fig.items, "seconds": secs, "rate": fig.items / secs if secs > 0 else 0.0,
            "published_seconds": published, "complete": fig.items >= n}


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    from bench import steady_load

    quick = profile["quick"]
    n = 2_000 if quick else 20_000
    limit_s = 120.0 if quick else 300.0
    rate, window = (200.0, 5.0) if quick else (1000.0, 20.0)
    sec = Section(NAME, TITLE)
    with fresh_database(env.mariadb_url, "bench_aps") as url:
        aps = run_apscheduler(url, n, limit_s)
    with fresh_database(env.mariadb_url, "bench_apsy") as url:
        sy = run_switchyard(env, url, n, limit_s)
    with fresh_database(env.mariadb_url, "bench_apss") as url:
        aps_steady = steady_load.run_apscheduler(url, rate, window)
    with fresh_database(env.mariadb_url, "bench_apsys") as url:
        sy_steady = steady_load.run_switchyard(env, url, rate, window)
    sec.settings = {"N": n, "apscheduler": aps.pop("settings"),
                    "switchyard": "threaded Scheduler (16 partitions, defaults), PulsarBus, 1 executor process, "
                                  "no-op handler, job timeout 0",
                    "steady": {"offered_rate_per_s": rate, "seconds": window, "due_after_creation_s": steady_load.LEAD_S,
                               "switchyard_idle_wait_s": 1.0}}
    sec.raw = {"apscheduler": aps, "switchyard": sy, "steady_apscheduler": aps_steady, "steady_switchyard": sy_steady}
    sec.rows = [
        Row(f"{n:,} one-shot jobs due now: fires/s", sy["rate"], aps["rate"], "/s", GOAL,
            note="peer: APScheduler" + ("" if aps["complete"] else f", INCOMPLETE {aps['fired']:,}/{n:,}")
                 + ("" if sy["complete"] else f"; Switchyard INCOMPLETE {sy['fired']:,}/{n:,}")),
        Row(f"{n:,} one-shot jobs due now: time until all fired", sy["seconds"], aps["seconds"], "s",
            ratio=(aps["seconds"] / sy["seconds"]) if sy["seconds"] else None,
            note="ratio = APScheduler time / Switchyard time"),
    ]
    for label, side in (("Switchyard", sy_steady), ("APScheduler", aps_steady)):
        if not side["complete"]:
            sec.notes.append(f"steady load: {label} INCOMPLETE, {side['fired']:,}/{side['offered']:,} fired "
                             f"within {steady_load.GRACE_S:.0f} s after the last due time")
    offered = f"offered {rate:,.0f}/s for {window:.0f} s, each due {steady_load.LEAD_S:.0f} s after creation"
    sec.rows += [
        Row("steady load: fires/s", sy_steady["rate"], aps_steady["rate"], "/s", GOAL,
            note=f"{offered}; producers reached {sy_steady['offered_rate']:,.0f}/s (Switchyard) and "
                 f"{aps_steady['offered_rate']:,.0f}/s (APScheduler add_job); peer: APScheduler"),
        Row("steady load: fire lag p99", sy_steady["lag_s"]["p99"], aps_steady["lag_s"]["p99"], "s",
            note=f"p50 {sy_steady['lag_s']['p50'] or 0:.3f} s vs {aps_steady['lag_s']['p50'] or 0:.3f} s; "
                 "lower is better; Switchyard: handler start minus T"),
    ]
    sec.notes.append(f"APScheduler: adding the {n:,} jobs took {aps['add_seconds']:.1f} s (not timed); first fire "
                     f"{(aps['first_fire_after_s'] or 0):.2f} s after resume().")
    sec.notes.append("steady load: bench/steady_load.py (jobs created continuously while the scheduler runs; "
                     "fires/s = fired / (last fire - first due)).")
    return sec
