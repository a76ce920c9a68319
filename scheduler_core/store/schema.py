"""The store's tables, as SQLAlchemy Core.

Times are UTC epoch milliseconds (BIGINT), never naive local DATETIMEs. The trigger
table is `PARTITION BY HASH(id)` on MySQL-compatible servers; on SQLite the same slices
come from a generated `part` column (id % N) with its own index. SQL stays within what
TiDB accepts as well as MariaDB: no RETURNING, no sequences, no MariaDB-only syntax.
"""
from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import (
    BigInteger,
    Column,
    Computed,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.dialects import mysql

SCHEMA_VERSION = 1
DEFAULT_PARTITIONS = 16
MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})

# a primary key that autoincrements on both: SQLite only aliases rowid for INTEGER
_Id = BigInteger().with_variant(Integer(), "sqlite")
_LongText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql").with_variant(mysql.MEDIUMTEXT(), "mariadb")


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    meta: Table
    fence: Table
    job: Table
    sharding_item: Table
    trigger: Table
    fired: Table
    ledger: Table
    checkpoint: Table
    business: Table
    audit: Table
    comparison: Table
    legacy_hold: Table
    business_fence: Table
    followup: Table
    followup_fired: Table
    partitions: int
    dialect: str

    @property
    def sliced_by_column(self) -> bool:
        """True where partitions are a column slice (SQLite), not a server partition."""
        return self.dialect not in MYSQL_DIALECTS


def build_tables(dialect: str, partitions: int = DEFAULT_PARTITIONS) -> Tables:
    if partitions < 1 or partitions > 1024:
        raise ValueError(f"partitions must be 1..1024, got {partitions}")
    md = MetaData()

    meta = Table(
        "dus_meta",
        md,
        Column("name", String(64), primary_key=True),
        Column("value", String(255), nullable=False),
    )
    # The fencing row: the newest leader epoch. Fenced writes check it inside their UPDATE.
    fence = Table(
        "dus_fence",
        md,
        Column("name", String(64), primary_key=True),
        Column("epoch", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )
    job = Table(
        "dus_job",
        md,
        Column("id", _Id, primary_key=True, autoincrement=True),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("handler", String(191), nullable=False),
        Column("params", _LongText, nullable=False),
        Column("shard_total", Integer, nullable=False, default=1),
        Column("timeout_ms", BigInteger, nullable=False),
        Column("max_retry", Integer, nullable=False, default=0),
        Column("priority", SmallInteger, nullable=False, default=5),
        Column("envelope_size", Integer, nullable=False, default=1),
        Column("explicit_items", SmallInteger, nullable=False, default=0),
        Column("shadow", SmallInteger, nullable=False, default=0),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        UniqueConstraint("job_code", name="uk_job_code"),
        Index("idx_job_biz", "biz_code"),
    )
    sharding_item = Table(
        "dus_sharding_item",
        md,
        Column("job_id", BigInteger, nullable=False),
        Column("item_index", Integer, nullable=False),
        Column("param", Text, nullable=False),
        PrimaryKeyConstraint("job_id", "item_index"),
    )

    trigger_cols: list[Column] = [  # type: ignore[type-arg]
        Column("id", _Id, primary_key=True, autoincrement=True),
        Column("job_id", BigInteger, nullable=False),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("cron_expr", String(255)),
        Column("interval_ms", BigInteger),
        Column("time_zone", String(64), nullable=False),
        Column("end_at", BigInteger),
        Column("next_fire_at", BigInteger, nullable=False),
        Column("state", String(16), nullable=False),
        Column("priority", SmallInteger, nullable=False),
        Column("misfire_policy", String(16), nullable=False),
        Column("owner_epoch", BigInteger),
        Column("acquire_deadline", BigInteger),
        Column("last_fired_at", BigInteger),
        # A per-call token stamped by every CAS, so that the re-read returns exactly the
        # rows this call won (no RETURNING on TiDB).
        Column("cas_token", String(32)),
        Column("version", BigInteger, nullable=False, default=0),
        Column("created_at", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    ]
    trigger_args: list[object] = []
    table_kw: dict[str, str] = {}
    if dialect in MYSQL_DIALECTS:
        # local per-partition index: serves state='waiting' AND next_fire_at BETWEEN ? AND ?
        # ORDER BY next_fire_at LIMIT ? inside one partition, with no filesort
        trigger_args += [
            Index("idx_state_fire", "state", "next_fire_at", "priority"),
            Index("idx_trigger_job", "job_code"),
            Index("idx_trigger_biz", "biz_code", "state"),
        ]
        table_kw = {
            f"{d}_{k}": v
            for d in ("mysql", "mariadb")
            for k, v in (("partition_by", "HASH(id)"), ("partitions", str(partitions)))
        }
    else:
        trigger_cols.append(Column("part", Integer, Computed(f"id % {partitions}", persisted=False)))
        trigger_args += [
            Index("idx_part_state_fire", "part", "state", "next_fire_at", "priority"),
            Index("idx_trigger_job", "job_code"),
            Index("idx_trigger_biz", "biz_code", "state"),
        ]
    trigger = Table("dus_job_trigger", md, *trigger_cols, *trigger_args, **table_kw)  # type: ignore[call-overload]

    fired = Table(
        "dus_fired_record",
        md,
        Column("command_id", String(96), primary_key=True),
        Column("trigger_id", BigInteger, nullable=False),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("scheduled_at", BigInteger, nullable=False),
        Column("item_index", Integer, nullable=False),
        Column("item_total", Integer, nullable=False),
        Column("state", String(16), nullable=False),
        Column("state_rank", SmallInteger, nullable=False),
        Column("epoch", BigInteger, nullable=False),
        Column("fired_at", BigInteger),
        Column("published_at", BigInteger),
        Column("received_at", BigInteger),
        Column("started_at", BigInteger),
        Column("result_at", BigInteger),
        Column("attempt", Integer, nullable=False, default=0),
        Column("misfired", SmallInteger, nullable=False, default=0),
        Column("message", String(1024), nullable=False, default=""),
        Column("item_count", Integer, nullable=False, default=1),
        Column("item_states", Text),
        Column("succeeded_items", Integer, nullable=False, default=0),
        Column("failed_items", Integer, nullable=False, default=0),
        Index("idx_fired_biz_time", "biz_code", "scheduled_at"),
        Index("idx_fired_trigger_time", "trigger_id", "scheduled_at"),
    )
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
    )
    audit = Table(
        "dus_cutover_audit",
        md,
        Column("id", _Id, primary_key=True, autoincrement=True),
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
    comparison = Table(
        "dus_comparison",
        md,
        Column("id", _Id, primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("window_start", BigInteger, nullable=False),
        Column("window_end", BigInteger, nullable=False),
        Column("computed_at", BigInteger, nullable=False),
        Column("verdict", String(16), nullable=False),  # ready | not_ready
        Column("reasons", Text, nullable=False),
        Column("body", _LongText, nullable=False),
        Index("idx_comparison_biz", "biz_code", "computed_at"),
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
    # The rollback fence per business (scheduler_core.fence): commands scheduled in
    # [from_at, until_at) are skipped by executors; until_at NULL is open-ended. `epoch`
    # grows with every raise and lift, so followers keep the latest whatever the order.
    # A table of its own (not a column of dus_business): the scheduler core owns it,
    # while dus_business is the migrator's.
    business_fence = Table(
        "dus_business_fence",
        md,
        Column("biz_code", String(64), primary_key=True),
        Column("from_at", BigInteger, nullable=False),
        Column("until_at", BigInteger),
        Column("epoch", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )
    # On-success follow-ups (scheduler_core.followups): after each successful run of
    # trigger_id (each item of it), each child trigger is fired once, at once.
    followup = Table(
        "dus_followup",
        md,
        Column("trigger_id", BigInteger, nullable=False),
        Column("child_trigger_id", BigInteger, nullable=False),
        Column("position", Integer, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        PrimaryKeyConstraint("trigger_id", "child_trigger_id"),
    )
    # One row per follow-up fired: the claim that makes a redelivered parent result fire
    # the child no second time (the child's command id is kept, so a publication that
    # failed half-way is retried with the same ids).
    followup_fired = Table(
        "dus_followup_fired",
        md,
        Column("parent_command_id", String(96), nullable=False),
        Column("child_trigger_id", BigInteger, nullable=False),
        Column("child_command_id", String(96), nullable=False),
        Column("at", BigInteger, nullable=False),
        PrimaryKeyConstraint("parent_command_id", "child_trigger_id"),
    )
    return Tables(
        metadata=md,
        meta=meta,
        fence=fence,
        job=job,
        sharding_item=sharding_item,
        trigger=trigger,
        fired=fired,
        ledger=ledger,
        checkpoint=checkpoint,
        business=business,
        audit=audit,
        comparison=comparison,
        legacy_hold=legacy_hold,
        business_fence=business_fence,
        followup=followup,
        followup_fired=followup_fired,
        partitions=partitions,
        dialect=dialect,
    )
