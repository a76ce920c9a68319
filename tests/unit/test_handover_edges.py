"""The handover instants at their edges: an occurrence exactly at a handover belongs to the
side that takes over from it. These are the lines that decide who fires an occurrence at a
switch (`migrator.cutover.first_at_or_after`, `Fence.covers`, `Supersede.covers`); a
"first strictly after" in their place passed every other test, though a rollback whose F
falls on an occurrence then loses that occurrence (neither side fires it)."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dualrun.testing import fired
from migrator.cutover import BusinessSwitch, first_at_or_after
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock
from scheduler_core.fence import Fence, FenceService, decode_fence, is_fence_skip
from scheduler_core.model import FiredState, JobCode, Trigger, TriggerKind, TriggerState
from scheduler_core.supersede import Supersede
from scheduler_core.times import to_ms
from tests.harness import make_harness
from tests.migration_env import migrated_xxljob, ready_switch

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


def _rate(interval_s: int, next_fire_at: datetime, end_at: datetime | None = None) -> Trigger:
    return Trigger(
        job_code=JobCode("j"),
        biz_code="b",
        kind=TriggerKind.FIXED_RATE,
        interval=timedelta(seconds=interval_s),
        next_fire_at=next_fire_at,
        end_at=end_at,
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
    # a fixed rate past its next_fire_at: its grid goes on only to its end
    rate = _rate(15, T0 + 60 * S, end_at=T0 + 90 * S)
    assert first_at_or_after(rate, T0 + 90 * S) == T0 + 90 * S
    assert first_at_or_after(rate, T0 + 90 * S + MS) is None


def test_a_fence_covers_from_its_instant_to_just_before_its_lift() -> None:
    fence = Fence("b", 1_000, 2_000, 1)
    assert [fence.covers(ms) for ms in (999, 1_000, 1_999, 2_000)] == [False, True, True, False]
    open_ended = Fence("b", 1_000, None, 2)
    assert [open_ended.covers(ms) for ms in (999, 1_000, 10**13)] == [False, True, True]


def test_a_supersede_covers_exactly_its_listed_times() -> None:
    s = Supersede(7, "b", 5_000, frozenset({5_000, 15_000}), (), 1)
    assert [s.covers(ms) for ms in (4_999, 5_000, 5_001, 10_000, 15_000)] == [False, True, False, False, True]


# --- the switch's own handover pieces (migrator.cutover.BusinessSwitch) -------------------------


def _switch(tmp_path: Path, fenced: bool = True) -> BusinessSwitch:
    env, _biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    clock = env.migrator.clock
    return ready_switch(env, fences=FenceService(env.store, InProcessBus(clock)) if fenced else None)


def _done(t: Trigger) -> Trigger:
    return replace(t, state=TriggerState.COMPLETED)


def test_a_one_shot_published_for_at_or_after_f_is_handed_to_legacy_at_its_due_time(tmp_path: Path) -> None:
    """The fence skips a one-shot the new side published for F or later, so legacy fires
    it; one due before F ran (or runs) on the new side; one not published yet is an
    ordinary hand-back; without a fence nothing published is skipped."""
    sw = _switch(tmp_path)
    f = T0 + 60 * S
    assert sw._once_fenced(_done(_once(f)), f) == f  # due exactly at F
    assert sw._once_fenced(_done(_once(f + S)), f) == f + S
    assert sw._once_fenced(_done(_once(f - MS)), f) is None
    assert sw._once_fenced(_once(f + S), f) is None  # waiting: not published
    assert sw._once_fenced(_done(_cron("0/10 * * * * ?", f + S)), f) is None
    assert _switch(tmp_path / "unfenced", fenced=False)._once_fenced(_done(_once(f)), f) is None


def test_legacy_takes_a_trigger_over_at_its_first_occurrence_at_or_after_f(tmp_path: Path) -> None:
    """With a fence: the first occurrence at or after F (F itself when due there), also when
    the new side published less than F (those before F are its runs: test_rollback_behind);
    none for a one-shot due before F (not published: a lookahead shorter than the margin):
    the new side runs it, legacy would be handed it inside its start margin. Without a
    fence: where the new side stopped publishing (next_fire_at)."""
    sw = _switch(tmp_path)
    f = T0 + 20 * S
    published_to = T0 + 50 * S
    assert sw._legacy_start(_cron("0/10 * * * * ?", published_to), f) == f
    assert sw._legacy_start(_cron("0/10 * * * * ?", published_to), f + MS) == T0 + 30 * S
    assert sw._legacy_start(_rate(15, published_to), f) == f  # 50 - 2 * 15: on its grid
    assert sw._legacy_start(_rate(15, published_to), f + MS) == T0 + 35 * S
    assert sw._legacy_start(_cron("0/10 * * * * ?", T0 + 10 * S), f) == f  # published less than F
    assert sw._legacy_start(_once(f - S), f) is None
    assert sw._legacy_start(_once(f + S), f) == f + S
    unfenced = _switch(tmp_path / "unfenced", fenced=False)
    assert unfenced._legacy_start(_cron("0/10 * * * * ?", published_to), f) == published_to
    assert sw._handover_instant() == sw.clock.now() + sw.control.start_margin


def test_published_after_reads_only_the_business_and_strictly_after(tmp_path: Path) -> None:
    """What decides whether a dual-run start lifts the fence ahead (LIFT_MARGIN): a record of
    the business due after `at`; another business's, or one due at `at`, does not count."""
    sw = _switch(tmp_path)
    at = T0 + 60 * S
    assert not sw._published_after("biz-a", at)
    sw.store.put_fired([fired("j", "biz-b", 1, at + S), fired("j", "biz-a", 2, at)])
    assert not sw._published_after("biz-a", at)
    sw.store.put_fired([fired("j", "biz-a", 2, at + MS)])
    assert sw._published_after("biz-a", at)


# --- the fence's own words: what a record, a log line and a rebroadcast say -----------------------


def test_only_a_skip_with_the_fences_message_is_a_fence_skip() -> None:
    at = "rollback fence at 2026-12-02T06:00:00+00:00"
    assert is_fence_skip("skipped", at) and is_fence_skip(FiredState.SKIPPED, at)
    assert not is_fence_skip("skipped", "misfire: skipped to the next occurrence")
    assert not is_fence_skip("skipped", None)
    assert not is_fence_skip("succeeded", at)


def test_raising_and_lifting_say_which_fence_and_how_many_records(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, clock)
    f = clock.now()
    h.store.put_fired([fired("j", "biz-a", 1, f + S, state=FiredState.PUBLISHED)])
    service = FenceService(h.store, h.bus)
    with caplog.at_level(logging.INFO, logger="scheduler_core.fence"):
        service.raise_fence("biz-a", f)
        service.lift_fence("biz-a", f + 60 * S)
    raised, lifted = (r for r in caplog.records if r.name == "scheduler_core.fence")
    assert raised.getMessage() == (
        f"raised the fence of biz-a [{f.isoformat()}, open) epoch 1; 1 fired record(s) marked skipped"
    )
    assert lifted.getMessage() == f"lifted to the fence of biz-a [{f.isoformat()}, {(f + 60 * S).isoformat()}) epoch 2"
    assert [(r.business, r.epoch) for r in (raised, lifted)] == [("biz-a", 1), ("biz-a", 2)]  # type: ignore[attr-defined]


def test_a_rebroadcast_publishes_every_stored_fence_again(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    service = FenceService(h.store, h.bus)
    service.raise_fence("biz-a", clock.now())
    service.raise_fence("biz-b", clock.now() + S)
    heard: list[Fence] = []
    again = InProcessBus(clock)  # a broker that lost its data: only what is published from now on
    view = again.follow_control(lambda p: heard.extend(f for f in [decode_fence(p)] if f is not None))
    assert FenceService(h.store, again).rebroadcast() == 2
    view.close()
    assert sorted((x.biz_code, x.from_ms) for x in heard) == [
        ("biz-a", to_ms(clock.now())),
        ("biz-b", to_ms(clock.now() + S)),
    ]
