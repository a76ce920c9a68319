"""The rollback fence (DESIGN "The rollback fence").

A rollback hands a business back to legacy at a handover F, but the new side has already
published up to one lookahead of commands with deliver-at = their fire time. A rollback
raises a fence: executors skip, with a record, every command of the business scheduled
in [from, until). A fence is a stop (`scheduler_core.stops`, the one mechanism of every
stop): a window of cause "rollback" of the business's stop, stored in `dus_stop`, relayed
by `StopRelay` and followed by the executors as every other stop; its windows add up
(a rollback, a re-cutover, a second rollback: two windows).

- `Fence` is one business's latest rollback window at its stop's epoch; the epoch grows
  with every change, so a later message wins whatever order the bus hands them over in.
- `FenceService` is the writing side (it implements `migrator.ports.FencePort`
  structurally; scheduler_core imports nothing of the migrator): it stores the fence,
  marks the fired records it covers as skipped, and broadcasts it on the bus's control
  channel, which every executor follows (`scheduler_core.executor.fences.FenceView`).

The records are marked *provisionally* (state `skipped` at the rank of `received`): an
executor that learns the fence answers its commands with a final `skipped` result; one
that had already invoked the handler when the fence reached it reports what really
happened (succeeded, failed), which moves the record forward over the provisional mark.
So a record never says "skipped" for a handler that ran.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from scheduler_core.logfields import log_fields
from scheduler_core.model import FiredState
from scheduler_core.ports import FenceStore, MessageBus
from scheduler_core.stops import (
    ROLLBACK_PREFIX,
    Cause,
    Scope,
    SkipWindow,
    Stop,
    decode_stop,
    encode_stop,
    rollback_message,
)
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)

# Every fired record and result skipped by a fence carries a message starting with this,
# which is how dual-run tells a rollback's skip from a misfire policy's.
MESSAGE_PREFIX = ROLLBACK_PREFIX


def skip_message(from_ms_: int) -> str:
    return rollback_message(from_ms_)


def is_fence_skip(state: str | FiredState, message: str | None) -> bool:
    """A fired record (or result) skipped by a rollback fence, not by a misfire policy."""
    return str(state) == FiredState.SKIPPED.value and (message or "").startswith(MESSAGE_PREFIX)


@dataclass(frozen=True, slots=True)
class Fence:
    """The commands of `business` scheduled in [from_ms, until_ms) are skipped
    (until_ms None: open-ended): the latest rollback window of the business's stop, at the
    stop's epoch. Times are epoch ms, as the commands carry them. `stop`: the whole stop
    it was read from (every window: what is broadcast), not part of its value."""

    biz_code: str
    from_ms: int
    until_ms: int | None
    epoch: int
    stop: Stop | None = field(default=None, compare=False, repr=False)

    def covers(self, scheduled_ms: int) -> bool:
        until = self.until_ms
        return self.from_ms <= scheduled_ms and (until is None or scheduled_ms < until)

    @property
    def from_at(self) -> datetime:
        return from_ms(self.from_ms)

    @property
    def until_at(self) -> datetime | None:
        return None if self.until_ms is None else from_ms(self.until_ms)

    @property
    def message(self) -> str:
        """What a record or result skipped by this fence says."""
        return skip_message(self.from_ms)

    def as_stop(self) -> Stop:
        if self.stop is not None:
            return self.stop
        window = SkipWindow(self.from_ms, self.until_ms, Cause.ROLLBACK)
        return Stop(Scope.BUSINESS, self.biz_code, (window,), self.epoch)

    def __str__(self) -> str:
        until = "open" if self.until_ms is None else self.until_at.isoformat()  # type: ignore[union-attr]
        return f"fence of {self.biz_code} [{self.from_at.isoformat()}, {until}) epoch {self.epoch}"


def fence_of_stop(stop: Stop) -> Fence | None:
    """The business's fence as its stop holds it: its latest rollback window; None for a
    stop of another scope or with no rollback window."""
    if stop.scope is not Scope.BUSINESS:
        return None
    rollbacks = [w for w in stop.windows if w.cause is Cause.ROLLBACK]
    if not rollbacks:
        return None
    w = max(rollbacks, key=lambda x: x.from_ms)
    return Fence(stop.key, w.from_ms, w.until_ms, stop.epoch, stop)


def encode_fence(fence: Fence) -> bytes:
    """The control message of a fence: its business's stop (one kind of message for every
    stop, `scheduler_core.stops`)."""
    return encode_stop(fence.as_stop())


def decode_fence(payload: bytes) -> Fence | None:
    """The fence a control message carries: None for a message of another kind or a stop
    with no rollback window. Raises ValueError for a malformed one."""
    stop = decode_stop(payload)
    return None if stop is None else fence_of_stop(stop)


class FenceService:
    """Raise and lift a business's rollback fence: a window of the business's stop
    (`scheduler_core.stops`, cause rollback), stored first with the records it covers in
    one transaction, then broadcast. If the broadcast fails the call raises after the
    store has the fence: whoever holds the bus relays it (`StopRelay`), or `rebroadcast()`."""

    def __init__(self, store: FenceStore, bus: MessageBus) -> None:
        self.store = store
        self.bus = bus

    def raise_fence(self, biz_code: str, at: datetime) -> int:
        """From `at` on, no command of the business is invoked; fired records at or after
        `at` not final yet are marked skipped. Returns how many records were marked."""
        fence, marked = self._store(biz_code, at)
        self._broadcast(fence)
        return marked

    def store_fence(self, biz_code: str, at: datetime) -> int:
        """`raise_fence` without its broadcast: the fence is stored (records marked), and
        the leader relays it to the executors within its relay period; `broadcast_fence`
        sends it at once. Split so a rollback starts legacy between the two: a broker slow
        to take the broadcast then never eats into legacy's start margin."""
        return self._store(biz_code, at)[1]

    def _store(self, biz_code: str, at: datetime) -> tuple[Fence, int]:
        fence, marked = self.store.raise_business_fence(biz_code, to_ms(at))
        log.info(
            "raised the %s; %d fired record(s) marked skipped",
            fence,
            marked,
            extra=log_fields(biz_code=biz_code, epoch=fence.epoch),
        )
        return fence, marked

    def broadcast_fence(self, biz_code: str) -> None:
        """The business's stored fence, published to the executors now."""
        fence = self.store.business_fence(biz_code)
        if fence is not None:
            self._broadcast(fence)

    def lift_fence(self, biz_code: str, at: datetime) -> None:
        """Commands scheduled at or after `at` run again (the fence becomes [from, at));
        records at or after `at` still only provisionally skipped go back to waiting for
        their executor's result."""
        fence = self.store.lift_business_fence(biz_code, to_ms(at))
        if fence is None:
            return  # never fenced: nothing to lift
        self._broadcast(fence)
        log.info("lifted to the %s", fence, extra=log_fields(biz_code=biz_code, epoch=fence.epoch))

    def fence_of(self, biz_code: str) -> Fence | None:
        return self.store.business_fence(biz_code)

    def rebroadcast(self) -> int:
        """Publish every stored fence again (e.g. after the broker lost its data); the
        epochs make it harmless to followers that already know them."""
        fences = self.store.business_fences()
        for fence in fences:
            self._broadcast(fence)
        return len(fences)

    def _broadcast(self, fence: Fence) -> None:
        self.bus.publish_control(fence.biz_code, encode_fence(fence))


__all__ = [
    "MESSAGE_PREFIX",
    "Fence",
    "FenceService",
    "decode_fence",
    "encode_fence",
    "fence_of_stop",
    "is_fence_skip",
    "skip_message",
]
