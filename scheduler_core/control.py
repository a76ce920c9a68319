"""The bus's control channel, shared by its two kinds of messages (rollback fences,
`scheduler_core.fence`; schedule edits, `scheduler_core.supersede`): the envelope of a
message, and what relays the stored ones onto the bus.

A relay is run by whoever has the bus, every `RELAY_EVERY`:

- the single scheduler leader (`scheduler run`) and `switchyard serve` relay everything;
- under the shard registry (`scheduler run --shards`) the member owning a trigger's
  partition relays that trigger's schedule edits, under that partition's ownership epoch
  (its pending runs' records are written only while the partition's fence still holds
  that epoch), and the member owning the lowest partition relays the business-wide
  fences. An ownership moves only after the old owner released it or its lease expired,
  so a handover leaves no gap longer than the partition's own, and two members relay the
  same thing at once only where a paused member has not noticed its lease is gone: the
  same messages twice (same command ids, same epochs), which followers ignore.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from scheduler_core.model import Epoch
from scheduler_core.ports import MessageBus

log = logging.getLogger(__name__)

WIRE_VERSION = 1
RELAY_EVERY = timedelta(milliseconds=200)


def encode_control(kind: str, body: dict[str, Any]) -> bytes:
    return json.dumps({"v": WIRE_VERSION, "k": kind, **body}, separators=(",", ":")).encode("utf-8")


def decode_control(payload: bytes, kind: str) -> dict[str, Any] | None:
    """The body of a control message of `kind`; None for one of another kind. Raises
    ValueError for an unknown version or a payload that is no JSON object."""
    try:
        body = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"malformed {kind} message: {exc}") from exc
    if not isinstance(body, dict) or body.get("v") != WIRE_VERSION:
        version = body.get("v") if isinstance(body, dict) else None
        raise ValueError(f"unsupported control message version {version!r}")
    return body if body.get("k") == kind else None


@dataclass(frozen=True, slots=True)
class Owned:
    """The ownership a relay writes under: `epoch` on `fence` (None, None: the leader's
    case, the store's current epoch, unfenced as the leader's relays always were)."""

    epoch: Epoch | None = None
    fence: str | None = None


class RelayScope(Protocol):
    """What this process relays."""

    def owner(self, trigger_id: int) -> Owned | None:
        """The ownership under which this process relays a trigger's control messages;
        None: another process does."""

    def business_wide(self) -> bool:
        """This process relays the business-wide ones (the rollback fences)."""

    def generation(self) -> int:
        """Grows whenever this process took over something to relay: a relay then reads
        the store whole once (what the previous owner may not have carried)."""


class Everything:
    """The scope of `switchyard serve`: every trigger, every fence (the single leader's is
    the same, with a generation per leadership won: `scheduler_core.scheduler.Scheduler`)."""

    def owner(self, trigger_id: int) -> Owned | None:
        return Owned()

    def business_wide(self) -> bool:
        return True

    def generation(self) -> int:
        return 0


EVERYTHING = Everything()


class ControlBroadcasts:
    """Broadcasts a control message for a key only when its epoch is newer than the one
    this relay last put on the bus for that key (a relay starts knowing nothing, so its
    first round broadcasts everything again; followers ignore what they know)."""

    def __init__(self, bus: MessageBus) -> None:
        self.bus = bus
        self._carried: dict[Hashable, int] = {}

    def carried(self, key: Hashable, epoch: int) -> bool:
        return self._carried.get(key, -1) >= epoch

    def send(self, biz_code: str, key: Hashable, epoch: int, payload: Callable[[], bytes]) -> bool:
        """True when broadcast now; False when this epoch was carried already."""
        if self.carried(key, epoch):
            return False
        self.bus.publish_control(biz_code, payload())
        self._carried[key] = epoch
        return True


Relay = Callable[[], object]


def relay_round(relays: Sequence[Relay], on_error: Callable[[], None]) -> None:
    """One round of every relay; a failure (the store or the bus briefly away) is logged
    and counted, and the next round tries again."""
    for relay in relays:
        try:
            relay()
        except Exception:
            on_error()
            log.exception("relay failed; retrying")


def run_relays(
    relays: Sequence[Relay], stop: threading.Event, on_error: Callable[[], None], every: timedelta = RELAY_EVERY
) -> None:
    """Rounds every `every` until `stop`."""
    while not stop.wait(every.total_seconds()):
        relay_round(relays, on_error)


__all__ = [
    "EVERYTHING",
    "RELAY_EVERY",
    "WIRE_VERSION",
    "ControlBroadcasts",
    "Everything",
    "Owned",
    "Relay",
    "RelayScope",
    "decode_control",
    "encode_control",
    "relay_round",
    "run_relays",
]
