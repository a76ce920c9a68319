"""The README's main job: the demo runs end to end and tells the story it claims."""
from __future__ import annotations

import json
from pathlib import Path

from switchyard.demo import run_demo


def test_demo_end_to_end(tmp_path: Path) -> None:
    result = run_demo(tmp_path / "demo", say=lambda _m: None)
    states = {b.business: b for b in result.businesses}
    assert len(states) == 4
    cut = [b for b in result.businesses if b.state == "cutover"]
    back = [b for b in result.businesses if b.state == "legacy"]
    assert len(cut) == 1 and cut[0].verdict == "ready", "a ready business is cut over"
    assert len(back) == 1 and back[0].verdict == "not_ready", "the regressed business is rolled back"
    assert any("success rate" in r for r in back[0].reasons)
    for b in (*cut, *back):
        assert b.boundary_missing == 0 and b.boundary_doubled == 0, b
        assert b.legacy_fires > 0 and b.new_fires > 0
    assert result.quarantined > 0 and result.migrated > 0
    overview = Path(result.overview)
    assert overview.exists() and "<html" in overview.read_text().lower()
    for b in result.businesses:
        report = Path(b.report)
        assert report.exists() and report.with_suffix(".md").exists()
        assert json.loads(report.with_suffix(".json").read_text())
    # a second run starts clean
    again = run_demo(tmp_path / "demo", say=lambda _m: None)
    assert [b.state for b in again.businesses] == [b.state for b in result.businesses]
