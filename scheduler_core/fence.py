"""The rollback fence (DESIGN "The rollback fence").

A rollback hands a business back to legacy at a handover F, but the new side has already
published up to one lookahead of commands with deliver-at = their fire time. Admission is
the cancellation boundary for ordinary cancels; a rollback instead raises a fence:
executors skip, with a record, every command of the business scheduled in [from, until).

- `Fence` is one business's fence; `epoch` grows with every change, so a later message
  wins over an earlier one whatever order the bus hands them over in.
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
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from scheduler_core.control import (
    EVERYTHING,
    WIRE_VERSION,
    ControlBroadcasts,
    RelayScope,
    decode_control,
    encode_control,
)
from scheduler_core.logfields import log_fields
from scheduler_core.model import FiredState
from scheduler_core.ports import FenceStore, MessageBus
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)

KIND = "fence"  # the control channel may carry other kinds later; followers ignore those
# Every fired record and result skipped by a fence carries a message starting with this,
# which is how dual-run tells a rollback's skip from a misfire policy's.
MESSAGE_PREFIX = "rollback fence"


def skip_message(from_ms_: int) -> str:
    return f"{MESSAGE_PREFIX} at {from_ms(from_ms_).isoformat()}"


def is_fence_skip(state: str | FiredState, message: str | None) -> bool:
    """A fired record (or result) skipped by a rollback fence, not by a misfire policy."""
    return str(state) == FiredState.SKIPPED.value and (message or "").startswith(MESSAGE_PREFIX)


@dataclass(frozen=True, slots=True)
class Fence:
    """The commands of `business` scheduled in [from_ms, until_ms) are skipped
    (until_ms None: open-ended). Times are epoch ms, as the commands carry them."""

    biz_code: str
    from_ms: int
    until_ms: int | None
    epoch: int

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

    def __str__(self) -> str:
        until = "open" if self.until_ms is None else self.until_at.isoformat()  # type: ignore[union-attr]
        return f"fence of {self.biz_code} [{self.from_at.isoformat()}, {until}) epoch {self.epoch}"


def encode_fence(fence: Fence) -> bytes:
    return encode_control(KIND, {"b": fence.biz_code, "f": fence.from_ms, "u": fence.until_ms, "e": fence.epoch})


def decode_fence(payload: bytes) -> Fence | None:
    """The fence of a control message; None for a control message of another kind.
    Raises ValueError for a malformed one."""
    body = decode_control(payload, KIND)
    if body is None:
        return None
    try:
        until = body.get("u")
        return Fence(
            biz_code=str(body["b"]),
            from_ms=int(body["f"]),
            until_ms=None if until is None else int(until),
            epoch=int(body["e"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed fence message: {exc}") from exc


class FenceService:
    """Raise and lift a business's rollback fence: the store first (the fence and the
    records it covers, in one transaction), then the broadcast. If the broadcast fails the
    call raises after the store has the fence: run it again (raising or lifting at the
    same instant is idempotent apart from the epoch), or `rebroadcast()`."""

    def __init__(self, store: FenceStore, bus: MessageBus) -> None:
        self.store = store
        self.bus = bus

    def raise_fence(self, biz_code: str, at: datetime) -> int:
        """From `at` on, no command of the business is invoked; fired records at or after
        `at` not final yet are marked skipped. Returns how many records were marked."""
        fence, marked = self.store.raise_business_fence(biz_code, to_ms(at), skip_message(to_ms(at)))
        self._broadcast(fence)
        log.info(
            "raised the %s; %d fired record(s) marked skipped",
            fence,
            marked,
            extra=log_fields(biz_code=biz_code, epoch=fence.epoch),
        )
        return marked

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


class FenceRelay:
    """Broadcasts the fences the store has and this bus has not carried yet: for a bus that
    another process's rollback cannot reach (the in-process bus of `switchyard serve`,
    where `switchyard rollback` run beside it writes the fence to the store only), and for
    a rollback whose own broadcast failed after the store had the fence. Read often
    (`relay()` every few hundred ms): a rollback's fence lies `start_margin` (2 s and more)
    ahead, and the executors must hear it before then. `scope`: whether this process is
    the one that relays the fences (`scheduler_core.control`)."""

    def __init__(self, store: FenceStore, bus: MessageBus, scope: RelayScope = EVERYTHING) -> None:
        self.store = store
        self.scope = scope
        self.broadcasts = ControlBroadcasts(bus)

    def relay(self) -> int:
        """Broadcast each stored fence newer than the one last carried; returns how many."""
        if not self.scope.business_wide():
            return 0
        sent = 0
        for fence in self.store.business_fences():
            if self.broadcasts.send(fence.biz_code, fence.biz_code, fence.epoch, partial(encode_fence, fence)):
                sent += 1
        return sent


__all__ = [
    "MESSAGE_PREFIX",
    "WIRE_VERSION",
    "Fence",
    "FenceRelay",
    "FenceService",
    "decode_fence",
    "encode_fence",
    "is_fence_skip",
    "skip_message",
]
