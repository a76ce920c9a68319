"""The soak's long-running processes: each a real `switchyard` subprocess the soak started,
restartable, ended only by its own PID; with every instance it ever ran (for the memory
check and the report)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.procs import start_cli, stop_process

log = logging.getLogger(__name__)


@dataclass
class Managed:
    """One role (a scheduler, an executor, a stream): `argv` run with `env` from `cwd`;
    `instances` the (pid, started monotonic) of each start."""

    role: str
    name: str
    argv: list[str]
    log: Path
    env: dict[str, str] | None = None
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    instances: list[tuple[int, float]] = field(default_factory=list)
    in_fault: bool = False  # the nemesis is killing and restarting it: nobody else restarts it

    def start(self) -> None:
        with self.log.open("ab") as out:
            out.write(f"\n--- start {time.strftime('%H:%M:%S')}\n".encode())
            out.flush()
            self.proc = start_cli(self.argv, out, env=self.env, cwd=self.cwd)
        self.instances.append((self.proc.pid, time.monotonic()))

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None and self.proc.poll() is None else None

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def sigstop(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGSTOP)

    def sigcont(self) -> None:
        if self.pid is not None:
            os.kill(self.pid, signal.SIGCONT)

    def ensure_running(self) -> bool:
        """Start it again if it died on its own (a crash the nemesis did not cause is a
        finding, logged by the caller); True when it had to."""
        if self.proc is not None and self.proc.poll() is not None:
            self.start()
            return True
        return False

    def stop(self) -> None:
        if self.proc is not None:
            if self.proc.poll() is None:
                os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process cannot take its SIGTERM
            stop_process(self.proc)


def rss_kib(pid: int) -> int | None:
    """The resident set of a process, in KiB (None: gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


def wait_for(check: Callable[[], bool], within_s: float, every_s: float = 0.2) -> float | None:
    """Seconds until `check()` held, or None if it did not within `within_s`. A check that
    raises has not held yet: the probes read the servers the nemesis restarts (a pooled
    connection from before a MariaDB restart fails once: "lost connection"), and one such
    error killed the probe's thread, leaving a recovered restart counted unrecovered."""
    start = time.monotonic()
    while time.monotonic() - start < within_s:
        try:
            if check():
                return time.monotonic() - start
        except Exception as exc:
            log.debug("probe not answered yet: %s", exc)
        time.sleep(every_s)
    return None
