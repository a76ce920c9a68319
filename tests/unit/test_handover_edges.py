"""The handover instants at their edges: an occurrence exactly at a handover belongs to the
side that takes over from it. These are the lines that decide who fires an occurrence at a
switch (`migrator.cutover.first_at_or_after`, `Fence.covers`, `Supersede.covers`); a
"first strictly after" in their place passed every other test, though a rollback whose F
falls on an occurrence then loses that occurrence (neither side fires it)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from migrator.cutover import first_at_or_after
from scheduler_core.fence import Fence
from scheduler_core.model import JobCode, Trigger, TriggerKind
from scheduler_core.supersede import Supersede

UTC = timezone.utc
T0 = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)
MS = timedelta(milliseconds=1)


def _cron(expr: str, next_fire_at: datetime, end_at: datetime | None = None) -> Trigger:
    return Trigger(
        job_code=JobCode("j"),
        biz_code="b",
        kind=TriggerKind.CRON,
        cron=expr,
        next_fire_at=next_fire_at,
        end_at=end_at,
    )


def _rate(interval_s: int, next_fire_at: datetime) -> Trigger:
    return Trigger(
        job_code=JobCode("j"),
        biz_code="b",
        kind=TriggerKind.FIXED_RATE,
        interval=timedelta(seconds=interval_s),
        next_fire_at=next_fire_at,
    )


def _once(at: datetime) -> Trigger:
    return Trigger(job_code=JobCode("j"), biz_code="b", kind=TriggerKind.ONCE, next_fire_at=at)


S = timedelta(seconds=1)


@pytest.mark.parametrize(
    ("at", "first"),
    [
        (T0 + 20 * S, T0 + 20 * S),  # on an occurrence: that occurrence
        (T0 + 20 * S - MS, T0 + 20 * S),
        (T0 + 20 * S + MS, T0 + 30 * S),
        (T0 + 40 * S, T0 + 40 * S),  # past next_fire_at (30 s), on an occurrence
    ],
)
def test_a_cron_hands_over_the_occurrence_at_the_instant_itself(at: datetime, first: datetime) -> None:
    assert first_at_or_after(_cron("0/10 * * * * ?", T0 + 30 * S), at) == first


@pytest.mark.parametrize(
    ("at", "first"),
    [
        # before next_fire_at (06:01:00, every 15 s): stepped back on its grid
        (T0 + 30 * S, T0 + 30 * S),  # on the grid: that occurrence
        (T0 + 30 * S - MS, T0 + 30 * S),
        (T0 + 30 * S + MS, T0 + 45 * S),
        (T0 + 60 * S - MS, T0 + 60 * S),
        (T0 + 60 * S, T0 + 60 * S),  # next_fire_at itself
        (T0 + 60 * S + MS, T0 + 75 * S),
        # after next_fire_at: on the grid through it
        (T0 + 90 * S, T0 + 90 * S),
        (T0 + 90 * S + MS, T0 + 105 * S),
        (T0, T0),
    ],
)
def test_a_fixed_rate_hands_over_the_occurrence_at_the_instant_itself(at: datetime, first: datetime) -> None:
    assert first_at_or_after(_rate(15, T0 + 60 * S), at) == first


def test_a_one_shot_is_handed_over_when_due_at_or_after_the_instant() -> None:
    due = T0 + 30 * S
    assert first_at_or_after(_once(due), due) == due
    assert first_at_or_after(_once(due), due - MS) == due
    assert first_at_or_after(_once(due), due + MS) is None


def test_no_occurrence_past_the_end_is_handed_over() -> None:
    ends = _cron("0/10 * * * * ?", T0 + 30 * S, end_at=T0 + 40 * S)
    assert first_at_or_after(ends, T0 + 40 * S) == T0 + 40 * S
    assert first_at_or_after(ends, T0 + 40 * S + MS) is None


def test_a_fence_covers_from_its_instant_to_just_before_its_lift() -> None:
    fence = Fence("b", 1_000, 2_000, 1)
    assert [fence.covers(ms) for ms in (999, 1_000, 1_999, 2_000)] == [False, True, True, False]
    open_ended = Fence("b", 1_000, None, 2)
    assert [open_ended.covers(ms) for ms in (999, 1_000, 10**13)] == [False, True, True]


def test_a_supersede_covers_exactly_its_listed_times() -> None:
    s = Supersede(7, "b", 5_000, frozenset({5_000, 15_000}), (), 1)
    assert [s.covers(ms) for ms in (4_999, 5_000, 5_001, 10_000, 15_000)] == [False, True, False, False, True]
