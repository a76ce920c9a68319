"""Issue 17: a watch after the switch. A cut-over business is checked against its expected
occurrences with no legacy side: missing, doubled (one occurrence under two command ids)
and late fires are found and named, a run still executing is running (not late), the
Prometheus gauge per business and kind says how many, and `dualrun watch-cutover` exits 1."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client import generate_latest

from dualrun.aftercut import AfterCutoverGauges, NotCutOver, check_after_cutover
from dualrun.settings import CompareSettings
from dualrun.testing import fired
from migrator.ports import GateDecision
from scheduler_core.model import FiredState
from switchyard.cli import cli
from switchyard.exitcodes import FAILED
from switchyard.wiring import dualrun_store
from tests.migration_env import FixedGate, migrated_xxljob
from tests.unit.test_dualrun_support import Scenario


def _cut_over(s: Scenario) -> datetime:
    s.business_row(state="cutover")
    s.switched(s.now - timedelta(hours=3), "legacy", "dual_run")
    cut = s.now - timedelta(minutes=30)
    s.switched(cut, "dual_run", "cutover")
    return cut


def _check(s: Scenario):  # type: ignore[no-untyped-def]
    s.flush()
    return check_after_cutover(
        s.store, dualrun_store(s.store), s.reader(), s.biz_code, source=s.source, settings=CompareSettings(), now=s.now
    )


def test_a_clean_cutover_has_nothing_missing_doubled_or_late(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", "0/10 * * * * ?")
    s.new(d, [t for t in s.times(d) if t >= cut])
    r = _check(s)
    assert r.ok, r.findings
    assert (r.window.start, r.window.end) == (cut, s.now)
    assert r.expected == r.fired == 180
    assert r.sentence.endswith("180 expected, 180 fired: nothing missing, doubled or late")


def test_missing_doubled_and_late_fires_are_found_and_named(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", "0/10 * * * * ?")
    times = [t for t in s.times(d) if t >= cut]
    gone, late, doubled, running = times[10], times[20], times[30], times[-1]
    s.new(d, [t for t in times if t not in (gone, late, running)])
    s.new(d, [late], lag=timedelta(seconds=8))
    s.new(d, [running], state=FiredState.RECEIVED)  # stamped received, still executing: running
    # the same occurrence under a second trigger (a doubled trigger after a re-migration)
    s.records.append(fired(s.code(d), s.biz_code, 99, doubled))
    r = _check(s)
    assert (r.missing, r.doubled, r.late, r.running) == (1, 1, 1, 1), r.findings
    assert not r.ok
    by_kind = {f.kind: f for f in r.findings}
    assert by_kind["missing"].scheduled_at == gone and by_kind["missing"].job_code == "xxl:reminder:12"
    assert by_kind["doubled"].scheduled_at == doubled
    assert by_kind["doubled"].detail == (
        f"item 0 fired 2 times: command ids 1-{round(doubled.timestamp() * 1000)}-0, "
        f"99-{round(doubled.timestamp() * 1000)}-0"
    )
    assert by_kind["late"].scheduled_at == late and by_kind["late"].detail == "received 8.0 s after its time"
    assert r.sentence.endswith(": 1 missing, 1 doubled, 1 late")
    gauges = AfterCutoverGauges()
    gauges.record(r)
    text = generate_latest(gauges.registry).decode()
    for kind in ("missing", "doubled", "late"):
        assert f'switchyard_after_cutover_fires{{biz_code="reminder",kind="{kind}"}} 1.0' in text


def test_a_business_never_cut_over_is_refused(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row()
    s.switched(s.now - timedelta(hours=1), "legacy", "dual_run")
    s.job("12", "0/10 * * * * ?")
    with pytest.raises(NotCutOver, match="reminder has no recorded cutover"):
        _check(s)


def test_watch_cutover_command_exits_1_and_names_what_is_missing(tmp_path: Path) -> None:
    """Through the command, on a migrated xxl-job business cut over by the real switch:
    nothing fired on the new side since, so every due occurrence is missing."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    clock = env.migrator.clock
    gate = FixedGate(GateDecision(ready=True, comparison_id=1, computed_at=clock.now()))
    sw = env.xxl_switch(
        gate,
        max_verdict_age=timedelta(days=9999),
    )
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops")
    res = CliRunner().invoke(
        cli,
        [
            "dualrun",
            "watch-cutover",
            "--business",
            biz,
            "--url",
            str(env.store.engine.url),
            "--legacy-url",
            str(env.legacy.url),
            "--max-runs",
            "1",
            "--lookback",
            "10m",
            "--json",
        ],
        catch_exceptions=False,
    )
    assert res.exit_code == FAILED, res.output
    body = json.loads(res.output.strip().splitlines()[-1])
    assert body["business"] == biz and body["missing"] > 0 and not body["ok"]
    assert body["findings"][0]["kind"] == "missing"


def test_a_run_with_no_result_past_its_timeout_is_overdue_not_running(tmp_path: Path) -> None:
    """Running is only running within the job's timeout: a received run with no result 10
    minutes after its time, on a job with a 60 s timeout, hung or lost its result."""
    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", "0/10 * * * * ?", timeout_seconds=60)
    times = [t for t in s.times(d) if t >= cut]
    hung, running = times[-60], times[-1]  # 10 min old, and just now
    s.new(d, [t for t in times if t not in (hung, running)])
    s.new(d, [hung, running], state=FiredState.RECEIVED)
    r = _check(s)
    assert (r.missing, r.doubled, r.late, r.running, r.overdue) == (0, 0, 0, 1, 1), r.findings
    assert not r.ok
    (f,) = [f for f in r.findings if f.kind == "overdue"]
    assert f.scheduled_at == hung and "no result, past the job's timeout" in f.detail
    assert r.sentence.endswith(": 1 overdue")
    gauges = AfterCutoverGauges()
    gauges.record(r)
    assert (
        'switchyard_after_cutover_fires{biz_code="reminder",kind="overdue"} 1.0'
        in generate_latest(gauges.registry).decode()
    )


def test_occurrences_an_operator_stopped_are_neither_missing_nor_failed(tmp_path: Path) -> None:
    """Issue 27: a job paused after the cutover (its published runs recorded skipped by the
    stop, the later ones never admitted) has nothing missing in the window of its pause;
    the occurrences outside the pause still count."""
    from scheduler_core.stops import Cause, Scope, StopService
    from scheduler_core.store.stops import SqlStops

    s = Scenario.create(tmp_path)
    cut = _cut_over(s)
    d = s.job("12", "0/10 * * * * ?")
    times = [t for t in s.times(d) if t >= cut]
    paused, resumed = times[50], times[100]
    gone = times[120]  # after the resume: really missing
    s.new(d, [t for t in times if t < paused or (t >= resumed and t != gone)])
    s.new(d, times[50:60], state=FiredState.SKIPPED)  # published, then skipped by the stop
    stops = StopService(SqlStops(s.store))
    stops.stop(Scope.JOB, s.code(d), paused, Cause.PAUSE, "ops", "downstream down")
    stops.lift(Scope.JOB, s.code(d), resumed, (Cause.PAUSE,))
    r = _check(s)
    assert [(f.kind, f.scheduled_at) for f in r.findings] == [("missing", gone)]
