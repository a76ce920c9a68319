"""Verdicts on fixtures where the truth is known."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dualrun.model import Label, MismatchKind, Mode, Verdict
from dualrun.settings import CompareSettings, Thresholds
from dualrun.verdict import SHADOW_NOTE, clears
from readers.records import ExecStatus, MisfireRule, SourceSystem
from scheduler_core.model import FiredState
from tests.unit.test_dualrun_support import Scenario, identical

UTC = timezone.utc


def _failed(c, code: str) -> bool:  # type: ignore[no-untyped-def]
    return any(ch.code == code and not ch.passed and not ch.skipped for ch in c.checks)


def test_identical_pair_is_ready(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert c.reasons == ()
    assert c.legacy.fires == c.new.fires == 360
    assert all(v["flagged"] == 0 for v in c.mismatch_counts.values())
    assert c.baseline.fires == 360 and c.baseline.missing == 0
    # rows just after a window belong to their own occurrences, not to the window's last one
    assert c.baseline.duplicates == 0 and c.legacy.duplicates == 0


def test_legacy_rows_after_the_window_do_not_leak_into_it(tmp_path: Path) -> None:
    s, d = identical(tmp_path)
    s.legacy(d, occurrences_after(d, s))  # the legacy log goes on after the window's end
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert c.legacy.fires == 360 and c.legacy.duplicates == 0 and c.legacy.unscheduled == 0


def occurrences_after(d, s):  # type: ignore[no-untyped-def]
    from dualrun.testing import occurrences

    return occurrences(d, s.now, s.now + timedelta(minutes=15))


def test_one_percent_dropped_on_new_side_is_not_ready_and_lists_the_missing_fires(tmp_path: Path) -> None:
    # Given one job every 10 s on both sides, When the new side drops every 90th fire
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    dropped = times[5::90]
    s.new(d, [t for t in times if t not in dropped])
    c = s.compare()
    # Then the verdict is not ready, and every dropped fire is listed as missing on the new side
    assert c.verdict is Verdict.NOT_READY
    assert _failed(c, "missing")
    missing = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_NEW]
    assert sorted(m.scheduled_at for m in missing) == dropped
    assert all(m.flagged for m in missing)
    assert any(r.startswith(f"{len(dropped)} missing fires of job xxl:reminder:12 between") for r in c.reasons)
    assert c.reasons[0].startswith(f"{len(dropped)} missing fires on the new side of 360")


def test_late_fires_fail_on_the_p99_lag(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    slow = set(times[::20])  # 5 % of fires 4.2 s late: below late_after, above the p99 SLO
    s.new(d, [t for t in times if t not in slow])
    s.new(d, sorted(slow), lag=timedelta(seconds=4.2))
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY
    # compared at xxl-job's 1 s precision (trigger_time is DATETIME): 4.2 s reads 4 s
    assert any(r.startswith("p99 lag 4 s > 1 s") for r in c.reasons), c.reasons
    assert not _failed(c, "late")  # 4.2 s is "on time" by xxl-job's 5 s rule


def test_fires_later_than_late_after_are_listed_as_late(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    slow = times[::10]
    s.new(d, [t for t in times if t not in slow])
    s.new(d, slow, lag=timedelta(seconds=9))
    c = s.compare()
    assert _failed(c, "late") and _failed(c, "lag_p99")
    late = [m for m in c.mismatches if m.kind is MismatchKind.LATE_ON_NEW]
    assert len(late) == len(slow) and "9.0 s" in late[0].detail


def test_failing_handler_fails_on_the_success_rate(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    bad = times[::33]  # 11 of 360: 3.1 %
    s.new(d, [t for t in times if t not in bad])
    s.new(d, bad, state=FiredState.FAILED)
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY
    reason = next(r for r in c.reasons if r.startswith("success rate"))
    assert reason.startswith("success rate 96.9% vs legacy 100.0%")
    assert any("fires failed on the new side only of job xxl:reminder:12" in r for r in c.reasons)
    assert c.mismatch_counts["failed_on_new"]["flagged"] == len(bad)


def test_xxl_month_end_lineage_difference_is_labelled_and_still_ready(tmp_path: Path) -> None:
    # Given a month-end job ("L" in day-of-month) and a six-month window, on xxl-job 3.1-3.3
    # whose cron lineage skips months shorter than 31 days (quartz#1298)
    now = datetime(2026, 7, 1, tzinfo=UTC)
    s = Scenario.create(tmp_path, now=now, window=timedelta(days=181))
    d = s.job("7", "0 0 1 L * ?")
    legacy_times = [t for t in s.all_times(d) if t.astimezone(s_zone()).day == 31]
    s.legacy(d, legacy_times)
    s.new(d)  # the new side fires every month end, as Quartz documents
    # a month-end job has 6 occurrences in half a year: its business lowers the per-job minimum
    c = s.compare(CompareSettings(thresholds=Thresholds(min_fires_per_job=6)))
    # Then the missing legacy fires are labelled, not flagged, and the verdict is ready
    assert c.verdict is Verdict.READY, c.reasons
    labelled = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_LEGACY]
    assert len(labelled) == 3 and all(m.label is Label.XXL_MONTH_END and not m.flagged for m in labelled)
    assert any("xxl_month_end" in n for n in c.notes)
    assert c.new.fires == 6 and c.legacy.fires == 3


def s_zone():  # type: ignore[no-untyped-def]
    from zoneinfo import ZoneInfo

    return ZoneInfo("Asia/Shanghai")


def test_aa_baseline_suppresses_noise_below_thresholds(tmp_path: Path) -> None:
    # Given a legacy side that is itself late on 2 % of fires, in both windows
    def build(path: Path, noisy_baseline: bool) -> Scenario:
        s = Scenario.create(path)
        d = s.job("12", "0/10 * * * * ?")
        for window, noisy in ((s.earlier, noisy_baseline), (s.current, True)):
            times = s.times(d, window)
            late = set(times[3::50]) if noisy else set()
            s.legacy(d, [t for t in times if t not in late])
            s.legacy(d, sorted(late), lag=timedelta(seconds=7))
        # When the new side is late on as many fires, other ones
        times = s.times(d)
        late_new = set(times[20::50])
        s.new(d, [t for t in times if t not in late_new])
        s.new(d, sorted(late_new), lag=timedelta(seconds=7))
        return s

    quiet = build(tmp_path / "a", noisy_baseline=True).compare()
    # Then the difference is within the A/A noise: ready
    assert quiet.verdict is Verdict.READY, quiet.reasons
    assert quiet.noise["late"] > 0.015
    assert quiet.mismatch_counts["late_on_new"]["total"] > 0
    # and the same new side against a clean legacy baseline is not
    loud = build(tmp_path / "b", noisy_baseline=False).compare()
    assert loud.verdict is Verdict.NOT_READY and _failed(loud, "late")


def test_shadow_mode_compares_timing_and_volume_only(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, state=FiredState.RECEIVED)  # the SDK records, never invokes
    c = s.compare(source=None)  # source and shadow flag come from dus_business
    assert c.mode is Mode.SHADOW
    assert c.verdict is Verdict.READY, c.reasons
    assert SHADOW_NOTE in c.notes
    skipped = {ch.code for ch in c.checks if ch.skipped}
    assert {"success_rate", "timeout_rate"} <= skipped
    assert c.mismatch_counts["failed_on_new"]["total"] == 0
    assert c.new.lag.p99 is not None  # timing is compared


def test_shadow_mode_still_catches_missing_fires(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, s.times(d)[:300], state=FiredState.RECEIVED)
    c = s.compare(source=None)
    assert c.verdict is Verdict.NOT_READY and _failed(c, "missing") and _failed(c, "volume")


def test_retries_and_manual_fires_of_xxl_job_are_grouped_and_labelled(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0 * * * * ?")
    s.legacy(d)
    s.new(d)
    # one scheduled fire failed and its retry (a new log row, 10 s later) succeeded
    first = s.times(d)[7]
    row = next(r for r in s.log.rows if r.triggered_at is not None and r.triggered_at == first)
    s.log.rows.remove(row)
    s.log.fire(d, first, status=ExecStatus.FAIL)
    s.log.fire(d, first, lag=timedelta(seconds=10), message="任务触发类型：失败重试触发<br>调度机器：x")
    # an operator ran the job by hand
    s.log.fire(d, s.times(d)[20] + timedelta(seconds=25), message="Trigger type：Manual trigger<br>")
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert c.legacy.fires == 60 and c.legacy.retries == 1 and c.legacy.success_rate == 1.0
    assert c.legacy.unscheduled == 1
    unscheduled = [m for m in c.mismatches if m.kind is MismatchKind.UNSCHEDULED_ON_LEGACY]
    assert len(unscheduled) == 1 and unscheduled[0].label is Label.LEGACY_UNSCHEDULED


def test_xxl_rows_without_fire_time_match_the_nearest_occurrence(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/30 * * * * ?")
    times = s.all_times(d)
    for i, t in enumerate(times):  # dispatch 0-2.9 s late, one early by half a second
        s.log.fire(d, t, lag=timedelta(milliseconds=-500 if i == 100 else (i % 3) * 1000 + 900))
    s.new(d)
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert c.legacy.fires == 120 and c.legacy.unscheduled == 0
    assert c.legacy.lag.max == pytest.approx(2.0)


def test_misfire_threshold_difference_is_labelled(tmp_path: Path) -> None:
    # xxl-job skipped a fire more than 5 s late (DO_NOTHING); the new side fired it 40 s late
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?", misfire=MisfireRule.SKIP)
    times = s.times(d)
    skipped = times[100]
    s.legacy(d, [t for t in s.all_times(d) if t != skipped])
    s.new(d, [t for t in times if t != skipped])
    s.new(d, [skipped], lag=timedelta(seconds=40))
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    [m] = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_LEGACY]
    assert m.label is Label.MISFIRE_THRESHOLD and m.scheduled_at == skipped


def test_doubled_trigger_on_new_side_is_extra(tmp_path: Path) -> None:
    s, d = identical(tmp_path)
    s.flush()
    twice = s.times(d)[:30]
    s._trigger_ids[d.source_key] = 99  # a second trigger of the same job
    s.new(d, twice)
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY and _failed(c, "extra")
    assert c.mismatch_counts["extra_on_new"]["flagged"] == 30


def test_batch_center_uses_the_stored_scheduled_time(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path, source=SourceSystem.BATCH_CENTER, biz_code="sop")
    d = s.job("31", "0 0/5 * * * ?")
    s.legacy(d, lag=timedelta(seconds=20))  # dispatch 20 s late: far from any nominal time, still matched
    s.new(d)
    c = s.compare()
    assert c.mismatch_counts["missing_on_new"]["total"] == 0
    assert c.legacy.lag.p50 == pytest.approx(20.0)
    assert c.new.lag.p99 == pytest.approx(0.05)
    assert c.verdict is Verdict.READY, c.reasons


def test_no_fires_on_either_side_is_not_ready(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.job("12", "0 0 0 1 1 ? 2030")
    c = s.compare()
    assert c.verdict is Verdict.NOT_READY and _failed(c, "data")


def test_thresholds_are_configurable_per_business(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, s.times(d)[1:])  # one missing fire: 0.28 %
    assert s.compare().verdict is Verdict.NOT_READY
    lenient = CompareSettings(thresholds=Thresholds(missing_abs=0.01, volume_abs=0.01))
    assert s.compare(lenient).verdict is Verdict.READY


@pytest.mark.parametrize(
    ("raw", "noise", "flagged"),
    [
        (0.01, 0.0, True),  # no noise: the absolute threshold decides
        (0.0002, 0.0, False),  # below the absolute threshold
        (0.011, 0.010, False),  # over noise by less than abs
        (0.05, 0.045, False),  # clears abs but not rel: 0.005 / 0.095 < 20 %
        (0.05, 0.02, True),
    ],
)
def test_diffy_rule_needs_both_thresholds(raw: float, noise: float, flagged: bool) -> None:
    assert clears(raw, noise, 0.0003 if raw < 0.001 else 0.003, 0.2) is flagged
