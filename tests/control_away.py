"""A bus whose control channel fails: a relay whose broadcast failed after it published
(the tests of relays across leaderships)."""

from __future__ import annotations

from typing import cast

from scheduler_core.errors import BusError
from scheduler_core.ports import MessageBus


class _ControlAway:
    def __init__(self, bus: MessageBus) -> None:
        self._bus = bus

    def __getattr__(self, name: str) -> object:
        return getattr(self._bus, name)

    def publish_control(self, key: str, payload: bytes) -> None:
        raise BusError("the control channel is away")


def control_away(bus: MessageBus) -> MessageBus:
    """`bus` with every control message failing, the rest as it is."""
    return cast(MessageBus, _ControlAway(bus))
