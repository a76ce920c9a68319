"""S of an operator's stop leaves every executor its lead to hear the stop, however long
the command took to get to the write. The chaos soak (docs/soak.md, seed 2) found a
`trigger pause` on a loaded machine that wrote its stop after its own S (start + 1 s):
the executor heard it 22 ms after it had started the occurrence at S + 0.58 s."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from scheduler_core.clock import ManualClock
from scheduler_core.stops import StopService
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard.trigger_actions import STOP_LEAD, act
from switchyard.wiring import migrator_store
from tests.harness import make_harness, stored_id


def test_a_slow_command_dates_its_stop_a_lead_after_the_write(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("slow-pause")
    t = h.once(job, 5)
    started = clock.now()
    clock.advance(timedelta(milliseconds=1500))  # the command's reads took 1.5 s
    report, _guard = act(
        h.store, migrator_store(h.store), StopService(SqlStops(h.store)), SqlSupersedes(h.store), "pause", [stored_id(t)],
        actor="ops", reason="slow", started=started,
    )  # fmt: skip
    assert report.at is not None and report.at >= clock.now() + STOP_LEAD, (report.at, clock.now())


def test_s_is_a_lead_after_the_later_of_the_start_and_the_write(clock: ManualClock) -> None:
    from switchyard.trigger_actions import stop_instant

    started = clock.now()
    assert stop_instant(started, started) == started + STOP_LEAD
    late = started + timedelta(milliseconds=1200)
    assert stop_instant(started, late) == late + STOP_LEAD
