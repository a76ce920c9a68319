"""The message bus's contract, run on the in-process bus and on the real Pulsar broker."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest

from scheduler_core.codec import CALLBACK_TOPIC, command_topic
from scheduler_core.ports import BusMessage, MessageBus, Received, Subscription
from tests.backends import message_bus

KINDS = [pytest.param("memory"), pytest.param("pulsar", marks=pytest.mark.pulsar)]
TICK_S = 0.1  # the broker's delayed-delivery tick (standalone.conf) and the bus's precision


@pytest.fixture(params=KINDS)
def bus(request: pytest.FixtureRequest) -> Iterator[MessageBus]:
    with message_bus(request.param) as b:
        yield b


def _drain(sub: Subscription, want: int, within_s: float) -> list[tuple[float, Received]]:
    got: list[tuple[float, Received]] = []
    deadline = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < deadline:
        for r in sub.receive(100, timedelta(milliseconds=100)):
            got.append((time.time(), r))
            sub.ack(r)
    return got


def test_deliver_at_is_honoured(bus: MessageBus) -> None:
    sub = bus.subscribe(command_topic("biz-a"), "executor")
    sent_at = time.time()
    due_ms = int((sent_at + 3) * 1000)
    bus.publish([BusMessage(command_topic("biz-a"), b"later", deliver_at_ms=due_ms, properties={"job_code": "j1"})])
    early = sub.receive(10, timedelta(seconds=1.5))
    assert early == [], "delivered before its deliver-at"
    got = _drain(sub, 1, within_s=5)
    assert len(got) == 1
    arrived, received = got[0]
    assert arrived >= due_ms / 1000 - TICK_S, f"arrived {due_ms / 1000 - arrived:.3f}s early"
    # No upper bound on lateness here: the broker hands it over on its next tick, but on a
    # loaded 2-core box this test's own thread may wake a second or more after that (a
    # failure seen once under load 10+). That it arrives at all is the drain's 5 s window;
    # lateness is measured in bench/ (hot_minute, publication), not asserted.
    assert received.message.payload == b"later"
    assert received.message.properties.get("job_code") == "j1"


def test_one_topic_per_business_and_a_separate_callback_topic(bus: MessageBus) -> None:
    a = bus.subscribe(command_topic("biz-a"), "executor")
    b = bus.subscribe(command_topic("biz-b"), "executor")
    cb = bus.subscribe(CALLBACK_TOPIC, "scheduler")
    bus.publish(
        [
            BusMessage(command_topic("biz-a"), b"a1"),
            BusMessage(command_topic("biz-b"), b"b1"),
            BusMessage(CALLBACK_TOPIC, b"r1"),
        ]
    )
    assert [r.message.payload for _, r in _drain(a, 1, 5)] == [b"a1"]
    assert [r.message.payload for _, r in _drain(b, 1, 5)] == [b"b1"]
    assert [r.message.payload for _, r in _drain(cb, 1, 5)] == [b"r1"]
    assert a.receive(10, timedelta(milliseconds=300)) == []


def test_shared_subscription_splits_messages_between_consumers(bus: MessageBus) -> None:
    topic = command_topic("biz-shared")
    c1 = bus.subscribe(topic, "executor")
    c2 = bus.subscribe(topic, "executor")
    bus.publish([BusMessage(topic, f"m{i}".encode()) for i in range(40)])
    seen: list[bytes] = []
    per: list[int] = [0, 0]
    deadline = time.monotonic() + 10
    while len(seen) < 40 and time.monotonic() < deadline:
        for k, c in enumerate((c1, c2)):
            for r in c.receive(5, timedelta(milliseconds=50)):
                seen.append(r.message.payload)
                per[k] += 1
                c.ack(r)
    assert sorted(seen) == sorted(f"m{i}".encode() for i in range(40)), "each message exactly once across the group"
    assert per[0] > 0 and per[1] > 0, f"a shared subscription must split the load, got {per}"


def test_unacked_messages_are_redelivered(bus: MessageBus) -> None:
    topic = command_topic("biz-redeliver")
    c1 = bus.subscribe(topic, "executor")
    bus.publish([BusMessage(topic, b"once")])
    (first,) = [r for _, r in _drain_no_ack(c1, 1, 5)]
    c1.nack(first)
    again = _drain(c1, 1, within_s=10)
    assert [r.message.payload for _, r in again] == [b"once"]


def _drain_no_ack(sub: Subscription, want: int, within_s: float) -> list[tuple[float, Received]]:
    got: list[tuple[float, Received]] = []
    deadline = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < deadline:
        got += [(time.time(), r) for r in sub.receive(want - len(got), timedelta(milliseconds=100))]
    return got


def test_an_ensured_subscription_keeps_messages_published_before_its_first_consumer(bus: MessageBus) -> None:
    topic = command_topic("late-executors")
    bus.ensure_subscription(topic, "executor")
    bus.ensure_subscription(topic, "executor")  # idempotent
    bus.publish([BusMessage(topic, b"kept", properties={"job_code": "j1"})])
    # a subscription that did not exist at publish time sees nothing of it
    other = bus.subscribe(topic, "created-later")
    sub = bus.subscribe(topic, "executor")
    got = _drain(sub, 1, within_s=10)
    assert [r.message.payload for _, r in got] == [b"kept"]
    assert other.receive(10, timedelta(milliseconds=500)) == []
