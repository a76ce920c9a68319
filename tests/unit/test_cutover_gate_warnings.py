"""The cutover gate carries the verdict's warnings ("N legacy job(s) ... quarantined ...
fix them before cutover"), and the cutover says them: in its report, its audit, the
refusal, and the `switchyard cutover` output (text and JSON)."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from dualrun.model import Comparison, Verdict
from dualrun.verdict_store import put_comparison
from migrator.business import BusinessRegistry, TransitionRefused
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from migrator.ports import GateDecision
from switchyard.cli import cli
from switchyard.wiring import DualRunGate
from tests.migration_env import FixedGate, migrated_xxljob, migrated_xxljob_urls, ready_switch
from tests.unit.test_dualrun_quarantine import _scenario

SENTENCE = "1 legacy job(s) of this business are quarantined and still run only on legacy; fix them before cutover"


def _quarantine_comparison(tmp_path: Path) -> Comparison:
    """A real comparison of a business with one quarantined job: ready, with the warning."""
    s, _, _ = _scenario(tmp_path / "scenario")
    c = s.compare()
    assert c.verdict is Verdict.READY and any(w.startswith(SENTENCE) for w in c.warnings), c.warnings
    return c


def _env(tmp_path: Path):  # type: ignore[no-untyped-def]
    return migrated_xxljob(tmp_path, groups=1, jobs_per_group=6)


def test_the_dual_run_gate_passes_the_verdict_warnings_on(tmp_path: Path) -> None:
    env, biz = _env(tmp_path)
    c = _quarantine_comparison(tmp_path)
    cid = put_comparison(env.dual, replace(c, biz_code=biz))
    d = DualRunGate(env.dual).decision(biz)
    assert d is not None and d.ready and d.comparison_id == cid
    assert d.warnings == c.warnings and d.warnings[0].startswith(SENTENCE)
    assert d.reasons == ()  # a warning is not a reason to refuse


def test_a_ready_cutover_reports_and_audits_the_warnings(tmp_path: Path) -> None:
    env, biz = _env(tmp_path)
    clock = env.migrator.clock
    c = _quarantine_comparison(tmp_path)
    put_comparison(env.dual, replace(c, biz_code=biz, computed_at=clock.now()))
    sw = env.xxl_switch(DualRunGate(env.dual))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    rep = sw.cutover(biz, actor="ops", reason="go")
    assert not rep.forced and rep.warnings == list(c.warnings)
    assert BusinessRegistry(env.own).audit(biz)[-1].detail["warnings"] == list(c.warnings)  # type: ignore[index]


def test_a_refused_cutover_says_the_warnings_too(tmp_path: Path) -> None:
    env, biz = _env(tmp_path)
    clock = env.migrator.clock
    gate = FixedGate(
        GateDecision(
            ready=False,
            comparison_id=4,
            computed_at=clock.now(),
            reasons=("p99 lag 4.2 s > 1 s",),
            warnings=(SENTENCE,),
        )
    )
    sw = env.xxl_switch(gate)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    with pytest.raises(TransitionRefused, match=r"p99 lag 4\.2 s > 1 s; warning: 1 legacy job\(s\) .* fix them before"):
        sw.cutover(biz, actor="ops")
    rep = sw.cutover(biz, actor="ops", force=True, reason="deadline")
    assert rep.forced and rep.warnings == [SENTENCE]


def test_no_warnings_when_the_verdict_has_none(tmp_path: Path) -> None:
    env, biz = _env(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    assert sw.cutover(biz, actor="ops").warnings == []


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_the_cutover_command_prints_the_warning(tmp_path: Path, as_json: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from scheduler_core.store.engine import make_engine

    command = importlib.import_module("switchyard.cli.cutover")  # (the package's `cutover` is the command)

    # the command's clock is the system's: settle at once instead of waiting out the
    # xxl-job pre-read window for real (nothing runs the legacy side here)
    monkeypatch.setattr(
        command,
        "legacy_control",
        lambda source, url, clock, tz: XxlJobControl(make_engine(url), clock, settle=timedelta(0)),
    )
    env, biz = _env(tmp_path)
    clock = env.migrator.clock
    BusinessSwitch(env.store, env.own, XxlJobControl(env.legacy, clock), clock).start_dual_run(
        biz, shadow=False, actor="ops"
    )
    c = _quarantine_comparison(tmp_path)
    # the command runs on the system clock: the stored verdict is fresh now
    put_comparison(env.dual, replace(c, biz_code=biz, computed_at=datetime.now(timezone.utc) - timedelta(seconds=5)))
    env.store.engine.dispose()
    args = ["cutover", "--business", biz, *migrated_xxljob_urls(tmp_path), "--actor", "ops", "--reason", "go"]
    result = CliRunner().invoke(cli, args + (["--json"] if as_json else []))
    assert result.exit_code == 0, result.output
    if as_json:
        body = json.loads(result.output.strip().splitlines()[-1])
        assert body["to_state"] == "cutover" and body["warnings"] == list(c.warnings)
    else:
        assert f"{biz}: dual_run -> cutover" in result.output
        warn = [ln for ln in result.output.splitlines() if ln.startswith("  warning: ")]
        assert len(warn) == 1 and warn[0].startswith("  warning: " + SENTENCE), result.output
