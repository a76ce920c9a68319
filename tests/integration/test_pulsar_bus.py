"""PulsarBus against the real standalone broker: what the contract suite does not cover
(admin backlog, volume, topic naming, connection failures, metadata round-trip)."""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest

from scheduler_core.bus.pulsar import PulsarBus, topic_local_name
from scheduler_core.codec import command_topic
from scheduler_core.errors import BusError, PublishError
from scheduler_core.ports import BusMessage, Received, Subscription
from tests.servers import server_url
from tests.waiting import until as _until

pytestmark = pytest.mark.pulsar

LEGAL = re.compile(r"^[A-Za-z0-9._-]+$")
TICK_S = 0.1  # the broker's delayed-delivery tick (standalone.conf)


def _new_bus(**kwargs: object) -> PulsarBus:
    return PulsarBus(
        server_url("pulsar"),
        admin_url=server_url("pulsar", "SWITCHYARD_PULSAR_ADMIN_URL"),
        topic_prefix=f"it{uuid.uuid4().hex[:8]}",
        **kwargs,  # type: ignore[arg-type]
    )


@pytest.fixture
def bus() -> Iterator[PulsarBus]:
    b = _new_bus()
    try:
        yield b
    finally:
        b.close()


def _drain(sub: Subscription, want: int, within_s: float) -> list[Received]:
    got: list[Received] = []
    deadline = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < deadline:
        for r in sub.receive(100, timedelta(milliseconds=100)):
            got.append(r)
            sub.ack(r)
    return got


def test_backlog_separates_due_from_delayed(bus: PulsarBus) -> None:
    topic = command_topic("biz-backlog")
    sub = bus.subscribe(topic, "executor")
    now_ms = int(time.time() * 1000)
    bus.publish(
        [BusMessage(topic, f"due{i}".encode(), deliver_at_ms=now_ms - 5_000) for i in range(3)]
        + [BusMessage(topic, f"later{i}".encode(), deliver_at_ms=now_ms + 60_000) for i in range(4)]
    )
    # the broker indexes delayed messages as its dispatcher reads them: poll, bounded
    assert _until(lambda: bus.backlog(topic, "executor") == (3, 4), within_s=10), bus.backlog(topic, "executor")

    got = _drain(sub, 3, within_s=5)
    assert sorted(r.message.payload for r in got) == [b"due0", b"due1", b"due2"]
    assert _until(lambda: bus.backlog(topic, "executor") == (0, 4), within_s=10), bus.backlog(topic, "executor")
    assert sub.receive(10, timedelta(milliseconds=300)) == [], "a +60 s message came early"

    # no topic / no subscription yet: nothing waits
    assert bus.backlog(command_topic("biz-never-used"), "executor") == (0, 0)
    assert bus.backlog(topic, "nobody") == (0, 0)


def test_backlog_needs_a_reachable_admin() -> None:
    no_admin = PulsarBus(server_url("pulsar"), topic_prefix="itnoadmin")
    dead_admin = PulsarBus(
        server_url("pulsar"), admin_url="http://127.0.0.1:1", topic_prefix="itdeadadmin", operation_timeout_s=2
    )
    try:
        with pytest.raises(BusError, match="admin"):
            no_admin.backlog("callback", "scheduler")
        with pytest.raises(BusError, match="unreachable"):
            dead_admin.backlog("callback", "scheduler")
    finally:
        no_admin.close()
        dead_admin.close()


def test_two_thousand_delayed_messages_in_one_call_arrive_exactly_once(bus: PulsarBus) -> None:
    topic = command_topic("biz-volume")
    consumers = [bus.subscribe(topic, "executor"), bus.subscribe(topic, "executor")]
    due_ms = int(time.time() * 1000) + 1_500
    n = 2_000
    bus.publish([BusMessage(topic, f"m{i}".encode(), deliver_at_ms=due_ms, properties={"i": str(i)}) for i in range(n)])

    seen: Counter[bytes] = Counter()
    per = [0, 0]
    earliest = float("inf")
    deadline = time.monotonic() + 20
    while sum(seen.values()) < n and time.monotonic() < deadline:
        for k, c in enumerate(consumers):
            for r in c.receive(200, timedelta(milliseconds=50)):
                earliest = min(earliest, time.time())
                seen[r.message.payload] += 1
                per[k] += 1
                c.ack(r)
    # anything still coming would be a duplicate
    for c in consumers:
        for r in c.receive(200, timedelta(milliseconds=500)):
            seen[r.message.payload] += 1
    assert len(seen) == n, f"got {len(seen)} distinct of {n}"
    assert set(seen.values()) == {1}, f"duplicates: {[p for p, k in seen.items() if k > 1][:5]}"
    assert per[0] > 0 and per[1] > 0, f"the shared subscription must split the load, got {per}"
    assert earliest >= due_ms / 1000 - TICK_S, f"first arrived {due_ms / 1000 - earliest:.3f}s early"


def test_odd_topic_names_map_to_legal_distinct_topics(bus: PulsarBus) -> None:
    odd = [
        command_topic("biz a/b"),
        command_topic("biz_a_b"),
        command_topic("biz a_b"),
        command_topic("账单"),
        command_topic("x-partition-3"),
        command_topic("biz:a?b#c"),
    ]
    names = [bus.local_topic(t) for t in odd]
    assert all(LEGAL.match(name) for name in names), names
    assert len(set(names)) == len(odd), names
    assert names[1] == f"{bus.local_topic('cmd.biz_a_b')}", "a legal name stays as it is"
    assert "-partition-" not in "".join(names), "a partition-like suffix would address a partition"
    assert topic_local_name("p", "cmd.biz a/b") == topic_local_name("p", "cmd.biz a/b"), "deterministic"

    # the odd names work end to end and do not share messages
    subs = [bus.subscribe(t, "executor") for t in odd]
    bus.publish([BusMessage(t, t.encode("utf-8")) for t in odd])
    for t, sub in zip(odd, subs, strict=True):
        assert [r.message.payload for r in _drain(sub, 1, within_s=5)] == [t.encode("utf-8")]
        assert sub.receive(10, timedelta(milliseconds=100)) == []


def test_unreachable_broker_is_a_one_line_bus_error() -> None:
    secret = "tok-" + uuid.uuid4().hex
    bus = PulsarBus("pulsar://127.0.0.1:1", operation_timeout_s=2, token=secret)
    try:
        assert secret not in repr(bus)
        for attempt in (
            lambda: bus.publish([BusMessage(command_topic("biz-a"), b"x")]),
            lambda: bus.subscribe(command_topic("biz-a"), "executor"),
        ):
            started = time.monotonic()
            with pytest.raises(BusError) as caught:
                attempt()
            assert time.monotonic() - started < 10
            text = str(caught.value)
            assert "\n" not in text and text, text
            assert "127.0.0.1:1" in text
            assert secret not in text
            assert caught.value.__cause__ is None and caught.value.__suppress_context__
    finally:
        bus.close()
        bus.close()  # idempotent


def test_properties_and_key_round_trip(bus: PulsarBus) -> None:
    topic = command_topic("biz-props")
    sub = bus.subscribe(topic, "executor")
    props = {"job_code": "j1", "command_id": "42:1767225600000:3", "note": "é ü 账单", "empty": ""}
    bus.publish(
        [
            BusMessage(topic, b"with", properties=props, key="job-42"),
            BusMessage(topic, b"without"),
        ]
    )
    got = {r.message.payload: r for r in _drain(sub, 2, within_s=5)}
    assert set(got) == {b"with", b"without"}
    with_meta = got[b"with"]
    assert dict(with_meta.message.properties) == props
    assert with_meta.message.key == "job-42"
    assert with_meta.message.topic == topic
    assert with_meta.redelivery_count == 0
    assert got[b"without"].message.key is None
    assert dict(got[b"without"].message.properties) == {}


def test_nack_counts_redeliveries_and_closed_bus_refuses(bus: PulsarBus) -> None:
    topic = command_topic("biz-nack")
    sub = bus.subscribe(topic, "executor")
    bus.publish([BusMessage(topic, b"again")])
    first = sub.receive(1, timedelta(seconds=5))
    assert len(first) == 1
    sub.nack(first[0])
    second = sub.receive(1, timedelta(seconds=5))
    assert [r.message.payload for r in second] == [b"again"]
    assert second[0].redelivery_count == 1
    sub.ack(second[0])
    bus.close()
    with pytest.raises(BusError):
        bus.publish([BusMessage(topic, b"late")])
    with pytest.raises(BusError):
        bus.subscribe(topic, "executor")
    sub.ack(second[0])  # after close: a no-op, like the in-process bus


def test_a_message_neither_acked_nor_nacked_stays_with_its_consumer_until_it_closes(bus: PulsarBus) -> None:
    """No ack timeout is set: a received message left alone is not redelivered while its
    consumer lives (so a consumer that cannot apply a batch must nack it, as the result
    consumer does), and goes to the others once that consumer closes."""
    topic = command_topic("biz-unacked")
    held = bus.subscribe(topic, "executor")
    bus.publish([BusMessage(topic, b"left")])
    assert [r.message.payload for r in held.receive(1, timedelta(seconds=5))] == [b"left"]
    other = bus.subscribe(topic, "executor")
    assert held.receive(1, timedelta(seconds=3)) == []  # three nack delays: not back
    assert other.receive(1, timedelta(0)) == []
    held.close()
    again = other.receive(1, timedelta(seconds=10))
    assert [r.message.payload for r in again] == [b"left"]


def test_chunks_published_concurrently_into_one_bus_arrive_exactly_once(bus: PulsarBus) -> None:
    # the threaded Scheduler's fire pool: several workers, each publishing its own chunk
    # and waiting for its acknowledgements, into the same bus and producer
    topic = command_topic("biz-pool")
    sub = bus.subscribe(topic, "executor")
    workers, chunks_each, chunk = 8, 4, 100
    errors: list[BaseException] = []

    def worker(w: int) -> None:
        try:
            for c in range(chunks_each):
                base = (w * chunks_each + c) * chunk
                bus.publish(
                    [
                        BusMessage(topic, f"m{base + i}".encode(), properties={"w": str(w)}, key=f"k{base + i}")
                        for i in range(chunk)
                    ]
                )
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    n = workers * chunks_each * chunk
    got = _drain(sub, n, within_s=30)
    got += sub.receive(200, timedelta(milliseconds=500))  # anything more would be a duplicate
    payloads = Counter(r.message.payload for r in got)
    assert len(payloads) == n and set(payloads.values()) == {1}
    assert all(r.message.key == "k" + r.message.payload.decode()[1:] for r in got)


def test_a_message_the_broker_refuses_fails_the_call_and_is_named(bus: PulsarBus) -> None:
    topic = command_topic("biz-too-big")
    sub = bus.subscribe(topic, "executor")
    too_big = b"x" * (6 * 1024 * 1024)  # over the broker's 5 MB message limit
    with pytest.raises(PublishError) as caught:
        bus.publish([BusMessage(topic, b"small-1"), BusMessage(topic, too_big), BusMessage(topic, b"small-2")])
    assert caught.value.failed == 1
    assert "TooBig" in str(caught.value), str(caught.value)
    # the rest of the call was still sent: a failure is per message, not per call
    assert sorted(r.message.payload for r in _drain(sub, 2, within_s=5)) == [b"small-1", b"small-2"]


def test_followers_of_one_prefix_starting_together_all_start(bus: PulsarBus) -> None:
    """Executor processes of one business start at once (a scale-out, the bench's
    packed_x2): each makes sure the control topic's retaining subscription exists while
    the others do. None may fail for it (the retainer must not be an Exclusive
    subscription two processes race to attach to: ConsumerBusy)."""
    prefix = bus._prefix
    n = 8
    buses = [
        PulsarBus(
            server_url("pulsar"),
            admin_url=server_url("pulsar", "SWITCHYARD_PULSAR_ADMIN_URL"),
            topic_prefix=prefix,
        )
        for _ in range(n)
    ]
    errors: list[BaseException] = []
    go = threading.Barrier(n)

    def follow(b: PulsarBus) -> None:
        try:
            go.wait(timeout=30)
            b.follow_control(lambda _payload: None)
        except BaseException as exc:
            errors.append(exc)

    try:
        for _round in range(3):  # a race: a few rounds on fresh topics make a loss likely
            threads = [threading.Thread(target=follow, args=(b,)) for b in buses]
            for t in threads:
                t.start()
            for t in threads:
                t.join(timeout=60)
            assert not errors, f"a follower failed to start: {errors[0]}"
            for b in buses:
                b._ensured.clear()  # each round makes sure of the retainer again, as new processes do
            go.reset()
        heard: list[bytes] = []
        feed = bus.follow_control(heard.append)
        bus.publish_control("k", b"after")
        assert _until(lambda: b"after" in heard, 30), "the control channel works after the race"
        feed.close()
    finally:
        for b in buses:
            b.close()
