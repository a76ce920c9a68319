"""Issue 28 on the real servers (MariaDB store, Pulsar bus): a job added by
`switchyard job add` fires under a real `switchyard scheduler run` and a real executor
process, `switchyard runs` shows its runs, and after `switchyard job stop` nothing runs
at or after the stop, including the runs already published a lookahead ahead; `job run
--param` runs it once now with a parameter of its own.

The store URL reaches every process through SWITCHYARD_URL, never its arguments."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.integration.procs import cli_json, scheduler_and_executor
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "jobsreal"


def _ran(events: Path) -> list[int]:
    """The scheduled times (ms) of the runs the executor's handler saw."""
    return [int(line.split()[1]) for line in events.read_text().splitlines() if line.strip()]


def test_a_job_added_by_the_cli_fires_shows_in_runs_and_stops(tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    events.touch()
    with scheduler_and_executor(
        tmp_path, BIZ, "tests.integration.job_handlers", env={"JOB_EVENTS": str(events)}
    ) as procs:
        url, pulsar, prefix, logs = procs.url, procs.bus, procs.prefix, procs.logs
        added = cli_json(url, "job", "add", f"{BIZ}:tick", "--handler", "note", "--every", "2s")
        assert added["state"] == "running", added
        assert until(lambda: len(_ran(events)) >= 2, 60), logs()
        runs: list[dict[str, Any]] = []

        def succeeded() -> bool:
            runs[:] = cli_json(url, "runs", "--job", f"{BIZ}:tick", "--state", "succeeded")
            return len(runs) >= 2

        assert until(succeeded, 30), logs()
        run = runs[-1]
        assert run["business"] == BIZ and run["job"] == "tick" and run["started_at"] and run["finished_at"]
        assert run["lag_ms"] is not None and run["lag_ms"] < 5000, run
        ran_ms = {int(datetime.fromisoformat(r["scheduled_at"]).timestamp() * 1000) for r in runs}
        assert ran_ms <= set(_ran(events)), "runs shows the runs the handler saw"

        # run once now with a parameter of its own: this command publishes it
        ran = cli_json(
            url, "job", "run", f"{BIZ}:tick", "--param", "once-now", "--bus", pulsar, "--topic-prefix", prefix
        )
        assert ran["published_by"] == "this command", ran
        assert until(lambda: "once-now" in events.read_text(), 30), logs()

        stopped = cli_json(url, "job", "stop", f"{BIZ}:tick")
        stop_ms = int(datetime.fromisoformat(stopped["at"]).timestamp() * 1000)
        assert stopped["changed"], stopped
        # 10 s after the stop (not after this command's answer): past the lookahead (4 s), so
        # what was published ahead was due meanwhile, and a delivery's lag on a loaded machine
        time.sleep(max(0.0, stop_ms / 1000 + 10 - time.time()))
        after = [ms for ms in _ran(events) if ms >= stop_ms]
        assert after == [], f"ran at or after the stop: {after}\n{logs()}"
        late = [
            r
            for r in cli_json(url, "runs", "--job", f"{BIZ}:tick", "--state", "succeeded", "--limit", "1000")
            if int(datetime.fromisoformat(r["scheduled_at"]).timestamp() * 1000) >= stop_ms
        ]
        assert late == []
        assert cli_json(url, "job", "show", f"{BIZ}:tick")["state"] == "stopped"
        # the native business is one of the center's businesses
        assert [b["business"] for b in cli_json(url, "status")] == [BIZ]
