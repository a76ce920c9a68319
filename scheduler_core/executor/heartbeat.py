"""An executor process's heartbeat into the executor registry (scheduler_core.store.executors).

    registry = SqlExecutorRegistry(engine)          # the store's engine
    with Heartbeat(registry, lambda: [executor], name="billing-1", instance_id=executor.instance_id):
        executor.run(stop)

One thread per process, apart from the receive and worker threads: every `interval` it
upserts the process's row (its businesses, host, pid, package version, concurrency, the
runs in work now, and its interval, by which a reader judges it lost), and on a clean
stop (leaving the `with`, or `close()`) it marks the row stopped. A beat that fails (the
store down, a table `db init` has not made yet) is a warning and the next interval tries
again: the registry is for people, so it never stops an executor. Every `PRUNE_EVERY`
beats it also deletes a bounded batch of rows past the registry's retention.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from datetime import timedelta
from importlib.metadata import PackageNotFoundError, version
from types import TracebackType
from typing import Protocol

from scheduler_core.executor.identity import new_instance_id
from scheduler_core.store.executors import ExecutorBeat

log = logging.getLogger(__name__)
DEFAULT_INTERVAL = timedelta(seconds=5)
PRUNE_EVERY = 60  # beats between two prunes of rows past the retention (5 min at the default)
DISTRIBUTION = "switchyard"


class BeatWriter(Protocol):
    def beat(self, beat: ExecutorBeat) -> None: ...

    def goodbye(self, instance_id: str) -> None: ...

    def prune(self) -> int: ...


class Serving(Protocol):
    """What the heartbeat reads of an executor (scheduler_core.executor.Executor)."""

    biz_code: str
    concurrency: int

    def in_flight(self) -> int: ...


def package_version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


class Heartbeat:
    def __init__(
        self,
        writer: BeatWriter,
        executors: Callable[[], Sequence[Serving]],
        *,
        name: str,
        interval: timedelta = DEFAULT_INTERVAL,
        instance_id: str | None = None,
    ) -> None:
        if interval <= timedelta(0):
            raise ValueError(f"the heartbeat interval must be positive, got {interval}")
        self.writer = writer
        self.executors = executors
        self.name = name
        self.interval = interval
        # the id the process's executors name in their results (Executor.instance_id)
        self.instance_id = instance_id or new_instance_id()
        self.host = socket.gethostname()
        self.pid = os.getpid()
        self.version = package_version()
        self.beats = 0  # beats written
        self.failures = 0  # beats that failed in a row
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> ExecutorBeat:
        """The row as of now: the executors' businesses, summed quota and runs in work."""
        serving = list(self.executors())
        return ExecutorBeat(
            instance_id=self.instance_id,
            name=self.name,
            biz_codes=tuple(sorted({ex.biz_code for ex in serving})),
            host=self.host,
            pid=self.pid,
            version=self.version,
            concurrency=sum(ex.concurrency for ex in serving),
            in_flight=sum(ex.in_flight() for ex in serving),
            interval=self.interval,
        )

    def beat_once(self) -> bool:
        """One beat; False (and a warning) if it could not be written."""
        try:
            self.writer.beat(self.snapshot())
        except Exception as exc:  # noqa: BLE001 - any failure: warn, try again next interval
            self.failures += 1
            log.warning(
                "executor registry: heartbeat %s not written (%d in a row), retried in %gs: %s",
                self.instance_id,
                self.failures,
                self.interval.total_seconds(),
                exc,
            )
            return False
        if self.failures:
            log.info("executor registry: heartbeat %s written again", self.instance_id)
        self.failures = 0
        self.beats += 1
        if self.beats % PRUNE_EVERY == 1:
            self._prune()
        return True

    def _prune(self) -> None:
        try:
            gone = self.writer.prune()
        except Exception as exc:  # noqa: BLE001 - housekeeping: tried again later
            log.warning("executor registry: pruning old rows failed: %s", exc)
            return
        if gone:
            log.info("executor registry: %d row(s) past the retention deleted", gone)

    def start(self) -> Heartbeat:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="executor-heartbeat", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        seconds = self.interval.total_seconds()
        while True:
            self.beat_once()
            if self._stop.wait(seconds):
                return

    def close(self, *, goodbye: bool = True, timeout: float = 10.0) -> None:
        """Stop beating; with `goodbye`, mark the row stopped (a clean stop)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
        if not goodbye:
            return
        try:
            self.writer.goodbye(self.instance_id)
        except Exception as exc:  # noqa: BLE001 - the row goes lost instead of stopped
            log.warning("executor registry: the stop of %s not recorded (it will show lost): %s", self.instance_id, exc)

    def __enter__(self) -> Heartbeat:
        return self.start()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
