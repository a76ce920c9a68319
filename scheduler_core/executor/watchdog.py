"""One thread per executor that enforces job timeouts for every watched run (see
`runner`): it wakes at the earliest deadline (at least every 50 ms) and hands an
overrunning run to `on_expired`, which starts a successor thread for it."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from scheduler_core.executor.runner import Backoff, EnvelopeRun, expire

log = logging.getLogger(__name__)
MAX_SLEEP_S = 0.05


class Watchdog:
    def __init__(self, backoff: Backoff, on_expired: Callable[[EnvelopeRun, int, float], None], name: str) -> None:
        self._backoff = backoff
        self._on_expired = on_expired
        self._name = name
        self._runs: set[EnvelopeRun] = set()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._closed = False
        self._thread: threading.Thread | None = None

    def watch(self, run: EnvelopeRun) -> None:
        with self._lock:
            if self._thread is None and not self._closed:  # started by the first timed job only
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._runs.add(run)
        self._wake.set()  # a timeout shorter than the current sleep must not be missed

    def unwatch(self, run: EnvelopeRun) -> None:
        with self._lock:
            self._runs.discard(run)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._closed:
            now = time.monotonic()
            soonest = now + MAX_SLEEP_S
            with self._lock:
                runs = list(self._runs)
            for run in runs:
                deadline = run.deadline
                if deadline > now:
                    soonest = min(soonest, deadline)
                    continue
                try:
                    taken = expire(run, now, self._backoff)
                    if taken is not None:
                        self._on_expired(run, *taken)
                except Exception:  # the watchdog must survive whatever one run does
                    log.exception("enforcing a job timeout failed")
            self._wake.wait(max(0.0005, soonest - time.monotonic()))
            self._wake.clear()
