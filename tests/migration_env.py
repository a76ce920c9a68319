"""Legacy databases and a target store for migrator tests (SQLite or MariaDB)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from sqlalchemy.engine import Engine

from migrator.apply import Migrator
from migrator.mapping import MappingOptions
from migrator.ports import GateDecision
from migrator.target import TargetWriter
from readers.batchcenter.reader import BatchCenterReader
from readers.legacy_ddl.loader import create_legacy_schema
from readers.ports import LegacyReader
from readers.xxljob.reader import XxlJobReader
from scheduler_core.clock import ManualClock
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema

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
    return MigrationEnv(legacy, store, reader, Migrator(reader, TargetWriter(store), clock, options))


def migrated_xxljob(tmp_path: Path, *, groups: int = 2, jobs_per_group: int = 12) -> tuple[MigrationEnv, str]:
    """An xxl-job 3.4 database (SQLite) seeded and migrated; with its first business."""
    from legacy_sim.seed import seed_xxljob
    from migrator.business import BusinessRegistry

    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(
        env.legacy, "3.4", groups=groups, jobs_per_group=jobs_per_group, bad_rows=0, malformed_crons=0, rng_seed=2
    )
    env.migrator.run()
    return env, BusinessRegistry(env.store).all()[0].biz_code


class FixedGate:
    """The cutover gate port answered by the test (dual-run's own tests cover verdicts)."""

    def __init__(self, decision: GateDecision | None) -> None:
        self.value = decision

    def decision(self, biz_code: str) -> GateDecision | None:
        return self.value
