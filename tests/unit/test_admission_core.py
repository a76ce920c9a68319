"""The core's admission: what the pool refused is counted, and the partition loops admit one at a time."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

from scheduler_core.clock import ManualClock
from scheduler_core.model import TriggerState
from tests.harness import make_harness, state_of


def test_rows_the_pool_refused_are_counted_as_released(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("j")
    triggers = [h.once(job, 1) for _ in range(3)]
    core = h.core(submit_retries=0, submit_retry_wait=timedelta(0))
    core.pool.try_submit = lambda *_a, **_k: False  # type: ignore[method-assign]
    core.tick_all()
    assert core.stats.acquired == 3
    assert core.stats.released == 3, "acquired rows handed back to waiting must show in the stats"
    assert core.stats.fired == 0
    assert {state_of(h.store, t) for t in triggers} == {TriggerState.WAITING}


def test_partition_loops_admit_one_at_a_time(tmp_path: Path, clock: ManualClock) -> None:
    # each loop reads the pool's headroom before its SELECT and spends it at submit: two
    # admitting side by side would both spend the same headroom
    h = make_harness(tmp_path, clock, partitions=4)
    job = h.job("j")
    for i in range(8):
        h.once(job, i)
    core = h.core()
    assert len(core.acquirers) == 4
    active, peak = [0], [0]
    guard = threading.Lock()
    real_select = h.store.select_due

    def slow_select(*args, **kwargs):  # type: ignore[no-untyped-def]
        with guard:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        try:
            threading.Event().wait(0.05)  # a slow server: ticks would overlap here
            return real_select(*args, **kwargs)
        finally:
            with guard:
                active[0] -= 1

    h.store.select_due = slow_select  # type: ignore[method-assign]
    start = threading.Barrier(len(core.acquirers))

    def loop(acq):  # type: ignore[no-untyped-def]
        start.wait(5)
        core.tick(acq)

    threads = [threading.Thread(target=loop, args=(a,)) for a in core.acquirers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    core.drain(10)
    core.shutdown()
    assert core.stats.ticks == 4
    assert peak[0] == 1, f"{peak[0]} partition loops were admitting at once"
