"""Virtual time for the simulators: epoch milliseconds, the driven clock, periodic ticks,
and the ordered queue of pending events."""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from scheduler_core.ports import Clock

UTC = timezone.utc
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def to_ms(at: datetime) -> int:
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"expected an aware datetime, got naive {at.isoformat()}")
    return (at - _EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    """Aware UTC, exact to the millisecond (no float round trip)."""
    return _EPOCH + timedelta(milliseconds=ms)


def first_tick_at_or_after(anchor: int, period: int, at: int) -> int:
    """The first time `anchor + k * period` (k >= 0) that is >= `at`."""
    if at <= anchor:
        return anchor
    return anchor + -(-(at - anchor) // period) * period


def catch_up(clock: Clock, ms: int) -> None:
    """Move the driven clock forward to `ms` (never back: a clock other code already moved
    further stays where it is, and the event keeps its own virtual time)."""
    now = clock.now_ms()
    if ms > now:
        clock.sleep((ms - now) / 1000)


@dataclass(order=True, slots=True)
class _Entry:
    at: int
    rank: int
    seq: int
    payload: Any = field(compare=False)


class EventQueue:
    """Pending events, ordered by (time, rank, insertion order): deterministic."""

    def __init__(self) -> None:
        self._heap: list[_Entry] = []
        self._seq = 0

    def push(self, at: int, rank: int, payload: Any) -> None:
        self._seq += 1
        heapq.heappush(self._heap, _Entry(at, rank, self._seq, payload))

    def peek(self) -> tuple[int, int] | None:
        return (self._heap[0].at, self._heap[0].rank) if self._heap else None

    def pop(self) -> tuple[int, Any]:
        entry = heapq.heappop(self._heap)
        return entry.at, entry.payload

    def retime_before(self, at: int) -> None:
        """Events due before `at` happen at `at` instead (in their original order)."""
        for entry in self._heap:
            if entry.at < at:
                entry.at = at
        heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)
