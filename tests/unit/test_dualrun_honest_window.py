"""Issue 17: a verdict never blames a difference that is not there. A window reaching before
the dual-run start (or across a cutover / rollback) is clipped, and so is its A/A baseline,
and the comparison says which span it compared; lag is compared at the coarser precision
of the two sides, so xxl-job's whole-second trigger_time does not make legacy look better."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from dualrun.model import Verdict, as_dict, comparison_from_dict
from dualrun.span import NotInDualRun
from readers.records import SourceSystem
from tests.unit.test_dualrun_support import Scenario


def _reasons(c) -> str:  # type: ignore[no-untyped-def]
    return " | ".join(c.reasons)


def test_a_window_reaching_before_the_dual_run_start_is_clipped_there(tmp_path: Path) -> None:
    """The issue's case: the default hour, 4 minutes after `dualrun start`: legacy fired
    the whole hour, the new side only since it began. Unclipped, that read as missing fires
    and a call volume far below legacy's."""
    s = Scenario.create(tmp_path)
    s.business_row()
    began = s.now - timedelta(minutes=4)
    s.switched(began, "legacy", "dual_run")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, [t for t in s.times(d) if t >= began])
    c = s.compare()
    assert c.window.start == began and c.window.end == s.now
    assert c.span is not None and c.span.requested.start == s.now - timedelta(hours=1)
    assert c.span.clipped[0] == "start clipped at the dual-run start 2026-12-02T07:56:00Z"
    assert c.baseline_window.end == began and c.baseline_window.length == timedelta(minutes=4)
    assert c.new.missing == 0 and c.legacy.fires == c.new.fires == 24
    reasons = _reasons(c)
    assert "volume" not in reasons and "missing" not in reasons, reasons
    # the honest reason: four minutes are too little evidence
    assert [ch.code for ch in c.checks if not ch.passed and not ch.skipped] == ["window"]
    body = as_dict(c)
    assert body["span"]["window"] == {"start": "2026-12-02T07:56:00Z", "end": "2026-12-02T08:00:00Z"}
    assert "compared 2026-12-02T07:56:00Z .. 2026-12-02T08:00:00Z" in body["span"]["sentence"]
    assert comparison_from_dict(body).span == c.span


def test_a_window_reaching_past_a_cutover_ends_at_the_cutover(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    s.switched(s.now - timedelta(hours=3), "legacy", "dual_run")
    cut = s.now - timedelta(minutes=20)
    s.switched(cut, "dual_run", "cutover")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d, [t for t in s.all_times(d) if t < cut])  # legacy switched off at the cutover
    s.new(d)
    c = s.compare()
    assert (c.window.start, c.window.end) == (s.now - timedelta(hours=1), cut)
    assert c.span is not None and c.span.clipped == ("end clipped at the cutover 2026-12-02T07:40:00Z",)
    assert c.new.missing == 0 and c.legacy.missing == 0
    assert c.new.fires == c.legacy.fires == 240
    assert c.verdict is Verdict.READY, c.reasons


def test_the_baseline_does_not_reach_across_a_rollback(tmp_path: Path) -> None:
    """An earlier cutover and rollback: legacy fired nothing while cut over. The A/A
    baseline (legacy against its own schedule) starts after the rollback, else legacy's
    own 'missing' fires would pass as noise and hide the new side's."""
    s = Scenario.create(tmp_path)
    s.business_row()
    t0 = s.now - timedelta(hours=3)
    cut, back, again = (s.now - timedelta(minutes=100), s.now - timedelta(minutes=80), s.now - timedelta(minutes=60))
    s.switched(t0, "legacy", "dual_run")
    s.switched(cut, "dual_run", "cutover")
    s.switched(back, "cutover", "legacy")
    s.switched(again, "legacy", "dual_run")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d, [t for t in s.all_times(d) if not cut <= t < back])
    s.new(d)
    c = s.compare()
    assert c.window.start == again
    assert (c.baseline_window.start, c.baseline_window.end) == (back, again)
    assert c.baseline.missing == 0, c.baseline
    assert c.span is not None and "baseline start clipped at the rollback 2026-12-02T06:40:00Z" in c.span.clipped


def test_a_window_outside_every_dual_run_is_refused_with_a_reason(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(state="legacy")
    s.switched(s.now - timedelta(hours=5), "legacy", "dual_run")
    s.switched(s.now - timedelta(hours=4), "dual_run", "legacy")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    with pytest.raises(NotInDualRun, match=r"reminder was not in dual-run at any time in 2026-12-02T07:00:00Z"):
        s.compare()


def test_without_any_switch_recorded_the_window_is_kept_and_said_so(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    c = s.compare()
    assert c.window == s.current
    assert c.span is not None and "no dual-run start recorded" in c.span.sentence


# --- lag precision ----------------------------------------------------------------------


def test_xxl_job_lag_is_compared_at_whole_seconds_on_both_sides(tmp_path: Path) -> None:
    """Both sides dispatch 1.9 s after the fire time. xxl-job's trigger_time keeps 1 s; the
    new side's received_at keeps 1.9 s: compared as stored, the new side failed the p99
    check (1.9 s > 1 s, legacy '1 s'). At the coarser precision both read 1 s."""
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d, lag=timedelta(milliseconds=1900))
    s.new(d, lag=timedelta(milliseconds=1900))
    c = s.compare()
    assert c.lag_precision is not None and c.lag_precision.ms == 1000
    assert c.new.lag.p99 == c.legacy.lag.p99 == 1.0
    assert c.verdict is Verdict.READY, c.reasons
    assert c.lag_precision.sentence == (
        "lag compared at 1 s precision, the coarser of legacy (xxl_job_log.trigger_time, "
        "DATETIME: 1 s) and the new side (1 ms); both sides' times are truncated to it"
    )
    assert as_dict(c)["lag_precision"]["ms"] == 1000


def test_batch_center_lag_keeps_milliseconds(tmp_path: Path) -> None:
    """The batch center's contract has DATETIME(3) start_time: milliseconds on both sides,
    so a new side 300 ms slower than legacy shows as such."""
    s = Scenario.create(tmp_path, source=SourceSystem.BATCH_CENTER)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d, lag=timedelta(milliseconds=400))
    s.new(d, lag=timedelta(milliseconds=700))
    c = s.compare()
    assert c.lag_precision is not None and c.lag_precision.ms == 1
    assert c.new.lag.p99 == pytest.approx(0.7) and c.legacy.lag.p99 == pytest.approx(0.4)
