"""Server restarts under load, on the real servers: the Pulsar broker restarted during
publication, MariaDB restarted during acquisition, etcd restarted under a leader. Work
resumes, nothing is lost, and the failure is visible in the scheduler's log or metrics.

These tests restart the SHARED servers (`scripts/stack restart ...`): they live in this
one module so they run one after the other, and each ends with `scripts/stack up` (in a
finally), so the stack is up again whatever happens.

Each test: one `switchyard scheduler run` subprocess (etcd election, Pulsar bus, MariaDB
store, Prometheus metrics on a loopback port), a stream of one-shot triggers due over
about 20 s, and an in-test Executor recording the command ids it runs.
"""
from __future__ import annotations

import re
import socket
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind, TriggerState, command_id
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import REPO, server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]
STACK = REPO / "scripts" / "stack"
BIZ = "restart"


def stack(*args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(STACK), *args], capture_output=True, text=True, timeout=timeout, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def metrics(port: int) -> dict[str, float]:
    """The scheduler's Prometheus samples, `name{labels}` -> value ({} if unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            body = r.read().decode()
    except OSError:
        return {}
    out: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            try:
                out[name] = float(value)
            except ValueError:
                pass
    return out


def errors_of(samples: dict[str, float], component: str) -> float:
    return samples.get(f'switchyard_errors_total{{component="{component}"}}', 0.0)


@dataclass
class Run:
    url: str
    store: SqlTriggerStore
    proc: SchedulerProc
    port: int
    expected: set[str]
    got: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def delivered(self) -> set[str]:
        with self.lock:
            return set(self.got)

    def wait_all(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.expected <= self.delivered():
                return True
            time.sleep(0.25)
        return self.expected <= self.delivered()


@contextmanager
def scheduled_stream(tmp: Path, name: str, n: int = 120, span_s: float = 20.0, lead_s: float = 6.0) -> Iterator[Run]:
    """A store with `n` one-shot triggers due over `span_s` seconds (starting `lead_s`
    from now), one scheduler subprocess, and an executor recording command ids."""
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"rs{uuid.uuid4().hex[:6]}"
    with mariadb_database("restart") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        store.put_job(Job(job_code=JobCode("tick"), biz_code=BIZ, handler="h"))
        t0 = clock.now() + timedelta(seconds=lead_s)
        triggers = store.add_triggers([
            Trigger(job_code=JobCode("tick"), biz_code=BIZ, kind=TriggerKind.ONCE,
                    next_fire_at=t0 + timedelta(seconds=span_s * i / n)) for i in range(n)])
        expected = {command_id(t.id, t.next_fire_at, 0) for t in triggers}  # type: ignore[arg-type]
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        ex = Executor(bus, BIZ, clock=clock, concurrency=16)
        port = _free_port()
        proc = start_scheduler(name, tmp, url=url, bus=pulsar, etcd=etcd, key=f"/sy-restart/{uuid.uuid4().hex[:6]}",
                               prefix=prefix, extra=["--metrics-port", str(port)])
        run = Run(url, store, proc, port, expected)

        @ex.handler()
        def record(ctx: ExecutionContext) -> None:
            with run.lock:
                run.got[ctx.command_id] += 1

        stop = threading.Event()
        ex_thread = threading.Thread(target=ex.run, args=(stop,), daemon=True)
        ex_thread.start()
        try:
            deadline = time.monotonic() + 40
            while store.current_epoch() == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.current_epoch() > 0, "no leader: " + proc.log_text()[-2000:]
            yield run
        finally:
            proc.stop()
            stop.set()
            ex_thread.join(timeout=40)
            ex.close()
            bus.close()
            engine.dispose()


def _report(run: Run, what: str, samples: dict[str, float], extra: str = "") -> str:
    missing = run.expected - run.delivered()
    dups = sum(n - 1 for n in run.got.values())
    return (f"{what}: delivered {len(run.delivered() & run.expected)} of {len(run.expected)} (missing {len(missing)}, "
            f"duplicates {dups}); publish_failures={samples.get('switchyard_publish_failures_total')}, "
            f"errors store={errors_of(samples, 'store')} fire={errors_of(samples, 'fire')} "
            f"results={errors_of(samples, 'results')}; {extra}")


def test_pulsar_restarted_during_publication(tmp_path: Path) -> None:
    try:
        with scheduled_stream(tmp_path, "pub") as run:
            time.sleep(4.0)  # publication under way (the lookahead is 4 s)
            t = time.monotonic()
            restarted = stack("restart", "pulsar")
            down_s = time.monotonic() - t
            assert restarted.returncode == 0, restarted.stderr[-2000:]
            back = time.monotonic()
            all_in = run.wait_all(90)
            after_s = time.monotonic() - back
            samples = metrics(run.port)
            log = run.proc.log_text()
            client_lines = len(re.findall(r"^\S+ \S+ (?:ERROR|WARN) .*ClientConnection", log, re.M))
            cas_losses = samples.get('switchyard_cas_losses_total{stage="outcome"}')
            summary = _report(run, "pulsar restart", samples,
                              f"restart took {down_s:.1f}s, all delivered {after_s:.1f}s after the broker was back; "
                              f"pulsar client ERROR/WARN lines {client_lines}; cas_losses(outcome)="
                              f"{cas_losses}, reclaimed="
                              f"{samples.get('switchyard_triggers_reclaimed_total')}")
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, f"{len(run.expected - run.delivered())} occurrence(s) never delivered after the broker " \
                           f"returned, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            # Switchyard's own account of the outage: its log line or its metrics (the Pulsar
            # client's C++ connection lines on stdout do not count: no metric, no alert)
            visible = ("publication failed" in log or "released to waiting" in log
                       or samples.get("switchyard_publish_failures_total", 0) > 0
                       or errors_of(samples, "bus") > 0 or errors_of(samples, "fire") > 0
                       or errors_of(samples, "results") > 0)
            assert visible, "the broker restart left no trace in Switchyard's log lines or metrics " \
                            "(no 'publication failed', no publish_failures, no errors{component})" + tail
            assert {t.state for t in run.store.triggers_of()} == {TriggerState.COMPLETED}, tail
    finally:
        up = stack("up")
        assert up.returncode == 0, "scripts/stack up failed after the Pulsar restart: " + up.stderr[-2000:]


def test_mariadb_restarted_during_acquisition(tmp_path: Path) -> None:
    try:
        with scheduled_stream(tmp_path, "acq") as run:
            time.sleep(5.0)  # the acquire loops are admitting the stream
            t = time.monotonic()
            restarted = stack("restart", "mariadb")
            down_s = time.monotonic() - t
            assert restarted.returncode == 0, restarted.stderr[-2000:]
            all_in = run.wait_all(90)
            samples = metrics(run.port)
            log = run.proc.log_text()
            summary = _report(run, "mariadb restart", samples, f"restart took {down_s:.1f}s; "
                              f"'tick failed' logged {log.count('tick failed')} time(s)")
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, f"{len(run.expected - run.delivered())} occurrence(s) never delivered after MariaDB " \
                           f"returned, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            assert "tick failed" in log or errors_of(samples, "store") > 0, \
                "the MariaDB restart left no 'tick failed' in the log and no errors{component=\"store\"}" + tail
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and {t.state for t in run.store.triggers_of()} != {TriggerState.COMPLETED}:
                time.sleep(0.25)
            assert {t.state for t in run.store.triggers_of()} == {TriggerState.COMPLETED}, tail
    finally:
        up = stack("up")
        assert up.returncode == 0, "scripts/stack up failed after the MariaDB restart: " + up.stderr[-2000:]


def test_etcd_restarted_under_a_leader(tmp_path: Path) -> None:
    try:
        with scheduled_stream(tmp_path, "ele") as run:
            time.sleep(4.0)
            epoch_before = int(run.store.current_epoch())
            t = time.monotonic()
            restarted = stack("restart", "etcd")
            down_s = time.monotonic() - t
            assert restarted.returncode == 0, restarted.stderr[-2000:]
            all_in = run.wait_all(90)
            samples = metrics(run.port)
            log = run.proc.log_text()
            epoch_after = int(run.store.current_epoch())
            terms = re.findall(r"leading with epoch (\d+)", log)
            summary = _report(run, "etcd restart", samples,
                              f"restart took {down_s:.1f}s; epoch {epoch_before} -> {epoch_after}; terms {terms}; "
                              f"is_leader={samples.get('switchyard_is_leader')}")
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, f"{len(run.expected - run.delivered())} occurrence(s) never delivered after the etcd " \
                           f"restart, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            # it keeps its lease (same epoch, still leading) or regains leadership (a newer term)
            assert samples.get("switchyard_is_leader") == 1.0, "the scheduler is not leading after the restart" + tail
            assert terms and int(terms[-1]) == epoch_after, tail
            assert "etcd call failed" in log or "keep-alive of epoch" in log, \
                "the etcd outage left no trace in the scheduler's log" + tail
            assert {t.state for t in run.store.triggers_of()} == {TriggerState.COMPLETED}, tail
    finally:
        up = stack("up")
        assert up.returncode == 0, "scripts/stack up failed after the etcd restart: " + up.stderr[-2000:]
