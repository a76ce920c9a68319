"""The Pulsar control follower's notion of "in sync", without a broker: a fake Reader
stands in for the client's. In sync only while the broker confirmed, recently, that
nothing is left unread; an outage (the confirmation failing) turns it off within the
staleness bound, and a confirmation turns it on again."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pulsar
import pytest

from scheduler_core.bus import pulsar as pulsar_bus
from scheduler_core.bus.pulsar import _ControlFollower
from tests.waiting import until


class _FakeReader:
    def __init__(self, history: list[bytes]) -> None:
        self.queue = list(history)
        self.reachable = threading.Event()
        self.reachable.set()
        self.closed = False

    def read_next(self, timeout_millis: int) -> object:
        if self.closed:
            raise pulsar.AlreadyClosed()
        if self.queue:
            payload = self.queue.pop(0)
            return type("Msg", (), {"data": lambda self: payload})()
        time.sleep(timeout_millis / 1000)
        raise pulsar.Timeout()

    def has_message_available(self) -> bool:
        if not self.reachable.is_set():
            raise pulsar.ConnectError()
        return bool(self.queue)

    def close(self) -> None:
        self.closed = True


def test_in_sync_only_while_the_broker_confirms_recently(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pulsar_bus, "CONTROL_POLL_MS", 20)
    monkeypatch.setattr(pulsar_bus, "CONTROL_DRAIN_MS", 5)
    monkeypatch.setattr(pulsar_bus, "CONTROL_STALE_S", 0.3)
    reader = _FakeReader([b"a", b"b"])
    got: list[bytes] = []
    follower = _ControlFollower(reader, "t", got.append, lambda _f: None)
    assert not follower.synced(), "not before the first catch-up"
    follower.start()
    try:
        assert follower.wait_synced(timedelta(seconds=5))
        assert got == [b"a", b"b"], "in sync only after the history was handed over"
        reader.reachable.clear()  # the broker is gone: no confirmation any more
        # stale after 0.3 s without a confirmation
        assert until(lambda: not follower.synced(), 2.0, every_s=0.02)
        reader.reachable.set()
        assert follower.wait_synced(timedelta(seconds=5))
    finally:
        follower.close()
    assert not follower.synced() and reader.closed
