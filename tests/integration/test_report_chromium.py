"""The HTML report in a real browser: Debian's headless Chromium loads it with no console
errors, the plots are there and drawn, and the screenshots stay in test-artifacts/."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from dualrun.verdict_store import put_comparison
from reports.load import load_overview, load_report
from reports.plots import LEGACY, NEW
from reports.write import write_report
from scheduler_core.model import FiredState
from switchyard.wiring import dualrun_store
from tests.integration.console_browser import run_chromium
from tests.servers import missing
from tests.unit.test_dualrun_support import Scenario

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "test-artifacts" / "report_chromium"
CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]\s*(.*)")


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        missing("Debian's chromium is not installed (apt-get install -y chromium)")
    assert found is not None
    return found


def _run(page: Path, profile: Path, *mode: str) -> subprocess.CompletedProcess[str]:
    _chromium()  # a missing browser is said so (and fails under CI)
    return run_chromium(page.resolve().as_uri(), profile, *mode, timeout_s=120)


def _console(stderr: str) -> list[str]:
    return [m.group(1) for line in stderr.splitlines() if (m := CONSOLE.search(line))]


def _colour_pixels(png: Path, rgb: str, tolerance: int = 40) -> int:
    want = np.asarray([int(rgb[i : i + 2], 16) for i in (1, 3, 5)], dtype=np.int16)
    with Image.open(png) as img:
        pixels = np.asarray(img.convert("RGB"), dtype=np.int16)
    return int((np.abs(pixels - want) <= tolerance).all(axis=-1).sum())


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("chromium")
    s = Scenario.create(tmp)
    s.business_row(state="dual_run")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    s.new(d, times[:150])
    s.new(d, times[150:160], state=FiredState.FAILED)
    s.new(d, times[165:300], lag=timedelta(milliseconds=300))
    s.new(d, times[300:], lag=timedelta(seconds=3))
    c = s.compare()
    for back in (30, 20, 10):
        put_comparison(dualrun_store(s.store), replace(c, computed_at=c.computed_at - timedelta(minutes=back)))
    put_comparison(dualrun_store(s.store), c)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report, overview = ARTIFACTS / "reminder.html", ARTIFACTS / "index.html"
    write_report(load_report(dualrun_store(s.store), "reminder", now=s.now).content(), "html", report)
    write_report(load_overview(dualrun_store(s.store), now=s.now, reports_dir=ARTIFACTS).content(), "html", overview)
    return {"report": report, "overview": overview, "profile": tmp / "profile"}


def test_console_check_catches_errors(tmp_path: Path) -> None:
    # the harness itself: a page that logs an error is caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>console.error('boom'); missing();</script></body></html>")
    messages = _console(_run(bad, tmp_path / "profile", "--dump-dom").stderr)
    assert any("boom" in m for m in messages) and any("missing" in m for m in messages)


def test_report_loads_without_console_errors_and_shows_its_plots(pages: dict[str, Path]) -> None:
    dom = _run(pages["report"], pages["profile"], "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert _console(dom.stderr) == []
    plots = re.findall(r'<img id="plot-(\w+)" src="data:image/png;base64,', dom.stdout)
    assert set(plots) == {"lag", "volume", "success", "history"}
    assert 'id="verdict"' in dom.stdout and "NOT READY" in dom.stdout

    shot = ARTIFACTS / "reminder.png"
    shot.unlink(missing_ok=True)
    run = _run(pages["report"], pages["profile"], f"--screenshot={shot}", "--window-size=1280,2600")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert _console(run.stderr) == []
    with Image.open(shot) as img:
        assert img.size == (1280, 2600)
    # the plots were decoded and drawn: both sides' colours are on the page
    assert _colour_pixels(shot, LEGACY) > 300 and _colour_pixels(shot, NEW) > 300


def test_overview_page_loads_without_console_errors(pages: dict[str, Path]) -> None:
    shot = ARTIFACTS / "overview.png"
    shot.unlink(missing_ok=True)
    run = _run(pages["overview"], pages["profile"], f"--screenshot={shot}", "--window-size=1280,700")
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert _console(run.stderr) == []
    dom = _run(pages["overview"], pages["profile"], "--dump-dom")
    assert '<a href="reminder.html">reminder</a>' in dom.stdout
