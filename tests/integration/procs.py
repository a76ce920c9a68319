"""Scheduler processes for fault tests: started as real `switchyard scheduler run`
subprocesses, ended by their PID only; a scheduler and an executor process on MariaDB and
Pulsar for the end-to-end tests of native jobs (`scheduler_and_executor`), and the CLI's
answers read in this process (`cli_json`); CPU hogs for the stress variants."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from click.testing import CliRunner

from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.servers import REPO, server_url


@dataclass
class SchedulerProc:
    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        stop_process(self.proc)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def stop_process(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    """SIGTERM, a bounded wait, then SIGKILL: a process the test started, by its PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def start_cli(args: list[str], out: IO[bytes], **popen: Any) -> subprocess.Popen[bytes]:
    """`python -m switchyard ARGS` as a subprocess of the test, both output streams to
    `out`, no stdin; `popen`: more of Popen's arguments (cwd, env). A URL carrying a
    password goes in its environment variable, not the arguments (tests.argv_urls)."""
    args, popen["env"] = urls_in_env(args, popen.get("env"))
    return subprocess.Popen(
        [sys.executable, "-m", "switchyard", *args],
        stdout=out,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        **popen,
    )


def stream_args(source: str, legacy_url: str, target_url: str, *more: str) -> list[str]:
    """The arguments of `switchyard migrate stream` from `source`'s legacy database."""
    return ["migrate", "stream", "--source", source, "--legacy-url", legacy_url, "--url", target_url, *more]


def executor_args(biz: str, bus: str, prefix: str, concurrency: int, *more: str) -> list[str]:
    """The arguments of `switchyard executor run` for business `biz` on the Pulsar `bus`
    under topic prefix `prefix`; `more`: its handlers or bridges."""
    return [
        "executor",
        "run",
        "--business",
        biz,
        "--bus",
        bus,
        "--topic-prefix",
        prefix,
        "--concurrency",
        str(concurrency),
        *more,
    ]


def forced_cutover_args(biz: str, target_url: str, legacy_url: str, reason: str, *more: str) -> list[str]:
    """The arguments of `switchyard cutover` of `biz` forced past the gate with `reason`,
    answering in JSON."""
    return [
        "cutover",
        "--business",
        biz,
        "--url",
        target_url,
        "--legacy-url",
        legacy_url,
        "--force",
        "--reason",
        reason,
        "--json",
        *more,
    ]


def start_scheduler(
    name: str, tmp: Path, *, url: str, bus: str, etcd: str, key: str, prefix: str, extra: list[str] | None = None
) -> SchedulerProc:
    log = tmp / f"{name}.log"
    args = [
        "scheduler",
        "run",
        "--url",
        url,
        "--bus",
        bus,
        "--election",
        etcd,
        "--election-key",
        key,
        "--topic-prefix",
        prefix,
        "--name",
        name,
        "--lease-ttl",
        "2",
        "--idle-wait",
        "0.3",
        "--acquire-deadline",
        "3",
        "--reclaim-interval",
        "0.5",
        "--lookahead",
        "4",
        "--log-level",
        "INFO",
        *(extra or []),
    ]
    with log.open("wb") as out:
        proc = start_cli(args, out)
    return SchedulerProc(name, proc, log)


def cli_json(url: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """The answer of `switchyard ARGS --json` against the store at `url` (given as
    SWITCHYARD_URL, the bus in memory, `env`: more of the environment), run in this process
    by click's runner: these calls test the command and its answer, not a process boundary,
    and a CLI process costs seconds of start-up on a loaded machine (a poll loop of them,
    most of a test's time). From one thread at a time: the runner swaps sys.stdout."""
    res = CliRunner().invoke(
        cli,
        [*args, "--json"],
        env={"SWITCHYARD_URL": url, "SWITCHYARD_BUS": "memory", **(env or {})},
        catch_exceptions=False,
    )
    assert res.exit_code == 0, f"switchyard {' '.join(args)}: exit {res.exit_code}\n{res.output}"
    return json.loads(res.stdout)


@dataclass
class SchedulerAndExecutor:
    """A `switchyard scheduler run` and a `switchyard executor run` process on a fresh
    MariaDB database and the Pulsar broker, under a topic prefix of their own."""

    url: str
    bus: str
    prefix: str
    scheduler: SchedulerProc
    executor: subprocess.Popen[bytes]
    executor_log: Path

    def logs(self) -> str:
        """Both processes' last lines, for an assertion's message."""
        executor = self.executor_log.read_text(errors="replace")[-3000:]
        return f"--- scheduler\n{self.scheduler.log_text()[-3000:]}\n--- executor\n{executor}"


@contextmanager
def scheduler_and_executor(
    tmp: Path,
    biz: str,
    handlers: str,
    *,
    concurrency: int = 2,
    env: dict[str, str] | None = None,
    executor_more: tuple[str, ...] = (),
) -> Iterator[SchedulerAndExecutor]:
    """A store of the current schema on a database of its own, a scheduler (local election)
    and an executor of business `biz` with the handlers of module `handlers`; `env`: more
    of the executor's environment (where its handlers write what they saw); `executor_more`:
    more of its arguments. The store URL
    reaches both processes through SWITCHYARD_URL, never their arguments. Both are ended by
    their PID when the block ends."""
    bus = server_url("pulsar")
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        engine.dispose()
        prefix = f"{biz[:8]}{uuid.uuid4().hex[:6]}"
        scheduler = start_scheduler("s0", tmp, url=url, bus=bus, etcd="local", key="/k", prefix=prefix)
        try:
            log = tmp / "executor.log"
            child_env = {**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_URL": url, **(env or {})}
            with log.open("wb") as out:
                args = executor_args(biz, bus, prefix, concurrency, "--handlers", handlers, *executor_more)
                executor = start_cli(args, out, cwd=REPO, env=child_env)
            try:
                yield SchedulerAndExecutor(url, bus, prefix, scheduler, executor, log)
            finally:
                stop_process(executor)
        finally:
            scheduler.stop()


# a busy loop that ends itself after argv[1] seconds, whatever happens to the test that started it
_HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@contextmanager
def cpu_hogs(n: int, bound_s: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """`n` processes keeping a CPU busy each, for at most `bound_s` seconds; killed by their
    PID when the block ends."""
    hogs: list[subprocess.Popen[bytes]] = []
    try:
        for _ in range(n):
            hogs.append(
                subprocess.Popen(
                    [sys.executable, "-c", _HOG, str(bound_s)],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        yield hogs
    finally:
        for h in hogs:
            if h.poll() is None:
                os.kill(h.pid, signal.SIGKILL)
            h.wait(timeout=10)
