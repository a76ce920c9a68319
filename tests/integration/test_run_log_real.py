"""Issue 28 on the real servers (MariaDB store, Pulsar bus): a real executor process runs
jobs added by `switchyard job add` under a real scheduler; what the handler logs during
each run (through `ctx.log` and its own logger) reaches the store with the run's result and
`switchyard runs log` shows it per sharding item, capped at 64 KiB with a marker for a
handler that logs more. The store URL reaches every process through SWITCHYARD_URL."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.executor.run_logs import MAX_RUN_BYTES
from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.procs import executor_args, start_cli, start_scheduler, stop_process
from tests.servers import REPO, server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "runlogreal"


def _json(url: str, *args: str) -> Any:
    done = subprocess.run(
        [sys.executable, "-m", "switchyard", *args, "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_BUS": "memory", "SWITCHYARD_URL": url},
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_handlers_log_lines_reach_the_run_log_per_item_capped(tmp_path: Path) -> None:
    pulsar = server_url("pulsar")
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        engine.dispose()
        prefix = f"rl{uuid.uuid4().hex[:6]}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_URL": url}
        scheduler = start_scheduler("s0", tmp_path, url=url, bus=pulsar, etcd="local", key="/k", prefix=prefix)
        log = tmp_path / "executor.log"
        with log.open("wb") as out:
            executor = start_cli(
                executor_args(BIZ, pulsar, prefix, 2, "--handlers", "tests.integration.runlog_handlers"),
                out,
                cwd=REPO,
                env=env,
            )

        def logs() -> str:
            return f"--- scheduler\n{scheduler.log_text()[-3000:]}\n--- executor\n{log.read_text(errors='replace')[-3000:]}"

        try:
            _json(url, "job", "add", f"{BIZ}:sharded", "--handler", "chatty", "--every", "2s", "--shards", "2")
            _json(url, "job", "add", f"{BIZ}:flood", "--handler", "chatty", "--every", "2s", "--param", "flood")
            found: dict[str, Any] = {}

            def ran(job: str) -> bool:
                runs = _json(url, "runs", "--job", f"{BIZ}:{job}", "--state", "succeeded")
                if runs:
                    found[job] = runs
                return bool(runs)

            assert until(lambda: ran("sharded"), 60), logs()
            assert until(lambda: ran("flood"), 30), logs()

            run = found["sharded"][0]
            seen = _json(url, "runs", "log", run["command_id"])
            lines = seen["logs"]
            assert seen["run"]["command_id"] == run["command_id"] and lines, (seen, logs())
            item = run["item"]
            assert [(x["item_index"], x["attempt"], x["truncated"]) for x in lines] == [(item, 0, False)]
            text = lines[0]["lines"]
            assert f"item {item} of 2 starts" in text and "INFO handler.sharded" in text, text
            assert "WARNING billing.report" in text and f"own logger of item {item}" in text, text
            assert "scheduler_core" not in text  # the SDK's own lines are not the handler's
            only = _json(url, "runs", "log", run["command_id"], "--item", str(item + 1))
            assert only["logs"] == []

            flood = _json(url, "runs", "log", found["flood"][0]["command_id"])["logs"]
            assert len(flood) == 1 and flood[0]["truncated"], flood
            body = flood[0]["lines"]
            kept, marker = body.rsplit("\n", 1)
            assert len(kept.encode()) <= MAX_RUN_BYTES and marker.startswith("... [truncated: ")
            assert "flood line 00000" in kept and "flood line 02999" not in kept
        finally:
            stop_process(executor)
            scheduler.stop()
