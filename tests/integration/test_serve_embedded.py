"""`switchyard serve` end to end, as an operator runs it: a subprocess on SQLite with the
in-process bus. One-shot, cron and fan-out jobs run, results are recorded, a business added
while it runs gets an executor, the metrics and the console answer; SIGTERM and a start
again lose nothing: a one-shot published ahead before the stop runs after the restart,
the cron occurrences missed while it was down run, and no run happens twice."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from scheduler_core.model import FiredState, Job, JobCode, Trigger, TriggerKind
from switchyard.wiring import open_store
from tests.argv_urls import urls_in_env
from tests.integration.procs import start_cli

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _runs(log: Path) -> list[dict[str, Any]]:
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def _until(what: str, cond: Callable[[], bool], proc: subprocess.Popen[bytes], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        assert proc.poll() is None, f"serve exited while waiting for {what}"
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read().decode()


def _start(url: str, out: Path, run_log: Path, metrics: int, console: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "SERVE_RUN_LOG": str(run_log), "PYTHONPATH": str(REPO)}
    env.pop("SWITCHYARD_CONSOLE_TOKEN", None)
    args = [
        "serve",
        "--url",
        url,
        "--handlers",
        "tests.serve_handlers",
        "--name",
        "serve-test",
        "--lookahead",
        "60",
        "--idle-wait",
        "0.5",
        "--metrics-port",
        str(metrics),
        "--console",
        "--console-port",
        str(console),
        "--log-level",
        "INFO",
    ]
    with out.open("ab") as f:
        return start_cli(args, f, env=env, cwd=str(REPO))


def _stop(proc: subprocess.Popen[bytes]) -> int:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=90)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
        raise AssertionError("serve did not stop within 90 s of SIGTERM") from None


def _db_init(url: str) -> None:
    """`switchyard db init` of the store, as an operator runs it before `serve`."""
    argv, env = urls_in_env(["db", "init", "--url", url])
    init = subprocess.run(
        [sys.executable, "-m", "switchyard", *argv],
        env=env,
        capture_output=True,
        text=True,
        cwd=str(REPO),
        timeout=120,
    )
    assert init.returncode == 0, init.stderr


def test_serve_runs_everything_in_one_process_and_a_restart_loses_nothing(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    _db_init(url)
    store = open_store(url)
    now = store.clock.now()
    t0 = datetime.fromtimestamp((int(now.timestamp()) // 2 + 2) * 2, tz=timezone.utc)  # an even second ahead
    for job in (
        Job(job_code=JobCode("tick"), biz_code="alpha", handler="h"),
        Job(job_code=JobCode("once"), biz_code="alpha", handler="h"),
        Job(job_code=JobCode("fan"), biz_code="beta", handler="h", shard_total=12, envelope_size=4),
        Job(job_code=JobCode("later"), biz_code="beta", handler="h"),
    ):
        store.put_job(job)

    def once(code: str, biz: str, after_s: int) -> Trigger:
        return Trigger(
            job_code=JobCode(code), biz_code=biz, kind=TriggerKind.ONCE, next_fire_at=t0 + timedelta(seconds=after_s)
        )

    store.add_triggers(
        [
            Trigger(
                job_code=JobCode("tick"), biz_code="alpha", kind=TriggerKind.CRON, cron="0/2 * * * * ?", next_fire_at=t0
            ),
            once("once", "alpha", 1),
            once("fan", "beta", 2),
            once("later", "beta", 40),  # published ahead (60 s lookahead) by the first process, due after it stopped
            # a fan-out published ahead too: its page records (4 items each) are published again
            once("fan", "beta", 41),
        ]
    )
    run_log, out = tmp_path / "runs.jsonl", tmp_path / "serve.log"
    metrics, console = _free_port(), _free_port()

    proc = _start(url, out, run_log, metrics, console)
    jobs = lambda: Counter(str(r["job"]) for r in _runs(run_log))  # noqa: E731
    _until(
        "one-shot, fan-out and three ticks",
        lambda: jobs()["once"] == 1 and jobs()["fan"] == 12 and jobs()["tick"] >= 3,
        proc,
    )
    # a business added while it runs gets its executor
    store.put_job(Job(job_code=JobCode("gamma-job"), biz_code="gamma", handler="h"))
    store.add_triggers(
        [
            Trigger(
                job_code=JobCode("gamma-job"),
                biz_code="gamma",
                kind=TriggerKind.ONCE,
                next_fire_at=store.clock.now() + timedelta(seconds=1),
            )
        ]
    )
    _until("the new business's job", lambda: jobs()["gamma-job"] == 1, proc)
    # the same metrics as the distributed scheduler, and the console
    text = _get(f"http://127.0.0.1:{metrics}/")
    assert "switchyard_is_leader 1.0" in text and 'switchyard_commands_published_total{biz_code="beta"}' in text
    sched = json.loads(_get(f"http://127.0.0.1:{console}/api/scheduler"))
    assert sched["leader"] == "serve-test" and sched["members"][0]["reachable"]
    lag = {d["biz_code"]: d for d in json.loads(_get(f"http://127.0.0.1:{console}/api/lag"))["businesses"]}
    assert lag["alpha"]["received_lag_s"]["p50"] is not None
    assert "later" not in jobs() and jobs()["fan"] == 12
    assert _stop(proc) == 0, out.read_text()[-3000:]
    first_pid = proc.pid
    stopped_at = time.time()

    time.sleep(3)  # down for a few ticks
    proc = _start(url, out, run_log, metrics, console)
    try:
        _until(
            "the one-shot and fan-out published before the stop",
            lambda: jobs()["later"] == 1 and jobs()["fan"] == 24,
            proc,
        )
        _until(
            "ticks after the restart",
            lambda: max(int(r["T"]) for r in _runs(run_log) if r["job"] == "tick") > (stopped_at + 6) * 1000,
            proc,
        )
    finally:
        assert _stop(proc) == 0, out.read_text()[-3000:]

    runs = _runs(run_log)
    keys = Counter((r["job"], r["T"], r["item"]) for r in runs)
    assert [k for k, n in keys.items() if n > 1] == [], "a run happened twice"
    fan_at = sorted({int(r["T"]) for r in runs if r["job"] == "fan"})
    assert len(fan_at) == 2
    for at in fan_at:
        assert sorted(int(r["item"]) for r in runs if r["job"] == "fan" and r["T"] == at) == list(range(12))
    assert {int(r["pid"]) for r in runs if r["job"] == "fan" and r["T"] == fan_at[1]} == {proc.pid}
    ticks = sorted(int(r["T"]) for r in runs if r["job"] == "tick")
    assert ticks == list(range(ticks[0], ticks[-1] + 1, 2000)), "a cron occurrence was lost across the restart"
    assert ticks[0] == int(t0.timestamp() * 1000)
    assert {int(r["pid"]) for r in runs if r["job"] == "later"} == {proc.pid} != {first_pid}
    log_text = out.read_text()
    assert "command(s) published again from the store" in log_text and "Traceback" not in log_text
    republished = [
        int(line.split("serve serve-test: ")[1].split(" ")[0])
        for line in log_text.splitlines()
        if "published again from the store" in line
    ]
    assert republished[0] == 0 and republished[1] >= 1  # the second start put back what the first had published
    # every run's result is recorded in the store
    last = max(int(r["T"]) for r in runs)  # type: ignore[call-overload]
    records = store.fired_between(
        None, t0 - timedelta(seconds=1), datetime.fromtimestamp(last / 1000 + 0.5, tz=timezone.utc)
    )
    recorded = {(r.job_code, int(r.scheduled_at.timestamp() * 1000), r.item_index): r for r in records}
    for key in keys:
        job, at, item = key
        rec = recorded.get((JobCode(str(job)), int(at), int(item)))
        if rec is None and job == "fan":  # a page record stands for its envelope's items
            rec = recorded[(JobCode(str(job)), int(at), int(item) // 4 * 4)]
        assert rec is not None and rec.state is FiredState.SUCCEEDED, (key, rec)
    store.engine.dispose()


def test_serve_with_the_xxl_job_bridge_needs_no_handler_code(tmp_path: Path) -> None:
    """`switchyard serve --bridge xxl-job`: a migrated xxl-job job (handler `xxl-job-bridge`)
    runs on the business's own executor (the stand-in) with no handlers module; its result
    comes back through the bridge's endpoint into the store; the token is never logged."""
    import json
    import os

    from sqlalchemy import select

    from scheduler_core.model import FiredState
    from tests.standins.xxl_executor import XxlExecutorStandIn
    from tests.unit.test_bridges import xxl_params

    secret = "serve-xxl-secret-51c2"
    url = f"sqlite:///{tmp_path / 'center.db'}"
    _db_init(url)
    store = open_store(url)
    store.put_job(
        Job(
            job_code=JobCode("xxl:demo:7"),
            biz_code="demo",
            handler="xxl-job-bridge",
            params=json.dumps(xxl_params(job_id="7")),
        )
    )
    due = store.clock.now() + timedelta(seconds=2)
    (trigger,) = store.add_triggers(
        [Trigger(job_code=JobCode("xxl:demo:7"), biz_code="demo", kind=TriggerKind.ONCE, next_fire_at=due)]
    )
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}/"
    out = tmp_path / "serve.log"
    with XxlExecutorStandIn(access_token=secret, admin_addresses=[endpoint]) as xxl:
        args = [
            "serve",
            "--url",
            url,
            "--bridge",
            "xxl-job",
            "--executor-address",
            xxl.address,
            "--access-token-env",
            "SERVE_XXL_TOKEN",
            "--listen",
            f"127.0.0.1:{port}",
            "--name",
            "serve-bridge",
            "--lookahead",
            "60",
            "--idle-wait",
            "0.5",
            "--log-level",
            "DEBUG",
        ]
        with out.open("wb") as f:
            proc = start_cli(
                args, f, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO), "SERVE_XXL_TOKEN": secret}
            )
        try:

            def done() -> bool:
                with store.engine.connect() as conn:
                    states = [
                        r[0]
                        for r in conn.execute(
                            select(store.t.fired.c.state).where(store.t.fired.c.trigger_id == trigger.id)
                        )
                    ]
                return states == [FiredState.SUCCEEDED.value]

            _until("the bridged run's success in the store", done, proc)
            assert [t["jobId"] for t in xxl.triggers] == [2**31 - 1 - 7]  # the bridge's own job id
        finally:
            code = _stop(proc)
            store.engine.dispose()
    text = out.read_text(errors="replace")
    assert "xxl-job bridge: endpoint " + endpoint in text
    assert secret not in text
    assert code == 0, text[-2000:]
