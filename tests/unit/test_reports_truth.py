"""Issue 32, "reports that tell the truth", on the report's data and its rendered forms:
the success-rate axis holds a regressed new side, a shadow business's new side is "not
compared" (never a 0 % success rate), a forced cutover is named with who, why and what it
overrode, a stale verdict is flagged by the gate's own bound, the boundary checks and the
quarantined jobs are shown, legends sit outside the plot, long lists are collapsed."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from dualrun.boundary_store import BoundaryTally, boundary_tallies, put_boundary_tally
from dualrun.model import Check, Verdict, iso, quarantine_sentence
from dualrun.verdict_store import put_comparison
from migrator.ports import VERDICT_MAX_AGE
from reports.load import load_overview, load_report
from reports.model import NOT_INVOKED
from reports.plots import fitted_range, history_figure, lag_figure, success_figure, volume_figure
from reports.write import render_report
from scheduler_core.model import FiredState
from switchyard.wiring import DualRunGate, dualrun_store
from tests.migration_env import migrated_xxljob
from tests.unit.test_dualrun_support import Scenario

START = datetime.fromisoformat("2026-12-02T07:00:00+00:00")


def _series(legacy: float, new: float, n: int = 12) -> list[dict[str, Any]]:
    return [
        {
            "start": iso(START + timedelta(minutes=5 * i)),
            "legacy_fires": 30,
            "new_fires": 30 - i % 3,
            "legacy_p50": 0.1,
            "legacy_p95": 0.2,
            "legacy_p99": 0.3,
            "new_p50": 0.1,
            "new_p95": 0.2,
            "new_p99": 0.3,
            "legacy_success": legacy,
            "new_success": new + (i % 4) * 0.03,
        }
        for i in range(n)
    ]


def test_the_success_axis_holds_a_regressed_new_side() -> None:
    ax = success_figure(_series(0.995, 0.35), shadow=False).axes[0]
    bottom, top = ax.get_ylim()
    assert bottom <= 35.0 and top >= 44.0  # every point of the new side is on the chart
    healthy = success_figure(_series(0.999, 0.998), shadow=False).axes[0]
    assert 85.0 <= healthy.get_ylim()[0] <= 95.0  # a healthy pair keeps a readable band
    assert fitted_range([float("nan"), 40.0, 99.0], floor=0.0, ceil=100.5) == (35.0, 100.5)
    assert fitted_range([], floor=0.0, ceil=100.5) == (0.0, 100.5)


@pytest.mark.parametrize("draw", [lag_figure, volume_figure, success_figure, history_figure])
def test_no_legend_covers_the_plot(draw: Any) -> None:
    series = _series(0.99, 0.4)
    fig = (
        draw(series, False)
        if draw is success_figure
        else draw([{**p, "computed_at": p["start"], "verdict": "ready"} for p in series])
        if draw is history_figure
        else draw(series)
    )
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    ax = fig.axes[0]
    assert fig.legends and not ax.get_legend()  # the legend belongs to the figure, not the axes
    plot, legend = ax.get_window_extent(renderer), fig.legends[0].get_window_extent(renderer)
    assert not plot.overlaps(legend), (plot, legend)


def test_a_shadow_business_shows_its_new_side_as_not_compared(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, state=FiredState.RECEIVED)  # the SDK records, never invokes
    put_comparison(dualrun_store(s.store), s.compare(source=None))
    content = load_report(dualrun_store(s.store), s.biz_code, now=s.now).content()
    rows = {r["measure"]: r for r in content["measure_rows"]}
    for measure in ("success rate", "timeout rate", "timed out", "succeeded", "failed"):
        assert rows[measure]["new"] == NOT_INVOKED, measure
        assert rows[measure]["legacy"] != NOT_INVOKED
    assert rows["fires"]["new"] != NOT_INVOKED and rows["lag p99"]["new"] != NOT_INVOKED  # compared
    html, md = render_report(content, "html"), render_report(content, "md")
    legacy = rows["success rate"]["legacy"]
    assert f'<tr><td>success rate</td><td class="num">{legacy}</td><td class="num">{NOT_INVOKED}</td>' in html
    assert f"| success rate | {legacy} | {NOT_INVOKED} |" in md


def _cut_over_by_force(tmp_path: Path) -> tuple[Any, str]:
    """A business cut over with --force past a not-ready verdict that warned of 3
    quarantined jobs, through the real switch and dual-run's gate."""
    from migrator.cutover import BusinessSwitch
    from migrator.legacy_control import XxlJobControl

    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    clock = env.migrator.clock
    sw = BusinessSwitch(env.store, env.own, XxlJobControl(env.legacy, clock), clock, DualRunGate(env.dual))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    s = Scenario.create(tmp_path / "c", biz_code=biz)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    base = s.compare()
    c = replace(
        base,
        biz_code=biz,
        computed_at=clock.now(),
        verdict=Verdict.NOT_READY,
        checks=(
            *base.checks,
            Check(code="success_rate", passed=False, sentence="success rate of the new side 41.00% vs legacy 99.50%"),
            Check(code="quarantined", passed=True, warning=True, sentence=quarantine_sentence(3)),
        ),
    )
    cid = put_comparison(env.dual, c)
    report = sw.cutover(biz, actor="alice", reason="the new handler is fixed, verified by hand", force=True)
    assert report.forced and report.gate_verdict == "not_ready" and report.overrode
    return env, f"{biz}|{cid}"


def test_a_forced_cutover_is_named_with_who_why_and_what_it_overrode(tmp_path: Path) -> None:
    env, ids = _cut_over_by_force(tmp_path)
    biz, cid = ids.split("|")
    content = load_report(env.dual, biz, now=env.migrator.clock.now()).content()
    cut = content["cutover"]
    assert cut["forced"] and cut["actor"] == "alice" and cut["reason"].startswith("the new handler is fixed")
    assert cut["gate_verdict"] == "not_ready" and cut["comparison_id"] == int(cid)
    assert any("latest verdict is not ready" in o and "41.00%" in o for o in cut["overrode"])
    for fmt in ("html", "md"):
        text = render_report(content, fmt)
        assert "no cutover gate passed yet" not in text, fmt
        assert "Before cutover" not in text and "fix them before cutover" not in text, fmt
        assert "cutover state cutover" not in text, fmt
        assert "forced past the gate by alice" in text, fmt
        assert "Still open after the cutover" in text, fmt
        assert "the new handler is fixed, verified by hand" in text, fmt
    html = render_report(content, "html")
    assert 'id="forced"' in html and "CUT OVER BY FORCE" in html and "state: <b>cut over</b>" in html


def test_a_verdict_older_than_the_gate_takes_is_stale_everywhere(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row()
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    c = s.compare()
    assert c.verdict is Verdict.READY
    own = dualrun_store(s.store)
    put_comparison(own, c)
    fresh = load_report(own, s.biz_code, now=s.now + VERDICT_MAX_AGE - timedelta(seconds=1)).content()
    assert fresh["freshness"]["stale"] is False
    later = s.now + timedelta(days=5)
    content = load_report(own, s.biz_code, now=later).content()
    assert content["freshness"]["stale"] is True and content["freshness"]["max_age"] == "1 h"
    html = render_report(content, "html")
    assert 'class="badge ready stale"' in html and "READY · STALE" in html and 'id="stale"' in html
    assert "(STALE)" in render_report(content, "md")
    overview = load_overview(own, now=later).content()
    row = overview["rows"][0]
    assert row["stale"] is True and overview["ready"] == 0 and overview["stale"] == 1
    assert "ready · stale" in render_report(overview, "html")


def test_boundary_checks_and_quarantined_jobs_are_in_the_report_and_the_overview(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    own = dualrun_store(s.store)
    put_comparison(own, s.compare())
    from sqlalchemy import insert

    from migrator.tables import migrator_tables

    with s.store.engine.begin() as conn:
        for key in ("90", "91", "92"):
            conn.execute(
                insert(migrator_tables().ledger).values(
                    source_system="xxl-job",
                    source_key=key,
                    business=s.biz_code,
                    status="quarantined",
                    field="schedule_conf",
                    reason="bad cron",
                    content_hash="h",
                    updated_at=0,
                )
            )
    tally = BoundaryTally(
        biz_code=s.biz_code,
        switch="cutover",
        switched_at=s.now - timedelta(minutes=30),
        checked_at=s.now,
        horizon=s.now - timedelta(minutes=1),
        checked=174,
        missing=0,
        doubled=2,
    )
    put_boundary_tally(own, tally)
    put_boundary_tally(own, replace(tally, checked_at=s.now + timedelta(seconds=5), checked=175))  # checked again
    assert [t.checked for t in boundary_tallies(own, s.biz_code)[s.biz_code]] == [175]
    report = load_report(own, s.biz_code, now=s.now).content()
    assert [(b["switch"], b["checked"], b["missing"], b["doubled"]) for b in report["boundary"]] == [
        ("cutover", 175, 0, 2)
    ]
    html = render_report(report, "html")
    assert 'id="boundary"' in html and '<td class="num">175</td>' in html
    assert "| cutover | 2026-12-02 07:30:00 UTC | 2026-12-02 07:59:00 UTC | 175 | 0 | 2 |" in render_report(
        report, "md"
    )
    overview = load_overview(own, now=s.now).content()
    row = overview["rows"][0]
    assert row["quarantined"] == 3 and row["boundary"][0]["doubled"] == 2
    ohtml = render_report(overview, "html")
    assert '<td class="quarantined">3</td>' in ohtml and "cutover: 175 / " in ohtml
    assert json.loads(render_report(overview, "json"))["rows"][0]["quarantined"] == 3


def test_a_long_mismatch_list_is_collapsed_with_its_count(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row()
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    s.new(d, times[:100])  # the rest missing on the new side
    c = s.compare()
    n = len(c.mismatches)
    assert n > 10
    put_comparison(dualrun_store(s.store), c)
    html = render_report(load_report(dualrun_store(s.store), s.biz_code, now=s.now).content(), "html")
    assert f'<details id="mismatches-list"><summary>{n} mismatches</summary>' in html


def test_a_cutovers_boundary_is_checked_from_its_audit_and_kept_for_the_report(tmp_path: Path) -> None:
    """record_cutover_boundary: the handover times the cutover's audit row keeps, the
    comparator's own matching, the tally stored and shown by the report."""
    from sqlalchemy import insert

    from dualrun.boundary_store import record_cutover_boundary
    from dualrun.testing import fired
    from migrator.tables import migrator_tables

    s = Scenario.create(tmp_path)
    s.business_row(state="cutover")
    d = s.job("12", "0/10 * * * * ?")
    times = s.times(d)
    h = times[len(times) // 2]
    s.legacy(d, [t for t in s.all_times(d) if t < h])
    s.new(d)
    s.records.append(fired(s.code(d), s.biz_code, 99, times[-30]))  # a second trigger fired one occurrence again
    s.flush()
    own = dualrun_store(s.store)
    put_comparison(own, s.compare())  # the report's comparison, made before the cutover
    assert record_cutover_boundary(s.store, own, s.reader(), s.biz_code, now=s.now) is None  # never cut over
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(migrator_tables().audit).values(
                biz_code=s.biz_code,
                from_state="dual_run",
                to_state="cutover",
                at=round(h.timestamp() * 1000),
                actor="ops",
                reason="verdict ready",
                forced=0,
                detail=json.dumps({"handover": {d.source_key: h.isoformat()}}),
            )
        )
    tally = record_cutover_boundary(s.store, own, s.reader(), s.biz_code, now=s.now)
    assert tally is not None
    owned = [t for t in times if h <= t < s.now - timedelta(minutes=1)]
    assert (tally.checked, tally.missing, tally.doubled) == (len(owned), 0, 1)
    shown = load_report(own, s.biz_code, now=s.now).content()["boundary"]
    assert [(b["switch"], b["checked"], b["doubled"]) for b in shown] == [("cutover", len(owned), 1)]
