"""`Executor(concurrency=N)` (`switchyard executor run --concurrency N`) never runs more
than N handlers of the business at once, including handlers that overran their job
timeout and still run (a Python thread cannot be killed), and it does use all N."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import FiredState
from tests.unit.test_executor_packs import _collect, _pack, _Running
from tests.waiting import until


class _Gauge:
    """Handlers in flight, counted on entry and exit (no barrier: nothing makes them
    meet; the burst alone has to)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.now = 0
        self.max = 0

    def __enter__(self) -> None:
        with self._lock:
            self.now += 1
            self.max = max(self.max, self.now)

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self.now -= 1


@pytest.mark.parametrize("n", [1, 4])
def test_a_burst_never_runs_more_than_n_handlers_and_reaches_n(n: int) -> None:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(
        bus, "d", concurrency=n, retry_backoff=timedelta(milliseconds=1), receipt_after=None
    )  # final results only
    gauge = _Gauge()

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        with gauge:
            # every third trigger overruns its 50 ms timeout: the watchdog reports it and
            # hands the rest of its message on while the handler still runs
            time.sleep(0.15 if ctx.trigger_id % 3 == 0 else 0.02)

    ids = []
    for burst in range(40):  # 40 messages of 2 runs each, all published before the executor starts
        ids += _pack(bus, 1 + 2 * burst, 2, timeout=timedelta(milliseconds=50))
    with _Running(ex):
        got = _collect(results, len(ids), within_s=60)
        until(lambda: not gauge.now, 10, every_s=0.01)  # the last overrun handlers return
    assert len(got) == len(ids)
    timed_out = [c for c in ids if got[c].state is FiredState.TIMED_OUT]
    assert timed_out, "no handler overran: the test did not exercise the timeout path"
    assert gauge.max == n, f"{gauge.max} handlers ran at once with concurrency {n}"
    ex.close()
