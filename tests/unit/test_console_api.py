"""The console's JSON API and pages (Starlette TestClient) over a store holding businesses
in every state, on the embedded default (SQLite) and on the real MariaDB: the right
states, verdicts with reasons and age, jobs by live side with the orphan flagged, audit,
quarantine, lag, scheduler members; unknown business 404, bad input 400, a store that is
down 503 (never a traceback); 401 without the bearer token; no secret in any answer."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from migrator.business import BusinessRegistry
from migrator.target import TargetWriter
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import FiredRecord, FiredState, command_id
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.cli.console import console_token
from switchyard.console.app import make_app
from switchyard.console.data import Sources, registry_members, scraped_members
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.console_state import ConsoleState, build_state
from tests.harness import stored_id

SECRET_PW = "Pw-SECRET-771"
SECRET_TOKEN = "tok-SECRET-552"


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def state(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ConsoleState]:
    if request.param == "sqlite":
        st = build_state(f"sqlite:///{tmp_path / 'legacy.db'}", f"sqlite:///{tmp_path / 't.db'}")
        yield st
        st.env.legacy.dispose()
        st.env.store.engine.dispose()
        return
    with mariadb_database("clegacy") as legacy, mariadb_database("ctarget") as target:
        st = build_state(legacy, target)
        try:
            yield st
        finally:  # a pooled connection would hold the DROP DATABASE back
            st.env.legacy.dispose()
            st.env.store.engine.dispose()


def _client(st: ConsoleState, **kw: object) -> TestClient:
    return TestClient(make_app(Sources(st.env.store, **kw)))  # type: ignore[arg-type]


def test_businesses_show_their_states_verdicts_and_problems(state: ConsoleState) -> None:
    rows = {r["business"]: r for r in _client(state).get("/api/businesses").json()}
    assert {c: rows[c]["state"] for c in (state.legacy, state.dual_run, state.cutover, state.rolled_back)} == {
        state.legacy: "legacy",
        state.dual_run: "dual_run",
        state.cutover: "cutover",
        state.rolled_back: "legacy",
    }
    assert rows[state.legacy]["verdict"] is None
    for code in (state.dual_run, state.cutover, state.rolled_back):
        v = rows[code]["verdict"]
        assert v["verdict"] == "not_ready" and v["reasons"] and v["age_s"] >= 0 and v["comparison_id"] > 0
    assert {c: r["problems"] for c, r in rows.items()} == {
        state.legacy: 0,
        state.dual_run: 0,
        state.cutover: 1,
        state.rolled_back: 0,
    }
    assert rows[state.dual_run]["sides"]["both"] > 0 and rows[state.cutover]["sides"]["orphaned"] == 1
    page = _client(state).get("/")
    assert page.status_code == 200 and "default-src 'none'" in page.headers["content-security-policy"]
    assert f'id="biz-{state.cutover}" data-state="cutover" class="problem"' in page.text


def test_a_business_lists_its_jobs_by_live_side_with_the_orphan_first(state: ConsoleState) -> None:
    c = _client(state)
    b = c.get(f"/api/businesses/{state.cutover}").json()
    first = b["jobs"][0]
    assert (first["source_key"], first["side"], first["problem"]) == (state.orphan_key, "orphaned", True)
    assert "stopped by the switch" in first["why"]
    others = b["jobs"][1:]
    assert others and all(not j["problem"] for j in others)
    assert all(j["next_fire_at"] and j["next_fire_from"] == "store" for j in others if j["side"] == "new")
    assert first["next_fire_at"] is None  # it fires nowhere
    on_legacy = [j for j in c.get(f"/api/businesses/{state.legacy}").json()["jobs"] if j["side"] == "legacy"]
    now = state.env.store.clock.now().isoformat()
    assert on_legacy and all(j["next_fire_from"] == "schedule" for j in on_legacy)
    assert all(j["next_fire_at"] >= now for j in on_legacy if j["next_fire_at"])
    assert [(a["from"], a["to"], a["actor"]) for a in b["audit"]] == [
        ("dual_run", "cutover", "alice"),
        ("legacy", "dual_run", "ops"),
    ]
    page = c.get(f"/business/{state.cutover}").text
    assert f'id="job-{state.orphan_key}" data-side="orphaned" class="problem"' in page and "ORPHANED" in page
    back = c.get(f"/api/businesses/{state.rolled_back}").json()
    assert back["audit"][0]["to"] == "legacy" and back["audit"][0]["reason"] == "failures on the new path"
    assert back["problems"] == 0


def test_audit_and_quarantine(state: ConsoleState) -> None:
    c = _client(state)
    audit = c.get("/api/audit").json()
    assert len(audit) == len(BusinessRegistry(migrator_store(state.env.store)).audit())
    assert [a["to"] for a in c.get("/api/audit", params={"business": state.rolled_back}).json()] == [
        "legacy",
        "cutover",
        "dual_run",
    ]
    rows = c.get("/api/quarantine").json()
    stored = TargetWriter(state.env.store, migrator_store(state.env.store)).quarantined()
    assert len(rows) == len(stored) > 0 and all(r["field"] and r["reason"] for r in rows)
    assert '<table id="quarantine">' in c.get("/quarantine").text


def test_the_full_report_is_rendered_on_demand(state: ConsoleState) -> None:
    c = _client(state)
    page = c.get(f"/report/{state.dual_run}")
    assert page.status_code == 200 and 'id="verdict"' in page.text and "NOT READY" in page.text
    body = c.get(f"/api/report/{state.dual_run}").json()
    assert body["business"] == state.dual_run and body["verdict"] == "not_ready" and body["reasons"]
    missing = c.get(f"/report/{state.legacy}")
    assert missing.status_code == 404 and "dualrun compare" in missing.text


def test_bad_input_gets_a_clear_page_and_status(state: ConsoleState) -> None:
    c = _client(state)
    for path in ("/business/no-such-biz", "/report/no-such-biz"):
        r = c.get(path)
        assert r.status_code == 404 and "no-such-biz" in r.text and "Traceback" not in r.text
    r = c.get("/api/businesses/no-such-biz")
    assert r.status_code == 404 and r.json()["error"] == "Unknown business"
    r = c.get("/api/lag", params={"window": "an hour"})
    assert r.status_code == 400 and "window" in r.json()["message"]
    assert c.get("/api/nothing-here").status_code == 404
    for path in ("/", "/api/businesses", f"/api/businesses/{state.cutover}", "/api/jobs"):  # read-only: no write
        for r in (c.post(path), c.delete(path)):
            assert r.status_code == 403 and "Read-only console" in r.text, path
    assert c.get("/nothing-here").status_code == 404


def test_lag_percentiles_per_business(state: ConsoleState) -> None:
    store = state.env.store
    now = store.clock.now()
    t = store.triggers_of(biz_code=state.dual_run)[0]
    recs = [
        FiredRecord(
            command_id=command_id(stored_id(t), now - timedelta(minutes=m), 0),
            trigger_id=stored_id(t),
            job_code=t.job_code,
            biz_code=state.dual_run,
            scheduled_at=now - timedelta(minutes=m),
            state=FiredState.SUCCEEDED,
            received_at=now - timedelta(minutes=m) + timedelta(milliseconds=lag),
            started_at=now - timedelta(minutes=m) + timedelta(milliseconds=lag + 5),
        )
        for m, lag in ((1, 10), (2, 20), (3, 30), (4, 40), (90, 9000))
    ]
    store.put_fired(recs)
    c = _client(state)
    d = {x["biz_code"]: x for x in c.get("/api/lag").json()["businesses"]}[state.dual_run]
    assert d["commands"] == 4  # the one 90 minutes back is outside the hour
    assert d["received_lag_s"]["p50"] == pytest.approx(0.02) and d["received_lag_s"]["max"] == pytest.approx(0.04)
    wide = {x["biz_code"]: x for x in c.get("/api/lag", params={"window": "7200"}).json()["businesses"]}[state.dual_run]
    assert wide["received_lag_s"]["max"] == pytest.approx(9.0)
    assert state.dual_run in c.get("/scheduler").text


def test_the_store_down_is_a_503_without_the_password(state: ConsoleState, caplog: pytest.LogCaptureFixture) -> None:
    # the console started while the store answered; now its server is gone (nothing listens on port 1)
    store = state.env.store
    store.engine = make_engine(f"mysql+pymysql://sched:{SECRET_PW}@127.0.0.1:1/switchyard")
    c = TestClient(make_app(Sources(store)))
    with caplog.at_level(logging.INFO):
        for path in ("/", "/api/businesses", "/scheduler", "/api/audit"):
            r = c.get(path)
            assert r.status_code == 503, (path, r.text)
            assert "cannot be read" in r.text and SECRET_PW not in r.text and "Traceback" not in r.text
    assert caplog.records and SECRET_PW not in caplog.text


def test_no_secret_reaches_a_page_or_the_api(state: ConsoleState) -> None:
    BusinessRegistry(migrator_store(state.env.store)).note(
        state.cutover,
        actor="ops",
        reason=f"paused: token={SECRET_TOKEN}",
        detail={"url": f"mysql+pymysql://app:{SECRET_PW}@127.0.0.1:13306/legacy", "auth": f"Bearer {SECRET_TOKEN}"},
    )
    c = _client(state)
    for path in ("/", f"/business/{state.cutover}", "/audit", "/api/audit", f"/api/businesses/{state.cutover}"):
        text = c.get(path).text
        assert SECRET_PW not in text and SECRET_TOKEN not in text, path
    assert "token=***" in c.get("/audit").text


def test_a_request_without_the_bearer_token_gets_401(state: ConsoleState) -> None:
    c = TestClient(make_app(Sources(state.env.store), token=SECRET_TOKEN))
    for path in ("/", "/api/businesses", f"/business/{state.cutover}", "/nothing-here"):
        r = c.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), path
        # nothing of the store: the page is the login form, which only names the page asked for (to go back)
        assert state.cutover not in r.text.replace(f"next={path}", "")
    assert c.get("/api/businesses", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert c.get("/api/businesses", headers={"Authorization": SECRET_TOKEN}).status_code == 401
    ok = c.get("/api/businesses", headers={"Authorization": f"Bearer {SECRET_TOKEN}"})
    assert ok.status_code == 200 and {r["business"] for r in ok.json()} >= {state.cutover}


def test_beyond_loopback_the_token_is_required_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SWITCHYARD_CONSOLE_TOKEN", raising=False)
    assert console_token("127.0.0.1", "SWITCHYARD_CONSOLE_TOKEN") is None
    res = CliRunner().invoke(cli, ["console", "--bind", "0.0.0.0", "--url", "sqlite:///nowhere.db"])
    assert res.exit_code == 2 and "SWITCHYARD_CONSOLE_TOKEN" in res.output
    monkeypatch.setenv("SWITCHYARD_CONSOLE_TOKEN", SECRET_TOKEN)
    assert console_token("0.0.0.0", "SWITCHYARD_CONSOLE_TOKEN") == SECRET_TOKEN
    opts = {o for p in cli.commands["console"].params for o in p.opts}  # type: ignore[attr-defined]
    assert "--token-env" in opts and "--token" not in opts  # the token itself never on the command line


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_real_server_needs_the_token_and_logs_no_secret(tmp_path: Path) -> None:
    st = build_state(f"sqlite:///{tmp_path / 'legacy.db'}", f"sqlite:///{tmp_path / 't.db'}")
    st.env.store.engine.dispose()
    port = _free_port()
    env = {"SWITCHYARD_CONSOLE_TOKEN": SECRET_TOKEN, "PATH": "/usr/bin:/bin"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "switchyard", "console", "--url", f"sqlite:///{tmp_path / 't.db'}", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        status = None
        while time.monotonic() < deadline and status is None:
            try:
                urllib.request.urlopen(base + "/api/businesses", timeout=2)
                status = 200
            except urllib.error.HTTPError as exc:
                status = exc.code
            except OSError:
                time.sleep(0.2)
        assert status == 401
        req = urllib.request.Request(base + "/api/businesses", headers={"Authorization": f"Bearer {SECRET_TOKEN}"})
        with urllib.request.urlopen(req, timeout=5) as resp:
            assert {r["business"] for r in json.loads(resp.read())} >= {st.cutover}
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "bearer token required" in out and SECRET_TOKEN not in out and "Traceback" not in out


def test_scheduler_members_leader_and_lookahead_lag(state: ConsoleState) -> None:
    metrics = SchedulerMetrics()
    metrics.leader.set(1)
    metrics.lookahead_lag.set(-0.25)
    metrics.published.labels(biz_code="x").inc(7)
    body = _client(state, members=registry_members("serve-1", metrics.registry)).get("/api/scheduler").json()
    assert body["leader"] == "serve-1" and body["members"][0]["lookahead_lag_s"] == pytest.approx(-0.25)
    assert body["members"][0]["commands_published"] == 7 and body["waiting_triggers"] > 0
    follower = SchedulerMetrics()
    port = _free_port()
    follower.serve(port)
    dead = _free_port()
    members = scraped_members([f"http://127.0.0.1:{port}/", f"http://127.0.0.1:{dead}/"])
    body = _client(state, members=members).get("/api/scheduler").json()
    assert [(m["reachable"], m["leader"]) for m in body["members"]] == [(True, False), (False, None)]
    assert body["leader"] is None and body["members"][1]["error"]
    assert 'class="flag">none' in _client(state, members=members).get("/scheduler").text


def test_a_hostile_business_code_is_shown_as_data(state: ConsoleState) -> None:
    hostile = "h'q\";--/*x*/<script>alert(1)</script>"
    BusinessRegistry(migrator_store(state.env.store)).ensure(hostile, "xxl-job")
    c = _client(state)
    from urllib.parse import quote

    body = c.get("/api/businesses/" + quote(hostile, safe="")).json()
    assert body["business"] == hostile and body["jobs"] == []
    page = c.get("/business/" + quote(hostile, safe=""))
    assert page.status_code == 200 and "<script>alert(1)</script>" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    index = c.get("/").text
    assert "<script>" not in index and 'href="/business/' + quote(hostile, safe="") + '"' in index


def test_a_frozen_business_is_shown_frozen_with_who_and_why(state: ConsoleState) -> None:
    """Issue 27: a freeze (its own, or of everything) shows on the list, the business page
    and its API."""
    from scheduler_core.stops import ALL_KEY, Cause, Scope, StopService
    from scheduler_core.store.stops import SqlStops

    stops = StopService(SqlStops(state.env.store))
    stops.stop(Scope.BUSINESS, state.cutover, state.env.store.clock.now(), Cause.FREEZE, "ana", "incident 12")
    c = _client(state)
    rows = {r["business"]: r for r in c.get("/api/businesses").json()}
    assert "by ana: incident 12" in rows[state.cutover]["frozen"]
    assert rows[state.legacy]["frozen"] is None
    assert "frozen" in c.get(f"/business/{state.cutover}").text
    stops.stop(Scope.ALL, ALL_KEY, state.env.store.clock.now(), Cause.FREEZE, "ana", "everything")
    rows = {r["business"]: r for r in c.get("/api/businesses").json()}
    assert rows[state.legacy]["frozen"].startswith("everything frozen")
