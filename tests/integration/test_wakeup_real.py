"""Wake-ups for short delays on the real servers: MariaDB store, Pulsar bus, etcd registry
and wake key. The schedulers' idle wait is set far longer than anything the tests wait
for, so a trigger due soon fires in time only because its partition's owner was woken."""

from __future__ import annotations

import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.election.registry import EtcdRegistry
from scheduler_core.election.wake_etcd import EtcdWakeups
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind
from scheduler_core.settings import SchedulerSettings
from scheduler_core.shards import ShardedScheduler
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from tests.backends import mariadb_database
from tests.integration.procs import start_scheduler
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

PARTITIONS = 8
IDLE_S = 120.0  # the loops' idle wait: only a wake-up admits a trigger due soon within the bounds below
BOUND_S = 40.0  # the longest a test waits for its fires: a third of the idle wait
LEAD_S = 1.0  # each trigger is due this long after it is added
SETTINGS = SchedulerSettings(
    idle_wait=timedelta(seconds=IDLE_S),
    max_wait=timedelta(seconds=IDLE_S),
    busy_wait=timedelta(seconds=IDLE_S),
    jitter=timedelta(0),
    reclaim_interval=timedelta(seconds=30),
)


@dataclass
class Real:
    url: str
    etcd: str
    pulsar: str
    prefix: str  # topics
    key: str  # the wake-up key
    registry: str  # the registry's prefix


@pytest.fixture
def real() -> Iterator[Real]:
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    tag = uuid.uuid4().hex[:8]
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, PARTITIONS)
        engine.dispose()
        yield Real(url, etcd, pulsar, f"wake{tag}", f"/sy-wake-test/{tag}/wake", f"/sy-wake-test/{tag}/shards")


def _store(url: str, wakeups: EtcdWakeups | None) -> SqlTriggerStore:
    store = SqlTriggerStore(make_engine(url), SystemClock())
    store.wakeups = wakeups
    return store


def _bus(r: Real) -> PulsarBus:
    return PulsarBus(r.pulsar, admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"), topic_prefix=r.prefix)


def _wait(cond: Callable[[], bool], bound_s: float = BOUND_S) -> bool:
    end = time.monotonic() + bound_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


class Lags:
    """An executor of the test's business recording handler start minus T per trigger."""

    def __init__(self, bus: PulsarBus, biz_code: str) -> None:
        self.lags: dict[int, float] = {}
        self._lock = threading.Lock()
        self.executor = Executor(bus, biz_code)
        self.stop = threading.Event()

        @self.executor.handler()
        def record(ctx: ExecutionContext) -> None:
            with self._lock:
                self.lags.setdefault(ctx.trigger_id, time.time() - ctx.scheduled_at.timestamp())

        self.thread = threading.Thread(target=self.executor.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def count(self) -> int:
        with self._lock:
            return len(self.lags)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=15)
        self.executor.close()


def _add(store: SqlTriggerStore, job: Job, n: int) -> list[Trigger]:
    due = store.clock.now() + timedelta(seconds=LEAD_S)
    return store.add_triggers(
        [
            Trigger(job_code=job.job_code, biz_code=job.biz_code, kind=TriggerKind.ONCE, next_fire_at=due)
            for _ in range(n)
        ]
    )


def test_a_wakeup_through_etcd_wakes_only_the_owner_of_the_triggers_partition(real: Real) -> None:
    """Two registry members, each with its own store and etcd watch, and a producer with
    a third: the producer's triggers due 1 s ahead fire within a fraction of the idle
    wait, woken only on the member that owns each trigger's partition."""
    member_wakes = [EtcdWakeups(real.etcd, key=real.key) for _ in range(2)]
    producer_wake = EtcdWakeups(real.etcd, key=real.key)
    stores = [_store(real.url, w) for w in member_wakes]
    producer = _store(real.url, producer_wake)
    buses = [_bus(real) for _ in range(3)]
    registries = [
        EtcdRegistry(real.etcd, member=f"m{i}", ttl=timedelta(seconds=4), prefix=real.registry) for i in range(2)
    ]
    members = [ShardedScheduler(stores[i], buses[i], registries[i], stores[i].clock, SETTINGS) for i in range(2)]
    stops = [threading.Event() for _ in members]
    threads = [threading.Thread(target=m.run, args=(s,), daemon=True) for m, s in zip(members, stops, strict=True)]
    job = producer.put_job(Job(job_code=JobCode("soon"), biz_code="wake-biz", handler="h"))
    lags = Lags(buses[2], "wake-biz")
    try:
        for t in threads:
            t.start()
        assert _wait(
            lambda: (
                all(m.status.owned for m in members)
                and sorted(p for m in members for p in m.status.owned) == list(range(PARTITIONS))
            )
        ), "the two members split the partitions"
        assert _wait(lambda: sum(m.core.stats.ticks for m in members) >= PARTITIONS), "each loop ticked once"
        assert all(w.wait_watching(10) for w in member_wakes)
        loops = {i: (m, o.loop) for m in members for i, o in m._owned.items()}
        before = {i: lp.wakeups for i, (_, lp) in loops.items()}
        added = _add(producer, job, 3) + _add(producer, job, 3)
        partitions = {int(t.id) % PARTITIONS for t in added}  # type: ignore[arg-type]
        assert _wait(lambda: lags.count() >= len(added)), "triggers due soon waited for the idle wait"
        lag = max(lags.lags.values())
        assert lag < IDLE_S / 4, f"fire lag {lag:.2f} s"
        woken = {i for i, (_, lp) in loops.items() if lp.wakeups > before[i]}
        assert woken == partitions, "exactly the loops of the triggers' partitions were woken"
        for i in partitions:
            owner = loops[i][0]
            assert i in owner.status.owned
        assert sum(w.heard for w in member_wakes) >= 2 and producer_wake.sent >= 1
        # counted once the publish returned, which may be after the executor ran them
        assert _wait(lambda: sum(m.core.stats.fired for m in members) == len(added))
    finally:
        for s in stops:
            s.set()
        for t in threads:
            t.join(timeout=30)
        lags.close()
        for reg in registries:
            reg.close()
        for w in [*member_wakes, producer_wake]:
            w.close()
        for b in buses:
            b.close()
        for st in [*stores, producer]:
            st.engine.dispose()


def test_scheduler_run_process_is_woken_by_another_process_adding_triggers(real: Real, tmp_path: Path) -> None:
    """`switchyard scheduler run --shards` in its own process, idle wait 120 s: triggers
    added by the test's process (its store wired to the same wake key) fire about a
    second after they are added, not after the idle wait."""
    proc = start_scheduler(
        "wk1",
        tmp_path,
        url=real.url,
        bus=real.pulsar,
        etcd=real.etcd,
        key=f"{real.key}-leader",
        prefix=real.prefix,
        extra=[
            "--shards",
            "--registry-prefix",
            real.registry,
            "--idle-wait",
            str(IDLE_S),
            "--max-wait",
            str(IDLE_S),
            "--wake-key",
            real.key,
            "--lookahead",
            "1800",
            "--acquire-deadline",
            "60",
            "--reclaim-interval",
            "30",
        ],
    )
    wake = EtcdWakeups(real.etcd, key=real.key)
    producer = _store(real.url, wake)
    bus = _bus(real)
    job = producer.put_job(Job(job_code=JobCode("soon"), biz_code="wake-cli", handler="h"))
    lags = Lags(bus, "wake-cli")
    try:
        reg = EtcdRegistry(real.etcd, member="observer", prefix=real.registry)
        try:
            assert _wait(lambda: len(reg.view().owners) == PARTITIONS), proc.log_text()[-3000:]
        finally:
            reg.close()
        time.sleep(2.0)  # each loop's first tick (nothing due) is done: every loop now waits IDLE_S
        added: list[Trigger] = []
        for _ in range(5):
            added += _add(producer, job, 2)
            time.sleep(0.3)
        assert _wait(lambda: lags.count() >= len(added)), (
            f"{lags.count()} of {len(added)} fired; log:\n{proc.log_text()[-3000:]}"
        )
        lag = max(lags.lags.values())
        assert lag < IDLE_S / 4, f"fire lag {lag:.2f} s"
        assert wake.sent >= 1
    finally:
        proc.stop()
        lags.close()
        wake.close()
        bus.close()
        producer.engine.dispose()
