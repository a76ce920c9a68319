"""Steady load for the APScheduler comparison: one-shot jobs created continuously, each
due LEAD_S after it is created, at an offered rate R for W seconds, while the scheduler
runs -- the way a business hands delayed jobs to a scheduler all day. Measured per side:
the rate actually offered (the producer is the scheduler's own API), fires/s from the
first due time to the last fire, and fire lag (fire time minus due time) p50/p99.

APScheduler: its documented setup (see vs_apscheduler), a producer thread calling
`add_job(..., "date", run_date=due)`; the job records its lag. add_job wakes the
scheduler, so it needs no polling setting.

Switchyard: a producer thread calling `SqlTriggerStore.add_triggers` every 100 ms with
the triggers due LEAD_S later; the threaded Scheduler with `idle_wait` = 1 s (the
production default of 30 s is for a 30-minute lookahead over long delays: a partition
that found nothing sleeps that long, so a job created with a shorter delay than the
idle wait can be late by up to it); an Executor process with a no-op handler records
handler start minus T.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.model import Trigger, TriggerKind
from scheduler_core.settings import SchedulerSettings

from bench.executors import ExecutorHost, HostConfig
from bench.harness import Deadline, StackEnv, bench_prefix, delete_topics, lag_summary
from bench.workload import ThreadedScheduler, bench_job, make_store

LEAD_S = 1.0  # each job is due this long after it is created
TICK_S = 0.1  # the producers' step
GRACE_S = 60.0  # after the last due time, how long a side may take to catch up

_lock = threading.Lock()
_aps_lags: list[float] = []
_aps_last = [0.0]


def aps_job(due_ts: float) -> None:
    """The APScheduler job (module level, so the job store can reference it)."""
    now = time.time()
    with _lock:
        _aps_lags.append(now - due_ts)
        _aps_last[0] = max(_aps_last[0], now)


def jobs_offered(rate: float, seconds: float) -> int:
    return round(seconds / TICK_S) * max(1, round(rate * TICK_S))


def _produce(rate: float, seconds: float, add: Any) -> dict[str, Any]:
    """Call add(due timestamps) every TICK_S with that step's jobs: exactly
    jobs_offered(rate, seconds) in all. A producer slower than the rate falls behind
    (its offered rate says so) instead of bunching."""
    steps, per_step = round(seconds / TICK_S), max(1, round(rate * TICK_S))
    start = time.time()
    for step in range(steps):
        add([time.time() + LEAD_S] * per_step)
        sleep = start + (step + 1) * TICK_S - time.time()
        if sleep > 0:
            time.sleep(sleep)
    took = time.time() - start
    offered = steps * per_step
    return {"offered": offered, "produce_seconds": took, "offered_rate": offered / took if took > 0 else 0.0,
            "first_due": start + LEAD_S}


def _summary(side: dict[str, Any], lags: list[float], last_fire: float | None) -> dict[str, Any]:
    fired = len(lags)
    span = (last_fire - side["first_due"]) if last_fire else None
    side.update(fired=fired, complete=fired >= side["offered"], lag_s=lag_summary(lags),
                rate=(fired / span) if span and span > 0 else 0.0)
    return side


def run_apscheduler(url: str, rate: float, seconds: float) -> dict[str, Any]:
    import logging

    from bench.vs_apscheduler import make_apscheduler

    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    sched = make_apscheduler(url)
    with _lock:
        _aps_lags.clear()
        _aps_last[0] = 0.0
    sched.start()
    seq = [0]
    try:
        def add(dues: list[float]) -> None:
            for due in dues:
                seq[0] += 1
                sched.add_job(aps_job, "date", run_date=datetime.fromtimestamp(due, timezone.utc), args=[due],
                              id=f"s{seq[0]}")

        side = _produce(rate, seconds, add)
        dl = Deadline(LEAD_S + GRACE_S)
        while not dl.expired():
            with _lock:
                if len(_aps_lags) >= side["offered"]:
                    break
            time.sleep(0.05)
        with _lock:
            lags, last_fire = list(_aps_lags), _aps_last[0]
    finally:
        sched.shutdown(wait=False)
    return _summary(side, lags, last_fire or None)


def run_switchyard(env: StackEnv, url: str, rate: float, seconds: float) -> dict[str, Any]:
    prefix = bench_prefix("apss")
    store = make_store(url, 16, pool_size=16)
    bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
    expected = jobs_offered(rate, seconds)
    try:
        job = store.put_job(bench_job("steady", timeout=timedelta(0)))
        host = ExecutorHost(HostConfig(env.pulsar_url, prefix, ["steady"], {"steady": expected},
                                       deadline_s=seconds + LEAD_S + GRACE_S, keep_lags=True))
        with host:
            ts = ThreadedScheduler(store, bus, SchedulerSettings(idle_wait=timedelta(seconds=1)))
            ts.start()

            def add(dues: list[float]) -> None:
                store.add_triggers([Trigger(job_code=job.job_code, biz_code=job.biz_code, kind=TriggerKind.ONCE,
                                            next_fire_at=datetime.fromtimestamp(due, timezone.utc)) for due in dues])

            side = _produce(rate, seconds, add)
            # the host stops at `expected` items or at its deadline, whichever comes first
            fig = host.wait(seconds + LEAD_S + GRACE_S)["steady"]
            ts.close()
    finally:
        bus.close()
        store.engine.dispose()
        delete_topics(env.pulsar_admin_url, prefix)
    lags = [v / 1000 for v in fig.start_lag_ms]
    side["executor_items"] = fig.items
    return _summary(side, lags, fig.last_handled)
