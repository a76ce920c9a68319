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
when the executor has run the N-th command. Two rows: one message per run (the default),
and the job's `envelope_size` = BURST_ENVELOPE, as the README advises for a job whose
triggers come due by the thousand in the same second.

Steady load (bench/steady_load.py): producers in their own processes, the offered rate
stepping up until each side falls behind.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
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
)
from bench.workload import ThreadedScheduler, bench_job, load_triggers, make_store, now_ms
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

NAME = "vs_apscheduler"
TITLE = "versus APScheduler 3.11 (SQLAlchemyJobStore on the same MariaDB)"
GOAL = Goal("ratio_min", 3.5)  # the burst, one message per run
ENVELOPE_GOAL = Goal("ratio_min", 5.0)  # the burst, envelope_size set
STEADY_RATE_GOAL = Goal("ratio_min", 5.0)  # highest sustained steady rate
LAG_GOAL = Goal("ratio_max", 1.0)  # steady-load fire lag p99 at most APScheduler's
APS_THREADS = 20
BURST_ENVELOPE = 100  # the README's example for on-the-hour bursts

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
    settings = {
        "jobstores": {"default": "SQLAlchemyJobStore(url=<same MariaDB, fresh database>)"},
        "executors": {"default": f"ThreadPoolExecutor({APS_THREADS})"},
        "job_defaults": {"coalesce": False, "max_instances": 3, "misfire_grace_time": 3600},
        "scheduler": "BackgroundScheduler(timezone=UTC)",
        "trigger": "date, run_date = now",
    }
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
        # CPU over the burst: APScheduler runs in this process (its scheduler thread, the
        # 20 pool threads and the job function); the broker is idle and only watched
        window = cpu.CpuWindow.pipeline(broker=False).start()
        t0 = time.perf_counter()
        sched.resume()
        dl = Deadline(limit_s)
        while not dl.expired():
            with _lock:
                if _count["n"] >= n:
                    break
            time.sleep(0.01)
        window.stop()
        with _lock:
            done, last, first = _count["n"], _count["last"], _count["first"]
    finally:
        sched.shutdown(wait=False)
    secs = (last - t0) if done >= n else (time.perf_counter() - t0)
    return {
        "fired": done,
        "seconds": secs,
        "rate": done / secs if secs > 0 else 0.0,
        "add_seconds": add_s,
        "first_fire_after_s": (first - t0) if first else None,
        "complete": done >= n,
        "settings": settings,
        "cpu": window.figures(int(done), unit="job"),
    }


def run_switchyard(env: StackEnv, url: str, n: int, limit_s: float, envelope_size: int = 1) -> dict[str, Any]:
    prefix = bench_prefix("aps")
    store = make_store(url, 16, pool_size=16)
    bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
    try:
        job = store.put_job(bench_job("aps", timeout=timedelta(0), envelope_size=envelope_size))
        with ExecutorHost(
            HostConfig(env.pulsar_url, prefix, ["aps"], {"aps": n}, deadline_s=limit_s + 30, keep_lags=False)
        ) as host:
            load_triggers(url, job, n, first_ms=now_ms() - 1000, spread_ms=1000)
            ts = ThreadedScheduler(store, bus, SchedulerSettings())
            # CPU from the scheduler's start until the executor ran the N-th command (read
            # from its shared count, <= 20 ms late); the executor's own CPU reading when it
            # saw its N-th replaces the stop's (it is shutting down by then, or gone)
            window = cpu.CpuWindow.pipeline({cpu.EXECUTOR: host.pids}).start()
            t0 = time.time()
            ts.start()
            published = ts.wait_fired(n, Deadline(limit_s))
            host.wait_handled(n, limit_s)
            window.stop()
            fig = host.wait(limit_s)["aps"]
            window.fill_missing({cpu.EXECUTOR: fig.cpu_end_s}, replace=True)
            ts.close()
    finally:
        bus.close()
        store.close()
        delete_topics(env.pulsar_admin_url, prefix)
    end = fig.last_handled or time.time()
    secs = end - t0
    return {
        "fired": fig.items,
        "seconds": secs,
        "rate": fig.items / secs if secs > 0 else 0.0,
        "published_seconds": published,
        # where the window's time goes: until the first command ran (the scheduler's start,
        # its first tick, the first publication and delivery), then the stream of them
        "first_handled_after_s": (fig.first_handled - t0) if fig.first_handled else None,
        "complete": fig.items >= n,
        "cpu": window.figures(fig.items, unit="trigger"),
    }


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    from bench import steady_load

    quick = profile["quick"]
    n = 2_000 if quick else 20_000
    limit_s = 120.0 if quick else 300.0
    rates, window = (steady_load.QUICK_RATES, 4.0) if quick else (steady_load.RATES, 10.0)
    sec = Section(NAME, TITLE)
    with fresh_database(env.mariadb_url, "bench_aps") as url:
        aps = run_apscheduler(url, n, limit_s)
    with fresh_database(env.mariadb_url, "bench_apsy") as url:
        sy = run_switchyard(env, url, n, limit_s)
    with fresh_database(env.mariadb_url, "bench_apsye") as url:
        sy_env = run_switchyard(env, url, n, limit_s, envelope_size=BURST_ENVELOPE)
    with fresh_database(env.mariadb_url, "bench_apss") as url:
        aps_steady = steady_load.run_apscheduler(url, rates, window)
    with fresh_database(env.mariadb_url, "bench_apsys") as url:
        sy_steady = steady_load.run_switchyard(env, url, rates, window)
    sec.settings = {
        "N": n,
        "apscheduler": aps.pop("settings"),
        "switchyard": "threaded Scheduler (16 partitions, defaults), PulsarBus, 1 executor process, "
        "no-op handler, job timeout 0",
        "burst_envelope_size": BURST_ENVELOPE,
        "cpu_accounting": cpu.SETTINGS
        | {
            "burst_switchyard_roles": list(sy["cpu"]["pids"]),
            "burst_apscheduler_roles": list(aps["cpu"]["pids"]),
            "pids": sy["cpu"]["pids"],
        },
        "steady": {
            "rates_per_s": list(rates),
            "seconds_per_step": window,
            "due_after_creation_s": steady_load.LEAD_S,
            "max_p99_s": steady_load.MAX_P99_S,
            "producer_processes": f"one per {steady_load.PRODUCER_RATE:.0f}/s offered",
            "switchyard": "scheduler defaults (idle wait 30 s, max wait 1 s, hold 2 s); "
            "producers' stores wired to the etcd wake key",
        },
    }
    sec.raw = {
        "apscheduler": aps,
        "switchyard": sy,
        "switchyard_envelope": sy_env,
        "steady_apscheduler": aps_steady,
        "steady_switchyard": sy_steady,
    }

    def first_s(side: dict[str, Any]) -> str:
        return "-" if side.get("first_handled_after_s") is None else f"{side['first_handled_after_s']:.3f} s"

    def incomplete(side: dict[str, Any], label: str) -> str:
        return "" if side["complete"] else f"; {label} INCOMPLETE {side['fired']:,}/{n:,}"

    sec.rows = [
        Row(
            f"{n:,} one-shot jobs due now: fires/s, one message per run",
            sy["rate"],
            aps["rate"],
            "/s",
            GOAL,
            note="peer: APScheduler"
            + incomplete(aps, "APScheduler")
            + incomplete(sy, "Switchyard")
            + f"; Switchyard's first command ran {first_s(sy)} after its start"
            + f" (APScheduler's first job {aps['first_fire_after_s'] or 0:.3f} s after resume)"
            + "; Switchyard "
            + cpu.describe(sy["cpu"], aps["rate"], "APScheduler")
            + "; APScheduler "
            + cpu.describe(aps["cpu"]),
        ),
        Row(
            f"{n:,} one-shot jobs due now: fires/s, envelope_size {BURST_ENVELOPE}",
            sy_env["rate"],
            aps["rate"],
            "/s",
            ENVELOPE_GOAL,
            note="as the README advises for bursts; peer: APScheduler (the same run)"
            + incomplete(sy_env, "Switchyard")
            + f"; the first command ran {first_s(sy_env)} after the start"
            + "; Switchyard "
            + cpu.describe(sy_env["cpu"], aps["rate"], "APScheduler"),
        ),
        Row(
            f"{n:,} one-shot jobs due now: time until all fired, one message per run",
            sy["seconds"],
            aps["seconds"],
            "s",
            ratio=(aps["seconds"] / sy["seconds"]) if sy["seconds"] else None,
            note="ratio = APScheduler time / Switchyard time",
        ),
    ]
    sy_best = steady_load.highest_sustained(sy_steady)
    aps_best = steady_load.highest_sustained(aps_steady)
    top = rates[-1]

    def best_rate(best: dict[str, Any] | None) -> float:
        # the step, when the producers offered it (their measured rate ends a hair under
        # it: the clock runs from the first add to after the last step's sleep); what they
        # reached, when they fell short of it by more than 1%
        if best is None:
            return 0.0
        step, reached = best["rate_step"], best["offered_rate"]
        return float(step) if reached >= 0.99 * step else float(reached)

    sy_rate, aps_rate = best_rate(sy_best), best_rate(aps_best)
    capped = (
        "; Switchyard sustained the highest step offered: its figure is a lower bound"
        if sy_best is not None and sy_best["rate_step"] == top
        else ""
    )
    if aps_best is None:
        capped += f"; APScheduler sustained none of the steps (below {rates[0]:,.0f}/s): no ratio"
    if sy_best is None:
        capped += f"; Switchyard sustained none of the steps (below {rates[0]:,.0f}/s)"
    sec.rows.append(
        Row(
            "steady load: highest sustained rate (complete, p99 lag <= 1 s)",
            sy_rate,
            aps_rate,
            "/s",
            STEADY_RATE_GOAL,
            ratio=(sy_rate / aps_rate) if aps_rate else None,
            note=f"steps {', '.join(f'{r:,.0f}' for r in rates)}/s, {window:.0f} s each, each job due "
            f"{steady_load.LEAD_S:.0f} s after creation; producers in their own processes; "
            f"peer: APScheduler{capped}",
        )
    )
    # the lag goal where APScheduler still kept up: its highest sustained step (its first if none)
    by_rate = {s_["rate_step"]: s_ for s_ in sy_steady}
    aps_ref = aps_best or (aps_steady[0] if aps_steady else None)
    for a in aps_steady:
        y = by_rate.get(a["rate_step"])
        if y is None:
            continue
        goal = LAG_GOAL if a is aps_ref else None
        sec.rows.append(
            Row(
                f"steady load {a['rate_step']:,.0f}/s: fire lag p99",
                y["lag_s"]["p99"],
                a["lag_s"]["p99"],
                "s",
                goal,
                note=f"p50 {y['lag_s']['p50'] or 0:.3f} s vs {a['lag_s']['p50'] or 0:.3f} s; fires/s "
                f"{y['rate']:,.0f} vs {a['rate']:,.0f}; producers reached {y['offered_rate']:,.0f}/s "
                f"vs {a['offered_rate']:,.0f}/s; lower is better; Switchyard: handler start minus T"
                + ("" if y["complete"] else f"; Switchyard INCOMPLETE {y['fired']:,}/{y['offered']:,}")
                + ("" if a["complete"] else f"; APScheduler INCOMPLETE {a['fired']:,}/{a['offered']:,}"),
            )
        )
    for y in sy_steady:
        if y["rate_step"] in {a["rate_step"] for a in aps_steady}:
            continue
        sec.rows.append(
            Row(
                f"steady load {y['rate_step']:,.0f}/s: fire lag p99 (APScheduler stopped below)",
                y["lag_s"]["p99"],
                None,
                "s",
                note=f"p50 {y['lag_s']['p50'] or 0:.3f} s; fires/s {y['rate']:,.0f}; producers reached "
                f"{y['offered_rate']:,.0f}/s"
                + ("" if y["complete"] else f"; INCOMPLETE {y['fired']:,}/{y['offered']:,}"),
            )
        )
    sec.notes.append(
        f"APScheduler: adding the {n:,} jobs took {aps['add_seconds']:.1f} s (not timed); first fire "
        f"{(aps['first_fire_after_s'] or 0):.2f} s after resume()."
    )
    sec.notes.append(
        "CPU in the burst rows (bench/cpu.py): each process's CPU ms per trigger (per job for APScheduler) "
        "over the measured window and the cores it used on average; the machine's busy share (both cores, "
        "whoever used them) and the share outside the pipeline's processes (the rest); the box's ceiling = "
        "cores x 1000 / total CPU ms per trigger, and its ratio to APScheduler's measured rate."
    )
    sec.notes.append(
        "steady load: bench/steady_load.py (each step: producer processes create jobs every 0.1 s, "
        "each due 1 s later; fires/s = fired / (last fire - first due); a side stops at its first step "
        "not fired completely within 30 s of the last due time or with p99 lag > 1 s)."
    )
    return sec
