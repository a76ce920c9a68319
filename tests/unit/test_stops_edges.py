"""The stop mechanism's own lines (scheduler_core.stops), one behaviour per test: what a
stop says of itself in the operator's log, which skipped records are a stop's, that a
stop given without an actor or a reason says neither, that a stop's instant may be given
in epoch ms as well as a datetime, what the service and the relay log, a relay that does
not relay the stops, a malformed message, the stored windows' text and a follower's
epochs (the mutation job's survivors of the stops group, docs/mutation.md)."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler_core.clock import ManualClock
from scheduler_core.control import Owned, encode_control
from scheduler_core.executor.fences import FenceView
from scheduler_core.model import FiredState
from scheduler_core.stops import (
    KIND,
    Cause,
    Scope,
    SkipWindow,
    Stop,
    StopIndex,
    StopRelay,
    StopService,
    decode_stop,
    is_stop_skip,
    windows_from_text,
    windows_to_text,
)
from scheduler_core.store.stops import SqlStops
from scheduler_core.times import to_ms
from tests.harness import Harness, make_harness

MS = to_ms(datetime.fromisoformat("2026-12-02T06:00:00+00:00"))


def _service(tmp_path: Path, clock: ManualClock) -> tuple[Harness, StopService]:
    h = make_harness(tmp_path, clock)
    return h, StopService(SqlStops(h.store), h.bus)


def test_a_stop_names_its_scope_epoch_and_each_window_with_its_span() -> None:
    closed = SkipWindow(MS, MS + 60_000, Cause.PAUSE)
    opened = SkipWindow(MS + 120_000, None, Cause.FREEZE)
    assert str(Stop(Scope.TRIGGER, "7", (closed, opened), 3)) == (
        "stop of trigger 7 epoch 3: pause [2026-12-02T06:00:00+00:00, 2026-12-02T06:01:00+00:00), "
        "freeze [2026-12-02T06:02:00+00:00, open)"
    )
    assert str(Stop(Scope.JOB, "j1", (), 4)) == "stop of job j1 epoch 4: no window"
    assert str(Stop(Scope.BUSINESS, "biz-a", (opened,), 1)).startswith("stop of business biz-a epoch 1: freeze [")
    assert str(Stop(Scope.ALL, "*", (opened,), 2)).startswith("stop of everything epoch 2: ")


def test_a_stop_of_more_than_three_windows_counts_them_by_cause() -> None:
    """A schedule edit's point windows are many: the text counts them, per cause, in the
    order the causes first appear."""
    points = tuple(SkipWindow(MS + i * 1000, MS + i * 1000 + 1, Cause.EDIT) for i in range(3))
    stop = Stop(Scope.TRIGGER, "7", (SkipWindow(MS - 5000, MS - 4000, Cause.PAUSE), *points), 9)
    assert str(stop) == "stop of trigger 7 epoch 9: 1 pause window(s), 3 edit window(s)"
    three = Stop(Scope.TRIGGER, "7", points, 9)
    assert "window(s)" not in str(three) and str(three).count("edit [") == 3


def test_only_a_skip_that_carries_the_stop_message_is_a_stops() -> None:
    said = "stopped: pause from 2026-12-02T06:00:00+00:00"
    assert is_stop_skip(FiredState.SKIPPED, said)
    assert is_stop_skip("skipped", said)
    assert not is_stop_skip(FiredState.SKIPPED, "misfire: skipped, 40 s late")
    assert not is_stop_skip(FiredState.SKIPPED, None)
    assert not is_stop_skip(FiredState.SUCCEEDED, said), "a run that ran is never a stop's skip"


def test_a_stop_without_actor_or_reason_says_neither(tmp_path: Path, clock: ManualClock) -> None:
    _h, stops = _service(tmp_path, clock)
    applied = stops.stop(Scope.JOB, "j1", MS, Cause.PAUSE)
    assert (applied.window.actor, applied.window.reason) == ("", "")
    assert applied.window.message == "stopped: pause from 2026-12-02T06:00:00+00:00"
    (many,), _ = stops.stop_many(Scope.TRIGGER, ["5"], MS, Cause.CANCEL)
    assert many.window.message == "stopped: cancel from 2026-12-02T06:00:00+00:00"


def test_a_stops_and_a_lifts_instant_may_be_epoch_ms_or_a_datetime(tmp_path: Path, clock: ManualClock) -> None:
    h, stops = _service(tmp_path, clock)
    at = datetime.fromisoformat("2026-12-02T06:00:00+00:00")
    assert stops.stop(Scope.TRIGGER, "1", MS, Cause.PAUSE).window.from_ms == MS
    assert stops.stop(Scope.TRIGGER, "2", at, Cause.PAUSE).window.from_ms == MS
    (a,), _ = stops.stop_many(Scope.TRIGGER, ["3"], MS + 5, Cause.PAUSE)
    assert a.window.from_ms == MS + 5
    (b,), _ = stops.lift_many(Scope.TRIGGER, ["3"], MS + 10, (Cause.PAUSE,))
    assert b.window.until_ms == MS + 10
    lifted = stops.lift(Scope.TRIGGER, "1", MS + 20, (Cause.PAUSE,))
    assert lifted is not None and lifted.window.until_ms == MS + 20
    assert stops.lift(Scope.TRIGGER, "2", at + timedelta(seconds=1), (Cause.PAUSE,)) is not None
    view = FenceView(h.bus)  # and each went out on the bus as stored
    assert view.stops.by_scope[(Scope.TRIGGER, "3")].windows[0].until_ms == MS + 10


def test_storing_and_lifting_a_stop_is_logged_with_the_stop_and_its_records(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    _h, stops = _service(tmp_path, clock)
    with caplog.at_level(logging.INFO, logger="scheduler_core.stops"):
        stops.stop(Scope.JOB, "j1", MS, Cause.PAUSE)
        stops.stop(Scope.JOB, "j1", MS, Cause.PAUSE)  # the same window again: nothing stored, nothing said
        stops.stop_many(Scope.TRIGGER, ["5", "6"], MS, Cause.PAUSE)
        stops.lift(Scope.JOB, "j1", MS + 1000, (Cause.PAUSE,))
    said = [r.getMessage() for r in caplog.records if r.name == "scheduler_core.stops"]
    assert said == [
        "stored the stop of job j1 epoch 1: pause [2026-12-02T06:00:00+00:00, open); 0 fired record(s) marked skipped",
        f"stored 2 pause stop(s) from {MS}; 0 fired record(s) marked skipped",
        "lifted to the stop of job j1 epoch 2: pause [2026-12-02T06:00:00+00:00, 2026-12-02T06:00:01+00:00); "
        "0 fired record(s) revived",
    ]


class _Follower:
    """A relay scope that does not relay the business-wide messages until `lead` is set
    (a shard member not owning the lowest partition, then owning it)."""

    def __init__(self) -> None:
        self.lead = False

    def owner(self, trigger_id: int) -> Owned | None:
        return Owned() if self.lead else None

    def business_wide(self) -> bool:
        return self.lead

    def generation(self) -> int:
        return 1


def test_a_relay_that_does_not_relay_stops_sends_none_and_says_so(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, clock)
    StopService(SqlStops(h.store)).stop(Scope.JOB, "j1", MS, Cause.PAUSE)  # stored, no bus
    scope = _Follower()
    relay = StopRelay(SqlStops(h.store), h.bus, scope, name="member-2")
    view = FenceView(h.bus)
    assert relay.relay() == 0
    assert view.stops.by_scope == {}
    scope.lead = True
    with caplog.at_level(logging.INFO, logger="scheduler_core.stops"):
        assert relay.relay() == 1
    assert (Scope.JOB, "j1") in view.stops.by_scope
    assert [r.getMessage() for r in caplog.records if r.name == "scheduler_core.stops"] == [
        "broadcast the stop of job j1 epoch 1: pause [2026-12-02T06:00:00+00:00, open)"
    ]


def test_a_malformed_stop_message_is_refused_saying_what_it_is() -> None:
    with pytest.raises(ValueError, match=r"^malformed stop message: 'w'$"):
        decode_stop(encode_control(KIND, {"s": "job", "x": "j1", "e": 1}))


def test_a_scopes_windows_are_stored_as_compact_json() -> None:
    """An edit's thousands of point windows are rewritten into the row at each change: no
    blank after a separator (and the text reads back as written)."""
    windows = (
        SkipWindow(1000, 1001, Cause.EDIT, effective_ms=900),
        SkipWindow(5000, None, Cause.PAUSE, "ops", "db down"),
    )
    text = windows_to_text(windows)
    assert text == '[{"f":1000,"u":1001,"c":"edit","e":900},{"f":5000,"u":null,"c":"pause","a":"ops","r":"db down"}]'
    assert windows_from_text(text) == windows


def test_a_follower_takes_a_stop_only_at_a_later_epoch_than_it_knows() -> None:
    """A relay carries every stop again after a restart: the same epoch again is no change
    (the follower keeps when it first heard it)."""
    one = Stop(Scope.JOB, "j1", (SkipWindow(MS, None, Cause.PAUSE),), 2)
    index = StopIndex().with_stop(one)
    assert not index.newer(one)
    assert not index.newer(Stop(Scope.JOB, "j1", (), 1))
    assert index.newer(Stop(Scope.JOB, "j1", (), 3))
    assert index.newer(Stop(Scope.JOB, "j2", (), 1))
