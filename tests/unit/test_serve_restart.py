"""The embedded center (what `switchyard serve` runs) across a restart, in process on
SQLite: commands published ahead by the first run are published again by the second
(same command ids, run once); a rollback fence raised while it was down holds: the
fenced command is published again (a lift before its T would revive it) and never
invoked, and executors hear the fence."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.fence import FenceService, is_fence_skip
from scheduler_core.model import FiredRecord, FiredState, Job, JobCode, Trigger, TriggerKind
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.embedded import EmbeddedCenter, untaken_commands
from switchyard.schema import init_schema
from tests.waiting import wait_for

DUE_AFTER_S = 20


def _until(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    wait_for(cond, what, timeout)


class Runs:
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []  # (job, command id)
        self.lock = threading.Lock()

    def register(self, ex: Executor) -> None:
        @ex.handler()
        def run(ctx: ExecutionContext) -> HandlerResult:
            with self.lock:
                self.seen.append((ctx.job_code, ctx.command_id))
            return HandlerResult(ok=True)


def _center(store: SqlTriggerStore, runs: Runs) -> tuple[EmbeddedCenter, threading.Event, threading.Thread]:
    settings = SchedulerSettings(lookahead=timedelta(seconds=60), idle_wait=timedelta(milliseconds=300))
    center = EmbeddedCenter(store, settings, runs.register, name="t", discover_every=0.2)
    stop = threading.Event()
    th = threading.Thread(target=center.run, args=(stop,), daemon=True)
    th.start()
    return center, stop, th


def _published_ahead(store: SqlTriggerStore) -> int:
    """Commands no executor took whose publication is recorded (a fired record stays
    pending: its trigger's outcome says it was published)."""
    return len(store.outcome_recorded(untaken_commands(store)))


def test_published_ahead_is_published_again_and_a_fence_raised_while_down_holds(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    for biz in ("keep", "fenced"):
        store.put_job(Job(job_code=JobCode(f"{biz}-job"), biz_code=biz, handler="h"))
    # the first center must publish both commands ahead and stop before they are due: its start
    # and stop took over 4 s on a loaded 2-core machine (the commands then ran in the first run),
    # hence the wide margin; the second run waits on conditions, and past T for what must not run
    due = store.clock.now() + timedelta(seconds=DUE_AFTER_S)
    store.add_triggers(
        [
            Trigger(job_code=JobCode(f"{biz}-job"), biz_code=biz, kind=TriggerKind.ONCE, next_fire_at=due)
            for biz in ("keep", "fenced")
        ]
    )
    runs = Runs()
    center, stop, th = _center(store, runs)
    _until(lambda: _published_ahead(store) == 2, "both commands published ahead")
    stop.set()
    th.join(timeout=60)
    assert store.clock.now() < due, f"the first run took over {DUE_AFTER_S} s to publish ahead and stop"
    assert not th.is_alive() and runs.seen == []  # stopped before they were due: nothing ran

    # while it is down, the business is rolled back from before its command's T
    fence_at = due - timedelta(seconds=1)
    assert FenceService(store, InProcessBus(store.clock)).raise_fence("fenced", fence_at) == 1
    assert [r.job_code for r in untaken_commands(store)] == ["keep-job"]

    center, stop, th = _center(store, runs)
    try:
        _until(lambda: len(runs.seen) == 1, "the command published again")
        # both published again: the fenced one too, which every executor skips while the fence
        # stands (a re-cutover lifting the fence before its T revives it, and it must be on the bus)
        assert center.republished == 2 and runs.seen[0][0] == "keep-job"
        executor = center.executors["fenced"][0]
        _until(lambda: executor.fences.synced(), "the fenced business's executor hears the fences")
        # the fence was raised on another bus: only the rebroadcast at start told this one
        assert executor.fences.covering("fenced", int(due.timestamp() * 1000)) is not None
        assert center.executors["keep"][0].fences.covering("keep", int(due.timestamp() * 1000)) is None
        time.sleep(max(0.0, (due - store.clock.now()).total_seconds()) + 1.0)
    finally:
        stop.set()
        th.join(timeout=60)
    assert [j for j, _c in runs.seen] == ["keep-job"]
    recs: dict[str, FiredRecord] = {
        r.job_code: r for r in store.fired_between(None, due - timedelta(seconds=1), due + timedelta(seconds=1))
    }
    assert recs["keep-job"].state is FiredState.SUCCEEDED
    assert is_fence_skip(recs["fenced-job"].state, recs["fenced-job"].message)
    engine.dispose()


def test_a_rollback_run_beside_it_reaches_its_executors_before_the_fence(tmp_path: Path) -> None:
    """`switchyard rollback` in another process writes the fence to the store only (its
    in-process bus reaches nobody): the running center must hear it and invoke nothing at
    or after the fence, although the command was published ahead before the rollback."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    store.put_job(Job(job_code=JobCode("rolled-job"), biz_code="rolled", handler="h"))
    due = store.clock.now() + timedelta(seconds=15)  # far enough for a slow start on a loaded machine
    store.add_triggers(
        [Trigger(job_code=JobCode("rolled-job"), biz_code="rolled", kind=TriggerKind.ONCE, next_fire_at=due)]
    )
    runs = Runs()
    center, stop, th = _center(store, runs)
    other_engine = make_engine(url)  # the rollback's own process: its own connections and bus
    try:
        _until(lambda: _published_ahead(store) == 1, "the command published ahead")
        _until(lambda: "rolled" in center.executors, "the business's executor")
        executor = center.executors["rolled"][0]
        assert executor.fences.covering("rolled", int(due.timestamp() * 1000)) is None
        other = SqlTriggerStore(other_engine, SystemClock())
        assert FenceService(other, InProcessBus(other.clock)).raise_fence("rolled", other.clock.now()) == 1
        _until(
            lambda: executor.fences.covering("rolled", int(due.timestamp() * 1000)) is not None,
            "the executor hears the fence raised by the other process",
        )
        _until(lambda: store.clock.now() > due + timedelta(seconds=1), "the command's due time passed")
    finally:
        stop.set()
        th.join(timeout=60)
        other_engine.dispose()
    assert runs.seen == []  # fenced: never invoked on the new side
    (rec,) = store.fired_between(None, due - timedelta(seconds=1), due + timedelta(seconds=1))
    assert is_fence_skip(rec.state, rec.message)
    engine.dispose()
