"""Scheduler processes for fault tests: started as real `switchyard scheduler run`
subprocesses, ended by their PID only; and CPU hogs for the stress variants (the same)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from tests.argv_urls import urls_in_env


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
