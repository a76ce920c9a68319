"""The fan-out path with one fired record per item, beyond one sharding page, on the real
servers: MariaDB store, Pulsar bus, etcd election, an Executor on the command topic.

A run of more items than a sharding page (300) is expanded page by page (by index, and
from the store's explicit items) and fired with envelopes of several items each; every
item must run exactly once, under the command id built from (trigger, T, item), and
have exactly one fired record, answered by its result."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.election.etcd import EtcdElection
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import FiredState, Job, JobCode, ShardingItem, Trigger, TriggerKind, TriggerState, command_id
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from tests.backends import mariadb_database
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

BY_INDEX = 650  # shard_total: pages of 300, 300, 50
EXPLICIT = 701  # explicit items from the store: pages of 300, 300, 101
ENVELOPE = 40  # items per message: envelopes cut across no page boundary


@pytest.fixture
def stack() -> Iterator[tuple[SqlTriggerStore, PulsarBus, str]]:
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, SystemClock())
        bus = PulsarBus(
            server_url("pulsar"),
            admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"),
            topic_prefix=f"fan{uuid.uuid4().hex[:6]}",
        )
        try:
            yield store, bus, server_url("etcd")
        finally:
            bus.close()
            engine.dispose()


def test_a_fan_out_beyond_one_sharding_page_fires_every_item_once_with_its_own_record(  # type: ignore[no-untyped-def]
    stack,
) -> None:
    store, bus, etcd = stack
    clock = store.clock
    store.put_job(
        Job(job_code=JobCode("by-index"), biz_code="sop", handler="h", shard_total=BY_INDEX, envelope_size=ENVELOPE)
    )
    store.put_job(
        Job(
            job_code=JobCode("explicit"),
            biz_code="sop",
            handler="h",
            shard_total=EXPLICIT,
            envelope_size=ENVELOPE,
            explicit_items=True,
        )
    )
    # explicit indexes with gaps, so a page boundary is found from the items, not counted
    explicit = [ShardingItem(job_code=JobCode("explicit"), index=3 * i, param=f"audience-{i}") for i in range(EXPLICIT)]
    store.put_sharding_items(JobCode("explicit"), explicit)
    t0 = clock.now() + timedelta(seconds=2)
    triggers = store.add_triggers(
        [
            Trigger(job_code=JobCode(code), biz_code="sop", kind=TriggerKind.ONCE, next_fire_at=t0)
            for code in ("by-index", "explicit")
        ]
    )
    by_index, from_store = triggers
    assert by_index.id is not None and from_store.id is not None

    runs: Counter[str] = Counter()
    seen: dict[str, tuple[int, int, str]] = {}
    lock = threading.Lock()
    ex = Executor(bus, "sop", clock=clock)

    @ex.handler("h")
    def item(ctx: ExecutionContext) -> None:
        with lock:
            runs[ctx.command_id] += 1
            seen[ctx.command_id] = (ctx.trigger_id, ctx.item_index, ctx.item_param)

    # per-item fired records even though the items travel ENVELOPE to a message
    settings = SchedulerSettings(
        page_records=False,
        idle_wait=timedelta(milliseconds=300),
        jitter=timedelta(milliseconds=50),
        reclaim_interval=timedelta(seconds=1),
    )
    election = EtcdElection(etcd, name="fan", ttl=timedelta(seconds=4), key=f"/sy-fan/{uuid.uuid4().hex[:6]}")
    sched = Scheduler(store, bus, election, clock, settings)
    stop = threading.Event()
    threads = [
        threading.Thread(target=sched.run, args=(stop,), daemon=True),
        threading.Thread(target=ex.run, args=(stop,), daemon=True),
    ]
    expected = {command_id(by_index.id, t0, i): (by_index.id, i, "") for i in range(BY_INDEX)}
    expected |= {command_id(from_store.id, t0, it.index): (from_store.id, it.index, it.param) for it in explicit}

    def answered() -> bool:
        records = store.get_fired(list(expected))
        return len(records) == len(expected) and all(r.state is FiredState.SUCCEEDED for r in records.values())

    for t in threads:
        t.start()
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not (len(runs) >= len(expected) and answered()):
            time.sleep(0.3)
        time.sleep(1.0)  # a duplicate delivery would land by now
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=15)
        ex.close()
        election.close()

    assert len(expected) == BY_INDEX + EXPLICIT
    missing = set(expected) - set(runs)
    assert not missing, f"{len(missing)} item(s) never ran, e.g. {sorted(missing)[:3]}"
    extra = set(runs) - set(expected)
    assert not extra, f"command ids not built from (trigger, T, item): {sorted(extra)[:3]}"
    twice = {cid: n for cid, n in runs.items() if n != 1}
    assert not twice, f"{len(twice)} item(s) ran more than once, e.g. {list(twice.items())[:3]}"
    assert seen == expected, "each command id carries its own trigger, item index and item param"

    records = store.fired_between("sop", t0 - timedelta(seconds=1), t0 + timedelta(minutes=5))
    per_trigger = Counter(r.trigger_id for r in records)
    assert per_trigger == {by_index.id: BY_INDEX, from_store.id: EXPLICIT}, "one fired record per item, no more"
    assert {r.command_id for r in records} == set(expected)
    assert all(r.item_count == 1 and r.state is FiredState.SUCCEEDED for r in records)
    assert {r.item_total for r in records if r.trigger_id == by_index.id} == {BY_INDEX}
    assert {t.state for t in store.triggers_of(biz_code="sop")} == {TriggerState.COMPLETED}
