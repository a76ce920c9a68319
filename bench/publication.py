"""Publication: per-message commands/s through `PulsarBus.publish` against a bare
pulsar-client `send_async` delayed-publish loop, same run, same broker.

Both send the same pre-built messages (one command per message, the payload the fire
pipeline encodes, its four properties, a partition key, deliver_at = now + 5 s) to a
fresh topic with the same producer settings (batching off, block_if_queue_full,
max_pending 10000, WARN-level client logger, the client's default one I/O thread). The
bare loop queues everything and flushes once. PulsarBus is called three ways:

- the goal row, as the threaded Scheduler calls it: `fire_workers` (8) pool threads,
  each publishing a chunk of `chunk_size` (100) and waiting for its acknowledgements, so
  several chunks are in flight at once;
- chunks of 100 from one thread (informational): each call waits for its acks before
  the next is sent, so the pipe drains and the broker idles once per chunk;
- one call with everything (informational): the per-message cost alone.

Each repetition runs the four in a rotated order, so a change in the shared machine's
load does not always fall on the same one.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
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
        cmd = ExecutionCommand(
            command_id=command_id(i + 1, t, 0),
            trigger_id=TriggerId(i + 1),
            job_code=JobCode("bench-pub"),
            biz_code="pub",
            handler="bench",
            scheduled_at=t,
            epoch=Epoch(1),
        )
        props = {
            "job_code": "bench-pub",
            "biz_code": "pub",
            "scheduled_at": str(deliver_at_ms),
            "trigger_id": str(i + 1),
        }
        out.append(
            BusMessage(topic, encode_commands([cmd]), deliver_at_ms=deliver_at_ms, properties=props, key=cmd.command_id)
        )
    return out


def bare_client(service_url: str) -> Any:
    """A pulsar-client with the settings every bare loop of the benches uses."""
    import pulsar

    return pulsar.Client(
        service_url, operation_timeout_seconds=30, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    )


@contextmanager
def bare_pair(service_url: str, topic: str) -> Iterator[tuple[Any, Any]]:
    """A bare Shared consumer (from the latest message, the bus's prefetch) and a bare
    producer (batching off, blocking when full) on `topic`: the ceiling the bus is
    measured against (fanout, hot_minute)."""
    import pulsar

    client = bare_client(service_url)
    try:
        consumer = client.subscribe(
            topic,
            "bare",
            consumer_type=pulsar.ConsumerType.Shared,
            initial_position=pulsar.InitialPosition.Latest,
            receiver_queue_size=500,
        )
        producer = client.create_producer(
            topic, batching_enabled=False, block_if_queue_full=True, max_pending_messages=MAX_PENDING
        )
        yield consumer, producer
        producer.close()
        consumer.close()
    finally:
        client.close()


def bare_publish(service_url: str, topic: str, messages: list[Any], timeout_s: float) -> dict[str, Any]:
    import pulsar

    client = bare_client(service_url)
    try:
        producer = client.create_producer(
            topic,
            send_timeout_millis=30_000,
            max_pending_messages=MAX_PENDING,
            block_if_queue_full=True,
            batching_enabled=False,
        )
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
        producer.send(
            first.payload,
            properties=dict(first.properties),
            partition_key=first.key,
            deliver_at=int(first.deliver_at_ms),
        )
        body = messages[1:]
        state["left"] = len(body)
        t0 = time.perf_counter()
        for m in body:
            producer.send_async(
                m.payload, cb, properties=dict(m.properties), partition_key=m.key, deliver_at=int(m.deliver_at_ms)
            )
        producer.flush()
        ok = done.wait(timeout_s)
        secs = time.perf_counter() - t0
        producer.close()
    finally:
        client.close()
    return {"rate": len(body) / secs, "seconds": secs, "complete": ok, "failed": state["failed"]}


def bus_publish(
    service_url: str, admin_url: str | None, prefix: str, logical: str, messages: list[Any], chunk: int
) -> dict[str, Any]:
    from scheduler_core.bus.pulsar import PulsarBus

    bus = PulsarBus(service_url, admin_url=admin_url, topic_prefix=prefix, max_pending=MAX_PENDING)
    try:
        bus.publish(messages[:1])  # producer created outside the timing, as the bare loop's is
        body = messages[1:]
        t0 = time.perf_counter()
        for i in range(0, len(body), chunk):
            bus.publish(body[i : i + chunk])
        secs = time.perf_counter() - t0
    finally:
        bus.close()
    return {"rate": len(body) / secs, "seconds": secs, "chunk": chunk}


def bus_publish_concurrent(
    service_url: str, admin_url: str | None, prefix: str, logical: str, messages: list[Any], chunk: int, workers: int
) -> dict[str, Any]:
    """PulsarBus.publish as the threaded Scheduler calls it: a pool of `workers` threads
    (SchedulerSettings.fire_workers), each publishing one chunk and waiting for its
    acknowledgements, all into the same bus, so several chunks are in flight at once."""
    from concurrent.futures import ThreadPoolExecutor

    from scheduler_core.bus.pulsar import PulsarBus

    bus = PulsarBus(service_url, admin_url=admin_url, topic_prefix=prefix, max_pending=MAX_PENDING)
    try:
        bus.publish(messages[:1])
        body = messages[1:]
        chunks = [body[i : i + chunk] for i in range(0, len(body), chunk)]
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="benchfire") as pool:
            t0 = time.perf_counter()
            for fut in [pool.submit(bus.publish, c) for c in chunks]:
                fut.result()  # a PublishError fails the measurement, as it should
            secs = time.perf_counter() - t0
    finally:
        bus.close()
    return {"rate": len(body) / secs, "seconds": secs, "chunk": chunk, "workers": workers}


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    from scheduler_core.settings import SchedulerSettings

    quick = profile["quick"]
    n = 5_000 if quick else 40_000
    reps = 1 if quick else 3
    defaults = SchedulerSettings()
    chunk, workers = defaults.chunk_size, defaults.fire_workers
    sec = Section(NAME, TITLE)
    sec.settings = {
        "messages": n,
        "repetitions": reps,
        "chunk_size": chunk,
        "fire_workers": workers,
        "deliver_at": "now + 5 s",
        "order": "rotated per repetition",
        "producer": {
            "batching_enabled": False,
            "block_if_queue_full": True,
            "max_pending_messages": MAX_PENDING,
            "client io_threads": 1,
        },
        "subscriptions": "none",
    }
    raw: dict[str, list[dict[str, Any]]] = {}
    prefix = bench_prefix("pub")
    url, admin = env.pulsar_url, env.pulsar_admin_url

    def fresh(logical: str) -> list[Any]:
        return build_messages(n + 1, int(time.time() * 1000) + 5_000, logical)

    kinds: dict[str, Callable[[int], dict[str, Any]]] = {
        "bare": lambda rep: bare_publish(url, f"persistent://public/default/{prefix}-bare{rep}", fresh("cmd.pub"), 120),
        "bus_pool": lambda rep: bus_publish_concurrent(
            url, admin, prefix, f"cmd.pub{rep}pool", fresh(f"cmd.pub{rep}pool"), chunk, workers
        ),
        "bus_chunks": lambda rep: bus_publish(url, admin, prefix, f"cmd.pub{rep}c", fresh(f"cmd.pub{rep}c"), chunk),
        "bus_one_call": lambda rep: bus_publish(url, admin, prefix, f"cmd.pub{rep}all", fresh(f"cmd.pub{rep}all"), n),
    }
    order = list(kinds)
    try:
        for rep in range(reps):
            turn = order[rep % len(order) :] + order[: rep % len(order)]
            for kind in turn:
                raw.setdefault(kind, []).append(kinds[kind](rep))
    finally:
        delete_topics(admin, prefix)

    def med(k: str) -> float | None:
        return median(v["rate"] for v in raw.get(k, []))

    def per_run(k: str) -> str:
        ratios = [v["rate"] / b["rate"] for v, b in zip(raw.get(k, []), raw.get("bare", []), strict=False)]
        return "per-run ratios " + ", ".join(f"{r:.2f}x" for r in ratios)

    bare = med("bare")
    peer = "peer: bare send_async loop + one flush"
    sec.rows = [
        Row(
            f"PulsarBus.publish, {workers} threads x chunks of {chunk} (as the threaded Scheduler's fire pool calls it)",
            med("bus_pool"),
            bare,
            "/s",
            GOAL,
            note=f"the goal row; {peer}; {per_run('bus_pool')}",
        ),
        Row(
            f"PulsarBus.publish, chunks of {chunk} from one thread",
            med("bus_chunks"),
            bare,
            "/s",
            note=f"informational: each call waits for its acks, the pipe drains per chunk; {peer}; "
            f"{per_run('bus_chunks')}",
        ),
        Row(
            f"PulsarBus.publish, one call of {n:,}",
            med("bus_one_call"),
            bare,
            "/s",
            GOAL,
            note=f"the per-message cost alone; {peer}; {per_run('bus_one_call')}",
        ),
    ]
    sec.raw = raw
    sec.notes.append(
        f"medians of {reps} run(s) of {n:,} messages each, the four kinds in a rotated order per run; "
        "one command per message, deliver_at set (the client never batches those)."
    )
    sec.notes.append(
        f"the pool row has at most {workers} x {chunk} messages in flight; the bare loop and the one "
        f"call queue up to the producer's {MAX_PENDING:,}-message pending limit, then each send waits "
        "for an acknowledgement to free a slot."
    )
    return sec
