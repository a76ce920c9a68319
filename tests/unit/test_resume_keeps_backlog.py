"""A pause that comes while the scheduler is behind on a trigger (its next occurrence
before the pause's S: a leader failing over) stops what is at or after S, nothing before.
The chaos soak (docs/soak.md, seed 4) found a resume that moved such a trigger to its first
occurrence at or after R: the occurrences before S, never stopped, were never fired."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.clock import ManualClock
from scheduler_core.model import MisfirePolicy, TriggerKind, TriggerState
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import to_ms
from tests.harness import make_harness, stored_id, trigger_of
from tests.operator import operate, resume


def test_a_resume_keeps_the_occurrences_due_before_the_pause(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("behind")
    behind = clock.now() - timedelta(seconds=10)  # the leader was away: ten occurrences not fired yet
    (t,) = h.store.add_triggers(
        [trigger_of(job, TriggerKind.CRON, behind, cron="* * * * * ?", misfire_policy=MisfirePolicy.SKIP)]
    )
    tid = stored_id(t)
    assert operate(h.store, "pause", tid)  # S = now + 1 s
    s_ms = to_ms(clock.now() + timedelta(seconds=1))
    clock.advance(timedelta(seconds=5))
    assert resume(h.store, tid)  # R = now + 2 s
    pending = [ms for sup in SqlSupersedes(h.store).supersedes() if sup.trigger_id == tid for ms in sup.pending_ms]
    due = list(range(to_ms(behind), s_ms, 1000))
    assert sorted(pending) == due, f"the occurrences before S were dropped: runs {pending}, due {due}"
    got = h.store.get_trigger(tid)
    assert got is not None and got.state is TriggerState.WAITING and got.next_fire_at >= clock.now()


def test_a_resume_still_skips_a_trigger_past_the_pause(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("on-time")
    start = clock.now() + timedelta(seconds=2)
    (t,) = h.store.add_triggers(
        [trigger_of(job, TriggerKind.CRON, start, cron="* * * * * ?", misfire_policy=MisfirePolicy.SKIP)]
    )
    tid = stored_id(t)
    assert operate(h.store, "pause", tid)
    clock.advance(timedelta(seconds=10))
    assert resume(h.store, tid)
    got = h.store.get_trigger(tid)
    assert got is not None and got.next_fire_at >= clock.now() + timedelta(seconds=2)


@pytest.mark.parametrize("action", ["pause", "cancel"])
def test_a_stop_hands_out_the_occurrences_due_before_it_even_if_never_lifted(
    tmp_path: Path, clock: ManualClock, action: str
) -> None:
    """A pause or a cancel stops what is at or after S. Given while the scheduler is behind
    on the trigger (its broker or its leader away), the occurrences before S go out as runs
    at once: left inside the stopped trigger, they ran only if it was resumed, and a trigger
    never resumed (or cancelled) had them neither fired nor recorded."""
    h = make_harness(tmp_path, clock)
    job = h.job("behind")
    behind = clock.now() - timedelta(seconds=10)  # ten occurrences not fired yet
    (t,) = h.store.add_triggers(
        [trigger_of(job, TriggerKind.CRON, behind, cron="* * * * * ?", misfire_policy=MisfirePolicy.SKIP)]
    )
    tid = stored_id(t)
    assert operate(h.store, action, tid)  # S = now + 1 s
    s_ms = to_ms(clock.now() + timedelta(seconds=1))
    pending = [ms for sup in SqlSupersedes(h.store).supersedes() if sup.trigger_id == tid for ms in sup.pending_ms]
    assert sorted(pending) == list(range(to_ms(behind), s_ms, 1000)), "the occurrences before S were left behind"
    got = h.store.get_trigger(tid)
    assert got is not None and got.state is (TriggerState.PAUSED if action == "pause" else TriggerState.CANCELLED)
    assert to_ms(got.next_fire_at) == s_ms  # past the pause: a resume hands nothing out twice
    if action == "pause":
        clock.advance(timedelta(seconds=5))
        assert resume(h.store, tid)
        again = [ms for sup in SqlSupersedes(h.store).supersedes() if sup.trigger_id == tid for ms in sup.pending_ms]
        assert sorted(again) == sorted(pending)
