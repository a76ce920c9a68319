"""The database kit: the one owner of our databases, below every other package.

It imports none of ours (an import-linter contract says so); the stores, the readers, the
migrator and dual-run take it. What it owns:

- `engine`: the engine for a store URL (SQLite, the embedded default, and MySQL-compatible
  servers) and a server engine's AUTOCOMMIT twin;
- `capabilities`: what a database can do, decided once per engine; the only place that
  asks a dialect's name;
- `connections`: `connect()` / `begin()`, on which a driver error comes out as one of
  `errors` (`translate` decides which);
- `database`: `Database`, the engine, its twin and capabilities together, with `close()`;
- `fastpath`: PyMySQL's multi-row statements and plain-tuple reads;
- `redact`: secrets masked in messages, logs and reports.
"""

from __future__ import annotations

from dbkit.capabilities import Capabilities, capabilities
from dbkit.connections import begin, connect
from dbkit.database import Database

__all__ = ["Capabilities", "Database", "begin", "capabilities", "connect"]
