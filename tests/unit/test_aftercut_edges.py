"""The post-cutover watch's own lines (dualrun/aftercut.py), one behaviour per test: its
JSON and its gauges, which cutover it watches from, the lookback, the edges of "due",
"late" and "overdue" to the millisecond, runs never received, a job it has no timeout
for, a business-wide freeze, a business renamed at its migration, and the order of the
findings (the mutation job's survivors of the watch group, docs/mutation.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from dualrun.aftercut import AfterCutover, AfterCutoverGauges, NotCutOver, check_after_cutover
from dualrun.errors import DualRunError
from dualrun.settings import CompareSettings, MatchSettings
from dualrun.testing import fired, occurrences
from scheduler_core.model import FiredState
from scheduler_core.stops import Cause, Scope, StopService
from scheduler_core.store.stops import SqlStops
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario

EVERY_10S = "0/10 * * * * ?"
EVERY_5S = "0/5 * * * * ?"
LATE = timedelta(seconds=5)  # CompareSettings' late_after
TIMEOUT_AND_GRACE = timedelta(seconds=60 + 30)  # a 60 s job timeout and the 30 s result grace


def _cut_over(s: Scenario, ago: timedelta = timedelta(minutes=30)) -> datetime:
    s.business_row(state="cutover")
    s.switched(s.now - timedelta(hours=3), "legacy", "dual_run")
    cut = s.now - ago
    s.switched(cut, "dual_run", "cutover")
    return cut


def _check(s: Scenario, **kw: object) -> AfterCutover:
    s.flush()
    return check_after_cutover(
        s.store,
        dualrun_store(s.store),
        s.reader(),
        s.biz_code,
        source=s.source,
        settings=CompareSettings(),
        now=s.now,
        **kw,  # type: ignore[arg-type]
    )


def _since(s: Scenario, d: object, cut: datetime) -> list[datetime]:
    return [t for t in s.times(d) if t >= cut]  # type: ignore[arg-type]


def test_the_json_of_a_result_names_every_figure_and_finding(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    s.new(d, times[1:-1])
    s.new(d, times[-1:], state=FiredState.RECEIVED)
    body = _check(s).as_dict()
    assert body == {
        "business": "reminder",
        "cutover_at": "2026-12-02T07:30:00Z",
        "window": {"start": "2026-12-02T07:30:00Z", "end": "2026-12-02T08:00:00Z"},
        "expected": 180,
        "fired": 179,
        "missing": 1,
        "doubled": 0,
        "late": 0,
        "overdue": 0,
        "running": 1,
        "ok": False,
        "sentence": "reminder after its cutover 2026-12-02T07:30:00Z, checked 2026-12-02T07:30:00Z .. "
        "2026-12-02T08:00:00Z: 180 expected, 179 fired: 1 missing",
        "findings": [
            {
                "kind": "missing",
                "job_code": "xxl:reminder:12",
                "scheduled_at": "2026-12-02T07:30:00Z",
                "detail": "expected by the schedule; no fired record on the new side",
            }
        ],
    }


def test_a_business_never_cut_over_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row()
    s.job("12", EVERY_10S)
    with pytest.raises(NotCutOver) as err:
        _check(s)
    assert str(err.value) == (
        "reminder has no recorded cutover: nothing to watch after it "
        "(`switchyard cutover` first; a dual-run is compared with `dualrun compare`)"
    )


def test_after_a_rollback_and_a_second_cutover_the_watch_starts_at_the_second(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    s.switched(s.now - timedelta(hours=3), "legacy", "dual_run")
    s.switched(s.now - timedelta(hours=2), "dual_run", "cutover")
    s.switched(s.now - timedelta(hours=1), "cutover", "dual_run")
    again = s.now - timedelta(minutes=20)
    s.switched(again, "dual_run", "cutover")
    d = s.job("12", EVERY_10S)
    s.new(d, _since(s, d, again))
    r = _check(s)
    assert r.ok, r.findings
    assert (r.cutover_at, r.window.start, r.expected) == (again, again, 120)


def test_a_lookback_shorter_than_the_time_since_the_cutover_checks_only_the_lookback(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    s.new(d, times[60:])  # nothing in the first 10 minutes after the cutover
    r = _check(s, lookback=timedelta(minutes=10))
    assert r.ok, r.findings
    assert (r.window.start, r.expected) == (s.now - timedelta(minutes=10), 60)
    assert _check(s, lookback=timedelta(hours=5)).window.start == cut, "never before the cutover"


def test_a_check_at_the_instant_of_the_cutover_has_nothing_to_check_yet(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    _cut_over(s, ago=timedelta(0))
    s.job("12", EVERY_10S)
    with pytest.raises(DualRunError) as err:
        _check(s)
    assert str(err.value) == "reminder: cut over at 2026-12-02T08:00:00Z, nothing to check yet"


def test_an_occurrence_is_due_once_late_after_has_passed_since_its_time_and_not_before(tmp_path: Path) -> None:
    """now - 5 s is due (its run should have been received by now); now - 4.99 s is not yet."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_5S)
    times = _since(s, d, cut)
    edge = s.now - LATE
    assert times[-1] == edge
    s.new(d, times[:-1])  # the occurrence exactly late_after ago has no record
    r = _check(s)
    assert [(f.kind, f.scheduled_at) for f in r.findings] == [("missing", edge)]
    assert r.expected == len(times) == 360
    s2 = Scenario.create(tmp_path / "b", now=s.now - timedelta(milliseconds=10))
    cut2 = _cut_over(s2)
    d2 = s2.job("12", EVERY_5S)
    young = [t for t in s2.times(d2) if t >= cut2]
    assert young[-1] == edge and s2.now - edge < LATE
    s2.new(d2, young[:-1])
    r2 = _check(s2)
    assert r2.ok and r2.expected == len(young) - 1, "an occurrence younger than late_after is not due"


def test_a_run_received_exactly_late_after_its_time_is_not_late_a_ms_more_is(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    on_time, late = times[10], times[11]
    s.new(d, [t for t in times if t not in (on_time, late)])
    s.new(d, [on_time], lag=LATE)
    s.new(d, [late], lag=LATE + timedelta(milliseconds=1))
    r = _check(s)
    assert [(f.kind, f.scheduled_at, f.detail) for f in r.findings] == [("late", late, "received 5.0 s after its time")]
    assert r.late == 1


def test_a_late_runs_lag_is_told_to_the_tenth_of_a_second(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    s.new(d, times[1:])
    s.new(d, times[:1], lag=timedelta(seconds=100))
    (f,) = _check(s).findings
    assert (f.kind, f.job_code, f.detail) == ("late", "xxl:reminder:12", "received 100.0 s after its time")


def test_a_run_never_received_is_late_only_once_late_after_has_passed(tmp_path: Path) -> None:
    """Published, not received by any executor: late (with how long it waits) once its time
    is more than late_after ago; at exactly late_after not yet."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_5S)
    times = _since(s, d, cut)
    old, edge = s.now - timedelta(minutes=10), s.now - LATE
    assert old in times and edge in times
    s.new(d, [t for t in times if t not in (old, edge)])
    s.new(d, [old, edge], state=FiredState.PUBLISHED)
    r = _check(s)
    assert [(f.kind, f.job_code, f.scheduled_at, f.detail) for f in r.findings] == [
        ("late", "xxl:reminder:12", old, "not received by an executor 600 s after its time")
    ]
    assert (r.late, r.running, r.overdue, r.missing) == (1, 0, 0, 0)


def test_a_run_without_result_is_overdue_only_past_its_timeout_and_the_grace(tmp_path: Path) -> None:
    """Received exactly timeout + grace ago: still running; a millisecond earlier: overdue;
    how long ago is told in whole seconds."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S, timeout_seconds=60)
    times = _since(s, d, cut)
    a, b, c = times[-10], times[-11], times[-70]  # 100 s, 110 s and 700 s before now
    s.new(d, [t for t in times if t not in (a, b, c)])
    at_edge = s.now - TIMEOUT_AND_GRACE
    s.new(d, [a], state=FiredState.RECEIVED, lag=at_edge - a)
    s.new(d, [b], state=FiredState.RECEIVED, lag=at_edge - timedelta(milliseconds=1) - b)
    s.new(d, [c], state=FiredState.RECEIVED)
    r = _check(s)
    overdue = [(f.job_code, f.scheduled_at, f.detail) for f in r.findings if f.kind == "overdue"]
    assert overdue == [
        ("xxl:reminder:12", c, "received 700 s ago, no result, past the job's timeout"),
        ("xxl:reminder:12", b, "received 90 s ago, no result, past the job's timeout"),
    ]
    assert (r.overdue, r.running) == (2, 1)


def test_a_run_of_a_job_without_a_known_timeout_is_running_however_long(tmp_path: Path) -> None:
    """No timeout to judge by: a job whose definition says none (0), and a job the
    definitions do not have at all (fired on the new side only)."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)  # no timeout
    times = _since(s, d, cut)
    s.new(d, times[1:])
    s.new(d, times[:1], state=FiredState.RECEIVED)
    s.records.append(fired("xxl:reminder:99", s.biz_code, 7, times[1], state=FiredState.RECEIVED))
    r = _check(s)
    assert (r.overdue, r.running, r.missing, r.doubled, r.late) == (0, 2, 0, 0, 0), r.findings
    assert r.ok


def test_doubles_come_first_then_missing_then_the_rest_by_time_each_with_its_job(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    late, gone, doubled = times[5], times[10], times[20]
    s.new(d, [t for t in times if t not in (late, gone)])
    s.new(d, [late], lag=timedelta(seconds=8))
    s.records.append(fired(s.code(d), s.biz_code, 99, doubled))
    r = _check(s)
    assert [(f.kind, f.job_code, f.scheduled_at) for f in r.findings] == [
        ("doubled", "xxl:reminder:12", doubled),
        ("missing", "xxl:reminder:12", gone),
        ("late", "xxl:reminder:12", late),
    ]


def test_occurrences_in_a_freeze_of_the_whole_business_are_not_missing(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    times = _since(s, d, cut)
    frozen, thawed = times[30], times[60]
    s.new(d, [t for t in times if not frozen <= t < thawed])
    stops = StopService(SqlStops(s.store))
    stops.stop(Scope.BUSINESS, s.biz_code, frozen, Cause.FREEZE, "ops", "quarter close")
    stops.lift(Scope.BUSINESS, s.biz_code, thawed, (Cause.FREEZE,))
    r = _check(s)
    assert r.ok and r.missing == 0, r.findings


def test_a_business_renamed_at_its_migration_is_checked_against_its_legacy_definitions(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)  # the legacy side calls it "reminder"
    d = s.job("12", EVERY_10S)  # migrated as job xxl:reminder:12
    s.biz_code = "reminders"  # the new side's name
    cut = _cut_over(s)
    s.records += [fired("xxl:reminder:12", "reminders", 1, t) for t in _since(s, d, cut)[1:]]
    s.flush()
    r = check_after_cutover(
        s.store,
        dualrun_store(s.store),
        s.reader(),
        "reminders",
        source=s.source,
        settings=CompareSettings(),
        now=s.now,
        legacy_biz_code="reminder",
    )
    assert (r.expected, r.fired, r.missing) == (180, 179, 1)
    assert (r.findings[0].job_code, r.findings[0].scheduled_at) == ("xxl:reminder:12", cut)


def test_the_gauges_say_what_they_count_and_when_the_business_was_checked(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    s.new(d, _since(s, d, cut))
    gauges = AfterCutoverGauges()
    gauges.record(_check(s))
    text = generate_latest(gauges.registry).decode()
    assert (
        "# HELP switchyard_after_cutover_fires Fires of a cut-over business found missing, doubled or late "
        "by its latest after-cutover check\n" in text
    )
    assert (
        "# HELP switchyard_after_cutover_checked_timestamp_seconds When the business was last checked "
        "after its cutover\n" in text
    )
    checked = gauges.registry.get_sample_value(
        "switchyard_after_cutover_checked_timestamp_seconds", {"biz_code": "reminder"}
    )
    assert checked == s.now.timestamp()


def test_the_window_ends_before_now_an_occurrence_at_now_is_the_next_checks(tmp_path: Path) -> None:
    """With no lateness allowed (late_after 0) an occurrence at `now` would be due at once;
    it lies past the window [cutover, now), whose fired records are read, so it is neither
    expected nor missing here (the next check has it)."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", EVERY_10S)
    s.new(d, _since(s, d, cut), lag=timedelta(0))  # each received at its time
    s.flush()
    r = check_after_cutover(
        s.store,
        dualrun_store(s.store),
        s.reader(),
        s.biz_code,
        source=s.source,
        settings=CompareSettings(match=MatchSettings(late_after=timedelta(0))),
        now=s.now,
    )
    assert s.now in occurrences(d, cut, s.now + timedelta(seconds=1)), "an occurrence exactly at now"
    assert r.ok and r.expected == 180, r.findings
