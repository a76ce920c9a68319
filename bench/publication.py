"""Publication: per-message commands/s through `PulsarBus.publish` against a bare
pulsar-client `send_async` delayed-publish loop, same run, same broker.

Both send the same pre-built messages (one command per message, the payload the fire
pipeline encodes, its four properties, a partition key, deliver_at = now + 5 s) to a
fresh topic with the same producer settings (batching off, block_if_queue_full,
max_pending 10000, WARN-level client logger). The bare loop queues everything and
flushes once; PulsarBus is called the way the fire pipeline calls it: once per chunk
(100 messages) and waiting for its acknowledgements, and once with everything.
"""
from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

from bench.harness import Goal, Row, Section, StackEnv, bench_prefix, delete_topics, median

NAME = "publication"
TITLE = "per-message publication vs a bare pulsar-client delayed-publish loop"
GOAL = Goal("ratio_min", 0.8)
MAX_PENDING = 10_000


def build_messages(n: int, deliver_at_ms: int, topic: str = "cmd.pub") -> list[Any]:
    from scheduler_core.codec import encode_commands
    from scheduler_core.model import Epoch, ExecutionCommand, JobCode, TriggerId, command_id
    from scheduler_core.ports import BusMessage

    t = datetime.fromtimestamp(deliver_at_ms / 1000, tz=timezone.utc)
    out = []
    for i in range(n):
        cmd = ExecutionCommand(command_id=command_id(i + 1, t, 0), trigger_id=TriggerId(i + 1),
                               job_code=JobCode("bench-pub"), biz_code="pub", handler="bench", scheduled_at=t,
                               epoch=Epoch(1))
        props = {"job_code": "bench-pub", "biz_code": "pub", "scheduled_at": str(deliver_at_ms),
                 "trigger_id": str(i + 1)}
        out.append(BusMessage(topic, encode_commands([cmd]), deliver_at_ms=deliver_at_ms, properties=props,
                              key=cmd.command_id))
    return out


def bare_publish(service_url: str, topic: str, messages: list[Any], timeout_s: float) -> dict[str, Any]:
    import pulsar

    client = pulsar.Client(service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn))
    try:
        producer = client.create_producer(topic, send_timeout_millis=30_000, max_pending_messages=MAX_PENDING,
                                          block_if_queue_full=True, batching_enabled=False)
        done = threading.Event()
        state = {"left": len(messages), "failed": 0}
        lock = threading.Lock()

        def cb(res: Any, _mid: Any) -> None:
            with lock:
                state["left"] -= 1
                if res != pulsar.Result.Ok:
                    state["failed"] += 1
                if state["left"] == 0:
                    done.set()

        first = messages[0]  # a first message outside the timing, as for the bus
        producer.send(first.payload, properties=dict(first.properties), partition_key=first.key,
                      deliver_at=int(first.deliver_at_ms))
        body = messages[1:]
        state["left"] = len(body)
        t0 = time.perf_counter()
        for m in body:
            producer.send_async(m.payload, cb, properties=dict(m.properties), partition_key=m.key,
                                deliver_at=int(m.deliver_at_ms))
        producer.flush()
        ok = done.wait(timeout_s)
        secs = time.perf_counter() - t0
        producer.close()
    finally:
        client.close()
    return {"rate": len(body) / secs, "seconds": secs, "complete": ok, "failed": state["failed"]}


def bus_publish(service_url: str, admin_url: str | None, prefix: str, logical: str, messages: list[Any],
                chunk: int) -> dict[str, Any]:
    from scheduler_core.bus.pulsar import PulsarBus

    bus = PulsarBus(service_url, admin_url=admin_url, topic_prefix=prefix, max_pending=MAX_PENDING)
    try:
        bus.publish(messages[:1])  # producer created outside the timing, as the bare loop's is
        body = messages[1:]
        t0 = time.perf_counter()
        for i in range(0, len(body), chunk):
            bus.publish(body[i:i + chunk])
        secs = time.perf_counter() - t0
    finally:
        bus.close()
    return {"rate": len(body) / secs, "seconds": secs, "chunk": chunk}


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    n = 5_000 if quick else 40_000
    reps = 1 if quick else 3
    chunks = [100, n]
    sec = Section(NAME, TITLE)
    sec.settings = {"messages": n, "repetitions": reps, "bus_chunks": chunks, "deliver_at": "now + 5 s",
                    "producer": {"batching_enabled": False, "block_if_queue_full": True,
                                 "max_pending_messages": MAX_PENDING}, "subscriptions": "none"}
    raw: dict[str, list[dict[str, Any]]] = {}
    prefix = bench_prefix("pub")
    try:
        for rep in range(reps):
            deliver = int(time.time() * 1000) + 5_000
            msgs = build_messages(n + 1, deliver)
            bare_topic = f"persistent://public/default/{prefix}-bare{rep}"
            raw.setdefault("bare", []).append(bare_publish(env.pulsar_url, bare_topic, msgs, 120))
            for c in chunks:
                logical = f"cmd.pub{rep}c{c}"
                msgs = build_messages(n + 1, int(time.time() * 1000) + 5_000, logical)
                raw.setdefault(f"bus_{c}", []).append(
                    bus_publish(env.pulsar_url, env.pulsar_admin_url, prefix, logical, msgs, c))
    finally:
        delete_topics(env.pulsar_admin_url, prefix)

    def med(k: str) -> float | None:
        return median(v["rate"] for v in raw.get(k, []))

    bare = med("bare")
    sec.rows = [
        Row("PulsarBus.publish, chunks of 100 (as the fire pipeline calls it)", med("bus_100"), bare, "/s", GOAL,
            note="peer: bare send_async loop + one flush"),
        Row(f"PulsarBus.publish, one call of {n:,}", med(f"bus_{n}"), bare, "/s", GOAL,
            note="peer: bare send_async loop + one flush"),
    ]
    sec.raw = raw
    sec.notes.append(f"medians of {reps} run(s) of {n:,} messages each; one command per message, deliver_at set "
                     "(the client never batches those).")
    return sec
