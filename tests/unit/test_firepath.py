"""The fire path (scheduler_core.firepath): it decides hold-or-fire, and nothing below the
core calls back up into it."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

from scheduler_core.clock import ManualClock
from scheduler_core.model import Epoch, TriggerKind
from scheduler_core.scheduler import SchedulerCore
from tests.harness import make_harness, trigger_of


def _callables(obj: object) -> Iterator[tuple[str, object]]:
    """The callables an object holds in its attributes (lists and tuples opened)."""
    for name, value in vars(obj).items():
        for v in value if isinstance(value, list | tuple) else [value]:
            if callable(v):
                yield name, v


def _reaches(fn: object, target: object, depth: int = 3) -> bool:
    """Whether calling `fn` calls into `target`: a method bound to it, or a partial or
    closure that holds it (or such a callable)."""
    if depth == 0:
        return False
    if getattr(fn, "__self__", None) is target:
        return True
    if isinstance(fn, functools.partial):
        return any(a is target or (callable(a) and _reaches(a, target, depth - 1)) for a in (fn.func, *fn.args))
    cells = getattr(fn, "__closure__", None) or ()
    return any(
        c.cell_contents is target or (callable(c.cell_contents) and _reaches(c.cell_contents, target, depth - 1))
        for c in cells
    )


def test_nothing_handed_down_by_the_core_calls_back_into_it(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=2, hold_within=timedelta(seconds=5))
    h.store.claim_epoch(Epoch(1))
    core = SchedulerCore(h.store, h.bus, clock, Epoch(1), h.settings)  # threaded: with the hold queue
    try:
        assert core.held is not None
        parts = [*core.acquirers, core.reclaimer, core.held, core.pool, core.path, core.in_flight, core.admission]
        back = [f"{type(p).__name__}.{name}" for p in parts for name, fn in _callables(p) if _reaches(fn, core)]
        assert back == [], "the fire path's parts hold calls back into SchedulerCore"
        assert all(a.path is core.path for a in core.acquirers), "every acquirer hands its chunks to the one path"
    finally:
        core.shutdown(cancel=True)


def test_the_path_holds_one_shots_due_shortly_and_fires_the_rest_now(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1, hold_within=timedelta(seconds=5))
    job = h.job("j")
    soon = [h.once(job, 1) for _ in range(3)]
    later = h.once(job, 60)  # beyond the hold: published now with deliver-at = T
    # a chunk is one business's: recurring triggers of another, never held
    every = h.job("every", biz="biz-b")
    recurring = h.store.add_triggers(
        [
            trigger_of(
                every, TriggerKind.FIXED_RATE, clock.now() + timedelta(seconds=1), interval=timedelta(minutes=10)
            )
            for _ in range(2)
        ]
    )
    h.store.claim_epoch(Epoch(1))
    core = SchedulerCore(h.store, h.bus, clock, Epoch(1), h.settings)
    try:
        assert core.held is not None
        (acq,) = core.acquirers
        assert core.tick(acq).acquired == len(soon) + 1 + len(recurring)
        assert core.pool.wait_idle(10)
        assert core.held.pending() == len(soon), "the one-shots due within hold_within are held for their T"
        assert core.stats.fired == 1 + len(recurring), "the far one-shot and the recurring triggers fire now"
        assert core.in_flight.contains(soon[0].id)  # type: ignore[arg-type]
        assert not core.in_flight.contains(later.id)  # type: ignore[arg-type]
    finally:
        core.shutdown(cancel=True)
