"""Switchyard-side building blocks shared by the sections: a store on a fresh MariaDB
database, jobs, bulk-loaded triggers, a no-op bus, and the two ways to drive the
scheduler (the steppable `SchedulerCore` inline, and the real threaded `Scheduler`)."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from bench.harness import Deadline, pymysql_connect
from scheduler_core.clock import SystemClock
from scheduler_core.election.local import LocalElection, LocalElectionGroup
from scheduler_core.model import Epoch, Job, JobCode
from scheduler_core.ports import BusMessage, MessageBus, Received, Subscription
from scheduler_core.scheduler import Scheduler, SchedulerCore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema

LOAD_CHUNK = 500_000  # rows per INSERT ... SELECT statement


def make_store(url: str, partitions: int, pool_size: int = 8) -> SqlTriggerStore:
    engine = make_engine(url, pool_size=pool_size)
    init_schema(engine, partitions)
    store = SqlTriggerStore(engine, SystemClock())
    store.warm_pools(pool_size)  # connects are set-up, not part of what is measured
    return store


# How a per-envelope ("page") fired-record mode is switched: SchedulerSettings.page_records
# (a bool) today; a string field on SchedulerSettings or Job by one of these names would be
# picked up too. Checked at run time, so `--fired-mode` passes through whatever exists.
FIRED_MODE_FIELDS = ("fired_mode", "fired_record_mode", "record_mode", "fired_records")
FIRED_MODES = ("item", "page")


def fired_mode_kwargs(mode: str) -> tuple[dict[str, Any], dict[str, Any], str] | None:
    """(settings kwargs, job kwargs, description) selecting `mode`, or None when the core
    has no such switch (then there is only the one behaviour)."""
    if mode not in FIRED_MODES:
        raise ValueError(f"fired mode must be one of {FIRED_MODES}, got {mode!r}")
    s_fields = {f.name for f in dataclasses.fields(SchedulerSettings)}
    j_fields = {f.name for f in dataclasses.fields(Job)}
    if "page_records" in s_fields:
        return {"page_records": mode == "page"}, {}, f"SchedulerSettings.page_records={mode == 'page'}"
    for name in FIRED_MODE_FIELDS:
        if name in s_fields:
            return {name: mode}, {}, f"SchedulerSettings.{name}={mode!r}"
        if name in j_fields:
            return {}, {name: mode}, f"Job.{name}={mode!r}"
    return None


def available_fired_modes() -> list[str]:
    return [m for m in FIRED_MODES if fired_mode_kwargs(m) is not None]


def bench_job(biz: str, **kw: Any) -> Job:
    return Job(job_code=JobCode(kw.pop("job_code", f"bench-{biz}")), biz_code=biz, handler="bench", **kw)


def load_triggers(
    url: str,
    job: Job,
    count: int,
    first_ms: int,
    spread_ms: int = 0,
    state: str = "waiting",
    chunk: int = LOAD_CHUNK,
    step_ms: int = 1,
) -> float:
    """Bulk-load `count` one-shot triggers of `job` (in the job's lane) with INSERT ...
    SELECT FROM the SEQUENCE engine; next_fire_at = first_ms + (i mod spread_ms) * step_ms.
    Returns rows/s.
    The load itself is kept out of the binlog when the grant allows (it is set-up, not
    a measurement, and spares the binlog readers of other tests)."""
    assert job.id is not None
    conn = pymysql_connect(url)
    started = time.perf_counter()
    try:
        with conn.cursor() as cur:
            skip_binlog(cur)
            done = 0
            while done < count:
                n = min(chunk, count - done)
                spread = f"MOD({done} + seq - 1, {spread_ms})" if spread_ms > 0 else "0"
                cur.execute(
                    "INSERT INTO dus_job_trigger (job_id, job_code, biz_code, kind, cron_expr, interval_ms, time_zone,"
                    " end_at, next_fire_at, state, priority, misfire_policy, lane, owner_epoch, acquire_deadline,"
                    " last_fired_at, cas_token, version, created_at, updated_at)"
                    f" SELECT %s, %s, %s, 'once', NULL, NULL, 'UTC', NULL, %s + {spread} * {step_ms}, %s, 5,"
                    f" 'fire_once_now', %s, NULL, NULL, NULL, NULL, 0, %s, %s FROM seq_1_to_{n}",
                    (job.id, job.job_code, job.biz_code, first_ms, state, job.lane.value, first_ms, first_ms),
                )
                conn.commit()
                done += n
    finally:
        conn.close()
    return count / max(1e-9, time.perf_counter() - started)


def skip_binlog(cur: Any) -> bool:
    try:
        cur.execute("SET SESSION sql_log_bin = 0")
        return True
    except Exception:  # noqa: BLE001 - no grant: the load is binlogged, nothing else changes
        return False


def analyze(url: str, table: str = "dus_job_trigger") -> None:
    conn = pymysql_connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute(f"ANALYZE TABLE {table}")
            cur.fetchall()
    finally:
        conn.close()


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class CountingBus(MessageBus):
    """A bus whose publish is a no-op counter: admission measured without a broker."""

    def __init__(self) -> None:
        self.messages = 0
        self.calls = 0
        self._lock = threading.Lock()

    def publish(self, messages: Sequence[BusMessage]) -> None:
        with self._lock:
            self.messages += len(messages)
            self.calls += 1

    def subscribe(self, topic: str, subscription: str) -> Subscription:
        return _NoSubscription()

    def ensure_subscription(self, topic: str, subscription: str) -> None:
        pass

    def close(self) -> None:
        pass


class _NoSubscription(Subscription):
    def receive(self, max_messages: int, timeout: timedelta) -> list[Received]:
        time.sleep(min(timeout.total_seconds(), 0.05))
        return []

    def ack(self, received: Received) -> None:
        pass

    def nack(self, received: Received) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class DriveResult:
    seconds: float  # start of the first tick until `expected` occurrences were fired
    fired: int
    commands: int
    messages: int
    ticks: int
    complete: bool
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.fired / self.seconds if self.seconds > 0 else 0.0


def drive_inline(
    store: SqlTriggerStore,
    bus: MessageBus,
    settings: SchedulerSettings,
    expected: int,
    deadline: Deadline,
    epoch: int = 1,
) -> DriveResult:
    """The steppable core on one thread (`inline=True`): tick_all until `expected`
    occurrences are fired. One connection in use at a time."""
    store.claim_epoch(Epoch(epoch))
    core = SchedulerCore(store, bus, store.clock, Epoch(epoch), settings, inline=True)
    started = time.perf_counter()
    try:
        while core.stats.fired < expected and not deadline.expired():
            core.tick_all()
        elapsed = time.perf_counter() - started
    finally:
        core.shutdown()
    s = core.stats
    return DriveResult(elapsed, s.fired, s.commands, s.messages, s.ticks, s.fired >= expected, dataclasses.asdict(s))


class ThreadedScheduler:
    """The production path: `Scheduler.run` (one acquire thread per partition, the
    bounded fire pool) under an in-process election. Results are not consumed
    (`consume_results=False`): no section here measures the callback path."""

    def __init__(self, store: SqlTriggerStore, bus: MessageBus, settings: SchedulerSettings) -> None:
        self.group = LocalElectionGroup(store.clock, ttl=timedelta(seconds=30))
        self.election = LocalElection(self.group, "bench")
        self.sched = Scheduler(store, bus, self.election, store.clock, settings, consume_results=False)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sched.run, args=(self.stop,), name="bench-scheduler", daemon=True)
        self.started = 0.0

    def start(self) -> None:
        self.started = time.perf_counter()
        self.thread.start()

    def fired(self) -> int:
        core = self.sched.core
        return core.stats.fired if core is not None else 0

    def stats(self) -> dict[str, Any]:
        core = self.sched.core
        return dataclasses.asdict(core.stats) if core is not None else {}

    def wait_fired(self, expected: int, deadline: Deadline, poll: float = 0.02) -> float | None:
        """Seconds from start until `expected` fired, or None at the deadline. Polled every
        20 ms: at 5 ms the poll itself took ~7% of the GIL from the scheduler it measures."""
        while self.fired() < expected:
            if deadline.expired():
                return None
            time.sleep(poll)
        return time.perf_counter() - self.started

    def close(self, timeout: float = 30) -> None:
        self.stop.set()
        self.thread.join(timeout=timeout)
        self.election.close()


def drive_threaded(
    store: SqlTriggerStore, bus: MessageBus, settings: SchedulerSettings, expected: int, deadline: Deadline
) -> DriveResult:
    ts = ThreadedScheduler(store, bus, settings)
    ts.start()
    try:
        secs = ts.wait_fired(expected, deadline)
    finally:
        ts.close()
    st = ts.stats()
    elapsed = secs if secs is not None else deadline.elapsed()
    return DriveResult(
        elapsed,
        st.get("fired", 0),
        st.get("commands", 0),
        st.get("messages", 0),
        st.get("ticks", 0),
        secs is not None,
        st,
    )


def count_fired(url: str) -> int:
    conn = pymysql_connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT COUNT(*) FROM dus_fired_record")
            return int(cur.fetchone()[0])
    finally:
        conn.close()
