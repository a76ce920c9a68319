"""Dual-run's table, as SQLAlchemy Core: one row per stored comparison (its verdict,
reasons and the whole result as JSON). `switchyard db init` creates it beside the
core's and the migrator's tables (switchyard.schema)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, MetaData, String, Table, Text

from scheduler_core.store.schema import ID_TYPE, LONG_TEXT


@dataclass(frozen=True)
class DualRunTables:
    metadata: MetaData
    comparison: Table


def dualrun_tables(md: MetaData | None = None) -> DualRunTables:
    """Dual-run's tables, defined on `md` (a fresh MetaData by default)."""
    md = md if md is not None else MetaData()
    comparison = Table(
        "dus_comparison",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("window_start", BigInteger, nullable=False),
        Column("window_end", BigInteger, nullable=False),
        Column("computed_at", BigInteger, nullable=False),
        Column("verdict", String(16), nullable=False),  # ready | not_ready
        Column("reasons", Text, nullable=False),
        Column("body", LONG_TEXT, nullable=False),
        Index("idx_comparison_biz", "biz_code", "computed_at"),
    )
    return DualRunTables(metadata=md, comparison=comparison)
