"""Issue 28 on the real servers (MariaDB store, Pulsar bus): a job added by
`switchyard job add` fires under a real `switchyard scheduler run` and a real executor
process, `switchyard runs` shows its runs, and after `switchyard job stop` nothing runs
at or after the stop, including the runs already published a lookahead ahead; `job run
--param` runs it once now with a parameter of its own.

The store URL reaches every process through SWITCHYARD_URL, never its arguments."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.procs import executor_args, start_cli, start_scheduler, stop_process
from tests.servers import REPO, server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "jobsreal"


def _cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "switchyard", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_BUS": "memory", "SWITCHYARD_URL": url},
        stdin=subprocess.DEVNULL,
    )


def _json(url: str, *args: str) -> Any:
    done = _cli(url, *args, "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _ran(events: Path) -> list[int]:
    """The scheduled times (ms) of the runs the executor's handler saw."""
    return [int(line.split()[1]) for line in events.read_text().splitlines() if line.strip()]


def test_a_job_added_by_the_cli_fires_shows_in_runs_and_stops(tmp_path: Path) -> None:
    pulsar = server_url("pulsar")
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        engine.dispose()
        prefix = f"jobs{uuid.uuid4().hex[:6]}"
        events = tmp_path / "events.txt"
        events.touch()
        env = {**os.environ, "JOB_EVENTS": str(events), "PYTHONPATH": str(REPO), "SWITCHYARD_URL": url}
        scheduler = start_scheduler("s0", tmp_path, url=url, bus=pulsar, etcd="local", key="/k", prefix=prefix)
        log = tmp_path / "executor.log"
        with log.open("wb") as out:
            executor = start_cli(
                executor_args(BIZ, pulsar, prefix, 2, "--handlers", "tests.integration.job_handlers"),
                out,
                cwd=REPO,
                env=env,
            )

        def logs() -> str:
            return f"--- scheduler\n{scheduler.log_text()[-3000:]}\n--- executor\n{log.read_text(errors='replace')[-3000:]}"

        try:
            added = _json(url, "job", "add", f"{BIZ}:tick", "--handler", "note", "--every", "2s")
            assert added["state"] == "running", added
            assert until(lambda: len(_ran(events)) >= 2, 60), logs()
            runs: list[dict[str, Any]] = []

            def succeeded() -> bool:
                runs[:] = _json(url, "runs", "--job", f"{BIZ}:tick", "--state", "succeeded")
                return len(runs) >= 2

            assert until(succeeded, 30), logs()
            run = runs[-1]
            assert run["business"] == BIZ and run["job"] == "tick" and run["started_at"] and run["finished_at"]
            assert run["lag_ms"] is not None and run["lag_ms"] < 5000, run
            ran_ms = {int(datetime.fromisoformat(r["scheduled_at"]).timestamp() * 1000) for r in runs}
            assert ran_ms <= set(_ran(events)), "runs shows the runs the handler saw"

            # run once now with a parameter of its own: this command publishes it
            ran = _json(
                url, "job", "run", f"{BIZ}:tick", "--param", "once-now", "--bus", pulsar, "--topic-prefix", prefix
            )
            assert ran["published_by"] == "this command", ran
            assert until(lambda: "once-now" in events.read_text(), 30), logs()

            stopped = _json(url, "job", "stop", f"{BIZ}:tick")
            stop_ms = int(datetime.fromisoformat(stopped["at"]).timestamp() * 1000)
            assert stopped["changed"], stopped
            time.sleep(10)  # past the lookahead (4 s): what was published ahead was due meanwhile
            after = [ms for ms in _ran(events) if ms >= stop_ms]
            assert after == [], f"ran at or after the stop: {after}\n{logs()}"
            late = [
                r
                for r in _json(url, "runs", "--job", f"{BIZ}:tick", "--state", "succeeded", "--limit", "1000")
                if int(datetime.fromisoformat(r["scheduled_at"]).timestamp() * 1000) >= stop_ms
            ]
            assert late == []
            assert _json(url, "job", "show", f"{BIZ}:tick")["state"] == "stopped"
            # the native business is one of the center's businesses
            assert [b["business"] for b in _json(url, "status")] == [BIZ]
        finally:
            stop_process(executor)
            scheduler.stop()
