"""The console in a real browser, on the real MariaDB: a migrated set of businesses, one
left on legacy, one dual-running, one cut over with an orphaned job, one cut over and
rolled back (built with the project's own migrator, switch and comparator), served by
`switchyard console --legacy-url ...` and loaded in Debian's headless Chromium. The page
shows each business's state and verdict, flags the orphan (red row and flag, listed
first), loads without console errors, and the full report renders with its plots. The
screenshots stay in test-artifacts/console_chromium/."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import numpy as np
import pytest
from PIL import Image

from tests.backends import mariadb_database
from tests.console_state import ConsoleState, build_state
from tests.integration.console_browser import chromium, console_messages, console_process, run_chromium
from tests.servers import missing

pytestmark = [pytest.mark.mariadb]
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "console_chromium"
FLAG_RED = (0xB3, 0x26, 0x1E)  # .flag in the console's stylesheet
PROBLEM_ROW = (0xFF, 0xE0, 0xDE)  # tr.problem td


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ConsoleState, str, Path]]:
    if chromium() is None:
        missing("Debian's chromium is not installed (apt-get install -y chromium)")
    tmp = tmp_path_factory.mktemp("console")
    with mariadb_database("cblegacy") as legacy, mariadb_database("cbtarget") as target:
        st = build_state(legacy, target)
        st.env.legacy.dispose()
        st.env.store.engine.dispose()
        log = tmp / "console.log"
        try:
            with console_process(target, [legacy], log) as base:
                yield st, base, tmp / "profile"
        finally:
            text = log.read_text()
            # the store's and the legacy database's passwords never reach the console's log
            from sqlalchemy.engine import make_url

            for url in (legacy, target):
                pw = make_url(url).password
                assert not pw or pw not in text
            assert "Traceback" not in text


def _pixels(png: Path, rgb: tuple[int, int, int], tolerance: int = 12) -> int:
    want = np.asarray(rgb, dtype=np.int16)
    with Image.open(png) as img:
        px = np.asarray(img.convert("RGB"), dtype=np.int16)
    return int((np.abs(px - want) <= tolerance).all(axis=-1).sum())


def _row(dom: str, row_id: str) -> str:
    m = re.search(rf'<tr id="{re.escape(row_id)}"[^>]*>.*?</tr>', dom, re.S)
    assert m, f"no row {row_id}"
    return m.group(0)


def test_the_businesses_page_shows_each_state_and_flags_the_orphan(served: tuple[ConsoleState, str, Path]) -> None:
    st, base, profile = served
    dom = run_chromium(base + "/", profile, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert console_messages(dom.stderr) == []
    page = dom.stdout
    want = {st.legacy: "legacy", st.dual_run: "dual_run", st.cutover: "cutover", st.rolled_back: "legacy"}
    for code, state in want.items():
        row = _row(page, f"biz-{code}")
        assert f'data-state="{state}"' in row and f'state-{state}">{state}</span>' in row
        assert ('class="problem"' in row) == (code == st.cutover)
    assert "1 orphaned/double" in _row(page, f"biz-{st.cutover}")
    assert "not_ready" in _row(page, f"biz-{st.dual_run}") and "none" in _row(page, f"biz-{st.legacy}")
    assert "full report" in _row(page, f"biz-{st.rolled_back}")

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "businesses.png"
    shot.unlink(missing_ok=True)
    run = run_chromium(base + "/", profile, f"--screenshot={shot}", "--window-size=1400,1400")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert _pixels(shot, FLAG_RED) > 200 and _pixels(shot, PROBLEM_ROW) > 2000  # the cut-over row is red


def test_the_cut_over_business_lists_the_orphan_first_in_red(served: tuple[ConsoleState, str, Path]) -> None:
    st, base, profile = served
    url = f"{base}/business/{quote(st.cutover, safe='')}"
    dom = run_chromium(url, profile, "--dump-dom")
    assert dom.returncode == 0 and console_messages(dom.stderr) == [], dom.stderr[-2000:]
    rows = re.findall(r'<tr id="job-([^"]+)" data-side="(\w+)"( class="problem")?>', dom.stdout)
    assert rows[0] == (st.orphan_key, "orphaned", ' class="problem"')
    assert rows[1:] and all(side == "new" and not flag for _k, side, flag in rows[1:])
    orphan = _row(dom.stdout, f"job-{st.orphan_key}")
    assert "ORPHANED" in orphan and "stopped by the switch" in orphan and "(inferred)" not in orphan
    assert 'id="problems"' in dom.stdout
    shot = ARTIFACTS / "cutover-business.png"
    shot.unlink(missing_ok=True)
    run = run_chromium(url, profile, f"--screenshot={shot}", "--window-size=1400,900")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert _pixels(shot, FLAG_RED) > 200 and _pixels(shot, PROBLEM_ROW) > 2000


def test_the_rolled_back_business_is_live_on_legacy_with_its_audit(served: tuple[ConsoleState, str, Path]) -> None:
    st, base, profile = served
    dom = run_chromium(f"{base}/business/{quote(st.rolled_back, safe='')}", profile, "--dump-dom")
    assert dom.returncode == 0 and console_messages(dom.stderr) == []
    sides = re.findall(r'<tr id="job-[^"]+" data-side="(\w+)"', dom.stdout)
    assert sides and "legacy" in sides and set(sides) <= {"legacy", "paused", "ended"}
    audit = re.search(r'<table id="audit">.*?</table>', dom.stdout, re.S)
    assert audit and "failures on the new path" in audit.group(0) and "bob" in audit.group(0)
    dual = run_chromium(f"{base}/business/{quote(st.dual_run, safe='')}", profile, "--dump-dom")
    assert set(re.findall(r'<tr id="job-[^"]+" data-side="(\w+)"', dual.stdout)) <= {"both", "paused", "ended"}


def test_the_full_report_renders_on_demand_with_its_plots(served: tuple[ConsoleState, str, Path]) -> None:
    st, base, profile = served
    dom = run_chromium(f"{base}/report/{quote(st.dual_run, safe='')}", profile, "--dump-dom")
    assert dom.returncode == 0 and console_messages(dom.stderr) == [], dom.stderr[-2000:]
    assert 'id="verdict"' in dom.stdout and "NOT READY" in dom.stdout
    assert re.findall(r'<img id="plot-(\w+)" src="data:image/png;base64,', dom.stdout)
    missing_page = run_chromium(f"{base}/business/no-such-business", profile, "--dump-dom")
    assert 'id="error">404 Unknown business' in missing_page.stdout
