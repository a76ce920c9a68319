"""PulsarBus.publish's per-message path without a broker: how acknowledgements are
counted and failures reported. A fake producer stands in for the client's, so these run
everywhere; the real round trip is in tests/integration/test_pulsar_bus.py."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pulsar
import pytest

from scheduler_core.bus.pulsar import PulsarBus, _Acks
from scheduler_core.errors import PublishError
from scheduler_core.ports import BusMessage


class _FakeProducer:
    """Records each send; answers every callback on its own thread, as the client's I/O
    thread does, with the result `answer` picks for the payload."""

    def __init__(self, answer: Callable[[bytes], Any] = lambda _p: pulsar.Result.Ok) -> None:
        self.sent: list[dict[str, Any]] = []
        self._answer = answer
        self._threads: list[threading.Thread] = []

    def send_async(self, content: bytes, callback: Callable[[Any, Any], None], **kwargs: Any) -> None:
        if not isinstance(content, bytes):
            raise ValueError("Argument data is expected to be of type 'bytes'")
        if kwargs.get("properties") is not None and not isinstance(kwargs["properties"], dict):
            raise ValueError("Argument properties is expected to be either None or of type 'dict'")
        self.sent.append({"content": content, **kwargs})
        t = threading.Thread(target=callback, args=(self._answer(content), None))
        self._threads.append(t)
        t.start()

    def join(self) -> None:
        for t in self._threads:
            t.join(5)


@pytest.fixture
def bus() -> Iterator[PulsarBus]:
    # the client connects lazily: nothing is contacted unless a producer is created
    b = PulsarBus("pulsar://127.0.0.1:1", topic_prefix="unit")
    try:
        yield b
    finally:
        b._producers.clear()  # the fakes have nothing to flush or close
        b.close()


def _with_producer(bus: PulsarBus, topic: str, producer: _FakeProducer) -> None:
    bus._producers[topic] = producer  # type: ignore[assignment]


def test_acks_count_concurrent_callbacks_without_losing_any() -> None:
    total = 8 * 2_000
    acks = _Acks(total)
    fails = {7, 1_234, 9_999}

    def storm(start: int) -> None:
        for i in range(start, total, 8):
            acks.callback(pulsar.Result.Timeout if i in fails else pulsar.Result.Ok, None)

    threads = [threading.Thread(target=storm, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert acks.wait(5) == 0
    assert len(acks.errors) == len(fails)
    assert all("Timeout" in e for e in acks.errors), acks.errors


def test_acks_wait_reports_the_messages_that_never_settled() -> None:
    acks = _Acks(5)
    for _ in range(3):
        acks.callback(pulsar.Result.Ok, None)
    assert acks.wait(0.05) == 2
    assert acks.errors == []


def test_acks_callback_never_raises_on_a_strange_result() -> None:
    class Weird:
        def __eq__(self, other: object) -> bool:
            raise RuntimeError("boom")

    acks = _Acks(1)
    acks.callback(Weird(), None)  # must not propagate: it would kill the process
    assert acks.wait(1) == 0
    assert acks.errors == ["callback error"]


def test_publish_sends_each_message_as_given_and_returns_when_all_are_acknowledged(bus: PulsarBus) -> None:
    a, b = _FakeProducer(), _FakeProducer()
    _with_producer(bus, "cmd.a", a)
    _with_producer(bus, "cmd.b", b)
    frozen: Mapping[str, str] = MappingProxyType({"job_code": "j"})
    bus.publish(
        [
            BusMessage("cmd.a", b"1", deliver_at_ms=1_767_225_600_000, properties={"x": "1"}, key="k1"),
            BusMessage("cmd.b", b"2", deliver_at_ms=1_767_225_600_000.0, properties=frozen),  # type: ignore[arg-type]
            BusMessage("cmd.a", b"3", key=""),
        ]
    )
    a.join()
    b.join()
    assert [s["content"] for s in a.sent] == [b"1", b"3"]
    assert [s["content"] for s in b.sent] == [b"2"]
    first, third = a.sent
    assert first["properties"] == {"x": "1"} and first["partition_key"] == "k1"
    assert first["deliver_at"] == 1_767_225_600_000
    assert third["deliver_at"] is None and third["partition_key"] is None
    only_b = b.sent[0]
    assert type(only_b["properties"]) is dict and only_b["properties"] == {"job_code": "j"}
    assert type(only_b["deliver_at"]) is int


def test_publish_names_the_failures_and_counts_them(bus: PulsarBus) -> None:
    producer = _FakeProducer(lambda p: pulsar.Result.ProducerQueueIsFull if p.startswith(b"bad") else pulsar.Result.Ok)
    _with_producer(bus, "cmd.a", producer)
    msgs = [BusMessage("cmd.a", b"bad%d" % i if i % 10 == 0 else b"ok%d" % i) for i in range(100)]
    with pytest.raises(PublishError, match="ProducerQueueIsFull") as caught:
        bus.publish(msgs)
    producer.join()
    assert caught.value.failed == 10
    assert len(producer.sent) == 100, "one failure must not stop the rest of the chunk"


def test_a_send_that_raises_fails_the_call_without_waiting_for_its_callback(bus: PulsarBus) -> None:
    producer = _FakeProducer()
    _with_producer(bus, "cmd.a", producer)
    bad = BusMessage("cmd.a", "not bytes")  # type: ignore[arg-type]
    with pytest.raises(PublishError, match="ValueError") as caught:
        bus.publish([BusMessage("cmd.a", b"fine"), bad])
    producer.join()
    assert caught.value.failed == 1
    assert [s["content"] for s in producer.sent] == [b"fine"]
