"""The bus's control channel (`MessageBus.publish_control` / `follow_control`), run on
the in-process bus and on the real Pulsar broker: a broadcast every follower sees whole
and in order, however late it starts. What carries rollback fences to every executor,
where the command subscription (Shared) would hand each message to one of them only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta

import pytest

from scheduler_core.ports import MessageBus
from tests.backends import message_bus

KINDS = [pytest.param("memory"), pytest.param("pulsar", marks=pytest.mark.pulsar)]


@pytest.fixture(params=KINDS)
def bus(request: pytest.FixtureRequest) -> Iterator[MessageBus]:
    with message_bus(request.param) as b:
        yield b


class _Got:
    def __init__(self) -> None:
        self.items: list[bytes] = []
        self._lock = threading.Lock()

    def __call__(self, payload: bytes) -> None:
        with self._lock:
            self.items.append(payload)

    def wait_for(self, n: int, within_s: float = 10.0) -> list[bytes]:
        _until(lambda: len(self.items) >= n, within_s)
        return list(self.items)


def _until(check: Callable[[], object], within_s: float) -> object:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if out := check():
            return out
        time.sleep(0.01)
    return check()


def test_every_follower_gets_every_control_message_in_order(bus: MessageBus) -> None:
    a, b = _Got(), _Got()
    feeds = [bus.follow_control(a), bus.follow_control(b)]
    try:
        assert all(f.wait_synced(timedelta(seconds=10)) for f in feeds)
        sent = [f"m{i}".encode() for i in range(20)]
        for i, payload in enumerate(sent):
            bus.publish_control(f"key-{i % 3}", payload)
        a.wait_for(20)
        b.wait_for(20)
        assert a.items == sent and b.items == sent, "broadcast, not shared; in publish order"
    finally:
        for f in feeds:
            f.close()


def test_a_follower_started_later_reads_the_whole_history_before_it_is_in_sync(bus: MessageBus) -> None:
    sent = [f"old-{i}".encode() for i in range(5)]
    for payload in sent:
        bus.publish_control("k", payload)
    late = _Got()
    feed = bus.follow_control(late)
    try:
        assert feed.wait_synced(timedelta(seconds=10))
        assert late.items == sent, "in sync means: everything published before is handed over"
        bus.publish_control("k", b"new")
        late.wait_for(6)
        assert late.items == [*sent, b"new"]
    finally:
        feed.close()


def test_a_closed_follower_hears_nothing_more(bus: MessageBus) -> None:
    got = _Got()
    feed = bus.follow_control(got)
    assert feed.wait_synced(timedelta(seconds=10))
    feed.close()
    bus.publish_control("k", b"after")
    time.sleep(0.3)
    assert got.items == [] and not feed.synced()
