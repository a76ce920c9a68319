"""Legacy databases and a target store for migrator tests (SQLite or MariaDB)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import text
from sqlalchemy.engine import Engine

from dualrun.store import DualRunStore
from migrator.apply import Migrator
from migrator.mapping import MappingOptions
from migrator.ports import GateDecision
from migrator.store import MigratorStore
from migrator.target import TargetWriter
from readers.batchcenter.reader import BatchCenterReader
from readers.legacy_ddl.loader import create_legacy_schema
from readers.ports import LegacyReader
from readers.xxljob.reader import XxlJobReader
from scheduler_core.clock import ManualClock
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store, migrator_store

if TYPE_CHECKING:
    from migrator.cutover import BusinessSwitch
    from migrator.ports import CutoverGate, LegacyControl

NOW = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


@dataclass
class MigrationEnv:
    legacy: Engine
    store: SqlTriggerStore
    reader: LegacyReader
    migrator: Migrator

    @property
    def writer(self) -> TargetWriter:
        return self.migrator.writer

    @property
    def own(self) -> MigratorStore:
        """The migrator's store the writer was handed (one per env, as the wiring builds it)."""
        return self.writer.own

    @property
    def dual(self) -> DualRunStore:
        """Dual-run's store on the env's target, as the wiring builds it."""
        return dualrun_store(self.store)

    def xxl_switch(self, gate: CutoverGate | None = None, **options: Any) -> BusinessSwitch:
        """The business switch of this env's xxl-job legacy database, on the env's clock."""
        from migrator.cutover import BusinessSwitch
        from migrator.legacy_control import XxlJobControl

        clock = self.migrator.clock
        return BusinessSwitch(self.store, self.own, XxlJobControl(self.legacy, clock), clock, gate, **options)


def make_env(
    legacy_url: str,
    target_url: str,
    system: str,
    lineage: str | None = None,
    options: MappingOptions = MappingOptions(),
) -> MigrationEnv:
    legacy = make_engine(legacy_url)
    create_legacy_schema(legacy, system, lineage)
    target = make_engine(target_url)
    init_schema(target, 4)
    clock = ManualClock(NOW)
    store = SqlTriggerStore(target, clock)
    reader: LegacyReader = XxlJobReader(legacy) if system == "xxl-job" else BatchCenterReader(legacy)
    return MigrationEnv(
        legacy, store, reader, Migrator(reader, TargetWriter(store, migrator_store(store)), clock, options)
    )


def live_cron_bean_ids(legacy: Engine) -> set[str]:
    """The xxl-job jobs running on legacy with a plain CRON BEAN schedule (no broadcast):
    the ones a child-job test can make parents."""
    with legacy.connect() as conn:
        return {
            str(i)
            for (i,) in conn.execute(
                text(
                    "SELECT id FROM xxl_job_info WHERE trigger_status = 1 AND schedule_type = 'CRON' AND glue_type = 'BEAN'"
                    " AND executor_route_strategy <> 'SHARDING_BROADCAST'"
                )
            )
        }


def migrated_xxljob_urls(tmp_path: Path) -> list[str]:
    """`--url` and `--legacy-url` of the databases migrated_xxljob(tmp_path) made, for
    the commands a test runs on them."""
    return ["--url", f"sqlite:///{tmp_path / 't.db'}", "--legacy-url", f"sqlite:///{tmp_path / 'xxl.db'}"]


def migrated_xxljob(tmp_path: Path, *, groups: int = 2, jobs_per_group: int = 12) -> tuple[MigrationEnv, str]:
    """An xxl-job 3.4 database (SQLite) seeded and migrated; with its first business."""
    from legacy_sim.seed import seed_xxljob
    from migrator.business import BusinessRegistry

    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(
        env.legacy, "3.4", groups=groups, jobs_per_group=jobs_per_group, bad_rows=0, malformed_crons=0, rng_seed=2
    )
    env.migrator.run()
    return env, BusinessRegistry(env.own).all()[0].biz_code


class FixedGate:
    """The cutover gate port answered by the test (dual-run's own tests cover verdicts)."""

    def __init__(self, decision: GateDecision | None) -> None:
        self.value = decision

    def decision(self, biz_code: str) -> GateDecision | None:
        return self.value


def ready_switch(env: MigrationEnv, control: LegacyControl | None = None, **kw: Any) -> BusinessSwitch:
    """The business switch of `env` behind a gate that is always ready (comparison 1,
    computed now); the legacy control is xxl-job's unless given; `kw` as BusinessSwitch's."""
    from migrator.cutover import BusinessSwitch
    from migrator.legacy_control import XxlJobControl

    clock = env.migrator.clock
    gate = FixedGate(GateDecision(ready=True, comparison_id=1, computed_at=clock.now()))
    return BusinessSwitch(
        env.store, env.own, control if control is not None else XxlJobControl(env.legacy, clock), clock, gate, **kw
    )
