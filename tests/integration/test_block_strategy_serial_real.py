"""Block strategy serial on the real servers (MariaDB store, Pulsar bus), and the run
log's executor: a job added by `switchyard job add --block serial` whose handler takes
longer than its period fires under a real `switchyard scheduler run`, and a real executor
process (`switchyard executor run --handlers tests.integration.block_handlers`, in the
executor registry through SWITCHYARD_URL) runs its occurrences one after another, in
fire-time order, never two at once, none lost: every occurrence up to the job's stop is
in the run log, run once (succeeded) or, queued when the stop came, skipped by it. Each
run's row names the executor process that ran it, as `switchyard executors` lists it.

The store URL reaches every process through SWITCHYARD_URL, never its arguments."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from tests.integration.procs import cli_json, scheduler_and_executor, start_cli, stop_process
from tests.integration.test_block_strategy_real import _events, _spans
from tests.servers import REPO
from tests.waiting import until

BIZ = "serialreal"
PERIOD_MS = 2000
HOLD_S = "3"  # each run holds 3 s, every 2 s: the runs queue up behind each other


@pytest.mark.mariadb
@pytest.mark.pulsar
def test_a_serial_job_slower_than_its_period_runs_one_at_a_time_none_lost(tmp_path: Path) -> None:
    events = tmp_path / "events.txt"
    events.touch()
    with scheduler_and_executor(
        tmp_path,
        BIZ,
        "tests.integration.block_handlers",
        concurrency=4,
        env={"BLOCK_EVENTS": str(events)},
        executor_more=("--heartbeat-interval", "1s"),
    ) as procs:
        url, logs = procs.url, procs.logs

        def runs() -> list[dict[str, Any]]:
            got: list[dict[str, Any]] = cli_json(url, "runs", "--job", f"{BIZ}:slow", "--limit", "5000")
            return sorted(got, key=lambda r: r["scheduled_at"])

        added = cli_json(
            url, "job", "add", f"{BIZ}:slow", "--handler", "hold", "--param", HOLD_S, "--every", "2s",
            "--block", "serial",
        )  # fmt: skip
        assert added["block"] == "serial", added
        assert cli_json(url, "job", "show", f"{BIZ}:slow")["block"] == "serial"

        # 4 runs done, so 2 or more have waited behind the one before
        assert until(lambda: events.read_text().count("returned cancelled=False") >= 4, 90), logs()
        cli_json(url, "job", "stop", f"{BIZ}:slow")

        rows: list[dict[str, Any]] = []

        def all_final() -> bool:  # the runs queued before the stop's instant run to the end
            rows[:] = runs()
            return bool(rows) and all(r["result"] in ("succeeded", "skipped", "failed") for r in rows)

        assert until(all_final, 120), (rows, logs())
        registry: list[dict[str, Any]] = cli_json(url, "executors", "--business", BIZ)

    seen = _events(events)
    done = [r for r in rows if r["result"] == "succeeded"]
    skipped = [r for r in rows if r["result"] == "skipped"]
    assert not [r for r in rows if r["result"] == "failed"], rows
    assert len(done) >= 4, rows
    # none lost: every occurrence up to the last run is in the log, run or skipped by the stop
    ran_until = max(r["scheduled_at"] for r in done)
    upto = [r for r in rows if r["scheduled_at"] <= ran_until]
    ms = [int(r["command_id"].split("-")[1]) for r in upto]
    assert all(b - a == PERIOD_MS for a, b in itertools.pairwise(ms)), ms
    for r in upto:
        if r["result"] == "succeeded":  # run once, to its end
            assert seen[r["command_id"]] == ["started", "returned cancelled=False"], (r, seen)
        else:
            assert r["result"] == "skipped" and r["message"].startswith("stopped: "), r
    for r in skipped:
        assert r["command_id"] not in seen, f"a skipped run reached its handler: {r}"
    # one after another, never two at once, in fire-time order
    lines = events.read_text().splitlines()
    spans = sorted(_spans(events))
    assert len(spans) == len(done)
    assert all(a[1] < b[0] for a, b in itertools.pairwise(spans)), lines
    started = [int(line.split(" ")[1]) for line in lines if line.endswith(" started")]
    assert started == sorted(started), lines
    # queued runs started late: the wait shows in their lag
    assert max(r["lag_ms"] for r in done) > 1000, done
    # each row names the executor process that ran it, as the registry lists it
    (ours,) = [e for e in registry if not e["legacy"]]
    assert {r["executor"] for r in done} == {ours["instance_id"]}, (done, registry)
    assert {r["executor_name"] for r in done} == {ours["name"]}


def test_on_serve_a_run_log_row_names_the_process_that_ran_it(tmp_path: Path) -> None:
    """The embedded default: `switchyard serve` (SQLite, in-process bus) runs a serial job
    and its rows name the executor process, the one `switchyard executors` lists."""
    url = f"sqlite:///{tmp_path / 'center.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    added = cli_json(url, "job", "add", "alpha:tick", "--handler", "h", "--every", "1s", "--block", "serial")
    assert added["block"] == "serial"
    env = {**os.environ, "SERVE_RUN_LOG": str(tmp_path / "runs.jsonl"), "PYTHONPATH": str(REPO)}
    args = ["serve", "--url", url, "--handlers", "tests.serve_handlers", "--name", "exec-serve"]
    args += ["--heartbeat-interval", "0.3s", "--idle-wait", "0.5"]
    log = tmp_path / "serve.log"
    with log.open("wb") as out:
        proc = start_cli(args, out, cwd=REPO, env=env)
    try:
        done: list[dict[str, Any]] = []

        def ran() -> bool:
            done[:] = [r for r in cli_json(url, "runs", "--job", "alpha:tick") if r["result"] == "succeeded"]
            return len(done) >= 2

        assert until(ran, 90, 0.5), log.read_text(errors="replace")[-3000:]
        (row,) = cli_json(url, "executors")
    finally:
        stop_process(proc)
    assert {(r["executor"], r["executor_name"]) for r in done} == {(row["instance_id"], "exec-serve")}, (done, row)
