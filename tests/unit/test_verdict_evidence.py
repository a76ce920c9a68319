"""A verdict needs evidence (issue 15): the comparison window must be long enough and every
recurring job must have enough expected fires in it, or the verdict is not ready and the
cutover gate refuses, saying which job, how many fires and what window. A shadow-mode
"ready" carries the warning that success rate was not compared: in the report, the gate's
refusal and acceptance, and the JSON of `dualrun compare` and of `cutover`."""

from __future__ import annotations

import importlib
import json
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from dualrun.model import Comparison, Verdict
from dualrun.settings import CompareSettings, Thresholds
from dualrun.verdict import SHADOW_WARNING
from dualrun.verdict_store import latest, put_comparison
from migrator.business import TransitionRefused
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from reports.load import load_report
from reports.write import render_report
from scheduler_core.model import FiredState
from switchyard.cli import cli
from switchyard.wiring import DualRunGate, dualrun_store
from tests.compare_cli import compare_args, patch_reader
from tests.migration_env import migrated_xxljob, migrated_xxljob_urls
from tests.unit.test_dualrun_support import Scenario, identical

NOT_COMPARED = "success rate was not compared"


def _check(c: Comparison, code: str):  # type: ignore[no-untyped-def]
    return next(ch for ch in c.checks if ch.code == code)


def _short_window(tmp_path: Path) -> Comparison:
    """Both sides fire alike, every 10 s (120 fires): only the 20-minute window is wrong."""
    s, _ = identical(tmp_path, window=timedelta(minutes=20))
    return s.compare()


def _sparse_job(tmp_path: Path) -> Comparison:
    """An hour, one job every 10 s (360 fires) and one every 10 min (6 fires)."""
    s = Scenario.create(tmp_path)
    for key, cron in (("12", "0/10 * * * * ?"), ("13", "0 0/10 * * * ?")):
        d = s.job(key, cron)
        s.legacy(d)
        s.new(d)
    return s.compare()


def _shadow_ready(tmp_path: Path) -> Scenario:
    s = Scenario.create(tmp_path)
    s.business_row(shadow=True)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, state=FiredState.RECEIVED)  # recorded, never invoked
    return s


def _switch(tmp_path: Path, c: Comparison) -> tuple[BusinessSwitch, str]:
    """A migrated xxl-job business in dual-run whose latest stored verdict is `c`, behind
    the real gate (DualRunGate over the store)."""
    env, biz = migrated_xxljob(tmp_path / "env", groups=1, jobs_per_group=6)
    clock = env.migrator.clock
    sw = env.xxl_switch(DualRunGate(env.dual))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    put_comparison(env.dual, replace(c, biz_code=biz, computed_at=clock.now()))
    return sw, biz


# --- a short window ---------------------------------------------------------------------


def test_a_window_shorter_than_the_minimum_is_not_ready_and_says_how_short(tmp_path: Path) -> None:
    c = _short_window(tmp_path)
    assert c.verdict is Verdict.NOT_READY
    assert not _check(c, "window").passed
    # every other check passes: the window alone refuses it
    assert [ch.code for ch in c.checks if not ch.passed and not ch.skipped] == ["window"]
    assert c.reasons == (
        "the compared window 2026-12-02 07:40:00Z .. 2026-12-02 08:00:00Z is 20 min long, shorter than the minimum "
        "of 30 min (min_window): too little evidence for a verdict",
    )


def test_the_gate_refuses_a_short_window_verdict_with_the_reason(tmp_path: Path) -> None:
    sw, biz = _switch(tmp_path, _short_window(tmp_path / "c"))
    with pytest.raises(
        TransitionRefused,
        match=r"latest verdict is not ready: the compared window .* is 20 min "
        r"long, shorter than the minimum of 30 min",
    ):
        sw.cutover(biz, actor="ops")


def test_a_lowered_minimum_window_passes_with_a_warning(tmp_path: Path) -> None:
    s, _ = identical(tmp_path, window=timedelta(minutes=20))
    c = s.compare(CompareSettings(thresholds=Thresholds(min_window=timedelta(minutes=15))))
    assert c.verdict is Verdict.READY, c.reasons
    assert c.thresholds["min_window"] == 900
    assert any("the minimum min_window was lowered from the default 30 min" in w for w in c.warnings), c.warnings


# --- too few fires per job --------------------------------------------------------------


def test_too_few_expected_fires_of_a_job_is_not_ready_and_names_the_job(tmp_path: Path) -> None:
    c = _sparse_job(tmp_path)
    assert c.verdict is Verdict.NOT_READY
    assert [ch.code for ch in c.checks if not ch.passed and not ch.skipped] == ["fires_per_job"]
    (reason,) = c.reasons
    assert reason == (
        "1 of 2 recurring job(s) have fewer than 10 expected fires in the 1 h window "
        "2026-12-02 07:00:00Z .. 2026-12-02 08:00:00Z (min_fires_per_job): too little evidence per "
        "job: job xxl:reminder:13 has 6"
    )
    assert "xxl:reminder:12" not in reason  # 360 expected fires: enough


def test_the_gate_refuses_too_few_fires_per_job_naming_the_job(tmp_path: Path) -> None:
    sw, biz = _switch(tmp_path, _sparse_job(tmp_path / "c"))
    with pytest.raises(
        TransitionRefused,
        match=r"fewer than 10 expected fires in the 1 h window .*job "
        r"xxl:reminder:13 has 6",
    ):
        sw.cutover(biz, actor="ops")


def test_many_short_jobs_are_listed_one_per_line(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    for n in range(5):
        d = s.job(str(20 + n), f"{n} 0/10 * * * ?")
        s.legacy(d)
        s.new(d)
    c = s.compare()
    check = _check(c, "fires_per_job")
    assert not check.passed and check.sentence.startswith("5 of 5 recurring job(s) have fewer than 10")
    assert check.details == tuple(
        f"job xxl:reminder:{20 + n}: 6 expected fire(s) in the window, need 10" for n in range(5)
    )
    assert set(check.details) <= set(c.reasons)


def test_stopped_and_one_shot_jobs_need_no_fires(tmp_path: Path) -> None:
    s, _ = identical(tmp_path)
    s.job("30", "0 0/10 * * * ?", enabled=False)  # stopped on legacy: expects nothing
    c = s.compare()
    assert c.verdict is Verdict.READY, c.reasons
    assert _check(c, "fires_per_job").sentence.startswith(
        "every recurring job has at least 10 expected fires in the 1 h window"
    )


# --- the command line -------------------------------------------------------------------


def test_compare_options_set_the_minimums(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = identical(tmp_path, window=timedelta(minutes=20))
    patch_reader(monkeypatch, s)
    refused = CliRunner().invoke(cli, compare_args(s, tmp_path))
    assert refused.exit_code == 1 and "is 20 min long, shorter than the minimum of 30 min" in refused.output
    ok = CliRunner().invoke(cli, compare_args(s, tmp_path, "--min-window", "20m", "--json"))
    assert ok.exit_code == 0, ok.output
    body = json.loads(ok.output)
    assert body["verdict"] == "ready" and body["thresholds"]["min_window"] == 1200
    assert body["thresholds"]["min_fires_per_job"] == 10
    strict = CliRunner().invoke(cli, compare_args(s, tmp_path, "--min-window", "20m", "--min-fires-per-job", "121"))
    assert strict.exit_code == 1 and "job xxl:reminder:12 has 120" in strict.output


def test_compare_options_override_the_thresholds_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s, _ = identical(tmp_path, window=timedelta(minutes=20))
    patch_reader(monkeypatch, s)
    toml = tmp_path / "thresholds.toml"
    toml.write_text('[defaults]\nmin_window = "10m"\n')
    assert CliRunner().invoke(cli, compare_args(s, tmp_path, "--thresholds", str(toml))).exit_code == 0
    args = compare_args(s, tmp_path, "--thresholds", str(toml), "--min-window", "1h")
    assert CliRunner().invoke(cli, args).exit_code == 1


# --- shadow mode: success rate not compared ---------------------------------------------


def test_a_shadow_ready_verdict_warns_that_success_rate_was_not_compared(tmp_path: Path) -> None:
    s = _shadow_ready(tmp_path)
    c = s.compare(source=None)
    assert c.verdict is Verdict.READY, c.reasons
    assert SHADOW_WARNING in c.warnings and NOT_COMPARED in SHADOW_WARNING
    assert NOT_COMPARED in c.summary


def test_the_shadow_warning_is_in_every_report_form(tmp_path: Path) -> None:
    s = _shadow_ready(tmp_path)
    put_comparison(dualrun_store(s.store), s.compare(source=None))
    content = load_report(dualrun_store(s.store), "reminder", now=s.now).content()
    assert SHADOW_WARNING in json.loads(render_report(content, "json"))["warnings"]
    assert f"**Before cutover:** {SHADOW_WARNING}" in render_report(content, "md")
    assert f"<b>Before cutover:</b> {SHADOW_WARNING}" in render_report(content, "html")
    for fmt in ("md", "html"):  # and the verdict's own line does not claim every check passed
        assert (
            "Ready: every check of timing and volume passed against the legacy side and its A/A noise baseline "
            "(shadow mode: success rate was not compared)."
        ) in render_report(content, fmt)


def test_the_gate_says_the_shadow_warning_when_it_accepts_and_when_it_refuses(tmp_path: Path) -> None:
    c = _shadow_ready(tmp_path / "c").compare(source=None)
    sw, biz = _switch(tmp_path / "ok", c)
    rep = sw.cutover(biz, actor="ops", reason="go")
    assert not rep.forced and SHADOW_WARNING in rep.warnings
    # refused (a stale verdict here): the refusal says it too
    sw, biz = _switch(tmp_path / "stale", c)
    sw.clock.advance(timedelta(hours=2))  # type: ignore[attr-defined]
    with pytest.raises(TransitionRefused, match="latest verdict is .* old .*; warning: " + re.escape(SHADOW_WARNING)):
        sw.cutover(biz, actor="ops")


def test_a_shadow_verdict_stored_without_the_warning_gets_it_at_the_gate(tmp_path: Path) -> None:
    """A shadow verdict stored before the warning existed (its body has none)."""
    s = _shadow_ready(tmp_path)
    c = s.compare(source=None)
    put_comparison(dualrun_store(s.store), replace(c, checks=tuple(ch for ch in c.checks if ch.code != "shadow")))
    stored = latest(dualrun_store(s.store), "reminder")
    assert stored is not None and SHADOW_WARNING in stored.warnings
    decision = DualRunGate(dualrun_store(s.store)).decision("reminder")
    assert decision is not None and decision.ready and SHADOW_WARNING in decision.warnings


def test_dualrun_compare_json_carries_the_shadow_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    s = _shadow_ready(tmp_path)
    patch_reader(monkeypatch, s)
    args = [a for a in compare_args(s, tmp_path, "--json") if a not in ("--source", "xxl-job")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    body = json.loads(result.output)
    assert body["verdict"] == "ready" and body["mode"] == "shadow" and SHADOW_WARNING in body["warnings"]
    text = CliRunner().invoke(cli, [a for a in compare_args(s, tmp_path) if a not in ("--source", "xxl-job")])
    assert f"  ! {SHADOW_WARNING}" in text.output


def test_cutover_json_carries_the_shadow_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from scheduler_core.store.engine import make_engine

    command = importlib.import_module("switchyard.cli.cutover")
    # the command runs on the system clock: settle at once instead of waiting out xxl-job's
    # pre-read window for real (nothing runs the legacy side here)
    monkeypatch.setattr(
        command,
        "legacy_control",
        lambda source, url, clock, tz: XxlJobControl(make_engine(url), clock, settle=timedelta(0)),
    )
    c = _shadow_ready(tmp_path / "c").compare(source=None)
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=6)
    clock = env.migrator.clock
    BusinessSwitch(env.store, env.own, XxlJobControl(env.legacy, clock), clock).start_dual_run(
        biz, shadow=True, actor="ops"
    )
    put_comparison(env.dual, replace(c, biz_code=biz, computed_at=datetime.now(timezone.utc) - timedelta(seconds=5)))
    env.store.engine.dispose()
    result = CliRunner().invoke(
        cli,
        ["cutover", "--business", biz, *migrated_xxljob_urls(tmp_path), "--actor", "ops", "--reason", "go", "--json"],
    )
    assert result.exit_code == 0, result.output
    body = json.loads(result.output.strip().splitlines()[-1])
    assert body["to_state"] == "cutover" and SHADOW_WARNING in body["warnings"]
