"""Issue 28, alerts in the one-process center: `switchyard serve` on SQLite runs the
alerter beside its scheduler and executors, so a job whose run fails reaches its webhook
(a real HTTP receiver on 127.0.0.1) with no other process."""

from __future__ import annotations

import os
from pathlib import Path

from scheduler_core.alert_rule import AlertRule
from scheduler_core.jobspec import JobSpec, Schedule
from scheduler_core.model import TriggerKind
from scheduler_core.stops import StopService
from scheduler_core.store.engine import make_engine
from scheduler_core.store.stops import SqlStops
from switchyard.alerts.store import recent_alerts
from switchyard.jobs import Jobs
from switchyard.schema import init_schema
from switchyard.wiring import alert_store, migrator_store, open_store
from tests.integration.procs import start_cli, stop_process
from tests.receivers import webhook
from tests.servers import REPO
from tests.waiting import until


def test_serve_sends_a_failed_runs_alert_to_its_webhook(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    store = open_store(url)
    log = tmp_path / "serve.log"
    with webhook() as hook:
        jobs = Jobs(store, migrator_store(store), StopService(SqlStops(store)), "tester")
        job = jobs.add(
            JobSpec(
                job_code="pay", biz_code="shop", handler="fail", schedule=Schedule(kind=TriggerKind.NONE),
                alerts=AlertRule(targets=(f"webhook:{hook.url}",), kinds=("failure",)),
            )
        ).job  # fmt: skip
        jobs.run(job)  # once, now: the scheduler inside serve fires it
        args = [
            "serve", "--url", url, "--handlers", "tests.integration.alert_handlers", "--idle-wait", "0.5",
            "--alert-interval", "0.5s", "--alert-group-wait", "0s", "--log-level", "INFO",
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with log.open("wb") as out:
            proc = start_cli(args, out, cwd=str(REPO), env=env)
        try:
            assert until(lambda: len(hook.calls()) >= 1, 90), log.read_text(errors="replace")[-3000:]
            (call,) = hook.calls()
            assert (call["business"], call["job"], call["kind"], call["status"], call["count"]) == (
                "shop",
                "pay",
                "failure",
                "firing",
                1,
            )
            assert "payment gateway refused" in call["message"]
            assert until(lambda: [r["outcome"] for r in recent_alerts(alert_store(store))] == ["delivered"], 10)
        finally:
            stop_process(proc)
            store.engine.dispose()
        assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
