"""Issue 28, the console as the admin (Starlette TestClient on SQLite): tokens with roles,
the login session and its CSRF token, the job pages and API through `switchyard.jobs`,
every write audited with who, before and after.

401 without credentials, 403 for a viewer writing, for a read-only console and for a
form without (or with a wrong) CSRF token; each job form path incl. its validation
errors naming the field."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from migrator.business import BusinessRegistry
from scheduler_core.cron import CronExpression
from scheduler_core.model import JobCode, TriggerKind, TriggerState
from switchyard.cli import cli
from switchyard.console.app import make_app
from switchyard.console.auth import COOKIE, Authority, Role, Token, TokenError, parse_tokens, tokens_from_file
from switchyard.console.data import Sources
from switchyard.wiring import migrator_store, open_existing_store

ADMIN = "adm-token-0123456789abcdef"
OPER = "op-token-0123456789abcdefg"
VIEW = "view-token-0123456789abcd"
TOKENS = [
    Token("alice", Role.ADMIN, ADMIN.encode()),
    Token("oscar", Role.OPERATOR, OPER.encode()),
    Token("vera", Role.VIEWER, VIEW.encode()),
]


@pytest.fixture
def store_url(tmp_path: Path) -> Iterator[str]:
    u = f"sqlite:///{tmp_path / 'center.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", u]).exit_code == 0
    yield u


@pytest.fixture
def src(store_url: str) -> Iterator[Sources]:
    store = open_existing_store(store_url)
    yield Sources(store)
    store.engine.dispose()


def client(src: Sources, writes: bool = True, tokens: list[Token] | None = None) -> TestClient:
    return TestClient(make_app(src, tokens=TOKENS if tokens is None else tokens, writes=writes))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def login_form(c: TestClient) -> dict[str, str]:
    """The login form's CSRF field, as its page gives it (with its nonce cookie)."""
    m = re.search(r'name="csrf" value="([^"]+)"', c.get("/login").text)
    assert m, "the login form carries its CSRF token"
    return {"csrf": m.group(1)}


def login(c: TestClient, token: str) -> str:
    """Log in through the form; the CSRF token of the session (read from a page's form)."""
    r = c.post("/login", data={"token": token, **login_form(c)}, follow_redirects=False)
    assert r.status_code == 303, r.text
    cookie = r.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    page = c.get("/jobs")
    assert page.status_code == 200
    m = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert m, "the logout form carries the session's CSRF token"
    return m.group(1)


FORM: dict[str, str] = {
    "business": "billing",
    "job": "invoice",
    "handler": "invoice_handler",
    "params": "p=1",
    "kind": "cron",
    "cron": "0 0/5 * * * ?",
    "zone": "Asia/Shanghai",
    "dialect": "2.5",
    "misfire": "fire_once_now",
    "shards": "1",
    "timeout": "30s",
    "retries": "0",
    "priority": "5",
}


def audit_rows(src: Sources, action: str) -> list[Any]:
    return [e for e in BusinessRegistry(migrator_store(src.store)).audit() if e.detail.get("action") == action]


# -- tokens ------------------------------------------------------------------------------


def test_tokens_from_the_environment_form_and_a_file(tmp_path: Path) -> None:
    got = parse_tokens(f"alice:admin:{ADMIN}, vera:viewer:{VIEW}")
    assert [(t.name, t.role) for t in got] == [("alice", Role.ADMIN), ("vera", Role.VIEWER)]
    for bad, why in (
        (f"alice:root:{ADMIN}", "unknown role"),
        ("alice:admin:short", "shorter than"),
        (f"alice:admin:{ADMIN},alice:viewer:{VIEW}", "given twice"),
        (f"alice:admin:{ADMIN},bob:viewer:{ADMIN}", "share one token"),
        ("alice-admin", "not name:role:token"),
    ):
        with pytest.raises(TokenError, match=why):
            parse_tokens(bad)
    f = tmp_path / "tokens"
    f.write_text(f"# who role token\nalice admin {ADMIN}\n\noscar operator {OPER}\n")
    os.chmod(f, 0o644)
    with pytest.raises(TokenError, match="readable by others"):
        tokens_from_file(f)
    os.chmod(f, stat.S_IRUSR | stat.S_IWUSR)
    assert [t.name for t in tokens_from_file(f)] == ["alice", "oscar"]
    f.write_text("alice admin\n")
    with pytest.raises(TokenError, match="line 1"):
        tokens_from_file(f)


def test_the_cli_takes_tokens_only_from_the_environment_or_a_file(store_url: str, tmp_path: Path) -> None:
    opts = {o for p in cli.commands["console"].params for o in p.opts}  # type: ignore[attr-defined]
    assert "--tokens-file" in opts and "--writes" in opts and "--tokens" not in opts and "--token" not in opts
    res = CliRunner().invoke(cli, ["console", "--url", store_url, "--writes"], env={"SWITCHYARD_CONSOLE_TOKENS": ""})
    assert res.exit_code == 2 and "--writes needs role tokens" in res.output
    f = tmp_path / "tokens"
    f.write_text(f"alice admin {ADMIN}\n")
    os.chmod(f, 0o640)
    res = CliRunner().invoke(cli, ["console", "--url", store_url, "--writes", "--tokens-file", str(f)])
    assert res.exit_code == 2 and "readable by others" in res.output


def test_a_session_cookie_is_signed_bound_to_its_token_and_expires() -> None:
    auth = Authority(TOKENS)
    me = auth.bearer(ADMIN.encode())
    assert me is not None and me.name == "alice" and me.role is Role.ADMIN
    cookie = auth.session_cookie(me)
    back = auth.session(cookie)
    assert back is not None and back.name == "alice" and back.via == "cookie" and back.session
    body, _, sig = cookie.partition(".")
    assert auth.session(body + "." + sig[:-2] + ("AA" if sig[-2:] != "AA" else "BB")) is None  # forged
    assert Authority(TOKENS).session(cookie) is None  # another process's key
    # the token changed: its sessions end
    assert Authority([Token("alice", Role.ADMIN, b"another-token-0123456789")], key=auth.key).session(cookie) is None
    assert (
        Authority(TOKENS, key=auth.key, ttl_s=-1).session(Authority(TOKENS, key=auth.key, ttl_s=-1).session_cookie(me))
        is None
    )
    assert auth.csrf(back) and auth.csrf_ok(back, auth.csrf(back)) and not auth.csrf_ok(back, "x" + auth.csrf(back))


# -- 401 / 403 / CSRF --------------------------------------------------------------------


def test_without_credentials_401_and_the_login_form(src: Sources) -> None:
    c = client(src)
    for path in ("/api/jobs", "/api/businesses", "/api/jobs/x"):
        r = c.get(path)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer"), path
    page = c.get("/jobs")
    assert page.status_code == 401 and 'id="login"' in page.text
    assert c.post("/api/jobs", json={"job": "x"}).status_code == 401
    assert c.get("/api/jobs", headers=bearer("not-a-token-0123456789")).status_code == 401
    bad = c.post("/login", data={"token": "wrong-token-0123456789", **login_form(c)}, follow_redirects=False)
    assert bad.status_code == 401 and COOKIE not in bad.headers.get("set-cookie", "")
    assert c.get("/api/jobs", headers=bearer(VIEW)).status_code == 200


def test_wrong_tokens_at_the_login_form_are_throttled(src: Sources) -> None:
    c = client(src)
    form = login_form(c)
    for _ in range(10):
        assert c.post("/login", data={"token": "wrong-token-0123456789", **form}).status_code == 401
    # the eleventh try within the minute is refused before its token is even compared
    r = c.post("/login", data={"token": ADMIN, **form}, follow_redirects=False)
    assert r.status_code == 429 and "Too many" in r.text and COOKIE not in r.headers.get("set-cookie", "")
    assert c.get("/api/jobs", headers=bearer(ADMIN)).status_code == 200  # a script's bearer is not a login


def test_a_cross_site_login_post_is_refused(src: Sources) -> None:
    """Login CSRF: another site's page posting its own token to /login (to have the browser
    work under the attacker's name) sends no login cookie of ours and cannot read the
    form's field: refused 403, no session, before the token is looked at."""
    attacker = client(src)
    stolen = login_form(attacker)  # a field from the attacker's own visit, with the attacker's cookie
    victim = client(src)
    for data in ({"token": ADMIN}, {"token": ADMIN, **stolen}, {"token": ADMIN, "csrf": "made-up"}):
        r = victim.post("/login", data=data, follow_redirects=False, headers={"Origin": "https://evil.example"})
        assert r.status_code == 403, (data, r.status_code)
        assert "stale or not this console" in r.text and COOKIE not in r.headers.get("set-cookie", "")
    assert victim.get("/api/jobs").status_code == 401  # not logged in
    # the victim's own form (its cookie and its field) logs in; the throttle counted none of the above
    login(victim, ADMIN)
    assert victim.get("/api/jobs").status_code == 200


def test_a_viewer_reads_and_an_operator_cannot_edit(src: Sources) -> None:
    c = client(src)
    assert c.post("/api/jobs", json=FORM, headers=bearer(ADMIN)).status_code == 201
    r = c.post("/api/jobs", json={**FORM, "job": "other"}, headers=bearer(VIEW))
    assert r.status_code == 403 and "viewer" in r.json()["message"]
    assert c.post("/api/jobs/invoice/stop", headers=bearer(VIEW)).status_code == 403
    assert c.get("/api/jobs/invoice", headers=bearer(VIEW)).json()["state"] == "running"
    # an operator stops and starts, but does not create, edit or delete
    assert c.post("/api/jobs", json={**FORM, "job": "other"}, headers=bearer(OPER)).status_code == 403
    assert c.post("/api/jobs/invoice", json={"cron": "0 0 * * * ?"}, headers=bearer(OPER)).status_code == 403
    assert c.delete("/api/jobs/invoice", headers=bearer(OPER)).status_code == 403
    assert c.post("/api/jobs/invoice/stop", headers=bearer(OPER)).status_code == 200
    assert c.get("/api/jobs/invoice", headers=bearer(VIEW)).json()["state"] == "stopped"
    assert c.post("/api/jobs/invoice/start", headers=bearer(OPER)).status_code == 200
    assert src.store.get_job(JobCode("other")) is None


def test_a_read_only_console_serves_no_writes_whatever_the_role(src: Sources) -> None:
    c = client(src, writes=False)
    r = c.post("/api/jobs", json=FORM, headers=bearer(ADMIN))
    assert r.status_code == 403 and "--writes" in r.json()["message"]
    assert src.store.get_job(JobCode("invoice")) is None
    login(c, ADMIN)
    assert "New job" not in c.get("/jobs").text
    # and without tokens the console reads as before, open, and writes nothing
    open_c = TestClient(make_app(src))
    assert open_c.get("/api/jobs").status_code == 200
    assert open_c.post("/api/jobs", json=FORM).status_code == 403
    with pytest.raises(ValueError, match="needs tokens"):
        make_app(src, writes=True)


def test_a_form_without_or_with_a_wrong_csrf_token_is_refused(src: Sources) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    for given in ({}, {"csrf": "wrong"}, {"csrf": csrf + "x"}):
        r = c.post("/jobs/new", data={**FORM, "action": "save", **given})
        assert r.status_code == 403 and "CSRF" in r.text, given
    # a cookie-authenticated API write needs it too (header), a bearer one does not
    assert c.post("/api/jobs", json=FORM).status_code == 403
    assert src.store.get_job(JobCode("invoice")) is None
    ok = c.post("/api/jobs", json=FORM, headers={"X-CSRF-Token": csrf})
    assert ok.status_code == 201, ok.text
    # another session's token is not this one's
    other = client(src)
    other_csrf = login(other, ADMIN)
    assert other_csrf != csrf
    assert c.post("/jobs/invoice", data={"action": "stop", "csrf": other_csrf}).status_code == 403
    # logging out needs it as well, and ends the session
    assert c.post("/logout", data={}).status_code == 403
    out = c.post("/logout", data={"csrf": csrf}, follow_redirects=False)
    assert out.status_code == 303 and COOKIE in out.headers["set-cookie"]
    assert c.get("/api/jobs").status_code == 401


# -- the job forms -----------------------------------------------------------------------


def test_create_a_job_by_the_form_with_its_cron_previewed_and_audited(src: Sources) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    assert c.get("/jobs/new").status_code == 200
    before = datetime.now(UTC)
    shown = c.post("/jobs/new", data={**FORM, "action": "preview", "csrf": csrf})
    assert shown.status_code == 200
    times = re.findall(r"<li>([^<]+)</li>", shown.text.split('id="preview-times"')[1].split("</ol>")[0])
    cron = CronExpression("0 0/5 * * * ?", "Asia/Shanghai")
    want, at = [], before
    for _ in range(5):
        nxt = cron.next_after(at)
        assert nxt is not None
        want.append(nxt)
        at = nxt
    assert [datetime.fromisoformat(t) for t in times] == want
    assert all(t.endswith("+08:00") for t in times)  # in the job's zone
    assert src.store.get_job(JobCode("invoice")) is None  # a preview writes nothing
    r = c.post("/jobs/new", data={**FORM, "action": "save", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/jobs/invoice?done=created"
    page = c.get("/jobs/invoice?done=created")
    assert "Created." in page.text and 'data-state="running"' in page.text and "0 0/5 * * * ?" in page.text
    (row,) = audit_rows(src, "job add")
    assert row.actor == "alice" and row.detail["before"] is None and row.detail["after"]["job"] == "invoice"
    audit = c.get("/audit")
    assert "job add" in audit.text and "alice" in audit.text and "invoice_handler" in audit.text


@pytest.mark.parametrize(
    ("changes", "field", "text"),
    [
        ({"cron": "0 61 * * * ?"}, "cron", "cron:"),
        ({"zone": "Mars/Olympus"}, "zone", "unknown time zone"),
        ({"handler": ""}, "handler", "must not be empty"),
        ({"job": "has space"}, "job", "white space"),
        ({"kind": "every", "every": "0s"}, "every", "at least 1 s"),
        ({"kind": "every", "every": "soon"}, "every", "every:"),
        ({"kind": "once", "at": "2001-01-01T00:00:00+00:00"}, "at", "in the past"),
        ({"shards": "0"}, "shards", "at least 1"),
        ({"shards": "two"}, "shards", "not a whole number"),
        ({"retries": "-1"}, "retries", "0 or more"),
        ({"priority": "10"}, "priority", "1..9"),
        ({"timeout": "-5s"}, "timeout", "timeout"),
        ({"children": "nosuchjob"}, "children", "no such job"),
        ({"shards": "3", "items": "a\nb"}, "items", "2 item parameters for 3 shards"),
        ({"lane": "fast"}, "lane", "unknown lane"),
        ({"block": "serial_execution"}, "block", "unknown block strategy"),
        ({"alerts": "webhook:ftp://x"}, "alerts", "http:// or https://"),
        ({"alerts": "mail:ops@example.com", "alert_on": "failure, lateness"}, "alerts", "unknown alert kind"),
    ],
)
def test_a_bad_field_is_named_on_the_form_and_nothing_is_written(
    src: Sources, changes: dict[str, str], field: str, text: str
) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    r = c.post("/jobs/new", data={**FORM, **changes, "action": "save", "csrf": csrf})
    assert r.status_code == 400, r.text
    m = re.search(rf'id="error-{field}">([^<]*)<', r.text)
    assert m and text in m.group(1), r.text[:3000]
    assert 'class="row field-error" id="row-' + field + '"' in r.text
    assert "Traceback" not in r.text
    assert SqlJobs(src) == []
    # the API names the field too
    api = c.post("/api/jobs", json={**FORM, **changes}, headers=bearer(ADMIN))
    assert api.status_code == 400 and text in api.json()["message"]


def test_the_form_sets_a_jobs_lane_and_alerts_and_an_edit_keeps_what_it_leaves(src: Sources) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    form = {**FORM, "lane": "burst", "alerts": "webhook:http://127.0.0.1:9/hook\nmail:ops@example.com"}
    form["alert_on"] = "failure, missed"
    r = c.post("/jobs/new", data={**form, "action": "save", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    shown = c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()
    assert shown["lane"] == "burst"
    assert shown["alerts"] == {
        "targets": ["webhook:http://127.0.0.1:9/hook", "mail:ops@example.com"],
        "on": ["failure", "missed"],
    }
    page = c.get("/jobs/invoice").text
    assert "<option selected>burst</option>" in page and "mail:ops@example.com" in page
    # an edit of another field, the lane left on "(business default)", keeps the job's lane and alerts
    edit = {**form, "lane": "", "retries": "2", "action": "save", "csrf": csrf}
    assert c.post("/jobs/invoice", data=edit, follow_redirects=False).status_code == 303
    shown = c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()
    assert shown["lane"] == "burst" and shown["alerts"]["on"] == ["failure", "missed"]
    # the lane and the targets edited; no target: no alert
    edit = {**form, "lane": "bulk", "alerts": "", "action": "save", "csrf": csrf}
    assert c.post("/jobs/invoice", data=edit, follow_redirects=False).status_code == 303
    shown = c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()
    assert shown["lane"] == "bulk" and shown["alerts"] == {"targets": [], "on": []}


def test_the_form_sets_a_jobs_block_strategy_and_an_edit_of_another_field_keeps_it(src: Sources) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    assert 'id="f-block"' in c.get("/jobs/new").text
    form = {**FORM, "block": "discard_later"}
    r = c.post("/jobs/new", data={**form, "action": "save", "csrf": csrf}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()["block"] == "discard_later"
    assert '<option value="discard_later" selected>' in c.get("/jobs/invoice").text
    edit = {**form, "retries": "2", "action": "save", "csrf": csrf}
    assert c.post("/jobs/invoice", data=edit, follow_redirects=False).status_code == 303
    assert c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()["block"] == "discard_later"
    # the API edits it by name
    api = c.post("/api/jobs/invoice", json={"block": "cover_early"}, headers=bearer(ADMIN))
    assert api.status_code == 200, api.text
    assert c.get("/api/jobs/invoice", headers=bearer(ADMIN)).json()["block"] == "cover_early"


def SqlJobs(src: Sources) -> list[str]:  # noqa: N802 (reads as the check it is)
    from scheduler_core.store.job_admin import SqlJobAdmin

    return [j.job_code for j in SqlJobAdmin(src.store).jobs()]


def test_edit_copy_start_stop_run_and_delete_through_the_forms(src: Sources) -> None:
    c = client(src)
    csrf = login(c, ADMIN)
    assert c.post("/jobs/new", data={**FORM, "action": "save", "csrf": csrf}).status_code == 200
    # edit: a bad cron is named and changes nothing; a good one is saved, audited before/after
    bad = c.post("/jobs/invoice", data={**FORM, "cron": "bogus", "action": "save", "csrf": csrf})
    assert bad.status_code == 400 and 'id="error-cron"' in bad.text
    assert src.store.triggers_of(job_code=JobCode("invoice"))[0].cron == "0 0/5 * * * ?"
    prev = c.post("/jobs/invoice", data={**FORM, "cron": "0 0 3 * * ?", "action": "preview", "csrf": csrf})
    times = re.findall(r"<li>([^<]+)</li>", prev.text.split('id="preview-times"')[1].split("</ol>")[0])
    assert len(times) == 5 and all("T03:00:00+08:00" in t for t in times)
    r = c.post("/jobs/invoice", data={**FORM, "cron": "0 0 3 * * ?", "action": "save", "csrf": csrf})
    assert r.status_code == 200 and "Saved." in r.text
    (t,) = [t for t in src.store.triggers_of(job_code=JobCode("invoice")) if t.state is not TriggerState.CANCELLED]
    assert t.cron == "0 0 3 * * ?"
    assert t.next_fire_at.astimezone(ZoneInfo("Asia/Shanghai")).hour == 3
    (edit,) = audit_rows(src, "job edit")
    assert edit.actor == "alice"
    assert edit.detail["before"]["schedule"]["cron"] == "0 0/5 * * * ?"
    assert edit.detail["after"]["schedule"]["cron"] == "0 0 3 * * ?"
    same = c.post("/jobs/invoice", data={**FORM, "cron": "0 0 3 * * ?", "action": "save", "csrf": csrf})
    assert "Nothing changed." in same.text and len(audit_rows(src, "job edit")) == 1
    # stop and start (the stop of "A stop is a stop": the trigger paused from the stop time)
    assert "Stopped" in c.post("/jobs/invoice", data={"action": "stop", "csrf": csrf}).text
    assert c.get("/api/jobs/invoice").json()["state"] == "stopped"
    assert audit_rows(src, "job stop")[0].detail["before"] == {"job": "invoice", "state": "waiting"}
    assert "Started." in c.post("/jobs/invoice", data={"action": "start", "csrf": csrf}).text
    assert c.get("/api/jobs/invoice").json()["state"] == "running"
    history = c.get("/jobs/invoice").text.split("Its audit log")[1]
    for what in ("job add", "job edit", "job stop", "job start"):
        assert f'<td class="what">{what}</td>' in history, what
    # run once now: a one-shot due now, the schedule unmoved
    assert "Runs once now." in c.post("/jobs/invoice", data={"action": "run", "csrf": csrf}).text
    once = [t for t in src.store.triggers_of(job_code=JobCode("invoice")) if t.kind is TriggerKind.ONCE]
    assert len(once) == 1 and abs(once[0].next_fire_at - datetime.now(UTC)) < timedelta(seconds=30)
    # with its own parameter, the console publishes it: without a bus it says so, naming the field
    no_bus = c.post("/jobs/invoice", data={"action": "run", "with_param": "1", "run_params": "x", "csrf": csrf})
    assert no_bus.status_code == 400 and "param" in no_bus.text
    # copy: created stopped, in the business asked for
    cp = c.post("/jobs/invoice", data={"action": "copy", "new_job": "invoice-2", "csrf": csrf})
    assert cp.status_code == 200 and "Copied" in cp.text and 'data-state="stopped"' in cp.text
    copied = c.get("/api/jobs/invoice-2").json()
    assert copied["schedule"]["cron"] == "0 0 3 * * ?" and copied["business"] == "billing"
    dup = c.post("/jobs/invoice", data={"action": "copy", "new_job": "invoice-2", "csrf": csrf})
    assert dup.status_code == 400 and "exists already" in dup.text
    # delete: gone from the list, its live triggers cancelled, audited with what it was
    unsure = c.post("/jobs/invoice-2", data={"action": "delete", "csrf": csrf})
    assert unsure.status_code == 400 and "tick the box" in unsure.text
    assert src.store.get_job(JobCode("invoice-2")) is not None
    d = c.post("/jobs/invoice-2", data={"action": "delete", "confirm": "1", "csrf": csrf}, follow_redirects=False)
    assert d.status_code == 303 and d.headers["location"] == "/jobs"
    assert src.store.get_job(JobCode("invoice-2")) is None
    assert audit_rows(src, "job delete")[0].detail["before"]["job"] == "invoice-2"
    assert c.get("/jobs/invoice-2").status_code == 404
    # an operator's page offers start/stop/run, not edit, copy or delete
    op = client(src)
    login(op, OPER)
    page = op.get("/jobs/invoice").text
    assert 'id="stop"' in page and 'id="run"' in page and 'id="save"' not in page and 'id="delete"' not in page
    assert op.get("/jobs/new").status_code == 403


def test_the_api_mirrors_the_forms(src: Sources) -> None:
    c = client(src)
    h = bearer(ADMIN)
    made = c.post("/api/jobs", json={**FORM, "job": "sync", "kind": "every", "every": "90s"}, headers=h)
    assert made.status_code == 201 and made.json()["schedule"]["every_s"] == 90
    r = c.post("/api/jobs/sync", json={"retries": 3, "children": []}, headers=h)
    assert r.status_code == 200 and r.json()["retries"] == 3
    r = c.post("/api/jobs/sync", json={"kind": "cron", "cron": "0 0 12 * * ?", "zone": "UTC"}, headers=h)
    assert r.status_code == 200 and r.json()["schedule"]["cron"] == "0 0 12 * * ?" and "next fire" in r.json()["note"]
    shown = c.get("/api/jobs/sync", headers=h).json()
    assert len(shown["next_fires"]) == 5 and all("T12:00:00+00:00" in t for t in shown["next_fires"])
    pv = c.get(
        "/api/jobs/preview", params={"kind": "cron", "cron": "0 30 9 ? * MON", "zone": "Europe/Berlin"}, headers=h
    )
    assert pv.status_code == 200 and all(
        "T09:30:00+01:00" in t or "T09:30:00+02:00" in t for t in pv.json()["next_fires"]
    )
    bad = c.get("/api/jobs/preview", params={"kind": "cron", "cron": "nope"}, headers=h)
    assert bad.status_code == 400 and bad.json()["message"].startswith("cron:")
    assert c.post("/api/jobs/sync/stop", headers=h).json()["action"] == "stop"
    assert c.post("/api/jobs/sync/run", headers=h).json()["trigger_id"] > 0
    assert c.post("/api/jobs/sync/copy", json={"job": "sync2"}, headers=h).status_code == 201
    assert c.delete("/api/jobs/sync2", headers=h).json()["deleted"] is True
    assert c.get("/api/jobs/nothing", headers=h).status_code == 404
    assert c.post("/api/jobs", content=b"not json", headers=h).status_code == 400


def test_the_list_filters_searches_pages_and_sorts_numbers_as_numbers(src: Sources) -> None:
    c = client(src)
    h = bearer(ADMIN)
    for n in (10, 9, 100, 1):
        assert c.post("/api/jobs", json={**FORM, "job": f"k{n}", "handler": f"h{n % 2}"}, headers=h).status_code == 201
    assert (
        c.post("/api/jobs", json={**FORM, "business": "ads", "job": "a1", "params": "needle"}, headers=h).status_code
        == 201
    )
    c.post("/api/jobs/k9/stop", headers=h)
    every = c.get("/api/jobs", headers=h).json()
    assert [j["job"] for j in every["jobs"]] == ["a1", "k1", "k9", "k10", "k100"] and every["total"] == 5
    assert every["jobs"][1]["side"] == "new"
    assert [j["job"] for j in c.get("/api/jobs?business=billing&state=stopped", headers=h).json()["jobs"]] == ["k9"]
    assert [j["job"] for j in c.get("/api/jobs?handler=h0", headers=h).json()["jobs"]] == ["k10", "k100"]
    assert [j["job"] for j in c.get("/api/jobs?q=NEEDLE", headers=h).json()["jobs"]] == ["a1"]
    assert [j["job"] for j in c.get("/api/jobs?name=k1", headers=h).json()["jobs"]] == ["k1", "k10", "k100"]
    assert c.get("/api/jobs?side=legacy", headers=h).json()["total"] == 0
    p2 = c.get("/api/jobs?size=2&page=2", headers=h).json()
    assert [j["job"] for j in p2["jobs"]] == ["k9", "k10"] and p2["pages"] == 3
    assert c.get("/api/jobs?state=bogus", headers=h).status_code == 400
    assert c.get("/api/jobs?size=0", headers=h).status_code == 400
    login(c, VIEW)
    page = c.get("/jobs?size=2")
    assert page.status_code == 200 and 'id="next"' in page.text and "size=2" in page.text
    assert 'id="job-k9" data-state="stopped"' in c.get("/jobs").text
