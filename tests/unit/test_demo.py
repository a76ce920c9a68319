"""The README's main job: the demo runs end to end and tells the story it claims."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

import pytest

from switchyard.demo import run_demo


# two whole demos (about 55 s each alone, 135 s in all with the suite's workers beside it)
@pytest.mark.timeout(600)
def test_demo_end_to_end(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "demo", say=lambda _m: None)
    states = {b.biz_code: b for b in result.businesses}
    assert len(states) == 4
    cut = [b for b in result.businesses if b.state == "cutover"]
    back = [b for b in result.businesses if b.state == "legacy"]
    assert len(cut) == 1 and cut[0].verdict == "ready", "a ready business is cut over"
    assert len(back) == 1 and back[0].verdict == "not_ready", "the regressed business is rolled back"
    assert any("success rate" in r for r in back[0].reasons)
    assert cut[0].switched == "cutover" and back[0].switched == "rollback"
    for b in (*cut, *back):
        # the boundary check covers occurrences after the handover in both directions: an
        # empty expected set would pass 0 missing / 0 doubled trivially
        assert b.boundary_checked > 0, b
        assert b.boundary_missing == 0 and b.boundary_doubled == 0, b
        assert b.legacy_fires > 0 and b.new_fires > 0
    # the table's fires are the verdict's, over its window: a ready business fires alike on
    # both sides there (shadow records counted), whatever was published ahead since
    assert result.window is not None and result.window.length >= timedelta(minutes=30)
    for b in result.businesses:
        if b.verdict == "ready":
            assert b.legacy_fires == b.new_fires, b
    shadow = [b for b in result.businesses if any("success rate was not compared" in w for w in b.warnings)]
    assert len(shadow) == 1 and shadow[0].verdict == "ready" and shadow[0].state == "dual_run"
    as_json = json.loads(json.dumps(result.as_dict()))  # what `switchyard demo --json` prints
    assert as_json["window"] == result.window.as_dict()
    assert {b["switched"]: b["boundary_checked"] for b in as_json["businesses"] if b["switched"]} == {
        "cutover": cut[0].boundary_checked,
        "rollback": back[0].boundary_checked,
    }
    # the rollback takes effect in seconds with the regression still on: the new side invokes
    # nothing at or after the fence, only occurrences before it (within the start margin)
    rb = result.rollback
    assert rb.fence_at is not None and rb.fenced > 0, rb
    assert rb.invoked_at_or_after_fence == 0, rb
    assert rb.last_invocation_s <= 10, rb
    assert as_json["rollback"]["invoked_at_or_after_fence"] == 0
    # an operator's pause of a job of a business in dual-run stops it at once, whatever was
    # published a lookahead ahead, and its resume runs each later occurrence once (issue 27)
    pz = result.pause
    assert pz.job_code and pz.paused_from and pz.resumed_from, pz
    assert pz.published_ahead > 0 and pz.skipped > 0, pz
    assert pz.invoked_in_pause == 0 and as_json["pause"]["invoked_in_pause"] == 0, pz
    assert pz.ran_after_resume > 0 and pz.doubled_after_resume == 0, pz
    assert result.quarantined > 0 and result.migrated > 0
    overview = Path(result.overview)
    assert overview.exists() and "<html" in overview.read_text().lower()
    for b in result.businesses:
        report = Path(b.report)
        assert report.exists() and report.with_suffix(".md").exists()
        assert json.loads(report.with_suffix(".json").read_text())
    # the boundary of each switch is in its business's report, not only in the terminal
    for b in (*cut, *back):
        shown = json.loads(Path(b.report).with_suffix(".json").read_text())["boundary"]
        assert [(x["switch"], x["checked"], x["missing"], x["doubled"]) for x in shown] == [
            (b.switched, b.boundary_checked, 0, 0)
        ]
    assert f"{cut[0].switched}: {cut[0].boundary_checked} / " in overview.read_text()
    # a second run starts clean
    again = run_demo(tmp_path / "demo", say=lambda _m: None)
    assert [b.state for b in again.businesses] == [b.state for b in result.businesses]
