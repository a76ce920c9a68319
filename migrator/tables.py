"""The migrator's tables, as SQLAlchemy Core: the migration ledger, the change stream's
checkpoints, the per-business cutover state with its audit log, and the legacy holds.

The scheduler core never reads them; `switchyard db init` creates them beside the core's
(switchyard.schema gathers every package's tables). Times are UTC epoch milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import BigInteger, Column, Index, MetaData, PrimaryKeyConstraint, SmallInteger, String, Table, Text

from scheduler_core.store.schema import ID_TYPE


@dataclass(frozen=True)
class MigratorTables:
    metadata: MetaData
    ledger: Table
    checkpoint: Table
    business: Table
    audit: Table
    legacy_hold: Table


def migrator_tables(md: MetaData | None = None) -> MigratorTables:
    """The migrator's tables, defined on `md` (a fresh MetaData by default)."""
    md = md if md is not None else MetaData()
    # The migration ledger: the idempotent "migrated" flag, keyed by source + key, with a
    # content hash so an unchanged re-run writes nothing and a changed row updates its target.
    ledger = Table(
        "dus_migration_ledger",
        md,
        Column("source_system", String(32), nullable=False),
        Column("source_key", String(191), nullable=False),
        Column("business", String(64), nullable=False),
        Column("status", String(16), nullable=False),  # migrated | quarantined | deleted
        Column("content_hash", String(64), nullable=False),
        Column("target_job_code", String(191)),
        Column("target_trigger_id", BigInteger),
        Column("field", String(64)),
        Column("reason", String(1024)),
        Column("raw_excerpt", Text),
        Column("updated_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("source_system", "source_key"),
        Index("idx_ledger_business", "business", "status"),
    )
    checkpoint = Table(
        "dus_stream_checkpoint",
        md,
        Column("stream_id", String(191), primary_key=True),
        Column("log_file", String(255)),
        Column("log_pos", BigInteger),
        Column("gtid", String(255)),
        Column("events_applied", BigInteger, nullable=False, default=0),
        Column("updated_at", BigInteger, nullable=False),
    )
    business = Table(
        "dus_business",
        md,
        Column("biz_code", String(64), primary_key=True),
        Column("source_system", String(32), nullable=False),
        Column("state", String(16), nullable=False),  # legacy | dual_run | cutover
        Column("shadow", SmallInteger, nullable=False, default=0),
        Column("version", BigInteger, nullable=False, default=0),
        Column("updated_at", BigInteger, nullable=False),
        # the lane its jobs get unless one names its own (scheduler_core.model.Lane); NULL: default
        Column("default_lane", String(16)),
    )
    audit = Table(
        "dus_cutover_audit",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("from_state", String(16), nullable=False),
        Column("to_state", String(16), nullable=False),
        Column("at", BigInteger, nullable=False),
        Column("actor", String(128), nullable=False),
        Column("reason", String(1024), nullable=False, default=""),
        Column("comparison_id", BigInteger),
        Column("forced", SmallInteger, nullable=False, default=0),
        Column("detail", Text),
        Index("idx_audit_biz", "biz_code", "at"),
    )
    # The legacy jobs Switchyard switched off itself (a cutover's stop), one row per job
    # while the stop stands: what tells the switch's own `trigger_status = 0` / paused
    # task from an operator's stop in the legacy admin, for a re-migration, the change
    # stream and `status --check`. Written BEFORE the legacy write it explains, removed
    # only after the job is live on legacy again (rollback, or an abandoned cutover).
    legacy_hold = Table(
        "dus_legacy_hold",
        md,
        Column("source_system", String(32), nullable=False),
        Column("source_key", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("reason", String(32), nullable=False),  # cutover
        Column("held_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("source_system", "source_key"),
        Index("idx_hold_biz", "biz_code"),
    )
    return MigratorTables(
        metadata=md, ledger=ledger, checkpoint=checkpoint, business=business, audit=audit, legacy_hold=legacy_hold
    )
