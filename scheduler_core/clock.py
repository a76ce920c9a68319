"""Clocks. Every part of the scheduler takes its clock, so tests can drive time."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from scheduler_core.ports import Clock
from scheduler_core.times import UTC, require_aware


class SystemClock(Clock):
    def now(self) -> datetime:
        return datetime.now(UTC)

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            time.sleep(seconds)

    def monotonic(self) -> float:
        return time.monotonic()


class ManualClock(Clock):
    """A driven clock: time moves only when a test says so. `sleep` advances the clock by
    the requested amount, so a loop that waits on it runs instantly and deterministically."""

    def __init__(self, start: datetime) -> None:
        require_aware(start, "start")
        self._now_ms = round(start.timestamp() * 1000)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.now_ms() / 1000, tz=UTC)

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, delta: timedelta | float) -> None:
        seconds = delta.total_seconds() if isinstance(delta, timedelta) else float(delta)
        if seconds < 0:
            raise ValueError("a clock does not go back")
        with self._lock:
            self._now_ms += round(seconds * 1000)

    def set(self, when: datetime) -> None:
        require_aware(when, "when")
        target = round(when.timestamp() * 1000)
        with self._lock:
            if target < self._now_ms:
                raise ValueError("a clock does not go back")
            self._now_ms = target

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    def monotonic(self) -> float:
        return self.now_ms() / 1000


class SteppingClock(Clock):
    """A driven clock as a waiting caller sees it: each `sleep` advances the clock and
    then lets something else run at the new time (a simulated legacy scheduler, a rival
    writer), as real time would while the caller waits."""

    def __init__(self, clock: ManualClock, on_sleep: Callable[[datetime], object]) -> None:
        self._clock = clock
        self._on_sleep = on_sleep
        self.slept: list[float] = []

    def now(self) -> datetime:
        return self._clock.now()

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def monotonic(self) -> float:
        return self._clock.monotonic()

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self._clock.sleep(seconds)
        self._on_sleep(self._clock.now())
