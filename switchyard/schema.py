"""Every package's tables in one store: the core's (scheduler_core.store.schema), the
migrator's (migrator.tables), dual-run's (dualrun.tables) and the alerts'
(switchyard.alerts.tables). `switchyard db init|check`
and the tests create and check them here; each package owns and reads its own."""

from __future__ import annotations

from sqlalchemy import MetaData
from sqlalchemy.engine import Engine

from dualrun.tables import dualrun_tables
from migrator.tables import migrator_tables
from scheduler_core.store import admin
from scheduler_core.store.admin import SchemaReport
from switchyard.alerts.tables import alert_tables


def package_metadata() -> tuple[MetaData, ...]:
    """The tables the packages above the core keep in the store."""
    return migrator_tables().metadata, dualrun_tables().metadata, alert_tables().metadata


def init_schema(engine: Engine, partitions: int | None = None) -> SchemaReport:
    """`switchyard db init`: the core's tables and every package's (idempotent)."""
    return admin.init_schema(engine, partitions, package_metadata())


def check_schema(engine: Engine) -> SchemaReport:
    """`switchyard db check`: what the store holds of every package's tables."""
    return admin.check_schema(engine, package_metadata())
