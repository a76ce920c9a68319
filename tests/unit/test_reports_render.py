"""Reports in their three forms, the overview page, secrets kept out, and the CLI."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from dbkit.redact import redact
from dualrun.verdict_store import put_comparison
from reports.errors import UnknownFormat
from reports.load import load_overview, load_report
from reports.write import format_for, render_report, write_report
from scheduler_core.model import FiredState
from switchyard.cli import cli
from switchyard.wiring import dualrun_store
from tests.unit.test_dualrun_support import Scenario

SECRETS = ("hunter2", "s3cr3t-token", "abcdef123456")


def _scenario(tmp_path: Path) -> Scenario:
    """A not-ready business with every kind of content: missing, failed, series, history."""
    s = Scenario.create(tmp_path)
    s.business_row(state="dual_run")
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    s.new(d, times[:100])
    s.new(d, times[100:110], state=FiredState.FAILED)
    s.new(d, times[120:])
    first = s.compare()
    put_comparison(dualrun_store(s.store), replace(first, computed_at=first.computed_at - timedelta(minutes=10)))
    leaky = replace(
        first,
        notes=(
            *first.notes,
            "legacy at mysql+pymysql://ro:hunter2@db:3306/xxl token=s3cr3t-token",
            "Authorization: Bearer abcdef123456",
        ),
    )
    put_comparison(dualrun_store(s.store), leaky)
    return s


@pytest.fixture
def report(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = _scenario(tmp_path)
    return s, load_report(dualrun_store(s.store), "reminder", now=s.now).content()


def test_json_form_has_the_verdict_reasons_and_series(report) -> None:  # type: ignore[no-untyped-def]
    _s, content = report
    data = json.loads(render_report(content, "json"))
    assert data["kind"] == "business_report" and data["verdict"] == "not_ready" and data["state"] == "dual_run"
    assert any(r.startswith("10 missing fires of job xxl:reminder:12") for r in data["reasons"])
    assert any(r.startswith("success rate") for r in data["reasons"])
    assert len(data["series"]) == 24 and len(data["history"]) == 2
    assert data["measures"]["baseline"]["fires"] == 360  # the noise baseline
    assert data["mismatch_counts"]["missing_on_new"]["flagged"] == 10


def test_markdown_form_says_the_same(report) -> None:  # type: ignore[no-untyped-def]
    _, content = report
    md = render_report(content, "md")
    assert md.startswith("# Dual-run report — reminder: NOT READY")
    for reason in content["reasons"]:
        assert reason in md
    assert "## Noise baseline (A/A: legacy against itself)" in md
    assert "| missing_on_new | 10 | 10 | 0 |" in md
    assert "## Stored comparisons (watch series)" in md


def test_html_form_is_self_contained_with_plots(report) -> None:  # type: ignore[no-untyped-def]
    _, content = report
    html = render_report(content, "html")
    imgs = re.findall(r'<img id="plot-(\w+)" src="data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert {name for name, _ in imgs} == {"lag", "volume", "success", "history"}
    assert all(len(data) > 2000 for _, data in imgs)
    assert "NOT READY" in html and "<script" not in html
    assert not re.search(r'(src|href)="(https?:)?//', html)  # nothing is fetched from anywhere
    assert "10 missing fires of job xxl:reminder:12" in html


def test_no_secret_reaches_any_form(report) -> None:  # type: ignore[no-untyped-def]
    _, content = report
    for fmt in ("json", "md", "html"):
        text = render_report(content, fmt)
        assert not any(secret in text for secret in SECRETS), fmt
    assert "mysql+pymysql://ro:***@db:3306/xxl" in render_report(content, "md")


def test_redact_masks_url_passwords_and_tokens() -> None:
    assert redact("pulsar+ssl://u:pw@h:6651") == "pulsar+ssl://u:***@h:6651"
    assert redact("X-BC-Token: abc") == "X-BC-Token: ***"
    assert redact("access_token=xyz&a=1") == "access_token=***&a=1"
    assert redact("plain text 12 fires") == "plain text 12 fires"


def test_overview_lists_businesses_with_their_cutover_states(tmp_path: Path) -> None:
    s = _scenario(tmp_path)
    other = Scenario(store=s.store, biz_code="sop")
    other.business_row(state="cutover")
    write_report(
        load_report(dualrun_store(s.store), "reminder", now=s.now).content(), "html", tmp_path / "out" / "reminder.html"
    )
    content = load_overview(dualrun_store(s.store), now=s.now, reports_dir=tmp_path / "out").content()
    rows = {r["business"]: r for r in content["rows"]}
    assert rows["reminder"]["state"] == "dual_run" and rows["reminder"]["verdict"] == "not_ready"
    assert rows["reminder"]["link"] == "reminder.html" and rows["sop"]["link"] is None
    assert rows["sop"]["state"] == "cutover" and rows["sop"]["verdict"] is None
    html = render_report(content, "html")
    assert '<a href="reminder.html">reminder</a>' in html and "never compared" in html
    assert not any(secret in html for secret in SECRETS)
    assert "| sop | xxl-job | cut over | none |" in render_report(content, "md")


def test_format_follows_the_suffix() -> None:
    assert format_for(Path("a.md"), None) == "md"
    assert format_for(Path("a.json"), None) == "json"
    assert format_for(Path("a.htm"), None) == "html"
    assert format_for(Path("a"), None) == "html"
    with pytest.raises(UnknownFormat):
        format_for(Path("a.txt"), None)  # issue 32: a suffix of no form is refused, not written as HTML
    assert format_for(Path("a.md"), "json") == "json"


def test_report_cli_writes_every_format_and_the_overview(tmp_path: Path) -> None:
    _scenario(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    for fmt in ("html", "md", "json"):
        out = tmp_path / "out" / f"reminder.{fmt}"
        result = runner.invoke(
            cli, ["report", "--business", "reminder", "--format", fmt, "--out", str(out), "--url", url]
        )
        assert result.exit_code == 0, result.output
        assert out.stat().st_size > 500
    result = runner.invoke(cli, ["report", "--overview", "--out", str(tmp_path / "out" / "index.html"), "--url", url])
    assert result.exit_code == 0, result.output
    assert 'href="reminder.html"' in (tmp_path / "out" / "index.html").read_text()


def test_report_cli_errors_are_one_line_with_exit_codes(tmp_path: Path) -> None:
    _scenario(tmp_path)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    runner = CliRunner()
    missing = runner.invoke(cli, ["report", "--business", "nobody", "--out", str(tmp_path / "x.html"), "--url", url])
    # a business that does not exist is a wrong argument naming it (issue 32), not "no comparison yet"
    assert missing.exit_code == 2 and "no such business: nobody" in missing.output, missing.output
    both = runner.invoke(
        cli, ["report", "--business", "reminder", "--overview", "--out", str(tmp_path / "x.html"), "--url", url]
    )
    assert both.exit_code == 2
    neither = runner.invoke(cli, ["report", "--out", str(tmp_path / "x.html"), "--url", url])
    assert neither.exit_code == 2


def test_shadow_report_says_timing_and_volume_only(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, state=FiredState.RECEIVED)
    put_comparison(dualrun_store(s.store), s.compare(source=None))
    content = load_report(dualrun_store(s.store), "reminder", now=s.now).content()
    for fmt in ("md", "html"):
        assert "Shadow mode: timing and volume only" in render_report(content, fmt)
    assert content["mode"] == "shadow"
