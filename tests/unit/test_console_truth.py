"""Issue 32 on the console (Starlette TestClient, the embedded SQLite store): a verdict
older than the cutover gate takes is flagged stale; quarantined jobs are counted with the
jobs by live side; the boundary checks are shown; the audit shows the verdict and the
comparison apart; the 404 header ends cleanly; the scheduler page has a window control
and a chart, and its admission lag says how far admission is behind (or idle), never the
lookahead's -1800 s. And the scheduler's admission gauge itself (scheduler_core)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from starlette.testclient import TestClient

from dualrun.boundary_store import BoundaryTally, put_boundary_tally
from migrator.ports import VERDICT_MAX_AGE
from migrator.target import TargetWriter
from scheduler_core.clock import ManualClock
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import FiredRecord, FiredState, command_id
from switchyard.console.app import make_app
from switchyard.console.data import CHART_BUCKETS, Sources, member_from_text, registry_members
from tests.console_state import ConsoleState, build_state
from tests.harness import make_harness, stored_id


@pytest.fixture
def state(tmp_path: Path) -> Iterator[ConsoleState]:
    st = build_state(f"sqlite:///{tmp_path / 'legacy.db'}", f"sqlite:///{tmp_path / 't.db'}")
    yield st
    st.env.legacy.dispose()
    st.env.store.engine.dispose()


def _client(st: ConsoleState, **kw: object) -> TestClient:
    return TestClient(make_app(Sources(st.env.store, **kw)))  # type: ignore[arg-type]


def _row(html: str, row_id: str) -> str:
    m = re.search(rf'<tr id="{re.escape(row_id)}"[^>]*>.*?</tr>', html, re.S)
    assert m, f"no row {row_id}"
    return m.group(0)


def _clock(st: ConsoleState) -> ManualClock:
    clock = st.env.store.clock
    assert isinstance(clock, ManualClock)
    return clock


def test_a_verdict_older_than_the_gate_takes_is_flagged_stale(state: ConsoleState) -> None:
    client = _client(state)
    fresh = {r["business"]: r for r in client.get("/api/businesses").json()}
    assert fresh[state.dual_run]["verdict"]["stale"] is False
    row = _row(client.get("/").text, f"biz-{state.dual_run}")
    assert 'class="verdict v-not_ready"' in row and ">stale<" not in row
    _clock(state).advance(VERDICT_MAX_AGE + timedelta(days=5))
    old = {r["business"]: r for r in client.get("/api/businesses").json()}
    assert old[state.dual_run]["verdict"]["stale"] is True
    assert old[state.dual_run]["verdict"]["max_age_s"] == VERDICT_MAX_AGE.total_seconds()
    row = _row(client.get("/").text, f"biz-{state.dual_run}")
    assert 'class="verdict v-stale"' in row and '<span class="stale"' in row
    page = client.get(f"/business/{state.dual_run}").text
    assert 'id="verdict" class="v-stale"' in page and '<span class="stale"' in page


def test_quarantined_jobs_are_counted_with_the_jobs_by_live_side(state: ConsoleState) -> None:
    rows = TargetWriter(state.env.store, state.env.own).quarantined()
    assert rows, "the seed quarantines some rows"
    biz = rows[0]["business"]
    n = sum(1 for r in rows if r["business"] == biz)
    client = _client(state)
    api = {r["business"]: r for r in client.get("/api/businesses").json()}[biz]
    assert api["quarantined"] == n and api["jobs"] == sum(api["sides"].values()) + n
    cell = re.search(r'<td class="sides">(.*?)</td>', _row(client.get("/").text, f"biz-{biz}"), re.S)
    assert cell and f"quarantined on legacy {n}" in cell.group(1)
    page = client.get(f"/business/{biz}").text
    assert f"quarantined on legacy {n}" in page
    # read from the legacy switches when the console can: a quarantined job stopped there is not counted
    stopped = {rows[0]["source_key"]}
    read = _client(state, legacy_live=lambda _source, keys: set(keys) - stopped)
    assert {r["business"]: r for r in read.get("/api/businesses").json()}[biz]["quarantined"] == n - 1


def test_the_boundary_checks_are_on_the_index_and_the_business_page(state: ConsoleState) -> None:
    now = _clock(state).now()
    put_boundary_tally(
        state.env.dual,
        BoundaryTally(
            biz_code=state.cutover,
            switch="cutover",
            switched_at=now - timedelta(minutes=10),
            checked_at=now,
            horizon=now - timedelta(minutes=1),
            checked=57,
            missing=0,
            doubled=3,
        ),
    )
    client = _client(state)
    api = {r["business"]: r for r in client.get("/api/businesses").json()}
    assert [(t["switch"], t["checked"], t["missing"], t["doubled"]) for t in api[state.cutover]["boundary"]] == [
        ("cutover", 57, 0, 3)
    ]
    assert api[state.legacy]["boundary"] == []
    cell = re.search(r'<td class="boundary">(.*?)</td>', _row(client.get("/").text, f"biz-{state.cutover}"), re.S)
    assert cell and "cutover: 57 / 0 / " in cell.group(1) and '<span class="flag">3</span>' in cell.group(1)
    table = re.search(r'<table id="boundary">.*?</table>', client.get(f"/business/{state.cutover}").text, re.S)
    assert table and '<td class="num">57</td>' in table.group(0)


def test_the_audit_shows_the_verdict_and_its_comparison_apart(state: ConsoleState) -> None:
    client = _client(state)
    entries = [a for a in client.get("/api/audit").json() if a["to"] == "cutover"]
    assert entries and all(a["comparison_id"] == 1 for a in entries)
    first = client.get("/api/report/" + state.dual_run).json()  # every comparison of this setup is not ready
    assert first["verdict"] == "not_ready"
    assert all(a["verdict"] == "not_ready" for a in entries)
    html = client.get("/audit").text
    cells = re.findall(r'<td class="verdict">(.*?)</td>\s*<td class="comparison">(.*?)</td>', html, re.S)
    assert ('<span class="v-not_ready">not_ready</span>', "#1") in cells
    assert "<th>verdict</th><th>comparison</th>" in html


def test_the_not_found_page_header_ends_cleanly(state: ConsoleState) -> None:
    page = _client(state).get("/no/such/page")
    assert page.status_code == 404
    assert "read-only ·" not in page.text and '<span class="muted">read-only</span>' in page.text
    assert "read-only · 20" in _client(state).get("/").text  # a page with a time keeps it


def _fired(st: ConsoleState, minutes_ago: list[int]) -> None:
    now = _clock(st).now()
    t = next(iter(st.env.store.triggers_of(biz_code=st.dual_run)))
    st.env.store.put_fired(
        [
            FiredRecord(
                command_id=command_id(stored_id(t), now - timedelta(minutes=m), 0),
                trigger_id=stored_id(t),
                job_code=t.job_code,
                biz_code=t.biz_code,
                scheduled_at=now - timedelta(minutes=m),
                item_index=0,
                item_total=1,
                state=FiredState.SUCCEEDED,
                fired_at=now - timedelta(minutes=m),
                received_at=now - timedelta(minutes=m) + timedelta(milliseconds=40),
            )
            for m in minutes_ago
        ]
    )


def test_the_scheduler_page_has_a_window_control_and_a_chart(state: ConsoleState) -> None:
    _fired(state, [1, 2, 3, 50, 600])
    client = _client(state)
    assert client.get("/api/lag?window=15m").json()["window_s"] == 900
    day = client.get("/api/lag?window=24h").json()
    assert day["window_s"] == 86400 and day["fired"] == 5 and sum(day["per_bucket"]) == 5
    assert len(day["per_bucket"]) == CHART_BUCKETS
    assert client.get("/api/lag?window=3600").json()["window_s"] == 3600  # seconds, as before
    assert client.get("/api/lag?window=soon").status_code == 400
    assert client.get("/scheduler?window=0s").status_code == 400
    page = client.get("/scheduler?window=15m").text
    links = re.findall(r'<a href="/scheduler\?window=(\w+)"( class="on")?>', page)
    assert [w for w, _ in links] == ["15m", "1h", "24h"] and [w for w, on in links if on] == ["15m"]
    chart = re.search(r'<svg id="fired-chart".*?</svg>', page, re.S)
    assert chart and len(re.findall(r"<rect ", chart.group(0))) == CHART_BUCKETS
    assert "3 fired record(s)" in page
    default = client.get("/scheduler").text
    assert [w for w, on in re.findall(r'<a href="/scheduler\?window=(\w+)"( class="on")?>', default) if on] == ["1h"]
    assert "4 fired record(s)" in default


def test_the_admission_lag_is_how_far_admission_is_behind_or_idle(state: ConsoleState, tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = SchedulerMetrics(registry)
    metrics.lookahead_lag.set(-1799.111)  # fires half an hour ahead: all is well
    metrics.admission_lag.labels(partition="p0").set(float("nan"))
    metrics.admission_lag.labels(partition="p1").set(float("nan"))
    client = _client(state, members=registry_members("serve-1", registry))
    member = client.get("/api/scheduler").json()["members"][0]
    assert member["admission_lag_s"] is None and member["admission_idle"] is True
    row = re.search(r'<td class="num admission">(.*?)</td>', client.get("/scheduler").text, re.S)
    assert row and "idle" in row.group(1)
    assert "-1799" not in client.get("/scheduler").text
    metrics.admission_lag.labels(partition="p1").set(12.5)
    member = member_from_text("m", _exposition(registry))
    assert member.admission_lag_s == 12.5 and member.admission_idle is False
    assert "12.500 s" in client.get("/scheduler").text


def _exposition(registry: CollectorRegistry) -> str:
    from prometheus_client import generate_latest

    return generate_latest(registry).decode("utf-8")


def test_the_admission_gauge_says_idle_caught_up_or_behind(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1, batch_size=2)
    core = h.core()
    gauge = core.metrics.admission_lag.labels(partition=core.acquirers[0].partition.name)
    core.tick_all()
    assert math.isnan(gauge._value.get())  # nothing due: idle
    job = h.job("j")
    h.once(job, 5)
    core.tick_all()
    assert gauge._value.get() == 0.0  # all that was due admitted
    for at in (10, 20, 30):
        h.once(job, at)
    core.tick_all()  # a full batch (2 of 3): admission reached T+20 s, not now + lookahead
    lookahead = core.settings.lookahead.total_seconds()
    assert gauge._value.get() == pytest.approx(lookahead - 20, abs=0.01)
    core.drain(10)
    core.shutdown()
