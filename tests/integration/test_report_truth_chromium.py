"""Issue 32, "reports that tell the truth", as a reader sees them: the HTML reports loaded
in Debian's headless Chromium. A regressed business's new side (about 40 % success) is
drawn on its success chart; its five-day-old verdict is flagged stale; its long mismatch
list is collapsed under its count; the boundary check of its switch is shown. A shadow
business's new side reads "not compared", a business cut over with --force names who
forced it, why, and what the gate said. Screenshots stay in test-artifacts/."""

from __future__ import annotations

import base64
import io
import re
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dualrun.boundary_store import BoundaryTally, put_boundary_tally
from dualrun.verdict_store import put_comparison
from reports.load import load_overview, load_report
from reports.plots import NEW
from reports.write import write_report
from scheduler_core.model import FiredState
from switchyard.wiring import dualrun_store
from tests.integration.console_browser import chromium, console_messages, run_chromium
from tests.servers import missing
from tests.unit.test_dualrun_support import Scenario
from tests.unit.test_reports_truth import _cut_over_by_force

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "report_truth_chromium"


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if chromium() is None:
        missing("Debian's chromium is not installed (apt-get install -y chromium)")
    tmp = tmp_path_factory.mktemp("truth")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {"profile": tmp / "profile"}

    # a regressed business: 3 of 5 fires fail on the new side, its verdict 5 days old
    s = Scenario.create(tmp / "regressed")
    s.business_row(state="cutover")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    s.new(d, [t for i, t in enumerate(times) if i % 5 < 2])
    s.new(d, [t for i, t in enumerate(times) if i % 5 >= 2], state=FiredState.FAILED)
    own = dualrun_store(s.store)
    put_comparison(own, s.compare())
    put_boundary_tally(
        own,
        BoundaryTally(
            biz_code=s.biz_code,
            switch="cutover",
            switched_at=s.now - timedelta(minutes=20),
            checked_at=s.now,
            horizon=s.now - timedelta(minutes=1),
            checked=114,
            missing=1,
            doubled=0,
        ),
    )
    later = s.now + timedelta(days=5)
    out["regressed"] = write_report(
        load_report(own, s.biz_code, now=later).content(), "html", ARTIFACTS / "reminder.html"
    )
    out["overview"] = write_report(
        load_overview(own, now=later, reports_dir=ARTIFACTS).content(), "html", ARTIFACTS / "index.html"
    )

    sh = Scenario.create(tmp / "shadow", biz_code="shadowed")
    sh.business_row(shadow=True)
    d = sh.job("12", "0/10 * * * * ?")
    sh.legacy(d)
    sh.new(d, state=FiredState.RECEIVED)  # recorded, never invoked
    put_comparison(dualrun_store(sh.store), sh.compare(source=None))
    content = load_report(dualrun_store(sh.store), "shadowed", now=sh.now).content()
    out["shadow"] = write_report(content, "html", ARTIFACTS / "shadowed.html")

    env, ids = _cut_over_by_force(tmp / "forced")
    biz = ids.split("|")[0]
    content = load_report(env.dual, biz, now=env.migrator.clock.now()).content()
    out["forced"] = write_report(content, "html", ARTIFACTS / "forced.html")
    return out


def _dom(pages: dict[str, Path], name: str) -> str:
    run = run_chromium(pages[name].resolve().as_uri(), pages["profile"], "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert console_messages(run.stderr) == []
    return run.stdout


def _plot(dom: str, name: str) -> np.ndarray:
    m = re.search(rf'<img id="plot-{name}" src="data:image/png;base64,([^"]+)"', dom)
    assert m, f"no {name} plot"
    with Image.open(io.BytesIO(base64.b64decode(m.group(1)))) as img:
        return np.asarray(img.convert("RGB"), dtype=np.int16)


def _colour(px: np.ndarray, rgb: str, tolerance: int = 40) -> int:
    want = np.asarray([int(rgb[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    return int((np.abs(px - want) <= tolerance).all(axis=-1).sum())


def test_the_regressed_new_side_is_on_its_success_chart(pages: dict[str, Path]) -> None:
    dom = _dom(pages, "regressed")
    # the new side's line at ~40 % is drawn (a legend swatch alone is a few dozen pixels)
    assert _colour(_plot(dom, "success"), NEW) > 800


def test_a_stale_verdict_is_flagged_in_the_report_and_the_overview(pages: dict[str, Path]) -> None:
    dom = _dom(pages, "regressed")
    badge = re.search(r'<span class="badge ([^"]+)" id="verdict">([^<]+)</span>', dom)
    assert badge and "stale" in badge.group(1).split() and badge.group(2) == "NOT READY · STALE"
    assert 'id="stale"' in dom and "computed 5d ago" in dom and "within 1 h" in dom
    overview = _dom(pages, "overview")
    row = re.search(r'<tr id="row-reminder">.*?</tr>', overview, re.S)
    assert row and "not ready · stale" in row.group(0) and "the gate wants one under 1 h" in row.group(0)


def test_long_lists_are_collapsed_and_the_boundary_is_shown(pages: dict[str, Path]) -> None:
    dom = _dom(pages, "regressed")
    m = re.search(r'<details id="mismatches-list"( open="")?><summary>(\d+) mismatches</summary>', dom)
    assert m and m.group(1) is None and int(m.group(2)) > 10  # closed, its count in the summary
    boundary = re.search(r'<table id="boundary">.*?</table>', dom, re.S)
    assert boundary and re.search(r"<td>cutover</td>.*<td class=\"num\">114</td>", boundary.group(0), re.S)
    overview = _dom(pages, "overview")
    assert "cutover: 114 / " in overview

    shot = ARTIFACTS / "reminder.png"
    shot.unlink(missing_ok=True)
    run = run_chromium(
        pages["regressed"].resolve().as_uri(), pages["profile"], f"--screenshot={shot}", "--window-size=1280,2600"
    )
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]


def test_a_shadow_business_reads_not_compared(pages: dict[str, Path]) -> None:
    dom = _dom(pages, "shadow")
    measures = re.search(r'<table id="measures">.*?</table>', dom, re.S)
    assert measures
    for measure in ("success rate", "timed out", "failed"):
        row = re.search(rf"<tr><td>{measure}</td>(.*?)</tr>", measures.group(0), re.S)
        assert row, measure
        _legacy, new, _baseline = re.findall(r'<td class="num">(.*?)</td>', row.group(1))
        assert new == "not compared (shadow: not invoked)", measure


def test_a_forced_cutover_names_who_why_and_the_verdict_it_overrode(pages: dict[str, Path]) -> None:
    dom = _dom(pages, "forced")
    assert "no cutover gate passed yet" not in dom and "Before cutover" not in dom
    assert "cutover state" not in dom and "state: <b>cut over</b>" in dom
    forced = re.search(r'<div class="warn" id="forced">.*?</div>', dom, re.S)
    assert forced
    text = forced.group(0)
    assert "alice forced the cutover" in text and "the new handler is fixed, verified by hand" in text
    assert "verdict not ready" in text and "latest verdict is not ready" in text
    assert "Still open after the cutover" in dom
