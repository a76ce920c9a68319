"""Issue 29 in the console: /lanes and /api/lanes per lane and business (the lookahead in
use and the lookahead lag from the scheduler's metrics, red when negative; the forecast,
the fire-time lag percentiles and the published-not-yet-due backlog from the store), on a
real scheduler core with the adaptive lookahead (SQLite, in-process bus); the job's lane in
the job list and on its page. MariaDB with a running scheduler: tests/integration/test_console_lanes_real.py."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from migrator.business import BusinessRegistry
from scheduler_core.clock import ManualClock
from scheduler_core.model import FiredRecord, FiredState, Lane, command_id
from switchyard.console.app import make_app
from switchyard.console.data import Sources, registry_members
from switchyard.wiring import migrator_store
from tests.harness import Harness, make_harness, stored_id


def _scene(h: Harness) -> dict[str, object]:
    """small (default lane): one run due in 60 s (inside the 2-minute quiet window: admitted
    and published ahead), one in 4 min (forecast); sop (burst lane): 10 due in 10 min; four
    past runs of small with receipt lags 10..40 ms."""
    for biz in ("small", "sop"):
        BusinessRegistry(migrator_store(h.store)).register_native(biz, actor="test", reason="lanes page")
    small = h.job("small-report", biz="small")
    sop = h.job("sop-fanout", biz="sop", lane=Lane.BURST)
    soon = h.once(small, 60)
    h.once(small, 240)
    for _ in range(10):
        h.once(sop, 600, lane=Lane.BURST)
    now = h.clock.now()
    h.store.put_fired(
        [
            FiredRecord(
                command_id=command_id(stored_id(soon), now - timedelta(minutes=m), 0),
                trigger_id=stored_id(soon),
                job_code=small.job_code,
                biz_code="small",
                scheduled_at=now - timedelta(minutes=m),
                state=FiredState.SUCCEEDED,
                received_at=now - timedelta(minutes=m) + timedelta(milliseconds=10 * m),
            )
            for m in (1, 2, 3, 4)
        ]
    )
    return {"small": small, "sop": sop}


@pytest.fixture
def h(tmp_path: Path, clock: ManualClock) -> Harness:
    return make_harness(tmp_path, clock, partitions=1, adaptive_lookahead=True)


def test_lanes_per_lane_and_business(h: Harness) -> None:
    _scene(h)
    core = h.core(adaptive_lookahead=True)
    core.tick_all()
    assert core.drain()
    src = Sources(h.store, members=registry_members("serve-1", core.metrics.registry))
    c = TestClient(make_app(src))
    body = c.get("/api/lanes", params={"window": "15m"}).json()
    assert body["gauges_from"] == "serve-1" and body["window_s"] == 900
    rows = {(r["lane"], r["business"]): r for r in body["rows"]}
    assert set(rows) == {("default", "small"), ("burst", "sop")}
    small, sop = rows["default", "small"], rows["burst", "sop"]
    # the window each lane uses, from the scheduler's gauges: quiet, its lookahead_min
    assert small["lookahead_s"] == sop["lookahead_s"] == 120
    # the store: the run due in 60 s was admitted (published ahead), the one in 4 min waits
    assert small["backlog"] == 1 and small["forecast"] == {"1m": 0, "5m": 1, "15m": 1, "60m": 1}
    assert sop["backlog"] == 0 and sop["forecast"] == {"1m": 0, "5m": 0, "15m": 10, "60m": 10}
    assert small["fired"] == 4 and small["lag_s"] == {"p50": 0.02, "p95": 0.04, "p99": 0.04}
    assert sop["fired"] == 0 and sop["lag_s"]["p99"] is None
    lanes = {x["lane"]: x for x in body["lanes"]}
    assert lanes["default"]["lookahead_lag_s"] == 120 and not lanes["default"]["behind"]
    assert lanes["burst"]["forecast"]["15m"] == 10 and lanes["bulk"]["businesses"] == 0
    page = c.get("/lanes")
    assert page.status_code == 200 and 'id="lane-default-small"' in page.text
    assert 'class="flag"' not in page.text.split('id="lanes"')[1]

    # admission behind now in a lane: its lookahead lag negative, the lane's row red
    core.metrics.lane_lookahead_lag.labels(lane="bulk").set(-3.5)
    body = c.get("/api/lanes").json()
    assert {x["lane"]: x["behind"] for x in body["lanes"]} == {"burst": False, "default": False, "bulk": True}
    html = c.get("/lanes").text
    assert '<tr id="lane-bulk" class="problem">' in html and '<span class="flag">-3.500 s</span>' in html


def test_lanes_without_scheduler_metrics_say_so(h: Harness) -> None:
    _scene(h)
    c = TestClient(make_app(Sources(h.store)))
    body = c.get("/api/lanes").json()
    assert body["gauges_from"] is None and not body["members_known"]
    assert all(r["lookahead_s"] is None for r in body["rows"])
    assert {(r["lane"], r["business"]) for r in body["rows"]} == {("default", "small"), ("burst", "sop")}
    assert "--scheduler-metrics URL" in c.get("/lanes").text
    assert c.get("/api/lanes", params={"window": "soon"}).status_code == 400


def test_the_job_list_and_page_show_the_lane(h: Harness) -> None:
    _scene(h)
    c = TestClient(make_app(Sources(h.store)))
    jobs = {j["job"]: j["lane"] for j in c.get("/api/jobs").json()["jobs"]}
    assert jobs == {"small-report": "default", "sop-fanout": "burst"}
    assert '<td class="lane">burst</td>' in c.get("/jobs").text
    assert '<td id="lane">burst</td>' in c.get("/jobs/sop-fanout").text
