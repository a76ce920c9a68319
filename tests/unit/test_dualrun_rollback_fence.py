"""Dual-run counting across a rollback fence: the new side's records a fence skipped are
the legacy side's to fire, so they count neither missing nor extra nor failed on the new
side (labelled rollback_fence), while a misfire policy's skip still counts, and a
handler that did run at or after the handover is still seen doubled at the boundary."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from dualrun.boundary import HandoverPlan, check_boundary
from dualrun.collect import Collector
from dualrun.match import ClassifyContext, JobFlags, Table, match
from dualrun.model import Label, MismatchKind, Window
from dualrun.settings import CompareSettings
from readers.records import LegacyDefinition
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.fence import FenceService
from scheduler_core.model import FiredState
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario


def _rolled_back(
    tmp_path: Path, *, skipped_by: str = "fence", ran_after_f: int = 0
) -> tuple[Scenario, LegacyDefinition, datetime, list[datetime]]:
    """Dual-run of a job every 10 s, rolled back at F, half-way through the window: legacy
    fires everything (it fires from F on after the rollback); the new side fired up to F,
    had published the rest, and skipped it (by the fence, or as a misfire policy would).
    `ran_after_f`: that many commands at or after F ran before the fence reached them."""
    s = Scenario.create(tmp_path)
    s.business_row(state="legacy")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    f = times[len(times) // 2]
    after = [t for t in times if t >= f]
    s.new(d, [t for t in times if t < f] + after[:ran_after_f])
    if skipped_by == "fence":
        s.new(d, after[ran_after_f:], state=FiredState.PUBLISHED)
        s.flush()
        marked = FenceService(s.store, InProcessBus(s.store.clock)).raise_fence(s.biz_code, f)
        assert marked == len(after) - ran_after_f
    else:
        s.new(d, after[ran_after_f:], state=FiredState.SKIPPED)
    return s, d, f, after


def test_records_a_rollback_fence_skipped_count_neither_missing_nor_extra_nor_failed(tmp_path: Path) -> None:
    s, _d, f, after = _rolled_back(tmp_path)
    c = s.compare()

    assert c.mismatch_counts[MismatchKind.MISSING_ON_NEW.value] == {
        "total": len(after),
        "flagged": 0,
        "labelled": len(after),
    }
    assert c.mismatch_counts[MismatchKind.EXTRA_ON_NEW.value]["total"] == 0
    assert c.mismatch_counts[MismatchKind.FAILED_ON_NEW.value]["total"] == 0
    assert c.mismatch_counts[MismatchKind.LATE_ON_NEW.value]["total"] == 0
    assert c.new.missing == 0 and c.new.failed == 0 and c.new.unfinished == 0
    assert c.new.expected == 360 - len(after), "the fenced occurrences are not expected of the new side"
    assert c.reference_fires == 360 - len(after)
    fenced = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_NEW]
    assert fenced and all(m.label is Label.ROLLBACK_FENCE and not m.flagged for m in fenced)
    assert all(m.scheduled_at >= f for m in fenced)
    assert all("rollback fence skipped it" in m.detail for m in fenced)
    checks = {ch.code: ch for ch in c.checks}
    assert all(checks[k].passed for k in ("missing", "extra", "late", "success_rate", "timeout_rate")), c.reasons
    # the volume check compares the new side's calls with legacy's own, not with legacy's
    # calls of the occurrences the fence took from the new side
    assert checks["volume"].passed and checks["volume"].legacy == 360 - len(after), checks["volume"].sentence
    assert "rollback fence" in checks["volume"].sentence


def test_the_legacy_calls_of_fenced_occurrences_are_known_to_the_matching(tmp_path: Path) -> None:
    s, _d, _f, after = _rolled_back(tmp_path)
    c = s.compare()  # flushes the records
    col = Collector(
        s.store,
        dualrun_store(s.store),
        s.reader(),
        source=s.source,
        biz_code=s.biz_code,
        legacy_biz_code=None,
        settings=CompareSettings(),
    )
    inputs = col.inputs(s.current, mode=c.mode, probe=None)
    ctx = ClassifyContext(
        settings=CompareSettings().match,
        flags=JobFlags.build(len(inputs.jobs), inputs.info),
        xxl=True,
        shadow=False,
        now_ms=int(s.now.timestamp() * 1000),
    )
    m = match(
        Table.of(inputs.legacy),
        Table.of(inputs.new),
        Table.of(inputs.expected),
        start=int(s.current.start.timestamp() * 1000),
        end=int(s.current.end.timestamp() * 1000),
        n_jobs=len(inputs.jobs),
        ctx=ctx,
    )
    assert len(m.fenced_fk) == len(after) and m.fenced_legacy_calls == len(after)


def test_a_misfire_policys_skip_still_counts_missing(tmp_path: Path) -> None:
    s, _d, _f, after = _rolled_back(tmp_path, skipped_by="misfire")
    c = s.compare()
    assert c.mismatch_counts[MismatchKind.MISSING_ON_NEW.value]["flagged"] == len(after)
    assert c.new.missing == len(after)


def test_the_boundary_of_a_fenced_rollback_is_clean_and_a_run_after_f_is_doubled(tmp_path: Path) -> None:
    s, d, f, _after = _rolled_back(tmp_path)
    s.flush()
    window = Window(start=s.current.start, end=s.current.end)
    switch = HandoverPlan(handover={d.source_key: f}, to_new=False, at=f)
    check = check_boundary(s.store, dualrun_store(s.store), s.reader(), s.biz_code, [switch], window=window, now=s.now)
    assert check.clean, [str(i) for i in check.issues]

    s2, d2, f2, after2 = _rolled_back(tmp_path / "ran", ran_after_f=2)
    s2.flush()
    check = check_boundary(
        s2.store,
        dualrun_store(s2.store),
        s2.reader(),
        s2.biz_code,
        [HandoverPlan(handover={d2.source_key: f2}, to_new=False, at=f2)],
        window=window,
        now=s2.now,
    )
    assert [(i.what, i.scheduled_at) for i in check.issues] == [("doubled", at) for at in after2[:2]]
    c = s2.compare()
    assert c.mismatch_counts[MismatchKind.MISSING_ON_NEW.value]["labelled"] == len(after2) - 2
    assert c.new.missing == 0


def test_an_operators_stop_on_the_new_side_is_labelled_so_not_as_a_rollback_fence(tmp_path: Path) -> None:
    """A pause (or cancel, freeze) of a dual-running trigger on the new side: legacy fires
    what the new side skipped. Deliberate, so neither missing nor failed, and the report
    says an operator stopped it, not that a rollback handed it back."""
    from scheduler_core.stops import Cause, Scope, StopService
    from scheduler_core.store.stops import SqlStops

    s = Scenario.create(tmp_path)
    s.business_row(state="dual_run")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    at = times[len(times) // 2]
    after = [t for t in times if t >= at]
    s.new(d, [t for t in times if t < at])
    s.new(d, after, state=FiredState.PUBLISHED)
    s.flush()
    applied = StopService(SqlStops(s.store)).stop(Scope.BUSINESS, s.biz_code, at, Cause.FREEZE, "ana", "incident 4")
    assert applied.records == len(after)
    c = s.compare()
    stopped = [m for m in c.mismatches if m.kind is MismatchKind.MISSING_ON_NEW]
    assert len(stopped) == len(after) and c.new.missing == 0 and c.new.failed == 0
    assert all(m.label is Label.OPERATOR_STOP and not m.flagged for m in stopped)
    assert all("an operator's stop skipped it" in m.detail for m in stopped)
    checks = {ch.code: ch for ch in c.checks}
    assert all(checks[k].passed for k in ("missing", "extra", "success_rate")), c.reasons
