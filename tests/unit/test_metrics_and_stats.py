"""Prometheus exposition and `scheduler stats --json` (fire-time lag per business)."""

from __future__ import annotations

import json
import socket
import urllib.request
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner

from scheduler_core.clock import ManualClock
from scheduler_core.executor import Executor
from switchyard.cli import cli
from tests.harness import make_harness


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_metrics_are_exposed_and_stats_report_lag_per_business(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    for biz in ("sop", "reminder"):
        job = h.job(f"j-{biz}", biz=biz, shard_total=4)
        h.once(job, 1)
    core = h.core()
    consumer = h.results(core)
    executors = [Executor(h.bus, biz, clock=clock) for biz in ("sop", "reminder")]  # subscribed before publishing
    core.tick_all()
    clock.advance(timedelta(seconds=1.25))  # executors take the commands 250 ms after T
    for ex in executors:
        ex.handler()(lambda ctx: None)
        ex.poll_once(timeout=timedelta(0))
    assert consumer.poll(timeout=timedelta(0)) == 8

    port = _free_port()
    core.metrics.serve(port)
    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
    assert 'switchyard_commands_published_total{biz_code="sop"} 4.0' in body
    assert "switchyard_fire_lag_seconds_bucket" in body and "switchyard_acquire_cycle_seconds" in body

    url = f"sqlite:///{tmp_path / 'sched.db'}"
    out = CliRunner().invoke(cli, ["scheduler", "stats", "--url", url, "--json", "--since", str(10**9)])
    assert out.exit_code == 0, out.output
    stats = {d["biz_code"]: d for d in json.loads(out.output)["businesses"]}
    assert set(stats) == {"sop", "reminder"}
    for d in stats.values():
        assert d["commands"] == 4 and d["states"] == {"succeeded": 4}
        assert abs(d["received_lag_s"]["p99"] - 0.25) < 0.01
