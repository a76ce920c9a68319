"""Dual-run's store: its own table (dualrun.tables) on the engine it is handed, and the
migrator's records it compares against, through the port the composition root hands it.

The business states, the ledger and the cutover audit are the migrator's tables, which
dual-run may not import (it does not migrate): it reads them only through
`dualrun.ports.MigrationRecords` (implemented by migrator.records). The core's tables are
read through scheduler_core.store.reads only. switchyard.wiring.dualrun_store builds this
once; dual-run's functions never make one themselves."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from dualrun.ports import MigrationRecords
from dualrun.tables import DualRunTables, dualrun_tables

_TABLES = dualrun_tables()  # definitions only (no dialect in them): one set for every store


class DualRunStore:
    def __init__(self, engine: Engine, migration: MigrationRecords) -> None:
        self.engine = engine
        self.t: DualRunTables = _TABLES
        self.migration = migration

    def close(self) -> None:
        """Close the pooled connections of the store's database (a later call opens new ones)."""
        self.engine.dispose()
