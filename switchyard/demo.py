"""The main job on the embedded default: no servers, SQLite + in-process bus + local
election. (The end-to-end migration story replaces the body of this module; the
scheduler path it shows stays.)"""
from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import FiredState, Job, JobCode, Trigger, TriggerKind
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore


@dataclass
class DemoResult:
    store_url: str
    command_id: str
    scheduled_at: str
    received_lag_ms: float
    state: str


def run_demo(workdir: Path, say: "callable[[str], None]" = print) -> DemoResult:  # type: ignore[valid-type]
    if workdir.exists():
        shutil.rmtree(workdir)  # a second run starts clean
    workdir.mkdir(parents=True)
    url = f"sqlite:///{workdir / 'switchyard.db'}"
    engine = make_engine(url)
    init_schema(engine, partitions=4)
    clock = SystemClock()
    store = SqlTriggerStore(engine, clock)
    bus = InProcessBus(clock)
    say(f"store initialised: {url} (4 partitions)")

    job = store.put_job(Job(job_code=JobCode("demo-reminder"), biz_code="reminder", handler="send_reminder"))
    due = clock.now() + timedelta(seconds=2)
    (trigger,) = store.add_triggers(
        [Trigger(job_code=job.job_code, biz_code=job.biz_code, kind=TriggerKind.ONCE, next_fire_at=due)]
    )
    say(f"one-shot trigger {trigger.id} for job {job.job_code} due at {due.isoformat()}")

    executor = Executor(bus, "reminder", clock=clock)
    handled = threading.Event()

    @executor.handler("demo-reminder")
    def send_reminder(ctx: ExecutionContext) -> None:
        lag = (clock.now() - ctx.scheduled_at).total_seconds() * 1000
        say(f"executor ran {ctx.command_id} ({lag:.0f} ms after its fire time)")
        handled.set()

    settings = SchedulerSettings(idle_wait=timedelta(milliseconds=200), jitter=timedelta(milliseconds=50))
    scheduler = Scheduler(store, bus, LocalElection(LocalElectionGroup(clock)), clock, settings)
    stop = threading.Event()
    threads = [threading.Thread(target=scheduler.run, args=(stop,), daemon=True),
               threading.Thread(target=executor.run, args=(stop,), daemon=True)]
    for t in threads:
        t.start()
    try:
        handled.wait(timeout=30)
        deadline = time.monotonic() + 10
        rec = None
        while time.monotonic() < deadline:
            recs = store.fired_between("reminder", due - timedelta(seconds=1), due + timedelta(seconds=1))
            rec = recs[0] if recs else None
            if rec is not None and rec.state.is_final:
                break
            time.sleep(0.05)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)
        executor.close()
        engine.dispose()
    if rec is None or rec.state is not FiredState.SUCCEEDED or rec.received_at is None:
        raise RuntimeError(f"the demo trigger did not complete: {rec}")
    lag_ms = (rec.received_at - rec.scheduled_at).total_seconds() * 1000
    return DemoResult(url, rec.command_id, rec.scheduled_at.isoformat(), lag_ms, rec.state.value)
