"""The console's run log (issue 28) over the Starlette app (httpx TestClient), on SQLite and
the real MariaDB: pages newest first by keyset, every run once across the pages; filters
by business, job, state and window; a run's detail with its handler's log lines; per
business the daily charts as data-URI images and their data as JSON; bad input 400, an
unknown run 404."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import unquote

import pytest
from starlette.testclient import TestClient

from scheduler_core.clock import ManualClock
from scheduler_core.model import FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import FiredUpdate
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.console.app import make_app
from switchyard.console.data import Sources
from tests.backends import sql_store

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
RESULTS = [FiredState.SUCCEEDED, FiredState.SUCCEEDED, FiredState.FAILED, FiredState.TIMED_OUT, FiredState.PENDING]


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SqlTriggerStore]:
    with sql_store(request.param, tmp_path, ManualClock(NOW)) as s:
        yield s


def _fill(store: SqlTriggerStore) -> list[FiredRecord]:
    recs = []
    for i in range(130):
        # three runs per scheduled second (a page boundary falls inside such a group), over 3 days
        at = NOW - timedelta(hours=i // 3) - timedelta(seconds=1)
        state = RESULTS[i % len(RESULTS)]
        recs.append(
            FiredRecord(
                command_id=command_id(1000 + i, at, 0),
                trigger_id=TriggerId(1000 + i),
                job_code=JobCode(f"job{i % 4}"),
                biz_code="billing" if i % 2 else "mail",
                scheduled_at=at,
                state=state,
                started_at=at + timedelta(milliseconds=10 + i) if state.is_final else None,
                result_at=at + timedelta(seconds=1) if state.is_final else None,
                message="boom <b>" if state is FiredState.FAILED else "",
            )
        )
    store.put_fired(recs)
    return recs


def _newest_first(recs: list[FiredRecord]) -> list[str]:
    return [r.command_id for r in sorted(recs, key=lambda r: (r.scheduled_at, r.command_id), reverse=True)]


def test_the_api_pages_by_keyset_and_filters(store: SqlTriggerStore) -> None:
    recs = _fill(store)
    client = TestClient(make_app(Sources(store)))
    got: list[str] = []
    params: dict[str, str] = {"window": "7d", "limit": "50"}
    for _ in range(10):  # bounded: 130 rows at 50 a page
        body = client.get("/api/runs", params=params).json()
        got += [r["id"] for r in body["runs"]]
        if body["next"] is None:
            break
        params["before"] = body["next"]
    assert got == _newest_first(recs)

    body = client.get("/api/runs", params={"business": "billing", "state": ["failed", "timed_out"], "window": "7d"})
    want = [r for r in recs if r.biz_code == "billing" and r.state in (FiredState.FAILED, FiredState.TIMED_OUT)]
    assert [r["id"] for r in body.json()["runs"]] == _newest_first(want)
    assert {r["result"] for r in body.json()["runs"]} <= {"failed", "timed_out"}

    body = client.get("/api/runs", params={"job": "job1", "window": "24h"}).json()
    want = [r for r in recs if r.job_code == "job1" and r.scheduled_at >= NOW - timedelta(hours=24)]
    assert [r["id"] for r in body["runs"]] == _newest_first(want) and want
    one = body["runs"][0]
    assert one["lag_ms"] is not None and one["lag_ms"] >= 10 and one["business"] == "billing"

    for bad, says in (
        ({"state": "lost"}, "state"),
        ({"before": "nonsense"}, "before"),
        ({"window": "forever"}, "window"),
        ({"limit": "0"}, "limit"),
    ):
        r = client.get("/api/runs", params=bad)
        assert r.status_code == 400 and says in r.json()["message"], (bad, r.text)


def test_pages_detail_with_log_lines_and_charts(store: SqlTriggerStore) -> None:
    recs = _fill(store)
    failed = next(r for r in recs if r.state is FiredState.FAILED)
    store.update_fired(
        [
            FiredUpdate(
                failed.command_id,
                FiredState.FAILED,
                failed.scheduled_at,
                logs=((0, "INFO handler.job step one <script>", False), (1, "second try", True)),
            )
        ]
    )
    client = TestClient(make_app(Sources(store)))
    page = client.get("/runs", params={"window": "7d"})
    assert page.status_code == 200 and 'href="/runs"' in page.text
    assert page.text.count('<tr class="run') == 50
    older = re.search(r'id="older" href="([^"]+)"', page.text)
    assert older is not None
    second = client.get(unquote(older.group(1)).replace("&amp;", "&"))
    assert second.status_code == 200 and second.text.count('<tr class="run') == 50
    assert "boom &lt;b&gt;" in page.text  # escaped

    detail = client.get(f"/runs/{failed.command_id}")
    assert detail.status_code == 200
    assert "step one &lt;script&gt;" in detail.text and "second try" in detail.text and "truncated" in detail.text
    api = client.get(f"/api/runs/{failed.command_id}").json()
    assert [(x["attempt"], x["truncated"]) for x in api["logs"]] == [(0, False), (1, True)]
    assert api["run"]["result"] == "failed"
    assert client.get("/runs/1-2-3").status_code == 404
    assert client.get("/api/runs/1-2-3").json()["status"] == 404

    charted = client.get("/runs", params={"business": "billing", "window": "7d"})
    imgs = re.findall(r'<img id="chart-(\w+)"[^>]* src="data:image/png;base64,', charted.text)
    assert imgs == ["results", "lag"]
    days = client.get("/api/runs/daily", params={"business": "billing", "days": "7"}).json()
    billing = [r for r in recs if r.biz_code == "billing"]
    assert sum(d["runs"] for d in days) == len(billing)
    assert sum(d["by_result"].get("failed", 0) for d in days) == sum(r.state is FiredState.FAILED for r in billing)
    assert all(d["lag_ms"]["p50"] is not None for d in days)
    assert client.get("/api/runs/daily").status_code == 400
