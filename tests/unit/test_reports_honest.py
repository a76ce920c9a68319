"""Issue 17: every form of the report (JSON, Markdown, HTML) shows the span that was
compared (and where it was clipped), the precision lag was compared at, and the change
stream's catch-up state, at compare time and at the cutover gate."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert

from dualrun.model import StreamState
from dualrun.verdict_store import put_comparison
from migrator.catchup import CatchupState
from migrator.tables import migrator_tables
from reports.load import load_report
from reports.write import render_report
from switchyard.wiring import dualrun_store
from tests.migration_env import migrated_xxljob, ready_switch
from tests.unit.test_dualrun_support import Scenario

SPAN = "start clipped at the dual-run start 2026-12-02T07:20:00Z"
PRECISION = "lag compared at 1 s precision, the coarser of legacy (xxl_job_log.trigger_time, DATETIME: 1 s)"


def _forms(s: Scenario, biz_code: str) -> dict[str, str]:
    content = load_report(dualrun_store(s.store), biz_code, now=s.now).content()
    return {fmt: render_report(content, fmt) for fmt in ("json", "md", "html")}


def test_every_form_shows_the_compared_span_precision_and_stream(tmp_path: Path) -> None:
    s = Scenario.create(tmp_path)
    s.business_row()
    began = s.now - timedelta(minutes=40)
    with s.store.engine.begin() as conn:
        conn.execute(
            insert(migrator_tables().audit).values(
                biz_code=s.biz_code,
                from_state="legacy",
                to_state="dual_run",
                at=round(began.timestamp() * 1000),
                actor="ops",
                reason="t",
                forced=0,
                detail="{}",
            )
        )
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, [t for t in s.times(d) if t >= began])
    c = s.compare()
    stream = StreamState(
        caught_up=False,
        checked_at=s.now,
        stream_id="xxl-job@db",
        sentence="change stream xxl-job@db is behind: 3 pending change(s)",
    )
    put_comparison(dualrun_store(s.store), replace(c, stream=stream))
    forms = _forms(s, s.biz_code)
    body = json.loads(forms["json"])
    assert body["span"]["clipped"] == [SPAN]
    assert body["lag_precision"]["ms"] == 1000 and body["stream"]["caught_up"] is False
    assert body["gate_stream"] is None
    for fmt in ("md", "html"):
        assert SPAN in forms[fmt], fmt
        assert PRECISION in forms[fmt], fmt
        assert "change stream xxl-job@db is behind: 3 pending change(s)" in forms[fmt], fmt
        assert "no cutover gate passed yet" in forms[fmt], fmt


def test_the_report_shows_the_stream_state_the_cutover_gate_found(tmp_path: Path) -> None:
    """Through the real switch: the gate's catch-up state is stored with the cutover's
    audit row and shown by the business's report."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=3)
    clock = env.migrator.clock

    class CaughtUp:
        def check(self, biz_code: str, source: str) -> CatchupState:
            return CatchupState(
                stream_id="xxl-job@legacy",
                caught_up=True,
                pending=0,
                checkpoint="bin.000002:900",
                head="bin.000002:1200",
                behind_bytes=300,
                last_advanced_s=2.0,
                waited_s=0.0,
                max_pending=0,
            )

    sw = ready_switch(env, max_verdict_age=timedelta(days=9999), catchup=CaughtUp())
    sw.start_dual_run(biz, shadow=False, actor="ops")
    s = Scenario.create(tmp_path / "c", biz_code=biz)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d)
    put_comparison(env.dual, replace(s.compare(), biz_code=biz, computed_at=clock.now()))
    report = sw.cutover(biz, actor="ops")
    assert report.stream is not None and report.stream["caught_up"] is True
    content = load_report(env.dual, biz, now=clock.now()).content()
    assert content["gate_stream"]["sentence"].startswith("change stream xxl-job@legacy is caught up (0 pending")
    md = render_report(content, "md")
    assert "change stream at the cutover gate: 2026-" in md and "300 binlog bytes behind" in md
