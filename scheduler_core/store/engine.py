"""The store's engine is the database kit's (`dbkit.engine`); named here for the tests and
benchmarks that build one from `scheduler_core.store.engine` (about eighty files)."""

from __future__ import annotations

from dbkit.engine import make_engine as make_engine
