"""The callback topic replaying old results and duplicates, on the real Pulsar topic and
the real MariaDB store: fired-record results stay correct.

Results are published with the wire codec (`encode_results`) onto the real callback
topic (`CALLBACK_TOPIC`, a unique topic prefix) and applied by the scheduler's own
`ResultConsumer`. Rounds end with a sentinel result (one synchronous publish per message,
one consumer, so the sentinel is applied after every message published before it):

1. first results: a failure, a success, a later attempt arriving first, a page record
   (an envelope of 3 items) with one failed item, a received-only step;
2. a later attempt wins; duplicates, an older attempt, a lower state and a different
   final state of the same attempt change nothing; an unknown id and a malformed
   message are dropped without harm;
3. every message of rounds 1 and 2 replayed: nothing changes, not even result_at.

Duplicates are never double-counted: the consumer's applied count, the page's item
counts, and the `switchyard_results` metric ("results applied") count each change once.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, encode_results
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, Epoch, FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]
S, F, R = FiredState.SUCCEEDED, FiredState.FAILED, FiredState.RECEIVED
T0 = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


@dataclass
class Env:
    store: SqlTriggerStore
    bus: PulsarBus
    consumer: ResultConsumer
    metrics: SchedulerMetrics


@pytest.fixture
def env() -> Iterator[Env]:
    pulsar = server_url("pulsar")
    with mariadb_database("replay") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, SystemClock())
        bus = PulsarBus(pulsar, topic_prefix=f"rp{uuid.uuid4().hex[:6]}")
        metrics = SchedulerMetrics()
        consumer = ResultConsumer(bus, store, metrics)  # subscribes before anything is published
        try:
            yield Env(store, bus, consumer, metrics)
        finally:
            consumer.close()
            bus.close()
            engine.dispose()


def cid(trigger: int, item: int = 0) -> CommandId:
    return command_id(trigger, T0, item)


A, B, C, D, P = cid(1), cid(2), cid(3), cid(4), cid(5)  # P: a page record of items 5-T0-0..2
PAGE_ITEMS = [cid(5, i) for i in range(3)]


def _fired(store: SqlTriggerStore, ids: list[CommandId], page: CommandId | None = None) -> None:
    recs = [
        FiredRecord(
            command_id=c,
            trigger_id=TriggerId(int(c.split("-")[0])),
            job_code=JobCode("j"),
            biz_code="b",
            scheduled_at=T0,
            epoch=Epoch(1),
            fired_at=T0,
        )
        for c in ids
    ]
    if page is not None:
        recs.append(
            FiredRecord(
                command_id=page,
                trigger_id=TriggerId(5),
                job_code=JobCode("j"),
                biz_code="b",
                scheduled_at=T0,
                item_index=0,
                item_total=3,
                item_count=3,
                epoch=Epoch(1),
                fired_at=T0,
            )
        )
    store.put_fired(recs)
    store.mark_published([r.command_id for r in recs], T0)


def up(
    c: CommandId, state: FiredState, attempt: int, at_s: float, msg: str = "", page: CommandId | None = None
) -> FiredUpdate:
    at = T0 + timedelta(seconds=at_s)
    return FiredUpdate(c, state, at, attempt, msg, received_at=at - timedelta(milliseconds=5), page_id=page)


def publish_round(e: Env, messages: list[bytes], sentinel: CommandId, timeout: float = 30.0) -> None:
    """Publish one message at a time (each acknowledged before the next), then the
    sentinel's success; poll until the sentinel is applied."""
    for payload in messages:
        e.bus.publish([BusMessage(CALLBACK_TOPIC, payload)])
    e.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([up(sentinel, S, 0, 1)]))])
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        e.consumer.poll(timeout=timedelta(milliseconds=200))
        got = e.store.get_fired([sentinel]).get(sentinel)
        if got is not None and got.state is S:
            e.consumer.poll(timeout=timedelta(milliseconds=300))  # anything redelivered right behind it
            return
    raise AssertionError(f"the sentinel {sentinel} was not applied within {timeout:.0f}s")


def snapshot(e: Env) -> dict[str, tuple[object, ...]]:
    recs = e.store.get_fired([A, B, C, D, P])
    return {
        c: (r.state, r.attempt, r.result_at, r.message, r.item_states, r.succeeded_items, r.failed_items)
        for c, r in recs.items()
    }


ROUND1 = [
    encode_results([up(A, F, 0, 10, "boom")]),
    encode_results([up(B, S, 0, 10)]),
    encode_results([up(C, S, 2, 30)]),  # the later attempt arrives first
    encode_results(
        [
            up(c, st, 0, 10, "item 1 failed" if st is F else "", page=P)
            for c, st in zip(PAGE_ITEMS, (S, F, S), strict=True)
        ]
    ),
    encode_results([up(D, R, 0, 10)]),
]
ROUND2 = [
    encode_results([up(A, S, 1, 20)]),  # a later attempt wins
    *[encode_results([up(B, S, 0, 10)])] * 3,  # duplicates
    encode_results([up(B, R, 0, 5)]),  # an older, lower state
    encode_results([up(B, F, 0, 40, "same attempt, other final state")]),
    encode_results([up(C, F, 1, 25, "older attempt"), up(C, R, 1, 20)]),
    encode_results([up(c, S, 1, 20, page=P) for c in PAGE_ITEMS]),  # the page's retry, all succeeded
    encode_results([up(D, S, 0, 20)]),
    encode_results([up(cid(999), S, 0, 10)]),  # never fired here
    b"not a result message",
    b'{"v": 1, "r": [{"c": "1-2-3"}]}',
]


def test_replayed_and_duplicated_results_leave_fired_records_correct(env: Env) -> None:
    _fired(env.store, [A, B, C, D, cid(101), cid(102), cid(103)], page=P)

    publish_round(env, ROUND1, cid(101))
    first = snapshot(env)
    assert first[A][:2] == (F, 0) and first[B][:2] == (S, 0) and first[C][:2] == (S, 2) and first[D][0] is R
    assert first[P][0] is F and first[P][4:] == ("SFS", 2, 1), first[P]

    publish_round(env, ROUND2, cid(102))
    second = snapshot(env)
    assert second[A][:3] == (S, 1, T0 + timedelta(seconds=20)), f"a later attempt must win: {second[A]}"
    assert second[B] == first[B], f"duplicates / older / same-attempt results changed B: {first[B]} -> {second[B]}"
    assert second[C] == first[C], f"an older attempt overwrote the final result of C: {first[C]} -> {second[C]}"
    assert second[P][0] is S and second[P][1] == 1 and second[P][4:] == ("SSS", 3, 0), f"page retry: {second[P]}"
    assert second[D][:2] == (S, 0), f"received -> succeeded must move forward: {second[D]}"
    assert env.consumer.malformed == 2, env.consumer.malformed

    publish_round(env, ROUND1 + ROUND2, cid(103))  # every old result once more
    third = snapshot(env)
    assert third == second, "a replay of old results changed final fired records:\n" + "\n".join(
        f"  {k}: {second[k]} -> {third[k]}" for k in second if second[k] != third[k]
    )
    # applied changes: round 1: A B C P D + sentinel; round 2: A P D + sentinel; round 3: sentinel
    assert env.consumer.applied == 6 + 4 + 1, f"duplicates or replays were applied: {env.consumer.applied}"
    assert env.consumer.malformed == 4


def test_duplicated_results_are_not_counted_twice_in_the_results_metric(env: Env) -> None:
    _fired(env.store, [A, cid(101)])
    dup = encode_results([up(A, S, 0, 10)])
    publish_round(env, [dup] * 5, cid(101))
    received = env.metrics.results.labels(state=S.value)._value.get()  # type: ignore[attr-defined]
    applied = env.metrics.results_applied._value.get()  # type: ignore[attr-defined]
    rec = env.store.get_fired([A])[A]
    assert rec.state is S and env.consumer.applied == 2  # A once, the sentinel once
    # switchyard_results counts what arrived (duplicates included), switchyard_results_applied what moved a record
    assert received == 6, f"switchyard_results{{state=succeeded}} = {received} after 5 copies + the sentinel"
    assert applied == 2, f"switchyard_results_applied = {applied}: duplicates were counted as applied"
