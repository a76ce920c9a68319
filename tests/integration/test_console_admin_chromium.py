"""Issue 28, the console as the admin, in a real browser on the real servers (MariaDB
store, Pulsar bus, a real `switchyard scheduler run` and executor process): headless
Chromium, driven over its DevTools pipe, logs in with an admin token, creates a job in the
form after previewing its cron's next 5 fire times in the job's zone, sees it fire, runs
it once now with a parameter of its own (the executor's handler receives it), stops it
(nothing runs at or after the stop), and edits its cron with the preview of the new
times; a failing job created with a webhook alert target reaches a real HTTP receiver;
the executor in the registry page goes from live to lost when its process is killed -9;
the job's lane shows in the job list and on the lanes page. Every write is on the audit page under the token's name.

The tokens and the store URL reach the console through its environment, never its
arguments."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.cdp import Page
from tests.integration.console_browser import chromium, free_port
from tests.integration.procs import scheduler_and_executor, start_cli, stop_process
from tests.receivers import Webhook, webhook
from tests.servers import REPO, missing
from tests.waiting import until

BIZ = "adminui"
ADMIN_TOKEN = "admin-" + uuid.uuid4().hex  # a fresh secret per run
ZONE = "Asia/Shanghai"


def _ran(events: Path) -> list[tuple[int, str]]:
    """(scheduled ms, parameter) of every run the executor's handler saw."""
    out = []
    for line in events.read_text().splitlines():
        bits = line.split(" ", 2)
        if len(bits) >= 2:
            out.append((int(bits[1]), bits[2] if len(bits) > 2 else ""))
    return out


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Page]:
    if chromium() is None:
        missing("Debian's chromium is not installed (apt-get install -y chromium)")
    p = Page(tmp_path / "profile")
    try:
        yield p
    finally:
        p.close()


def _api(base: str, path: str) -> Any:
    req = urllib.request.Request(base + path, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read())


def _console(url: str, pulsar: str, prefix: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_CONSOLE_TOKEN")},
        "PYTHONPATH": str(REPO),
        "SWITCHYARD_URL": url,
        "SWITCHYARD_CONSOLE_TOKENS": f"alice:admin:{ADMIN_TOKEN}",
    }
    args = ["console", "--port", str(port), "--writes", "--bus", pulsar, "--topic-prefix", prefix]
    with log.open("wb") as out:
        proc = start_cli(args, out, cwd=REPO, env=env)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            urllib.request.urlopen(base + "/api/scheduler", timeout=2).close()
        except urllib.error.HTTPError as exc:
            return exc.code == 401  # up, and asking for a token
        except OSError:
            return False
        return True

    assert until(up, 60, 0.2), log.read_text()[-3000:]
    return proc, base


def _executor_states(page: Page, base: str) -> list[str]:
    """The states of the registry's rows of BIZ on the executors page, read afresh."""
    page.goto(f"{base}/executors?business={BIZ}")
    return list(page.js("[...document.querySelectorAll('#executors tr.executor')].map(r => r.dataset.state)") or [])


def daily_loop(
    page: Page,
    base: str,
    events: Path,
    logs: Callable[[], str],
    hook: Webhook,
    kill_executor: Callable[[], None] | None = None,
) -> None:
    """Log in, create a job (its cron previewed), see it fire, run it once with a parameter
    of its own, stop it (nothing runs at or after the stop), edit its cron (previewed); a
    failing job's alert reaches a webhook; the executor in the registry goes from live to
    lost when its process is killed (`kill_executor`)."""

    def on_fail() -> str:
        return f"{logs()}\n--- page {page.url}\n{page.body()[:2000]}"

    # no token: the login form (401), which brings one back to the page asked for
    page.goto(base + "/jobs/new")
    assert page.attr("#login", "action") == "/login?next=/jobs/new", on_fail()
    page.fill("#token", ADMIN_TOKEN)
    page.click("#login-submit")
    assert page.url == base + "/jobs/new", on_fail()
    assert page.text("#me") == "alice (admin)"

    # create a job: its cron previewed first, in its zone
    for field, value in {
        "#f-business": BIZ,
        "#f-job": "tick",
        "#f-handler": "note",
        "#f-params": "scheduled",
        "#f-cron": "0/2 * * * * ?",
        "#f-zone": ZONE,
    }.items():
        page.fill(field, value)
    page.click("#preview")
    times = [datetime.fromisoformat(t) for t in page.texts("#preview-times li")]
    assert len(times) == 5, on_fail()
    assert all(str(t.utcoffset()) == "8:00:00" for t in times)  # in the job's zone
    assert [(b - a).total_seconds() for a, b in itertools.pairwise(times)] == [2.0] * 4
    page.click("#save")
    assert page.url.startswith(base + "/jobs/tick"), on_fail()
    assert page.attr("#job-state", "data-state") == "running", on_fail()

    # it fires: the executor's handler runs it with the job's parameter
    assert until(lambda: any(p == "scheduled" for _, p in _ran(events)), 60), on_fail()

    # its lane (the business's default) in the job list, and on the lanes page with its runs
    page.goto(f"{base}/jobs?business={BIZ}")
    assert page.text("#job-tick td.lane") == "default", on_fail()
    page.goto(base + "/lanes")
    assert page.text(f"#lane-default-{BIZ} td") == "default", on_fail()
    page.goto(base + "/jobs/tick")

    # run once now with a parameter of its own: the console publishes it
    page.check("#run-with")
    page.fill("#run-params", "from-the-browser")
    page.click("#run")
    assert "Runs once now." in page.text("#done"), on_fail()
    assert until(lambda: any(p == "from-the-browser" for _, p in _ran(events)), 30), on_fail()

    # stop: nothing runs at or after the stop time
    page.click("#stop")
    assert page.attr("#job-state", "data-state") == "stopped", on_fail()
    (stop,) = [a for a in _api(base, "/api/audit") if a["detail"].get("action") == "job stop"]
    stop_ms = int(datetime.fromisoformat(stop["detail"]["after"]["at"]).timestamp() * 1000)
    time.sleep(8)  # past the lookahead (4 s): what was published ahead was due meanwhile
    after = [ms for ms, p in _ran(events) if ms >= stop_ms and p == "scheduled"]
    assert after == [], f"ran after the stop: {after}\n{on_fail()}"

    # edit its cron: the new times previewed, then saved
    page.fill("#f-cron", "0 30 3 * * ?")
    page.click("#preview")
    coming = page.texts("#preview-times li")
    assert len(coming) == 5 and all("T03:30:00+08:00" in t for t in coming), on_fail()
    page.click("#save")
    assert "Saved." in page.text("#done"), on_fail()
    assert "0 30 3 * * ?" in page.text("#schedule")
    shown = page.texts("#coming li")
    assert len(shown) == 5 and all("T03:30:00+08:00" in t for t in shown), on_fail()
    assert page.attr("#job-state", "data-state") == "stopped"  # an edit does not start it

    # a job that fails, with a webhook among its alert targets: the alert reaches it
    page.goto(base + "/jobs/new")
    for field, value in {
        "#f-business": BIZ,
        "#f-job": "breaks",
        "#f-handler": "fail",
        "#f-cron": "0/2 * * * * ?",
        "#f-zone": ZONE,
        "#f-alerts": f"webhook:{hook.url}",
        "#f-alert_on": "failure",
    }.items():
        page.fill(field, value)
    page.click("#save")
    assert page.url.startswith(base + "/jobs/breaks"), on_fail()

    def alerted() -> bool:
        return any(c["job"] == "breaks" and c["kind"] == "failure" for c in hook.calls())

    assert until(alerted, 90, 0.5), f"no alert at the webhook: {hook.calls()}\n{on_fail()}"
    (first,) = [c for c in hook.calls() if c["job"] == "breaks"][:1]
    assert first["business"] == BIZ and first["status"] == "firing" and "ledger refused" in first["message"]
    page.click("#stop")
    assert page.attr("#job-state", "data-state") == "stopped", on_fail()

    # the executor in the registry: live, then lost once its process is killed
    if kill_executor is not None:
        assert until(lambda: "live" in _executor_states(page, base), 30, 0.5), on_fail()
        kill_executor()
        assert until(lambda: _executor_states(page, base) == ["lost"], 30, 0.5), on_fail()

    # every write audited under the token's name, with what it was and became
    page.goto(base + "/audit")
    whats = page.texts("#audit td.what")
    assert {"job add", "job run", "job stop", "job edit"} <= set(whats), on_fail()
    actors = page.texts("#audit td.actor")
    assert actors and all(a == "alice" for a, w in zip(actors, whats, strict=True) if w.startswith("job "))
    csp = [e for e in page.errors() if "Content Security Policy" in e]
    assert csp == [], csp


@pytest.mark.mariadb
@pytest.mark.pulsar
def test_the_daily_loop_on_mariadb_and_pulsar(tmp_path: Path, page: Page) -> None:
    events = tmp_path / "events.txt"
    events.touch()
    with scheduler_and_executor(
        tmp_path,
        BIZ,
        "tests.integration.job_handlers",
        env={"JOB_EVENTS": str(events)},
        # the store from SWITCHYARD_URL: it heartbeats into the registry, every second
        executor_more=("--heartbeat-interval", "1"),
    ) as procs:
        url, pulsar, prefix, executor = procs.url, procs.bus, procs.prefix, procs.executor
        env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_URL": url}
        alerts_log = tmp_path / "alerts.log"
        with alerts_log.open("wb") as out:
            alerter = start_cli(["alerts", "run", "--interval", "1s", "--group-wait", "1s"], out, cwd=REPO, env=env)
        console_log = tmp_path / "console.log"
        console, base = _console(url, pulsar, prefix, console_log)

        def logs() -> str:
            return (
                f"{procs.logs()}\n--- alerts\n"
                f"{alerts_log.read_text(errors='replace')[-1500:]}\n--- console\n"
                f"{console_log.read_text(errors='replace')[-3000:]}"
            )

        def kill_executor() -> None:
            executor.send_signal(signal.SIGKILL)
            executor.wait(timeout=30)

        try:
            with webhook() as hook:
                daily_loop(page, base, events, logs, hook, kill_executor)
        finally:
            stop_process(console)
            stop_process(alerter)
        text = console_log.read_text(errors="replace")
        assert ADMIN_TOKEN not in text and "Traceback" not in text, text[-3000:]


def test_the_daily_loop_on_serve_with_sqlite(tmp_path: Path, page: Page) -> None:
    """The same loop on `switchyard serve --console --console-writes` (SQLite, the
    in-process bus: the console's run-now publishes on it, its stop broadcasts on it)."""
    url = f"sqlite:///{tmp_path / 'center.db'}"
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")},
        "PYTHONPATH": str(REPO),
        "SWITCHYARD_URL": url,
        "SWITCHYARD_CONSOLE_TOKENS": f"alice:admin:{ADMIN_TOKEN}",
        "JOB_EVENTS": str(tmp_path / "events.txt"),
    }
    events = tmp_path / "events.txt"
    events.touch()
    init = subprocess.run(
        [sys.executable, "-m", "switchyard", "db", "init"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert init.returncode == 0, init.stdout + init.stderr
    port = free_port()
    log = tmp_path / "serve.log"
    args = ["serve", "--handlers", "tests.integration.job_handlers", "--console", "--console-port", str(port)]
    args += ["--alert-interval", "1s", "--alert-group-wait", "1s"]
    with log.open("wb") as out:
        proc = start_cli([*args, "--console-writes"], out, cwd=REPO, env=env)
    base = f"http://127.0.0.1:{port}"

    def up() -> bool:
        assert proc.poll() is None, log.read_text()[-3000:]
        try:
            urllib.request.urlopen(base + "/api/scheduler", timeout=2).close()
        except urllib.error.HTTPError as exc:
            return exc.code == 401
        except OSError:
            return False
        return True

    try:
        assert until(up, 60, 0.2), log.read_text()[-3000:]
        # the registry's live-to-lost is the MariaDB loop's: here the executor is the console's own process
        with webhook() as hook:
            daily_loop(page, base, events, lambda: "--- serve\n" + log.read_text(errors="replace")[-4000:], hook)
    finally:
        stop_process(proc)
    text = log.read_text(errors="replace")
    assert ADMIN_TOKEN not in text and "Traceback" not in text, text[-3000:]
