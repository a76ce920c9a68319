"""Watch mode: compare every business on a schedule and store the series (APScheduler 3.x).

APScheduler is used here only, wrapped: one interval job per business (first run at
once, `max_instances=1`, coalesced), a stop `Event` that ends the watch, and a bounded
shutdown: runs in flight get `grace` to finish, after which they are reported as
abandoned instead of holding the process.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from apscheduler.events import EVENT_JOB_ERROR, EVENT_JOB_EXECUTED, EVENT_JOB_MISSED, JobExecutionEvent
from apscheduler.executors.pool import ThreadPoolExecutor
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.interval import IntervalTrigger

from dualrun.model import Comparison

log = logging.getLogger(__name__)


@dataclass
class WatchSummary:
    runs: int = 0
    ready: int = 0
    not_ready: int = 0
    errors: int = 0
    abandoned: int = 0  # runs still in flight when the grace period ran out
    last: dict[str, Comparison] = field(default_factory=dict)
    last_error: dict[str, str] = field(default_factory=dict)


class Watch:
    """Runs `compare_one(business)` every `every` for each business until `stop` is set
    (or until each business has been compared `max_runs` times)."""

    def __init__(
        self,
        compare_one: Callable[[str], Comparison],
        biz_codes: Sequence[str],
        every: timedelta,
        *,
        max_runs: int | None = None,
        grace: timedelta = timedelta(seconds=30),
        on_result: Callable[[Comparison], None] | None = None,
        on_error: Callable[[str, BaseException], None] | None = None,
    ) -> None:
        if every <= timedelta(0):
            raise ValueError("the watch interval must be positive")
        if not biz_codes:
            raise ValueError("nothing to watch: no business given")
        self.compare_one, self.biz_codes, self.every = compare_one, list(dict.fromkeys(biz_codes)), every
        self.max_runs, self.grace = max_runs, grace
        self.on_result, self.on_error = on_result, on_error
        self.summary = WatchSummary()
        self._lock = threading.Lock()
        self._in_flight = 0
        self._idle = threading.Condition(self._lock)
        self._done: dict[str, int] = dict.fromkeys(self.biz_codes, 0)

    def _run(self, biz_code: str, stop: threading.Event) -> None:
        with self._lock:  # checked under the lock `_drain` counts under: no run starts after the drain
            if stop.is_set():
                return
            self._in_flight += 1
        try:
            self._compare(biz_code)
        finally:
            with self._lock:
                self._in_flight -= 1
                self._done[biz_code] += 1
                finished = self.max_runs is not None and all(n >= self.max_runs for n in self._done.values())
                self._idle.notify_all()
            if finished:
                stop.set()

    def _compare(self, biz_code: str) -> None:
        try:
            result = self.compare_one(biz_code)
        except Exception as exc:  # a loop boundary: log, count, keep watching
            log.warning(
                "comparison of %s failed: %s",
                biz_code,
                exc,
                extra={"action": "watch_compare_failed", "business": biz_code},
            )
            with self._lock:
                self.summary.errors += 1
                self.summary.last_error[biz_code] = str(exc)
            if self.on_error is not None:
                self.on_error(biz_code, exc)
            return
        with self._lock:
            self.summary.runs += 1
            self.summary.ready += int(result.is_ready)
            self.summary.not_ready += int(not result.is_ready)
            self.summary.last[biz_code] = result
        if self.on_result is not None:
            self.on_result(result)

    def _scheduler(self, stop: threading.Event) -> BackgroundScheduler:
        sched = BackgroundScheduler(
            executors={"default": ThreadPoolExecutor(max(1, min(4, len(self.biz_codes))))},
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": max(1, int(self.every.total_seconds())),
            },
            timezone="UTC",
        )
        for biz_code in self.biz_codes:
            sched.add_job(
                self._run,
                IntervalTrigger(seconds=self.every.total_seconds(), timezone="UTC"),
                args=(biz_code, stop),
                id=f"compare:{biz_code}",
                name=f"compare {biz_code}",
                next_run_time=_now_for(sched),
            )
        sched.add_listener(_log_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_EXECUTED)
        return sched

    def run(self, stop: threading.Event) -> WatchSummary:
        """Watch until `stop` is set; returns when in-flight runs finished or `grace` ran out."""
        sched = self._scheduler(stop)
        sched.start()
        log.info(
            "watching %s every %s",
            ", ".join(self.biz_codes),
            self.every,
            extra={"action": "watch_start", "business": ",".join(self.biz_codes)},
        )
        try:
            stop.wait()
        finally:
            sched.shutdown(wait=False)
            self._drain()
        return self.summary

    def _drain(self) -> None:
        with self._lock:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=self.grace.total_seconds())
            self.summary.abandoned = self._in_flight
        if self.summary.abandoned:
            log.warning(
                "%d comparison(s) still running after %s; abandoned",
                self.summary.abandoned,
                self.grace,
                extra={"action": "watch_abandon", "business": ",".join(self.biz_codes)},
            )


def _now_for(sched: BackgroundScheduler):  # type: ignore[no-untyped-def]
    """'Run at once' in the scheduler's own zone (APScheduler reads the clock itself)."""
    from datetime import datetime

    return datetime.now(sched.timezone)  # noqa: DTZ005 - APScheduler's clock, not ours


def _log_event(event: JobExecutionEvent) -> None:
    if event.code == EVENT_JOB_MISSED:
        log.warning(
            "watch run %s missed its time (previous run still going)",
            event.job_id,
            extra={"action": "watch_run_missed", "business": event.job_id},
        )
