"""Stops: "the new side runs no command of X scheduled at or after S".

X is a scope: one trigger, one job, one business, or everything. An operator's pause,
cancel and freeze are stops; a resume or an unfreeze closes one at an instant R. The
trigger store's admission is not the boundary: up to one lookahead of commands is
already on the bus with deliver-at = their fire time, so a stop reaches them where they
run, in the executors, as the rollback fence (`scheduler_core.fence`) and the schedule
edit (`scheduler_core.supersede`) do:

1. the stop is stored first (`StopStore`, one row per scope with every window it has had
   and an epoch grown by each change), and the fired records it covers are marked
   skipped in the same transaction, *provisionally* (a result of a run that had already
   started still moves them, so a record never says "skipped" for a handler that ran);
2. it is broadcast on the bus's control channel (kind "stop"): by the command itself when
   it holds the bus, and always by whoever holds the bus (`StopRelay`: the scheduler
   leader, the shard registry's member for business-wide messages, `switchyard serve`),
   which reads the store every `RELAY_EVERY` and records that it carried each epoch, so
   a command run without a bus can tell the operator when its stop went out;
3. every executor follows the channel (`scheduler_core.executor.fences.FenceView`) and
   answers each command a stop covers skipped, with the window's message, never
   invoking its handler. An executor that starts reads the whole channel before it runs
   anything, so it knows every standing stop.

Epochs order the messages of one scope: a follower keeps the newest whatever order the
bus hands them over in. A scope keeps all its windows (a pause, a resume, a second
pause: two windows), not only the last one; windows that ended long ago are dropped.
"""

from __future__ import annotations

import enum
import json
import logging
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import Protocol

from scheduler_core.control import EVERYTHING, ControlBroadcasts, RelayScope, decode_control, encode_control
from scheduler_core.errors import BusError
from scheduler_core.model import FiredState, TriggerState
from scheduler_core.ports import MessageBus
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)

KIND = "stop"
# Every fired record and result skipped by an operator's stop carries a message starting
# with this: dual-run and the post-cutover watch count such a record neither missing nor
# failed. A rollback's window says ROLLBACK_PREFIX instead (its occurrences are legacy's).
MESSAGE_PREFIX = "stopped: "
ROLLBACK_PREFIX = "rollback fence"
EDIT_PREFIX = "superseded by a schedule edit"
ALL_KEY = "*"
# after its first round a relay reads only the stops changed this recently (far more than
# a round, to cover clocks apart between hosts)
RECENT = timedelta(minutes=2)
# windows that ended this long ago are dropped from a scope's row (and its messages): no
# command that old is still waiting in the bus of a healthy system
RETAIN = timedelta(days=1)


class Scope(enum.StrEnum):
    TRIGGER = "trigger"
    JOB = "job"
    BUSINESS = "business"
    ALL = "all"


class Cause(enum.StrEnum):
    PAUSE = "pause"
    CANCEL = "cancel"
    FREEZE = "freeze"
    # a rollback's fence (`scheduler_core.fence`): the business's occurrences from F on are
    # legacy's; its windows say "rollback fence at F", which dual-run tells apart
    ROLLBACK = "rollback"
    # a schedule edit (`scheduler_core.supersede`): one window per superseded occurrence of
    # the old schedule, [T, T + 1 ms), saying "superseded by a schedule edit at E"
    EDIT = "edit"


@dataclass(frozen=True, slots=True)
class SkipWindow:
    """Commands scheduled in [from_ms, until_ms) are skipped (until_ms None: open)."""

    from_ms: int
    until_ms: int | None
    cause: Cause
    actor: str = ""
    reason: str = ""
    effective_ms: int | None = None  # a schedule edit's E (its windows start at the occurrences)

    def covers(self, scheduled_ms: int) -> bool:
        return self.from_ms <= scheduled_ms and (self.until_ms is None or scheduled_ms < self.until_ms)

    @property
    def open(self) -> bool:
        return self.until_ms is None

    @property
    def message(self) -> str:
        """What a record or result skipped by this window says (one text per window: a
        lift revives only the records its own window marked)."""
        if self.cause is Cause.ROLLBACK:
            return rollback_message(self.from_ms)
        if self.cause is Cause.EDIT:
            return edit_message(self.from_ms if self.effective_ms is None else self.effective_ms)
        text = f"{MESSAGE_PREFIX}{self.cause.value} from {from_ms(self.from_ms).isoformat()}"
        if self.actor:
            text += f" by {self.actor}"
        return f"{text}: {self.reason}" if self.reason else text

    def to_json(self) -> dict[str, object]:
        body: dict[str, object] = {"f": self.from_ms, "u": self.until_ms, "c": self.cause.value}
        for name, value in (("a", self.actor), ("r", self.reason), ("e", self.effective_ms)):
            if value:  # an edit's many point windows stay small on the wire
                body[name] = value
        return body

    @classmethod
    def from_json(cls, body: dict[str, object]) -> SkipWindow:
        until = body.get("u")
        return cls(
            from_ms=int(body["f"]),  # type: ignore[call-overload]
            until_ms=None if until is None else int(until),  # type: ignore[call-overload]
            cause=Cause(str(body["c"])),
            actor=str(body.get("a") or ""),
            reason=str(body.get("r") or ""),
            effective_ms=None if body.get("e") is None else int(body["e"]),  # type: ignore[call-overload]
        )


@dataclass(frozen=True, slots=True)
class Stop:
    """Every window of one scope, at one epoch."""

    scope: Scope
    key: str
    windows: tuple[SkipWindow, ...]
    epoch: int
    updated_ms: int = 0
    relayed_epoch: int = 0
    relayed_by: str = ""
    relayed_ms: int | None = None

    def covering(self, scheduled_ms: int) -> SkipWindow | None:
        for w in self.windows:
            if w.covers(scheduled_ms):
                return w
        return None

    def open_window(self, causes: tuple[Cause, ...] | None = None) -> SkipWindow | None:
        for w in self.windows:
            if w.open and (causes is None or w.cause in causes):
                return w
        return None

    @property
    def standing(self) -> bool:
        return any(w.open for w in self.windows)

    @property
    def name(self) -> str:
        return scope_name(self.scope, self.key)

    def __str__(self) -> str:
        if len(self.windows) > 3:  # a schedule edit's point windows: counted, not listed
            counts: dict[str, int] = {}
            for w in self.windows:
                counts[w.cause.value] = counts.get(w.cause.value, 0) + 1
            spans = ", ".join(f"{n} {cause} window(s)" for cause, n in counts.items())
        else:
            spans = ", ".join(
                f"{w.cause.value} [{from_ms(w.from_ms).isoformat()}, "
                f"{'open' if w.until_ms is None else from_ms(w.until_ms).isoformat()})"
                for w in self.windows
            )
        return f"stop of {self.name} epoch {self.epoch}: {spans or 'no window'}"


def rollback_message(from_ms_: int) -> str:
    return f"{ROLLBACK_PREFIX} at {from_ms(from_ms_).isoformat()}"


def edit_message(effective_ms: int) -> str:
    return f"{EDIT_PREFIX} at {from_ms(effective_ms).isoformat()}"


def scope_name(scope: Scope, key: str) -> str:
    return "everything" if scope is Scope.ALL else f"{scope.value} {key}"


def is_stop_skip(state: str | FiredState, message: str | None) -> bool:
    """A fired record (or result) skipped by a stop (pause, cancel, freeze)."""
    return str(state) == FiredState.SKIPPED.value and (message or "").startswith(MESSAGE_PREFIX)


def encode_stop(stop: Stop) -> bytes:
    return encode_control(
        KIND, {"s": stop.scope.value, "x": stop.key, "w": [w.to_json() for w in stop.windows], "e": stop.epoch}
    )


def decode_stop(payload: bytes) -> Stop | None:
    """The stop of a control message; None for one of another kind. Raises ValueError for
    a malformed one."""
    body = decode_control(payload, KIND)
    if body is None:
        return None
    try:
        return Stop(
            scope=Scope(str(body["s"])),
            key=str(body["x"]),
            windows=tuple(SkipWindow.from_json(w) for w in body["w"]),
            epoch=int(body["e"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed stop message: {exc}") from exc


def windows_to_text(windows: tuple[SkipWindow, ...]) -> str:
    return json.dumps([w.to_json() for w in windows], separators=(",", ":"))


def windows_from_text(text: str) -> tuple[SkipWindow, ...]:
    return tuple(SkipWindow.from_json(w) for w in json.loads(text or "[]"))


@dataclass(frozen=True, slots=True)
class Applied:
    """What one stop or lift did in the store."""

    stop: Stop
    window: SkipWindow
    changed: bool  # False: the same window stood already (a repeated pause): nothing written
    records: int = 0  # fired records marked skipped (a stop) or revived (a lift)


class StopStore(Protocol):
    """Where stops live (`scheduler_core.store.stops.SqlStops`)."""

    @abstractmethod
    def open_window(self, scope: Scope, key: str, window: SkipWindow) -> Applied:
        """In one transaction: the window is added to the scope's row with the next epoch
        (unless a window of the same cause is open already: `changed` False), and the
        fired records of the scope at or after its start not final yet are marked skipped
        provisionally with its message."""

    @abstractmethod
    def close_window(self, scope: Scope, key: str, until_ms: int, causes: tuple[Cause, ...]) -> Applied | None:
        """The open window of one of `causes` ends at `until_ms` (next epoch); the records
        it marked at or after `until_ms` wait for their executor's result again. None: no
        such window stands."""

    @abstractmethod
    def stops(self, changed_within: timedelta | None = None) -> list[Stop]:
        """Every stop, or those changed within the last `changed_within` (by updated_at,
        the writer's clock: the window must cover clock skew between hosts)."""

    @abstractmethod
    def stop_of(self, scope: Scope, key: str) -> Stop | None: ...

    @abstractmethod
    def stops_of(self, scope: Scope, keys: list[str]) -> list[Stop]:
        """The stops of these keys of one scope (those that exist)."""

    @abstractmethod
    def open_windows(self, scope: Scope, keys: list[str], window: SkipWindow) -> tuple[list[Applied], int]:
        """`open_window` for many keys of one scope in one transaction; with the records
        marked in all."""

    @abstractmethod
    def close_windows(
        self, scope: Scope, keys: list[str], until_ms: int, causes: tuple[Cause, ...]
    ) -> tuple[list[Applied], int]:
        """`close_window` for many keys in one transaction (those with no such window left
        out); with the records revived in all."""

    @abstractmethod
    def settle_trigger(self, trigger_id: int, to: TriggerState) -> bool:
        """In one transaction holding the trigger's stop row: if its pause (cancel) window
        still stands and the trigger waits, move it to `to`. False when the window was
        lifted meanwhile or the trigger does not wait."""

    @abstractmethod
    def mark_relayed(self, stops: list[Stop], by: str) -> None:
        """These stops' epochs are on the bus (each kept only if newer than recorded)."""


@dataclass
class StopIndex:
    """The stops a follower knows, by scope; `covering` is on the executor's hot path, so
    the dict is swapped whole on a change and read without a lock."""

    by_scope: dict[tuple[Scope, str], Stop] = field(default_factory=dict)

    def covering(self, trigger_id: int, job_code: str, biz_code: str, scheduled_ms: int) -> SkipWindow | None:
        stops = self.by_scope
        if not stops:
            return None
        for scope, key in (
            (Scope.TRIGGER, str(trigger_id)),
            (Scope.JOB, job_code),
            (Scope.BUSINESS, biz_code),
            (Scope.ALL, ALL_KEY),
        ):
            s = stops.get((scope, key))
            if s is not None and (w := s.covering(scheduled_ms)) is not None:
                return w
        return None

    def newer(self, stop: Stop) -> bool:
        known = self.by_scope.get((stop.scope, stop.key))
        return known is None or known.epoch < stop.epoch

    def with_stop(self, stop: Stop) -> StopIndex:
        updated = dict(self.by_scope)
        updated[(stop.scope, stop.key)] = stop
        return StopIndex(updated)


class StopService:
    """Store a stop (or its lift), then broadcast it when this process holds a bus. The
    store is always first: a relay carries whatever the broadcast here did not."""

    def __init__(self, store: StopStore, bus: MessageBus | None = None) -> None:
        self.store = store
        self.bus = bus
        # stops stored whose broadcast here failed (the broker down): the relay carries
        # them once it answers. Raised instead, the command said it failed after the stop
        # had taken effect (the soak: a pause "failed" in a Pulsar restart, its job then
        # handed back to legacy stopped, as an operator's pause is)
        self.unsent = 0

    def stop(
        self, scope: Scope, key: str, at: datetime | int, cause: Cause, actor: str = "", reason: str = ""
    ) -> Applied:
        at_ms = at if isinstance(at, int) else to_ms(at)
        applied = self.store.open_window(scope, key, SkipWindow(at_ms, None, cause, actor, reason))
        if applied.changed:
            self._broadcast(applied.stop)
            log.info("stored the %s; %d fired record(s) marked skipped", applied.stop, applied.records)
        return applied

    def stop_many(
        self, scope: Scope, keys: list[str], at: datetime | int, cause: Cause, actor: str = "", reason: str = ""
    ) -> tuple[list[Applied], int]:
        """`stop` of many keys of one scope in one transaction (a pause of every trigger of
        a job); with the records marked in all."""
        at_ms = at if isinstance(at, int) else to_ms(at)
        applied, marked = self.store.open_windows(scope, keys, SkipWindow(at_ms, None, cause, actor, reason))
        for a in applied:
            if a.changed:
                self._broadcast(a.stop)
        log.info("stored %d %s stop(s) from %s; %d fired record(s) marked skipped", len(keys), cause, at_ms, marked)
        return applied, marked

    def lift_many(
        self, scope: Scope, keys: list[str], at: datetime | int, causes: tuple[Cause, ...]
    ) -> tuple[list[Applied], int]:
        at_ms = at if isinstance(at, int) else to_ms(at)
        applied, revived = self.store.close_windows(scope, keys, at_ms, causes)
        for a in applied:
            self._broadcast(a.stop)
        return applied, revived

    def lift(self, scope: Scope, key: str, at: datetime | int, causes: tuple[Cause, ...]) -> Applied | None:
        at_ms = at if isinstance(at, int) else to_ms(at)
        applied = self.store.close_window(scope, key, at_ms, causes)
        if applied is not None:
            self._broadcast(applied.stop)
            log.info("lifted to the %s; %d fired record(s) revived", applied.stop, applied.records)
        return applied

    def _broadcast(self, stop: Stop) -> None:
        if self.bus is None:
            return
        try:
            self.bus.publish_control(stop.key, encode_stop(stop))
        except BusError as exc:
            self.unsent += 1
            log.warning("the %s is stored; its broadcast failed (%s): the relay carries it", stop, exc)


class StopRelay:
    """Broadcasts the stored stops this bus has not carried yet, and records in the store
    that it did (what a command run without a bus waits for). Run by whoever holds the
    bus, every RELAY_EVERY; `scope`: whether this process relays the business-wide
    control messages (`scheduler_core.control`)."""

    def __init__(
        self,
        store: StopStore,
        bus: MessageBus,
        scope: RelayScope = EVERYTHING,
        name: str = "",
        settle: Callable[[list[Stop]], list[Stop]] | None = None,
    ) -> None:
        self.store = store
        self.scope = scope
        self.name = name
        self.broadcasts = ControlBroadcasts(bus)
        self._whole_read: int | None = None  # the scope's generation at the last whole read
        # what brings the triggers' states in line with their stops (a pause given while a
        # trigger was being fired: `scheduler_core.operations.settle`); its answer, the
        # stops still unsettled, is tried again every round
        self.settle = settle
        self._unsettled: dict[tuple[Scope, str], Stop] = {}

    def relay(self) -> int:
        if not self.scope.business_wide():
            self._whole_read = None  # when this process relays again, it reads the store whole first
            return 0
        # the first round (and the first after this process took the relaying over) reads
        # every stop: what a previous relay or a broker that lost its data may not have
        # carried; later rounds only the rows changed lately, so a store with many stopped
        # triggers is not read whole every few hundred ms
        generation = self.scope.generation()
        whole = self._whole_read != generation
        sent: list[Stop] = []
        read = self.store.stops(None if whole else RECENT)
        for stop in read:
            if self.broadcasts.send(stop.key, (stop.scope, stop.key), stop.epoch, partial(encode_stop, stop)):
                sent.append(stop)
                log.info("broadcast the %s", stop)
        unrecorded = [s for s in sent if s.relayed_epoch < s.epoch]
        if unrecorded:
            self.store.mark_relayed(unrecorded, self.name)
        self._whole_read = generation
        if self.settle is not None:
            candidates = {(s.scope, s.key): s for s in (*self._unsettled.values(), *read)}
            self._unsettled = {(s.scope, s.key): s for s in self.settle(list(candidates.values()))}
        return len(sent)


__all__ = [
    "ALL_KEY",
    "EDIT_PREFIX",
    "KIND",
    "MESSAGE_PREFIX",
    "RETAIN",
    "ROLLBACK_PREFIX",
    "Applied",
    "Cause",
    "Scope",
    "SkipWindow",
    "Stop",
    "StopIndex",
    "StopRelay",
    "StopService",
    "StopStore",
    "decode_stop",
    "edit_message",
    "encode_stop",
    "is_stop_skip",
    "rollback_message",
    "scope_name",
    "windows_from_text",
    "windows_to_text",
]
