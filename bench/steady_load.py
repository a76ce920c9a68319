"""Steady load for the APScheduler comparison: one-shot jobs created continuously, each
due LEAD_S after it is created, the offered rate stepping up (RATES) until a side falls
behind -- the way a business hands delayed jobs to a scheduler all day. Per side and
step: the rate the producers reached, fires/s, fire lag (fire time minus due time)
p50/p99; and each side's highest sustained rate: the highest step fired completely with
p99 lag <= MAX_P99_S.

The producers run in their own processes (`producer_main`, PRODUCER_RATE jobs/s each at
most), so their work does not share the scheduler's interpreter, and each side's
producer uses that side's own API as documented:

- APScheduler: `add_job(..., "date", run_date=due)` must run in the scheduler's process
  (its job store is not shared between schedulers; its docs point to an RPC service such
  as rpyc for other processes). The producer processes send each step's due times over a
  queue to a thread of the APScheduler process, which calls add_job; that add_job's
  insert is part of what this scheduler does per job. add_job wakes the scheduler.
- Switchyard: `SqlTriggerStore.add_triggers` in the producer process (a business service
  writes its triggers to the store), its store wired to the etcd wake key the scheduler
  listens on (`scheduler_core.wakeup`): a trigger due within the lookahead wakes its
  partition's loop at once. The threaded Scheduler runs with the production defaults
  (idle wait 30 s, 1 s at most between ticks, chunks due within 2 s held and fired at
  T); an Executor process with a no-op handler records handler start minus T.
"""

from __future__ import annotations

import math
import multiprocessing as mp
import threading
import time
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.executors import ExecutorHost, HostConfig
from bench.harness import Deadline, StackEnv, bench_prefix, delete_topics, lag_summary
from bench.workload import ThreadedScheduler, bench_job, make_store
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

LEAD_S = 1.0  # each job is due this long after it is created
TICK_S = 0.1  # the producers' step
GRACE_S = 30.0  # after the last due time, how long a side may take to catch up
MAX_P99_S = 1.0  # a step is sustained when complete with p99 lag at most this
PRODUCER_RATE = 2500.0  # jobs/s one producer process is asked for at most
RATES = (250.0, 500.0, 1000.0, 2000.0, 3500.0, 5000.0, 7500.0)
QUICK_RATES = (250.0, 500.0, 1000.0, 2500.0)  # 5x of a peer that sustains 500 is on the list
READY_S = 60.0

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
    return _producers(rate) * round(seconds / TICK_S) * _per_step(rate)


def _producers(rate: float) -> int:
    return max(1, math.ceil(rate / PRODUCER_RATE))


def _per_step(rate: float) -> int:
    return max(1, round(rate / _producers(rate) * TICK_S))


def producer_main(
    kind: str, target: dict[str, Any], rate: float, seconds: float, start_at: Any, out: Any, jobs: Any
) -> None:
    """One producer process: from `start_at` (a shared value the parent sets to epoch
    seconds once every producer is ready), every TICK_S, jobs due LEAD_S later; exactly `seconds / TICK_S` steps of `_per_step(rate)`. A producer slower than
    its rate falls behind (its offered rate says so) instead of bunching."""
    add: Any
    closers: list[Any] = []
    try:
        if kind == "switchyard":
            from scheduler_core.election.wake_etcd import EtcdWakeups
            from scheduler_core.model import Trigger, TriggerKind

            store = make_store(target["url"], 16, pool_size=2)
            store.wakeups = EtcdWakeups(target["etcd"], key=target["wake_key"])
            closers += [store.wakeups.close, store.engine.dispose]
            job = store.get_job(target["job_code"])
            assert job is not None

            def add(dues: list[float]) -> None:
                store.add_triggers(
                    [
                        Trigger(
                            job_code=job.job_code,
                            biz_code=job.biz_code,
                            kind=TriggerKind.ONCE,
                            next_fire_at=datetime.fromtimestamp(d, timezone.utc),
                        )
                        for d in dues
                    ]
                )
        else:

            def add(dues: list[float]) -> None:
                jobs.put(dues)

        steps, per_step = round(seconds / TICK_S), _per_step(rate)
        if kind == "switchyard":
            # connections up before the gun: the database's, and etcd's (a wake-up for an
            # hour ahead, which no loop acts on now)
            assert store.wakeups is not None
            store.wakeups.notify({0: int(time.time() * 1000) + 3_600_000})
            with store.engine.connect():
                pass
        out.put(("ready", time.time()))
        end = time.monotonic() + READY_S
        while start_at.value == 0.0 and time.monotonic() < end:
            time.sleep(0.005)
        time.sleep(max(0.0, start_at.value - time.time()))
        start = time.time()
        for step in range(steps):
            add([time.time() + LEAD_S] * per_step)
            sleep = start + (step + 1) * TICK_S - time.time()
            if sleep > 0:
                time.sleep(sleep)
        out.put(("done", {"offered": steps * per_step, "seconds": time.time() - start, "start": start}))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for close in closers:
            close()


def _produce(kind: str, target: dict[str, Any], rate: float, seconds: float, jobs: Any = None) -> dict[str, Any]:
    """Run the step's producer processes to the end; the step's offered figures."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    n = _producers(rate)
    sync = ctx.Value("d", 0.0)
    procs = [
        ctx.Process(target=producer_main, args=(kind, target, rate, seconds, sync, out, jobs), daemon=True)
        for _ in range(n)
    ]
    for p in procs:
        p.start()
    try:
        for _ in procs:
            msg = out.get(timeout=READY_S)
            if msg[0] != "ready":
                raise RuntimeError(f"producer failed to start: {msg[1]}")
        sync.value = time.time() + 0.5
        done = []
        for _ in procs:
            msg = out.get(timeout=seconds + READY_S)
            if msg[0] != "done":
                raise RuntimeError(f"producer: {msg[1]}")
            done.append(msg[1])
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    offered = sum(d["offered"] for d in done)
    took = max(d["seconds"] for d in done)
    return {
        "offered": offered,
        "producers": n,
        "produce_seconds": took,
        "offered_rate": offered / took if took > 0 else 0.0,
        "first_due": min(d["start"] for d in done) + LEAD_S,
    }


def _summary(side: dict[str, Any], lags: list[float], last_fire: float | None) -> dict[str, Any]:
    fired = len(lags)
    span = (last_fire - side["first_due"]) if last_fire else None
    side.update(
        fired=fired,
        complete=fired >= side["offered"],
        lag_s=lag_summary(lags),
        rate=(fired / span) if span and span > 0 else 0.0,
    )
    p99 = side["lag_s"]["p99"]
    side["sustained"] = bool(side["complete"] and p99 is not None and p99 <= MAX_P99_S)
    return side


def highest_sustained(steps: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The highest step fired completely with p99 <= MAX_P99_S, below the first that was not."""
    best = None
    for s in steps:
        if not s["sustained"]:
            break
        best = s
    return best


def run_apscheduler(url: str, rates: tuple[float, ...], seconds: float) -> list[dict[str, Any]]:
    import logging

    from bench.vs_apscheduler import make_apscheduler

    logging.getLogger("apscheduler").setLevel(logging.ERROR)
    sched = make_apscheduler(url)
    sched.start()
    ctx = mp.get_context("spawn")
    steps: list[dict[str, Any]] = []
    seq = [0]
    try:
        for rate in rates:
            with _lock:
                _aps_lags.clear()
                _aps_last[0] = 0.0
            jobs = ctx.Queue()
            stop = threading.Event()

            def receive(q: Any = jobs, halt: threading.Event = stop) -> None:
                # the APScheduler process's side of the producers: add_job per job, as its API asks
                while not halt.is_set():
                    try:
                        dues = q.get(timeout=0.1)
                    except Exception:  # noqa: BLE001 - queue.Empty
                        continue
                    for due in dues:
                        seq[0] += 1
                        sched.add_job(
                            aps_job,
                            "date",
                            run_date=datetime.fromtimestamp(due, timezone.utc),
                            args=[due],
                            id=f"s{seq[0]}",
                        )

            receiver = threading.Thread(target=receive, name="aps-receiver", daemon=True)
            receiver.start()
            side = _produce("apscheduler", {}, rate, seconds, jobs)
            dl = Deadline(LEAD_S + GRACE_S)
            while not dl.expired():
                with _lock:
                    if len(_aps_lags) >= side["offered"]:
                        break
                time.sleep(0.05)
            stop.set()
            receiver.join(timeout=30)
            with _lock:
                lags, last_fire = list(_aps_lags), _aps_last[0]
            side["rate_step"] = rate
            steps.append(_summary(side, lags, last_fire or None))
            if not steps[-1]["sustained"]:
                break
            for job in sched.get_jobs():  # none left when it kept up; a clean slate otherwise
                job.remove()
    finally:
        sched.shutdown(wait=False)
    return steps


def run_switchyard(env: StackEnv, url: str, rates: tuple[float, ...], seconds: float) -> list[dict[str, Any]]:
    from scheduler_core.election.wake_etcd import EtcdWakeups

    if not env.etcd_url:
        raise RuntimeError("the steady load needs etcd (the wake-ups of the producers' processes)")
    prefix = bench_prefix("apss")
    wake_key = f"/bench/wake/{uuid.uuid4().hex[:8]}"
    store = make_store(url, 16, pool_size=16)
    store.wakeups = EtcdWakeups(env.etcd_url, key=wake_key)
    bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
    steps: list[dict[str, Any]] = []
    ts = ThreadedScheduler(store, bus, SchedulerSettings())
    try:
        ts.start()
        store.wakeups.listen(lambda _p: None)  # opens the watch now, not at the first lead
        if hasattr(store.wakeups, "wait_watching"):
            store.wakeups.wait_watching(10)
        for rate in rates:
            biz = f"steady{int(rate)}"
            job = store.put_job(bench_job(biz, timeout=timedelta(0)))
            expected = jobs_offered(rate, seconds)
            host = ExecutorHost(
                HostConfig(
                    env.pulsar_url,
                    prefix,
                    [biz],
                    {biz: expected},
                    deadline_s=seconds + LEAD_S + GRACE_S + READY_S,
                    keep_lags=True,
                )
            )
            with host:
                side = _produce(
                    "switchyard",
                    {"url": url, "etcd": env.etcd_url, "wake_key": wake_key, "job_code": job.job_code},
                    rate,
                    seconds,
                )
                fig = host.wait(seconds + LEAD_S + GRACE_S + READY_S)[biz]
            lags = [v / 1000 for v in fig.start_lag_ms]
            side["executor_items"] = fig.items
            side["rate_step"] = rate
            steps.append(_summary(side, lags, fig.last_handled))
            if not steps[-1]["sustained"]:
                break
        steps_stats = ts.stats()
        if steps:
            steps[-1]["scheduler_stats"] = steps_stats
    finally:
        ts.close()
        store.wakeups.close()
        bus.close()
        store.close()
        delete_topics(env.pulsar_admin_url, prefix)
    return steps
