"""Issue 28 on the real servers (MariaDB store, Pulsar bus): a real executor process runs
jobs added by `switchyard job add` under a real scheduler; what the handler logs during
each run (through `ctx.log` and its own logger) reaches the store with the run's result and
`switchyard runs log` shows it per sharding item, capped at 64 KiB with a marker for a
handler that logs more. The store URL reaches every process through SWITCHYARD_URL."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scheduler_core.executor.run_logs import MAX_RUN_BYTES
from tests.integration.procs import cli_json, scheduler_and_executor
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "runlogreal"


def test_a_handlers_log_lines_reach_the_run_log_per_item_capped(tmp_path: Path) -> None:
    with scheduler_and_executor(tmp_path, BIZ, "tests.integration.runlog_handlers") as procs:
        url, logs = procs.url, procs.logs
        cli_json(url, "job", "add", f"{BIZ}:sharded", "--handler", "chatty", "--every", "2s", "--shards", "2")
        cli_json(url, "job", "add", f"{BIZ}:flood", "--handler", "chatty", "--every", "2s", "--param", "flood")
        found: dict[str, Any] = {}

        def ran(job: str) -> bool:
            runs = cli_json(url, "runs", "--job", f"{BIZ}:{job}", "--state", "succeeded")
            if runs:
                found[job] = runs
            return bool(runs)

        assert until(lambda: ran("sharded"), 60, every_s=0.5), logs()
        assert until(lambda: ran("flood"), 30, every_s=0.5), logs()

        run = found["sharded"][0]
        seen = cli_json(url, "runs", "log", run["command_id"])
        lines = seen["logs"]
        assert seen["run"]["command_id"] == run["command_id"] and lines, (seen, logs())
        item = run["item"]
        assert [(x["item_index"], x["attempt"], x["truncated"]) for x in lines] == [(item, 0, False)]
        text = lines[0]["lines"]
        assert f"item {item} of 2 starts" in text and "INFO handler.sharded" in text, text
        assert "WARNING billing.report" in text and f"own logger of item {item}" in text, text
        assert "scheduler_core" not in text  # the SDK's own lines are not the handler's
        only = cli_json(url, "runs", "log", run["command_id"], "--item", str(item + 1))
        assert only["logs"] == []

        flood = cli_json(url, "runs", "log", found["flood"][0]["command_id"])["logs"]
        assert len(flood) == 1 and flood[0]["truncated"], flood
        body = flood[0]["lines"]
        kept, marker = body.rsplit("\n", 1)
        assert len(kept.encode()) <= MAX_RUN_BYTES and marker.startswith("... [truncated: ")
        assert "flood line 00000" in kept and "flood line 02999" not in kept
