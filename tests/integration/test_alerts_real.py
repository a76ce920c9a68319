"""Issue 28, alerts on the real servers (MariaDB store, Pulsar bus, a real scheduler and
executor process, a real HTTP receiver on 127.0.0.1): jobs made by `switchyard job add
--alert webhook:...` whose runs fail, time out, or are never taken (a business with no
executor) each reach the webhook once: the three failures as one message counting 3, the
timeout and the missed fire one each; an alerter run again (a restart) sends nothing
again; `switchyard alerts` lists what was sent; `alerts test` sends a test message.

The store URL reaches every process through SWITCHYARD_URL, never its arguments (but the
scheduler's, as the job CLI test starts it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_core.model import JobCode
from scheduler_core.stops import StopService
from scheduler_core.store.job_admin import SqlJobAdmin
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from switchyard.jobs import Jobs
from switchyard.wiring import migrator_store, open_existing_store
from tests.integration.procs import cli_json, scheduler_and_executor
from tests.receivers import webhook
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "alertsreal"
NO_EXECUTOR = "alertsorphan"  # a business no executor serves: its runs are never taken
ALERTER = ["alerts", "run", "--once", "--group-wait", "0s", "--grace", "2s"]


def _runs(store: SqlTriggerStore, job: str, state: str) -> list[dict[str, Any]]:
    """Read in this process (each CLI process costs seconds on a loaded machine)."""
    return SqlJobAdmin(store).runs(job_code=JobCode(job), states=[state])


def test_failures_timeouts_and_missed_fires_reach_a_real_webhook_once(tmp_path: Path) -> None:
    with (
        webhook("/alerts/x") as hook,
        scheduler_and_executor(tmp_path, BIZ, "tests.integration.alert_handlers") as procs,
    ):
        url, logs = procs.url, procs.logs
        store = open_existing_store(url)
        try:
            target = f"webhook:{hook.url}"
            for name, handler, kind, more in (
                (f"{BIZ}:pay", "fail", "failure", []),
                (f"{BIZ}:report", "slow", "timeout", ["--timeout", "1s"]),
                (f"{NO_EXECUTOR}:sweep", "fail", "missed", []),
            ):
                added = cli_json(
                    url, "job", "add", name, "--handler", handler, "--no-schedule",
                    "--alert", target, "--alert-on", kind, *more,
                )  # fmt: skip
                assert added["alerts"] == {"targets": [target], "on": [kind]}, added
            # run once now, as `switchyard job run` does (in this process: see _runs)
            jobs = Jobs(store, migrator_store(store), StopService(SqlStops(store)), "tester")
            for name in ("pay", "pay", "pay", "report", "sweep"):
                jobs.run(jobs.resolve(name))

            assert until(lambda: len(_runs(store, "pay", "failed")) == 3, 60), logs()
            assert until(lambda: len(_runs(store, "report", "timed_out")) == 1, 60), logs()
            # published and never taken, and past the alerter's grace (2 s) after its time
            assert until(lambda: len(_runs(store, "sweep", "published")) == 1, 30), logs()
            (sweep,) = _runs(store, "sweep", "published")
            assert until(lambda: store.clock.now_ms() - int(sweep["scheduled_at"]) > 2500, 10)
            assert hook.calls() == [], "nothing is sent before an alerter runs"

            def alerter() -> dict[str, Any]:
                out: dict[str, Any] = cli_json(url, *ALERTER)
                return out

            first = alerter()  # one pass: it returns once its messages were sent
            assert len(first["sent"]) == 3 and all(s["ok"] for s in first["sent"]), first
            calls = {c["kind"]: c for c in hook.calls()}
            assert len(hook.calls()) == 3, hook.calls()
            pay = calls["failure"]
            assert (pay["business"], pay["job"], pay["status"], pay["count"]) == (BIZ, "pay", "firing", 3)
            assert len(pay["fired_ids"]) == 3 and "payment gateway refused" in pay["message"], pay
            assert pay["link"] == f"/business/{BIZ}?job=pay" and pay["first_scheduled_at"] <= pay["last_scheduled_at"]
            assert (calls["timeout"]["job"], calls["timeout"]["count"]) == ("report", 1)
            assert (calls["missed"]["business"], calls["missed"]["count"]) == (NO_EXECUTOR, 1)
            assert "not taken by an executor" in calls["missed"]["message"], calls["missed"]
            assert set(hook.paths) == {"/alerts/x"}

            # the alerter restarted: nothing is sent again
            again = alerter()
            assert again["sent"] == [] and again["events"] == 0, again
            assert len(hook.calls()) == 3

            listed = cli_json(url, "alerts")
            assert sorted((r["job"], r["kind"], r["outcome"], r["count"]) for r in listed) == [
                ("pay", "failure", "delivered", 3),
                ("report", "timeout", "delivered", 1),
                ("sweep", "missed", "delivered", 1),
            ]
            assert [r["job"] for r in cli_json(url, "alerts", "--job", f"{BIZ}:pay")] == ["pay"]

            tested = cli_json(url, "alerts", "test", "--job", f"{BIZ}:pay")
            assert tested == [{"target": target, "ok": True, "attempts": 1, "error": ""}]
            assert hook.calls()[-1]["status"] == "test" and len(hook.calls()) == 4
        finally:
            store.engine.dispose()
