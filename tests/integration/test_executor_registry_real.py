"""The executor registry on the real MariaDB and Pulsar, through the CLI as an operator
sees it: two real `switchyard executor run` processes (one with a handlers module, one
serving the xxl-job bridge) heartbeat into the store and show live in `switchyard
executors --json`; the one killed with SIGKILL goes lost within a few heartbeats, the one
stopped with SIGTERM says stopped (listed with --all only); and the xxl-job admin's
registered executors are listed beside them, live or lost by xxl-job's 90 s rule.
The store's URL reaches every process through the environment, never its arguments."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from readers.legacy_ddl import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.procs import cli_json, executor_args, start_cli, stop_process
from tests.servers import REPO, server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "regreal"
BEAT = "0.3s"  # lost after 3 missed: under a second


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _executors(url: str, *more: str, legacy: str | None = None) -> list[dict[str, Any]]:
    """`switchyard executors --json` (in this process: tests.integration.procs.cli_json)."""
    rows: list[dict[str, Any]] = cli_json(
        url, "executors", *more, env={"SWITCHYARD_LEGACY_URL": legacy} if legacy else None
    )
    return rows


def _by_pid(rows: list[dict[str, Any]]) -> dict[int, str]:
    return {r["pid"]: r["state"] for r in rows if not r["legacy"]}


def _legacy_admin(url: str) -> None:
    """An xxl-job 3.4 admin database: BIZ's app registered live 5 s ago and dead 200 s
    ago (in the admin's JDBC zone), and another app's live registration."""
    engine = make_engine(url)
    try:
        create_legacy_schema(engine, "xxl-job", "3.4")
        now = datetime.now(ZoneInfo("Asia/Shanghai")).replace(tzinfo=None, microsecond=0)
        rows = [
            ("EXECUTOR", BIZ, "http://10.9.0.1:9999/", now - timedelta(seconds=5)),
            ("EXECUTOR", BIZ, "http://10.9.0.2:9999/", now - timedelta(seconds=200)),
            ("EXECUTOR", "other-app", "http://10.9.0.3:9999/", now),
        ]
        with engine.begin() as conn:
            for g, k, v, t in rows:
                conn.execute(
                    text(
                        "INSERT INTO xxl_job_registry (registry_group, registry_key, registry_value, update_time) "
                        "VALUES (:g, :k, :v, :t)"
                    ),
                    {"g": g, "k": k, "v": v, "t": t},
                )
    finally:
        engine.dispose()


def test_executors_show_live_then_lost_after_sigkill_and_stopped_after_sigterm(tmp_path: Path) -> None:
    pulsar = server_url("pulsar")
    prefix = f"reg{uuid.uuid4().hex[:6]}"
    events = tmp_path / "events.txt"
    events.touch()
    with mariadb_database("reg") as url, mariadb_database("regxxl") as legacy:
        engine = make_engine(url)
        init_schema(engine, 2)
        engine.dispose()
        _legacy_admin(legacy)
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "JOB_EVENTS": str(events),
            "SWITCHYARD_URL": url,  # the store: from the environment, not the arguments
            "SWITCHYARD_HEARTBEAT_INTERVAL": BEAT,
        }
        # Given two executor processes of the business: one with handlers, one a bridge
        handlers = executor_args(BIZ, pulsar, prefix, 3, "--handlers", "tests.integration.job_handlers")
        bridge = executor_args(
            BIZ,
            pulsar,
            prefix,
            2,
            "--bridge",
            "xxl-job",
            "--executor-address",
            "http://127.0.0.1:9/",
            "--listen",
            f"127.0.0.1:{_free_port()}",
        )
        with (tmp_path / "a.log").open("wb") as out_a, (tmp_path / "b.log").open("wb") as out_b:
            a = start_cli(handlers, out_a, cwd=REPO, env=env)
            b = start_cli(bridge, out_b, cwd=REPO, env=env)

        def logs() -> str:
            return "\n".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "a.log", tmp_path / "b.log"))

        try:
            assert not any(url in arg for arg in a.args + b.args)  # type: ignore[operator]
            # Then both are live, with what they serve
            rows: list[dict[str, Any]] = []

            def both_live() -> bool:
                rows[:] = _executors(url)
                return _by_pid(rows) == {a.pid: "live", b.pid: "live"}

            assert until(both_live, 90, 0.5), (rows, logs())
            row_a = next(r for r in rows if r["pid"] == a.pid)
            row_b = next(r for r in rows if r["pid"] == b.pid)
            assert (row_a["businesses"], row_a["concurrency"], row_a["in_flight"]) == ([BIZ], 3, 0)
            assert (row_b["businesses"], row_b["concurrency"]) == ([BIZ], 2)
            assert row_a["host"] == socket.gethostname() and row_a["version"] not in ("", None)
            assert row_a["heartbeat_interval_s"] == pytest.approx(0.3)

            # When one is killed with SIGKILL (no goodbye): it goes lost, the other stays live
            a.kill()
            a.wait(10)
            assert until(lambda: _by_pid(_executors(url)) == {a.pid: "lost", b.pid: "live"}, 60, 0.5), logs()

            # When the other is stopped with SIGTERM: it says stopped, shown with --all only
            stop_process(b)
            assert b.returncode == 0, logs()
            assert _by_pid(_executors(url)) == {a.pid: "lost"}
            every = _executors(url, "--all", "--business", BIZ, "--legacy-db-tz", "Asia/Shanghai", legacy=legacy)
            assert _by_pid(every) == {a.pid: "lost", b.pid: "stopped"}
            stopped = next(r for r in every if r["pid"] == b.pid)
            assert stopped["stopped_at"] is not None and stopped["in_flight"] == 0
            # And the xxl-job admin's registrations of the app are beside them, by its own rule
            legacy_rows = [(r["host"], r["state"]) for r in every if r["legacy"]]
            assert legacy_rows == [("http://10.9.0.1:9999/", "live"), ("http://10.9.0.2:9999/", "lost")]
        finally:
            for p in (a, b):
                stop_process(p)
