"""Dual-run's tables, as SQLAlchemy Core: one row per stored comparison (its verdict,
reasons and the whole result as JSON), and one per boundary check of a switch (how many
occurrences from the handover on were checked, missing, doubled). `switchyard db init`
creates them beside the core's and the migrator's tables (switchyard.schema)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, MetaData, String, Table, Text

from scheduler_core.store.schema import ID_TYPE, LONG_TEXT


@dataclass(frozen=True)
class DualRunTables:
    metadata: MetaData
    comparison: Table
    boundary: Table


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
    boundary = Table(
        "dus_boundary_check",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("switch", String(16), nullable=False),  # cutover | rollback
        Column("switched_at", BigInteger, nullable=False),  # when the switch began
        Column("checked_at", BigInteger, nullable=False),
        Column("horizon", BigInteger, nullable=False),  # occurrences up to here were checked
        Column("checked", BigInteger, nullable=False),
        Column("missing", BigInteger, nullable=False),
        Column("doubled", BigInteger, nullable=False),
        Index("idx_boundary_biz", "biz_code", "switched_at"),
    )
    return DualRunTables(metadata=md, comparison=comparison, boundary=boundary)
