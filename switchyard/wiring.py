"""Build the ports from URLs: the only place that knows every adapter."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from dbkit.engine import make_engine
from scheduler_core.clock import SystemClock
from scheduler_core.ports import Clock, Election, MessageBus, Wakeups
from scheduler_core.store.sql import SqlTriggerStore

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy.engine import Connection, Engine

    from dualrun.store import DualRunStore
    from migrator.catchup import StreamCatchup
    from migrator.ports import FencePort, GateDecision, LegacyControl
    from migrator.store import MigratorStore
    from migrator.target import TargetWriter
    from readers.ports import LegacyReader
    from readers.timezones import LegacyZones
    from scheduler_core.executor import Executor
    from scheduler_core.store.executors import SqlExecutorRegistry
    from switchyard.alerts.store import AlertStore


def open_store(url: str, clock: Clock | None = None) -> SqlTriggerStore:
    """The store at `url`; a SQLite file is created if missing (`db init`, `serve`, `demo`)."""
    return SqlTriggerStore(make_engine(url), clock or SystemClock())


def open_existing_store(url: str, clock: Clock | None = None) -> SqlTriggerStore:
    """The store at `url`, which must exist: every command but the ones that create a store
    opens it so, and a typo'd SQLite path is an error naming it (BadStoreUrl), not a new
    empty file."""
    return SqlTriggerStore(make_engine(url, must_exist=True), clock or SystemClock())


def migrator_store(store: SqlTriggerStore) -> MigratorStore:
    """The migrator's own store (its tables) in the trigger store's database: one database,
    so a chunk's ledger rows commit in the transaction of its jobs. The one place the
    migrator's store is made from the trigger store's engine; its entry points are handed it."""
    from migrator.store import MigratorStore

    return MigratorStore(store.engine, store.clock)


def dualrun_store(store: SqlTriggerStore) -> DualRunStore:
    """Dual-run's own store in the trigger store's database, with the migrator's records it
    reads (migrator.records, as dual-run's MigrationRecords port: dual-run may not import
    the migrator, only the composition root joins them)."""
    from dualrun.store import DualRunStore
    from migrator.records import MigratorRecords

    return DualRunStore(store.engine, MigratorRecords(migrator_store(store)))


def target_writer(store: SqlTriggerStore) -> TargetWriter:
    """The migrator's writer: the trigger store's port and the migrator's own store."""
    from migrator.target import TargetWriter

    return TargetWriter(store, migrator_store(store))


def open_bus(
    url: str,
    *,
    admin_url: str | None = None,
    token: str | None = None,
    clock: Clock | None = None,
    topic_prefix: str = "switchyard",
) -> MessageBus:
    if url == "memory":
        from scheduler_core.bus.memory import InProcessBus

        return InProcessBus(clock or SystemClock())
    if url.startswith("pulsar://") or url.startswith("pulsar+ssl://"):
        from scheduler_core.bus.pulsar import PulsarBus

        return PulsarBus(url, admin_url=admin_url, token=token, topic_prefix=topic_prefix)
    raise ValueError(f"unknown bus URL {url!r}: use 'memory' or pulsar://HOST:PORT")


def open_election(
    url: str, name: str, ttl: timedelta, clock: Clock | None = None, key: str = "/switchyard/scheduler/leader"
) -> Election:
    if url == "local":
        from scheduler_core.election.local import LocalElection, LocalElectionGroup

        return LocalElection(LocalElectionGroup(clock or SystemClock(), ttl), name)
    if url.startswith("http://") or url.startswith("https://"):
        from scheduler_core.election.etcd import EtcdElection

        return EtcdElection(url, name=name, ttl=ttl, key=key)
    raise ValueError(f"unknown election URL {url!r}: use 'local' or http://HOST:PORT (etcd)")


def open_wakeups(url: str, key: str = "/switchyard/wake") -> Wakeups:
    """Wake-ups for short delays (`scheduler_core.wakeup`): 'local' for one process, or
    the etcd URL the schedulers elect (or shard) on, so a trigger added due soon by any
    process wakes its partition's owner. Set it as the store's `wakeups`."""
    if url == "local":
        from scheduler_core.wakeup import LocalWakeups

        return LocalWakeups()
    if url.startswith("http://") or url.startswith("https://"):
        from scheduler_core.election.wake_etcd import EtcdWakeups

        return EtcdWakeups(url, key=key)
    raise ValueError(f"unknown wake-up URL {url!r}: use 'local' or http://HOST:PORT (etcd)")


class DualRunGate:
    """Adapts dual-run's stored verdicts to the migrator's CutoverGate port (the migrator
    may not import dualrun; only the composition root joins them)."""

    def __init__(self, own: DualRunStore) -> None:
        self.own = own

    def decision(self, biz_code: str) -> GateDecision | None:
        from dualrun.verdict_store import latest
        from migrator.ports import GateDecision

        v = latest(self.own, biz_code)
        if v is None:
            return None
        return GateDecision(
            ready=v.is_ready,
            comparison_id=v.comparison_id,
            computed_at=v.computed_at,
            reasons=tuple(v.reasons),
            warnings=tuple(v.warnings),
        )


def stream_catchup(
    own: MigratorStore, legacy: Engine, tz: str, *, wait_s: float = 5.0, max_pending: int = 0
) -> StreamCatchup | None:
    """The cutover gate's change-stream check (migrator.catchup) for a legacy database with a
    binlog (MySQL / MariaDB); None for others (SQLite: no stream can follow it)."""
    from dbkit.capabilities import capabilities
    from migrator.catchup import StreamCatchup

    if not capabilities(legacy).binlog:
        return None
    return StreamCatchup(own, legacy, tz=tz, wait=timedelta(seconds=wait_s), max_pending=max_pending)


def legacy_control(source: str, legacy_url: str, clock: Clock, tz: str = "Asia/Shanghai") -> LegacyControl:
    from migrator.legacy_control import BatchCenterControl, XxlJobControl

    engine = make_engine(legacy_url, must_exist=True)
    if source == "xxl-job":
        return XxlJobControl(engine, clock)
    if source == "batch-center":
        return BatchCenterControl(engine, clock, tz=tz)
    raise ValueError(f"unknown source system {source!r}")


def legacy_reader(
    source: str, bind: Engine | Connection, tz: str | LegacyZones = "Asia/Shanghai", *, xxl_version: str | None = None
) -> LegacyReader:
    """The reader of a legacy system over an engine, or over a connection (a snapshot).
    `tz`: one zone for everything, or the xxl-job source's two (database, cron).
    `xxl_version`: the xxl-job admin's version (its crons' Quartz dialect); None: from the schema."""
    from readers.timezones import LegacyZones

    zones = tz if isinstance(tz, LegacyZones) else LegacyZones.of(tz)
    if source == "xxl-job":
        from readers.xxljob.reader import XxlJobReader

        return XxlJobReader(bind, db_tz=zones.db, cron_tz=zones.cron, version=xxl_version)
    if source == "batch-center":
        if zones.split:
            raise ValueError(f"the batch center stores and schedules in one zone, not {zones.db} and {zones.cron}")
        from readers.batchcenter.reader import BatchCenterReader

        return BatchCenterReader(bind, tz=zones.db)
    raise ValueError(f"unknown source system {source!r}")


class LegacySwitches:
    """Reads the legacy switches (which jobs are switched on) for `status` and the
    console: each URL's system is told by its tables (xxl_job_info: xxl-job; bc_task: the
    batch center); a business whose system has no URL here is answered None (inferred by
    the caller). Holds an engine per legacy database: `close()` them when done (a caller
    that asks in a loop, the soak's sampler or a script, would otherwise leave their pools
    to the garbage collector, one set per call)."""

    def __init__(self, urls: Sequence[str], clock: Clock) -> None:
        from sqlalchemy import inspect

        self.controls: dict[str, LegacyControl] = {}
        try:
            for url in urls:
                probe = make_engine(url, must_exist=True)
                try:
                    names = set(inspect(probe).get_table_names())
                finally:
                    probe.dispose()
                source = "xxl-job" if "xxl_job_info" in names else "batch-center" if "bc_task" in names else None
                if source is None:
                    raise ValueError(f"{url!r} holds neither xxl_job_info nor bc_task: not a legacy database")
                self.controls[source] = legacy_control(source, url, clock)
        except BaseException:
            self.close()
            raise

    def __call__(self, source: str, keys: Sequence[str]) -> set[str] | None:
        control = self.controls.get(source)
        return None if control is None else control.live(keys)

    def close(self) -> None:
        for control in self.controls.values():
            control.close()


def legacy_switches(urls: Sequence[str], clock: Clock) -> LegacySwitches:
    """The legacy switches of `urls` (see LegacySwitches)."""
    return LegacySwitches(urls, clock)


def load_handlers(executor: Executor, module_name: str) -> None:
    """Registers a handlers module on an executor: `register(executor)`, or a `HANDLERS =
    {job_code: fn}` mapping (`executor run --handlers` and `serve --handlers`). Raises
    ValueError naming the module when it cannot be imported or has neither."""
    import importlib

    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"cannot import handlers module {module_name!r}: {exc}") from None
    if hasattr(module, "register"):
        module.register(executor)
    elif hasattr(module, "HANDLERS"):
        for name, fn in module.HANDLERS.items():
            executor.handler(name)(fn)
    else:
        raise ValueError(f"{module_name} has neither register(executor) nor HANDLERS")


def fence_service(store: SqlTriggerStore, bus: MessageBus) -> FencePort:
    """The rollback fence (scheduler_core.fence) as the migrator's FencePort."""
    from scheduler_core.fence import FenceService

    return FenceService(store, bus)


def executor_registry(store: SqlTriggerStore) -> SqlExecutorRegistry:
    """The executor registry (dus_executor) in the trigger store's database."""
    from scheduler_core.store.executors import SqlExecutorRegistry

    return SqlExecutorRegistry(store.engine)


def alert_store(store: SqlTriggerStore) -> AlertStore:
    """The alerts' own store (switchyard.alerts.tables) in the trigger store's database."""
    from switchyard.alerts.store import AlertStore

    return AlertStore(store.engine, store.clock)
