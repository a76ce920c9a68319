"""Issue 29, lanes on the real servers: `db init` upgrades a lane-less MariaDB store, a lane
at its budget does not delay another lane's due triggers on MariaDB, and on Pulsar a
stalled `bulk` consumer does not slow the `default` lane of the same business."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import command_topic
from scheduler_core.election.etcd import EtcdElection
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import Job, JobCode, Lane, Trigger, TriggerKind
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.backends import mariadb_database, sql_store
from tests.harness import harness_on, state_of
from tests.servers import server_url
from tests.unit.test_lanes import C, W, _burst_then_default, upgrade_lands_every_trigger_in_default
from tests.waiting import until


@pytest.mark.mariadb
def test_db_init_upgrades_a_lane_less_store_on_mariadb(clock: ManualClock) -> None:
    with mariadb_database("lnu") as url:
        upgrade_lands_every_trigger_in_default(url, clock)


@pytest.mark.mariadb
def test_a_lane_at_its_budget_does_not_delay_another_lanes_due_triggers_on_mariadb(
    tmp_path: Path, clock: ManualClock
) -> None:
    with sql_store("mariadb", tmp_path, clock, partitions=1) as store:
        h = harness_on(store, clock, batch_size=10, hold_within=timedelta(0))
        burst, quiet = _burst_then_default(h)
        core = h.core()
        core.tick_all()
        core.drain()
        assert [state_of(store, t) for t in quiet] == [C, C, C]
        assert sum(state_of(store, t) is C for t in burst) == 5
        assert sum(state_of(store, t) is W for t in burst) == 25
        core.shutdown()


@pytest.fixture
def stack() -> Iterator[tuple[SqlTriggerStore, PulsarBus, str]]:
    etcd = server_url("etcd")
    with mariadb_database("lnp") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, SystemClock())
        bus = PulsarBus(
            server_url("pulsar"),
            admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"),
            topic_prefix=f"ln{uuid.uuid4().hex[:6]}",
        )
        try:
            yield store, bus, etcd
        finally:
            bus.close()
            engine.dispose()


@pytest.mark.mariadb
@pytest.mark.pulsar
@pytest.mark.etcd
def test_a_stalled_bulk_consumer_does_not_slow_the_default_lane(stack) -> None:  # type: ignore[no-untyped-def]
    """One business, two lanes: its bulk executor takes one command and stalls (its handler
    waits until the test ends, its receive loop blocked on its quota, 300 commands backed
    up behind it). The default lane's 30 commands, due in the same seconds, all start
    within 2 s of their T: they travel on the business's default topic, consumed by its
    own executor. (On one topic the stalled consumer would hold them: it is released only
    after they all ran, or the wait ends and the test fails.)"""
    store, bus, etcd = stack
    clock = store.clock
    store.put_job(Job(job_code=JobCode("export"), biz_code="shop", handler="export", lane=Lane.BULK))
    store.put_job(Job(job_code=JobCode("ping"), biz_code="shop", handler="ping"))
    # the executors first, as in a deployment: each reads the control channel before it
    # runs anything, which on a broker just started took seconds (built after t0, they
    # made the default lane's first commands 5-9 s late on a fresh stack)
    stalled = Executor(bus, "shop", clock=clock, concurrency=1, lane=Lane.BULK, receipt_after=None)
    default = Executor(bus, "shop", clock=clock, lane=Lane.DEFAULT)
    t0 = clock.now() + timedelta(seconds=4)
    bulk = [
        Trigger(job_code=JobCode("export"), biz_code="shop", kind=TriggerKind.ONCE, next_fire_at=t0, lane=Lane.BULK)
        for _ in range(300)
    ]
    pings = [
        Trigger(
            job_code=JobCode("ping"),
            biz_code="shop",
            kind=TriggerKind.ONCE,
            next_fire_at=t0 + timedelta(milliseconds=50 * i),
        )
        for i in range(30)
    ]
    store.add_triggers(bulk + pings)
    release = threading.Event()
    started: dict[str, float] = {}
    bulk_started: list[str] = []
    lock = threading.Lock()

    @stalled.handler("export")
    def export(ctx: ExecutionContext) -> None:
        with lock:
            bulk_started.append(ctx.command_id)
        release.wait(60)

    @default.handler("ping")
    def ping(ctx: ExecutionContext) -> None:
        with lock:
            started.setdefault(ctx.command_id, (clock.now() - ctx.scheduled_at).total_seconds())

    election = EtcdElection(etcd, name="lanes", ttl=timedelta(seconds=4), key=f"/sy-lanes/{uuid.uuid4().hex[:6]}")
    settings = SchedulerSettings(idle_wait=timedelta(milliseconds=300), jitter=timedelta(milliseconds=50))
    sched = Scheduler(store, bus, election, clock, settings)
    stop = threading.Event()
    threads = [threading.Thread(target=fn, args=(stop,), daemon=True) for fn in (sched.run, stalled.run, default.run)]
    for t in threads:
        t.start()
    try:
        assert until(lambda: len(started) >= 30, 40), f"{len(started)} of 30 default commands started"
        with lock:
            lags = sorted(started.values())
            n_bulk = len(bulk_started)
        assert lags[-1] <= 2.0, f"the slowest default command started {lags[-1]:.3f}s after its T"
        assert lags[0] >= -0.15, f"a command started {-lags[0]:.3f}s before its T"
        assert n_bulk == 1, f"the stalled bulk consumer ran {n_bulk} handlers"
        # the bulk backlog waits in its own topic, the default topic's subscription is empty
        assert until(lambda: sum(bus.backlog(command_topic("shop", Lane.BULK), "executor")) >= 299, 10)
        assert until(lambda: sum(bus.backlog(command_topic("shop"), "executor")) == 0, 10)
    finally:
        release.set()
        stop.set()
        for t in threads:
            t.join(timeout=15)
        stalled.close()
        default.close()
        election.close()
