"""The migrator's store: its own tables (migrator.tables) on the engine it is handed.

They live in the trigger store's database (a chunk's ledger rows commit in the
transaction of its jobs), but the migrator reaches the core's tables only through the
core's port and modules (scheduler_core.store.definitions, .reads). The composition root
(switchyard.wiring.migrator_store) builds it once and hands it to the migrator's entry
points, which never make one themselves."""

from __future__ import annotations

from sqlalchemy.engine import Engine

from migrator.tables import MigratorTables, migrator_tables
from scheduler_core.ports import Clock

_TABLES = migrator_tables()  # definitions only (no dialect in them): one set for every store


class MigratorStore:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.t: MigratorTables = _TABLES

    def close(self) -> None:
        """Close the pooled connections of the store's database (a later call opens new ones)."""
        self.engine.dispose()
