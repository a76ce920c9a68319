"""Server restarts under load, on the real servers: the Pulsar broker restarted during
publication, MariaDB restarted during acquisition, etcd restarted under a leader. Work
resumes, nothing is lost, and the failure is visible in the scheduler's log AND in its
metrics: each scenario asserts at least one pair of a Switchyard log line and the Prometheus
counter that goes with it (`VisibilityPair`), both non-zero after the outage. The Pulsar
client's own C++ connection lines on stdout do not count: no metric, no alert.

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
from scheduler_core.election.etcd import EtcdElection
from scheduler_core.errors import ElectionError
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, Job, JobCode, Trigger, TriggerKind, TriggerState, command_id
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import REPO, server_url

# exclusive: the shared servers restart under these tests, so they run alone, after the
# parallel run (scripts/test)
pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd, pytest.mark.exclusive]
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


@dataclass(frozen=True)
class VisibilityPair:
    """One way an outage shows: a line the scheduler logs and the counter it increments."""

    log_pattern: str  # a regular expression over the scheduler's log
    metric: str  # a sample name as the exposition shows it, labels included

    def seen(self, log: str, samples: dict[str, float]) -> tuple[int, float]:
        return len(re.findall(self.log_pattern, log)), samples.get(self.metric, 0.0)


def visibility(pairs: list[VisibilityPair], log: str, samples: dict[str, float]) -> tuple[list[str], str]:
    """(the pairs seen in both the log and the metrics, a one-line account of every pair)."""
    both: list[str] = []
    parts: list[str] = []
    for pair in pairs:
        lines, value = pair.seen(log, samples)
        parts.append(f"{pair.log_pattern!r} x{lines} / {pair.metric}={value:g}")
        if lines > 0 and value > 0:
            both.append(pair.metric)
    return both, "; ".join(parts)


def _errors(component: str) -> str:
    return f'switchyard_errors_total{{component="{component}"}}'


PULSAR_PAIRS = [
    VisibilityPair(r"publication slow: ", _errors("bus")),
    VisibilityPair(r"publication failed for ", "switchyard_publish_failures_total"),
    VisibilityPair(r"applying results failed ", _errors("results")),
    VisibilityPair(r"fire of \d+ trigger\(s\) failed", _errors("fire")),
]
MARIADB_PAIRS = [
    VisibilityPair(r"tick failed; retrying", _errors("store")),
    VisibilityPair(r"reclaim failed; retrying", _errors("store")),
    VisibilityPair(r"fire of \d+ trigger\(s\) failed", _errors("fire")),
    VisibilityPair(r"applying results failed ", _errors("results")),
]
ETCD_ERROR_PAIRS = [
    VisibilityPair(r"etcd call failed, retrying", 'switchyard_election_errors_total{stage="campaign"}'),
    VisibilityPair(r"keep-alive of epoch \d+ failed, retrying", 'switchyard_election_errors_total{stage="keepalive"}'),
]
ETCD_RECONNECT_PAIRS = [
    VisibilityPair(r"etcd answers again", 'switchyard_election_reconnects_total{stage="campaign"}'),
    VisibilityPair(r"keep-alive of epoch \d+ recovered", 'switchyard_election_reconnects_total{stage="keepalive"}'),
]


@dataclass
class Run:
    url: str
    store: SqlTriggerStore
    proc: SchedulerProc
    port: int
    expected: set[CommandId]
    got: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)
    others: list[SchedulerProc] = field(default_factory=list)  # further shard members

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
def scheduled_stream(
    tmp: Path, name: str, n: int = 120, span_s: float = 20.0, lead_s: float = 6.0, members: int = 1
) -> Iterator[Run]:
    """A store with `n` one-shot triggers due over `span_s` seconds (starting `lead_s`
    from now), one scheduler subprocess (or `members` shard members, `--shards`), and an
    executor recording command ids."""
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"rs{uuid.uuid4().hex[:6]}"
    with mariadb_database("restart") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        store.put_job(Job(job_code=JobCode("tick"), biz_code=BIZ, handler="h"))
        t0 = clock.now() + timedelta(seconds=lead_s)
        triggers = store.add_triggers(
            [
                Trigger(
                    job_code=JobCode("tick"),
                    biz_code=BIZ,
                    kind=TriggerKind.ONCE,
                    next_fire_at=t0 + timedelta(seconds=span_s * i / n),
                )
                for i in range(n)
            ]
        )
        expected = {command_id(t.id, t.next_fire_at, 0) for t in triggers}  # type: ignore[arg-type]
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        ex = Executor(bus, BIZ, clock=clock, concurrency=16)
        port = _free_port()
        key = f"/sy-restart/{uuid.uuid4().hex[:6]}"
        shards = ["--shards", "--registry-prefix", f"{key}/shards"] if members > 1 else []
        procs = [
            start_scheduler(
                f"{name}{i}" if i else name,
                tmp,
                url=url,
                bus=pulsar,
                etcd=etcd,
                key=key,
                prefix=prefix,
                extra=[*shards, "--metrics-port", str(port if i == 0 else _free_port())],
            )
            for i in range(members)
        ]
        proc = procs[0]
        run = Run(url, store, proc, port, expected, others=procs[1:])

        @ex.handler()
        def record(ctx: ExecutionContext) -> None:
            with run.lock:
                run.got[ctx.command_id] += 1

        stop = threading.Event()
        ex_thread = threading.Thread(target=ex.run, args=(stop,), daemon=True)
        ex_thread.start()
        try:
            deadline = time.monotonic() + 40

            def ready() -> bool:
                if members == 1:
                    return store.current_epoch() > 0
                # the shard members: every partition owned (a partition's epoch is its own)
                owned = set().union(*(re.findall(r"partition (p\d+): owned", p.log_text()) for p in procs))
                return len(owned) >= 4

            while not ready() and time.monotonic() < deadline:
                time.sleep(0.1)
            assert ready(), "no leader: " + "".join(p.log_text()[-2000:] for p in procs)
            yield run
        finally:
            for p in procs:
                p.stop()
            stop.set()
            ex_thread.join(timeout=40)
            ex.close()
            bus.close()
            engine.dispose()


def _report(run: Run, what: str, samples: dict[str, float], extra: str = "") -> str:
    missing = run.expected - run.delivered()
    dups = sum(n - 1 for n in run.got.values())
    return (
        f"{what}: delivered {len(run.delivered() & run.expected)} of {len(run.expected)} (missing {len(missing)}, "
        f"duplicates {dups}); publish_failures={samples.get('switchyard_publish_failures_total')}, "
        f"errors store={errors_of(samples, 'store')} fire={errors_of(samples, 'fire')} "
        f"results={errors_of(samples, 'results')}; {extra}"
    )


def test_election_connection_errors_are_counted() -> None:
    """The election's counters move where it catches etcd's connection errors: a candidate
    that cannot reach etcd counts every failed campaign call (in every scheduler registry of
    the process), then one that reaches the real etcd counts nothing more."""
    etcd = server_url("etcd")
    metrics = SchedulerMetrics()

    def count() -> float:
        return metrics.registry.get_sample_value("switchyard_election_errors_total", {"stage": "campaign"}) or 0.0

    before = count()
    down = EtcdElection(
        f"http://127.0.0.1:{_free_port()}", name="nobody", ttl=timedelta(seconds=2), backoff=timedelta(milliseconds=50)
    )
    try:
        with pytest.raises(ElectionError, match="etcd unreachable"):
            down.campaign(timedelta(seconds=1.5))
    finally:
        down.close()
    failed = count() - before
    assert failed >= 2, f"{failed} failed campaign call(s) counted in 1.5 s of retries against a closed port"
    assert (
        SchedulerMetrics().registry.get_sample_value("switchyard_election_errors_total", {"stage": "campaign"})
        == count()
    ), "one process-wide counter"
    up = EtcdElection(etcd, name="somebody", ttl=timedelta(seconds=2), key=f"/sy-restart/{uuid.uuid4().hex[:6]}")
    try:
        assert up.campaign(timedelta(seconds=20)) is not None
        assert count() - before == failed, "a healthy campaign counts no error"
    finally:
        up.close()


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
            summary = _report(
                run,
                "pulsar restart",
                samples,
                f"restart took {down_s:.1f}s, all delivered {after_s:.1f}s after the broker was back; "
                f"pulsar client ERROR/WARN lines {client_lines}; cas_losses(outcome)="
                f"{cas_losses}, reclaimed="
                f"{samples.get('switchyard_triggers_reclaimed_total')}",
            )
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, (
                f"{len(run.expected - run.delivered())} occurrence(s) never delivered after the broker "
                f"returned, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            )
            # Switchyard's own account of the outage: a log line AND its counter
            both, seen = visibility(PULSAR_PAIRS, log, samples)
            print(f"pulsar restart visible in log and metrics: {both or 'none'} ({seen})")
            assert both, "the broker restart is not visible in BOTH Switchyard's log and its metrics: " + seen + tail
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
            both, seen = visibility(MARIADB_PAIRS, log, samples)
            summary = _report(
                run,
                "mariadb restart",
                samples,
                f"restart took {down_s:.1f}s; 'tick failed' logged {log.count('tick failed')} time(s); visible: {seen}",
            )
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, (
                f"{len(run.expected - run.delivered())} occurrence(s) never delivered after MariaDB "
                f"returned, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            )
            assert both, (
                "the MariaDB restart is not visible in BOTH the scheduler's log and its metrics: " + seen + tail
            )
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and {t.state for t in run.store.triggers_of()} != {
                TriggerState.COMPLETED
            }:
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
            errors_seen, errors_text = visibility(ETCD_ERROR_PAIRS, log, samples)
            back_seen, back_text = visibility(ETCD_RECONNECT_PAIRS, log, samples)
            summary = _report(
                run,
                "etcd restart",
                samples,
                f"restart took {down_s:.1f}s; epoch {epoch_before} -> {epoch_after}; terms {terms}; "
                f"is_leader={samples.get('switchyard_is_leader')}; errors: {errors_text}; "
                f"reconnects: {back_text}",
            )
            print(summary)
            tail = f"\n{summary}\n--- scheduler log (tail)\n{log[-4000:]}"
            assert all_in, (
                f"{len(run.expected - run.delivered())} occurrence(s) never delivered after the etcd "
                f"restart, e.g. {sorted(run.expected - run.delivered())[:3]}" + tail
            )
            # it keeps its lease (same epoch, still leading) or regains leadership (a newer term)
            assert samples.get("switchyard_is_leader") == 1.0, "the scheduler is not leading after the restart" + tail
            assert terms and int(terms[-1]) == epoch_after, tail
            # the outage and the recovery, each in the log AND in switchyard_election_*_total
            assert errors_seen, (
                "the etcd outage is not visible in BOTH the log and "
                "switchyard_election_errors_total: " + errors_text + tail
            )
            assert back_seen, (
                "the etcd recovery is not visible in BOTH the log and "
                "switchyard_election_reconnects_total: " + back_text + tail
            )
            assert {t.state for t in run.store.triggers_of()} == {TriggerState.COMPLETED}, tail
    finally:
        up = stack("up")
        assert up.returncode == 0, "scripts/stack up failed after the etcd restart: " + up.stderr[-2000:]


def test_etcd_restarted_under_shard_members(tmp_path: Path) -> None:
    """Two `--shards` members share the partitions through the etcd registry; etcd restarts
    under them. Every occurrence is delivered, none twice (the chaos soak with server
    restarts saw a business fire nothing for about two minutes after one, on a loaded box)."""
    try:
        with scheduled_stream(tmp_path, "shr", members=2) as run:
            time.sleep(4.0)
            t = time.monotonic()
            restarted = stack("restart", "etcd")
            down_s = time.monotonic() - t
            assert restarted.returncode == 0, restarted.stderr[-2000:]
            all_in = run.wait_all(90)
            samples = metrics(run.port)
            summary = _report(run, "etcd restart under 2 shard members", samples, f"restart took {down_s:.1f}s")
            print(summary)
            logs = "".join(f"\n--- {p.name} (tail)\n{p.log_text()[-3000:]}" for p in [run.proc, *run.others])
            assert all_in, (
                f"{len(run.expected - run.delivered())} occurrence(s) never delivered after the etcd restart, "
                f"e.g. {sorted(run.expected - run.delivered())[:3]}\n{summary}{logs}"
            )
            assert not [c for c, n in run.got.items() if n > 1], f"an occurrence ran twice\n{summary}{logs}"
    finally:
        up = stack("up")
        assert up.returncode == 0, "scripts/stack up failed after the etcd restart: " + up.stderr[-2000:]
