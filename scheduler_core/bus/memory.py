"""InProcessBus: a real delayed bus inside one process, on the injected clock.

It keeps Pulsar's semantics that the scheduler relies on: a message is delivered no
earlier than its deliver-at; consumers of one subscription name share the messages
(Shared); a subscription sees only messages published after it was created; unacked
messages are redelivered (after nack, or when their consumer closes).

Its control channel is a list kept for the bus's life: a follower gets the whole list
when it starts, then each new message within `publish_control`, on the publisher's
thread; so a follower is always in sync (there is no broker to lose).
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta

from scheduler_core.errors import BusError
from scheduler_core.ports import BusMessage, Clock, ControlFeed, MessageBus, Received, Subscription

log = logging.getLogger(__name__)
NACK_DELAY_MS = 1000


@dataclass(order=True)
class _Entry:
    due_ms: int
    seq: int
    message: BusMessage = field(compare=False)
    redelivery: int = field(default=0, compare=False)


class _Queue:
    """One subscription name's shared queue."""

    def __init__(self) -> None:
        self.heap: list[_Entry] = []
        self.in_flight: dict[int, _Entry] = {}


class InProcessBus(MessageBus):
    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._cond = threading.Condition()
        self._topics: dict[str, dict[str, _Queue]] = {}
        self._seq = itertools.count()
        self._closed = False
        self.published = 0
        # the control channel: every message, and the followers (one lock for both, held
        # while handing a message over, so followers see one order)
        self._control_lock = threading.Lock()
        self._control: list[bytes] = []
        self._followers: list[_InProcessFeed] = []

    def publish(self, messages: Sequence[BusMessage]) -> None:
        with self._cond:
            if self._closed:
                raise BusError("the bus is closed")
            now = self.clock.now_ms()
            for m in messages:
                due = now if m.deliver_at_ms is None else max(now, m.deliver_at_ms)
                for queue in self._topics.get(m.topic, {}).values():
                    heapq.heappush(queue.heap, _Entry(due, next(self._seq), m))
                self.published += 1
            self._cond.notify_all()

    def subscribe(self, topic: str, subscription: str) -> Subscription:
        with self._cond:
            queue = self._topics.setdefault(topic, {}).setdefault(subscription, _Queue())
        return _InProcessSubscription(self, queue)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        with self._cond:
            if self._closed:
                raise BusError("the bus is closed")
            self._topics.setdefault(topic, {}).setdefault(subscription, _Queue())

    def publish_control(self, key: str, payload: bytes) -> None:
        if self._closed:
            raise BusError("the bus is closed")
        with self._control_lock:
            self._control.append(payload)
            for feed in self._followers:
                feed.hand_over(payload)

    def follow_control(self, on_message: Callable[[bytes], None]) -> ControlFeed:
        feed = _InProcessFeed(self, on_message)
        with self._control_lock:
            for payload in self._control:
                feed.hand_over(payload)
            self._followers.append(feed)
        return feed

    def _unfollow(self, feed: _InProcessFeed) -> None:
        with self._control_lock:
            if feed in self._followers:
                self._followers.remove(feed)

    def backlog(self, topic: str, subscription: str) -> tuple[int, int]:
        """(due, delayed) messages waiting in one subscription: the consumer-lag view."""
        with self._cond:
            queue = self._topics.get(topic, {}).get(subscription)
            if queue is None:
                return (0, 0)
            now = self.clock.now_ms()
            due = sum(1 for e in queue.heap if e.due_ms <= now)
            return (due, len(queue.heap) - due)

    # -- used by subscriptions ---------------------------------------------------------

    def _take(self, queue: _Queue, max_messages: int, timeout: timedelta) -> list[Received]:
        wait_until = self.clock.monotonic() + max(0.0, timeout.total_seconds())
        with self._cond:
            while True:
                now = self.clock.now_ms()
                out: list[Received] = []
                while queue.heap and queue.heap[0].due_ms <= now and len(out) < max_messages:
                    entry = heapq.heappop(queue.heap)
                    queue.in_flight[entry.seq] = entry
                    out.append(Received(entry.message, entry.seq, entry.redelivery))
                if out or self._closed:
                    return out
                remaining = wait_until - self.clock.monotonic()
                if remaining <= 0:
                    return []
                next_due = (queue.heap[0].due_ms - now) / 1000 if queue.heap else remaining
                # Real waiting is bounded by the timeout; a driven clock advances elsewhere
                # and a publish wakes us.
                self._cond.wait(min(remaining, max(0.001, next_due), 0.05))

    def _ack(self, queue: _Queue, receipt: object) -> None:
        with self._cond:
            queue.in_flight.pop(int(receipt), None)  # type: ignore[call-overload]

    def _nack(self, queue: _Queue, receipt: object, delay_ms: int = NACK_DELAY_MS) -> None:
        with self._cond:
            entry = queue.in_flight.pop(int(receipt), None)  # type: ignore[call-overload]
            if entry is not None:
                heapq.heappush(
                    queue.heap,
                    _Entry(self.clock.now_ms() + delay_ms, next(self._seq), entry.message, entry.redelivery + 1),
                )
                self._cond.notify_all()


class _InProcessSubscription(Subscription):
    def __init__(self, bus: InProcessBus, queue: _Queue) -> None:
        self._bus = bus
        self._queue = queue
        self._mine: set[int] = set()

    def receive(self, max_messages: int, timeout: timedelta) -> list[Received]:
        got = self._bus._take(self._queue, max_messages, timeout)
        self._mine.update(int(r.receipt) for r in got)  # type: ignore[call-overload]
        return got

    def ack(self, received: Received) -> None:
        self._mine.discard(int(received.receipt))  # type: ignore[call-overload]
        self._bus._ack(self._queue, received.receipt)

    def nack(self, received: Received) -> None:
        self._mine.discard(int(received.receipt))  # type: ignore[call-overload]
        self._bus._nack(self._queue, received.receipt)

    def close(self) -> None:
        # like a consumer disconnecting: its unacked messages go back to the others
        for receipt in list(self._mine):
            self._bus._nack(self._queue, receipt, delay_ms=0)
        self._mine.clear()


class _InProcessFeed(ControlFeed):
    def __init__(self, bus: InProcessBus, on_message: Callable[[bytes], None]) -> None:
        self._bus = bus
        self._on_message = on_message
        self._closed = False

    def hand_over(self, payload: bytes) -> None:
        if self._closed:
            return
        try:
            self._on_message(payload)
        except Exception:  # noqa: BLE001 - a follower's bug must not fail the publisher
            log.exception("a control message follower failed")

    def synced(self) -> bool:
        return not self._closed

    def wait_synced(self, timeout: timedelta) -> bool:
        return self.synced()

    def close(self) -> None:
        self._closed = True
        self._bus._unfollow(self)
