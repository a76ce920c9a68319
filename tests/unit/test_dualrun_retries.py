"""Issue 17: retries and manual fires stay grouped as before (one fire per occurrence, a
manual fire unscheduled and labelled), and a run's retries on the new side (a bridged run
retried by the new executor) are compared with legacy's retry count for the same
occurrence: a difference is listed, per occurrence, never counted against the new side."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from dualrun.model import Label, MismatchKind, Verdict
from readers.records import ExecStatus
from scheduler_core.model import FiredState
from tests.unit.test_dualrun_support import Scenario


def test_retries_are_compared_per_occurrence_and_manual_fires_stay_unscheduled(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    d = s.job("12", "0 * * * * ?")
    times = s.times(d)
    same, more = times[7], times[30]
    s.legacy(d, [t for t in s.all_times(d) if t != same])
    # legacy: the first attempt failed, its retry (a new log row 10 s later) succeeded
    s.log.fire(d, same, status=ExecStatus.FAIL)
    s.log.fire(d, same, lag=timedelta(seconds=10), message="任务触发类型：失败重试触发<br>调度机器：x")
    s.log.fire(d, times[20] + timedelta(seconds=25), message="Trigger type：Manual trigger<br>")  # by hand
    s.new(d, [t for t in times if t not in (same, more)])
    s.new(d, [same], attempt=1)  # the bridged run failed once and succeeded on its retry, like legacy
    s.new(d, [more], attempt=2)  # two retries where legacy needed none
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert c.legacy.fires == c.new.fires == 60
    assert (c.legacy.retries, c.new.retries) == (1, 3)
    differ = [m for m in c.mismatches if m.kind is MismatchKind.RETRIES_DIFFER]
    assert [(m.scheduled_at, m.detail) for m in differ] == [
        (more, "legacy made 1 attempt(s) (0 retries), the new side 3 (2 retries) for the same occurrence")
    ]
    assert not differ[0].flagged
    assert c.mismatch_counts["retries_differ"] == {"total": 1, "flagged": 0, "labelled": 0}
    (manual,) = [m for m in c.mismatches if m.kind is MismatchKind.UNSCHEDULED_ON_LEGACY]
    assert manual.label is Label.LEGACY_UNSCHEDULED
    assert any(n.startswith("1 occurrence(s) fired by both sides took a different number of attempts") for n in c.notes)


def test_shadow_mode_does_not_compare_retries(tmp_path: Path) -> None:
    """In shadow mode the new side never invoked the handler: no attempts to compare."""
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0 * * * * ?")
    s.legacy(d, status=ExecStatus.SUCCESS)
    s.new(d, state=FiredState.RECEIVED, attempt=0)
    c = s.compare()
    assert not [m for m in c.mismatches if m.kind is MismatchKind.RETRIES_DIFFER]
