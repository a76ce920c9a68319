"""Issue 17: a run still executing 5 s after its fire time is "running", neither late nor
missing. The new side's executor stamps it received when it outlasts a short threshold
(scheduler_core.executor.receipts); the comparator judges lateness from that stamp. Seen
before: "late (not received by an executor)" for a run that succeeded at +20 s."""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dualrun.model import MismatchKind
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import SystemClock
from scheduler_core.executor import Executor
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, FiredState, command_id
from tests.publish import publish_command
from tests.unit.test_dualrun_support import Scenario

UTC = timezone.utc


def _late(c) -> list:  # type: ignore[no-untyped-def]
    return [m for m in c.mismatches if m.kind is MismatchKind.LATE_ON_NEW]


def test_a_run_executing_past_late_after_is_running_not_late(tmp_path: Path) -> None:
    """End to end on the simulator: a job every second; the occurrence T goes through a
    real executor whose handler is still running when the comparison is made 6 s later."""
    clock = SystemClock()
    fire_at = datetime.fromtimestamp(int(time.time()) + 1, tz=UTC)
    s = Scenario.create(tmp_path, now=fire_at + timedelta(seconds=6))
    d = s.job("12", "* * * * * ?")
    s.legacy(d)
    s.new(d, [t for t in s.times(d) if t != fire_at])  # every other occurrence ran and succeeded
    tid = s._trigger_ids[d.source_key]
    s.new(d, [fire_at], state=FiredState.PUBLISHED)  # the scheduler's record of T, before any result
    s.flush()
    bus = InProcessBus(clock)
    consumer = ResultConsumer(bus, s.store, SchedulerMetrics())
    ex = Executor(bus, "reminder", clock=clock, concurrency=1, receipt_after=timedelta(milliseconds=200))
    release = threading.Event()
    ex.handler()(lambda ctx: release.wait(30) and None)
    cid = CommandId(command_id(tid, fire_at, 0))
    while time.time() < fire_at.timestamp():  # deliver at T, as the bus would (bounded: < 1 s)
        time.sleep(0.01)
    publish_command(bus, cid, tid, s.code(d), "reminder", fire_at)
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    try:
        end = time.monotonic() + 20
        while time.monotonic() < end and s.store.get_fired([cid])[cid].received_at is None:
            consumer.poll(timeout=timedelta(milliseconds=50))
        rec = s.store.get_fired([cid])[cid]
        assert rec.state is FiredState.RECEIVED and rec.received_at is not None
        c = s.compare()  # 6 s after T, the handler still running
    finally:
        release.set()
        stop.set()
        th.join(10)
        ex.close()
    assert not _late(c), _late(c)
    assert c.new.running == 1 and c.new.missing == 0 and c.new.late == 0
    assert not any("not received" in r for r in c.reasons), c.reasons


def test_a_command_no_executor_took_is_still_late(tmp_path: Path) -> None:
    """The stamp does not hide a real delay: published, never received, 6 s past T."""
    fire_at = datetime(2026, 12, 2, 7, 59, 54, tzinfo=UTC)
    s = Scenario.create(tmp_path)
    d = s.job("12", "* * * * * ?")
    s.legacy(d)
    s.new(d, [t for t in s.times(d) if t != fire_at])
    s.new(d, [fire_at], state=FiredState.PUBLISHED)
    c = s.compare()
    (m,) = _late(c)
    assert m.scheduled_at == fire_at and m.detail.startswith("not received by an executor")
    assert c.new.running == 0


def test_a_run_with_no_result_past_its_timeout_counts_as_timed_out(tmp_path: Path) -> None:
    """ "Running" holds within the job's timeout only: a received run with no result two
    minutes after its time, on a job whose timeout is 10 s, is counted timed out (its result
    hung or was lost), while one on a job with a 10-minute timeout is still running."""
    s = Scenario.create(tmp_path)
    short = s.job("12", "0/10 * * * * ?", timeout_seconds=10)
    long = s.job("13", "0/10 * * * * ?", timeout_seconds=600)
    at = s.now - timedelta(minutes=2)
    for d in (short, long):
        s.legacy(d)
        s.new(d, [t for t in s.times(d) if t != at])
        s.new(d, [at], state=FiredState.RECEIVED)
    c = s.compare()
    assert c.new.running == 1, c.new
    assert c.new.timed_out == 1 and c.new.unfinished == 1
    assert c.new.finished == c.new.succeeded + 1
