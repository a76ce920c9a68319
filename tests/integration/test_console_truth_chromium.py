"""Issue 32 on the console as an operator sees it: `switchyard console` over a store of
businesses in every state (SQLite, the embedded default), pages loaded in Debian's headless
Chromium. Its verdicts were computed days before the console's clock reads them: each is
flagged stale. The jobs by live side count the quarantined jobs still firing on legacy;
the boundary check is on the index; the audit shows verdict and comparison apart; the 404
header ends cleanly; the scheduler page has a window control and a chart of fired records.
Screenshots stay in test-artifacts/console_truth_chromium/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from dualrun.boundary_store import BoundaryTally, put_boundary_tally
from migrator.target import TargetWriter
from tests.console_state import ConsoleState, build_state
from tests.integration.console_browser import chromium, console_messages, console_process, run_chromium
from tests.servers import missing

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "console_truth_chromium"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConsoleState, str, Path]]:
    if chromium() is None:
        missing("Debian's chromium is not installed (apt-get install -y chromium)")
    tmp = tmp_path_factory.mktemp("console_truth")
    target = f"sqlite:///{tmp / 't.db'}"
    st = build_state(f"sqlite:///{tmp / 'legacy.db'}", target)
    now = st.env.store.clock.now()
    put_boundary_tally(
        st.env.dual,
        BoundaryTally(
            biz_code=st.cutover,
            switch="cutover",
            switched_at=now - timedelta(minutes=10),
            checked_at=now,
            horizon=now - timedelta(minutes=1),
            checked=57,
            missing=2,
            doubled=0,
        ),
    )
    st.env.legacy.dispose()
    st.env.store.engine.dispose()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    with console_process(target, [], tmp / "console.log") as base:
        yield st, base, tmp / "profile"


def _dom(url: str, profile: Path) -> str:
    run = run_chromium(url, profile, "--dump-dom")
    assert run.returncode == 0, run.stderr[-2000:]
    assert console_messages(run.stderr) == []
    return run.stdout


def _row(dom: str, row_id: str) -> str:
    m = re.search(rf'<tr id="{re.escape(row_id)}"[^>]*>.*?</tr>', dom, re.S)
    assert m, f"no row {row_id}"
    return m.group(0)


def test_the_index_flags_stale_verdicts_counts_quarantined_jobs_and_shows_the_boundary(
    served: tuple[ConsoleState, str, Path],
) -> None:
    st, base, profile = served
    dom = _dom(base + "/", profile)
    for code in (st.dual_run, st.cutover, st.rolled_back):  # computed days before the console's now
        verdict = re.search(r'<td class="verdict ([^"]+)">(.*?)</td>', _row(dom, f"biz-{code}"), re.S)
        assert verdict and verdict.group(1) == "v-stale" and '<span class="stale"' in verdict.group(2), code
    quarantined = TargetWriter(st.env.store, st.env.own).quarantined()
    biz = quarantined[0]["business"]
    n = sum(1 for r in quarantined if r["business"] == biz)
    sides = re.search(r'<td class="sides">(.*?)</td>', _row(dom, f"biz-{biz}"), re.S)
    assert sides and f"quarantined on legacy {n}</span>" in sides.group(1)
    cut = _row(dom, f"biz-{st.cutover}")  # its verdict warned of quarantined jobs before the cutover
    assert "quarantined and still run only on legacy" in cut and "fix them before cutover" not in cut
    boundary = re.search(r'<td class="boundary">(.*?)</td>', _row(dom, f"biz-{st.cutover}"), re.S)
    assert boundary and "cutover: 57 / " in boundary.group(1) and '<span class="flag">2</span>' in boundary.group(1)
    shot = ARTIFACTS / "businesses.png"
    shot.unlink(missing_ok=True)
    run = run_chromium(base + "/", profile, f"--screenshot={shot}", "--window-size=1500,900")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]


def test_the_audit_shows_the_verdict_and_the_comparison_in_their_own_columns(
    served: tuple[ConsoleState, str, Path],
) -> None:
    _st, base, profile = served
    dom = _dom(base + "/audit", profile)
    assert "<th>verdict</th><th>comparison</th><th>forced</th>" in dom
    cells = re.findall(r'<td class="verdict">(.*?)</td>\s*<td class="comparison">(.*?)</td>', dom, re.S)
    assert ('<span class="v-not_ready">not_ready</span>', "#1") in cells


def test_the_not_found_page_header_has_no_dangling_separator(served: tuple[ConsoleState, str, Path]) -> None:
    _st, base, profile = served
    dom = _dom(base + "/no-such-page", profile)
    assert 'id="error">404 Not found' in dom
    header = re.search(r"<header>.*?</header>", dom, re.S)
    assert header and header.group(0).removesuffix("</header>").rstrip().endswith(
        '<span class="muted">read-only</span>'
    )


def test_the_scheduler_page_has_a_window_control_and_a_chart(served: tuple[ConsoleState, str, Path]) -> None:
    _st, base, profile = served
    dom = _dom(base + "/scheduler?window=24h", profile)
    links = re.findall(r'<a href="/scheduler\?window=(\w+)"( class="on")?>', dom)
    assert [w for w, _ in links] == ["15m", "1h", "24h"] and [w for w, on in links if on] == ["24h"]
    chart = re.search(r'<svg id="fired-chart".*?</svg>', dom, re.S)
    assert chart and len(re.findall(r"<rect ", chart.group(0))) == 48
    assert "Fired records (last 24.0 h)" in dom
    shot = ARTIFACTS / "scheduler.png"
    shot.unlink(missing_ok=True)
    run = run_chromium(base + "/scheduler?window=15m", profile, f"--screenshot={shot}", "--window-size=1200,700")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
