"""The executor registry on the embedded default: `switchyard serve` (SQLite, in-process
bus) heartbeats one row for the process, with every business it found executors for,
and says stopped on SIGTERM; `switchyard executors` reads it from the same file."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from scheduler_core.model import Job, JobCode
from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from switchyard.wiring import open_store
from tests.integration.procs import cli_json, start_cli, stop_process
from tests.servers import REPO
from tests.waiting import until


def _executors(url: str, *more: str) -> list[dict[str, Any]]:
    """`switchyard executors --json` (in this process: tests.integration.procs.cli_json)."""
    rows: list[dict[str, Any]] = cli_json(url, "executors", *more)
    return rows


def test_serve_heartbeats_one_row_for_its_businesses_and_stops_cleanly(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    store = open_store(url)
    for biz in ("alpha", "beta"):
        store.put_job(Job(job_code=JobCode(f"{biz}-job"), biz_code=biz, handler="h"))
    store.engine.dispose()
    env = {**os.environ, "SERVE_RUN_LOG": str(tmp_path / "runs.jsonl"), "PYTHONPATH": str(REPO)}
    args = ["serve", "--url", url, "--handlers", "tests.serve_handlers", "--name", "reg-serve"]
    args += ["--concurrency", "2", "--heartbeat-interval", "0.3s", "--idle-wait", "0.5"]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = start_cli(args, out, cwd=REPO, env=env)
    try:
        rows: list[dict[str, Any]] = []

        def serving_both() -> bool:
            rows[:] = _executors(url)
            return len(rows) == 1 and rows[0]["businesses"] == ["alpha", "beta"] and rows[0]["state"] == "live"

        assert until(serving_both, 90, 0.5), (rows, log.read_text(errors="replace")[-3000:])
        (row,) = rows
        assert (row["name"], row["pid"], row["state"], row["concurrency"]) == ("reg-serve", proc.pid, "live", 4)
        stop_process(proc)
        assert proc.returncode == 0, log.read_text(errors="replace")[-3000:]
        assert _executors(url) == []
        (gone,) = _executors(url, "--all")
        assert (gone["instance_id"], gone["state"]) == (row["instance_id"], "stopped")
    finally:
        stop_process(proc)
