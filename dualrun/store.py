"""Dual-run's store: its own table (dualrun.tables) on the engine it is handed, and a
read-only view of the migration records it compares against.

The business states, the ledger and the cutover audit are the migrator's tables, which
dual-run may not import (it does not migrate): `MigrationView` names the columns it reads
of them, as the readers name the legacy columns they read; tests/unit/test_table_owners.py
checks the view against migrator.tables. The core's tables are read through
scheduler_core.store.reads only."""

from __future__ import annotations

from sqlalchemy import column, table
from sqlalchemy.engine import Engine
from sqlalchemy.sql.expression import TableClause

from dualrun.tables import DualRunTables, dualrun_tables
from scheduler_core.store.sql import SqlTriggerStore

_TABLES = dualrun_tables()  # definitions only (no dialect in them): one set for every store


class MigrationView:
    """The migrator's tables as dual-run and the reports read them (read-only)."""

    business: TableClause = table(
        "dus_business", column("biz_code"), column("source_system"), column("state"), column("shadow")
    )
    ledger: TableClause = table(
        "dus_migration_ledger",
        column("source_system"),
        column("source_key"),
        column("business"),
        column("status"),
        column("target_job_code"),
        column("field"),
        column("reason"),
    )
    audit: TableClause = table(
        "dus_cutover_audit",
        column("id"),
        column("biz_code"),
        column("at"),
        column("from_state"),
        column("to_state"),
        column("detail"),
    )


class DualRunStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.t: DualRunTables = _TABLES
        self.migration = MigrationView

    @classmethod
    def beside(cls, store: SqlTriggerStore) -> DualRunStore:
        """Dual-run's store in the trigger store's database, for callers that hold the
        trigger store only (the one place dual-run takes the engine from it)."""
        return cls(store.engine)
