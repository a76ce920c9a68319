"""The store's tables, as SQLAlchemy Core: the scheduler core's own (the migrator's and
dual-run's are in their packages: migrator.tables, dualrun.tables).

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

# 2: dus_job_trigger.cron_dialect (an older store gets it from `db init`: store/upgrade.py)
# 3: dus_job.lane, dus_job_trigger.lane and the due index with the lane (issue 29)
# 4: dus_run_log, and the run log's indexes on dus_fired_record (idx_fired_time,
#    idx_fired_job_time); the result consumer writes log lines, so an older store is refused
# 5: dus_job.block, the job's block strategy (issue 28; NULL: concurrent)
# 6: dus_fired_record.executor, the executor process that ran the run (issue 28); the
#    result consumer writes it, so an older store is refused until `db init`
SCHEMA_VERSION = 6
DEFAULT_PARTITIONS = 16
MYSQL_DIALECTS = frozenset({"mysql", "mariadb"})

# a primary key that autoincrements on both: SQLite only aliases rowid for INTEGER (the
# other packages' tables use these too: migrator.tables, dualrun.tables)
ID_TYPE = BigInteger().with_variant(Integer(), "sqlite")
LONG_TEXT = Text().with_variant(mysql.MEDIUMTEXT(), "mysql").with_variant(mysql.MEDIUMTEXT(), "mariadb")


# index of an older schema -> the one that serves its reads now: `db init` creates the new
# one and then drops the old (store/upgrade.py)
REPLACED_INDEXES = {
    "dus_job_trigger": {"idx_state_fire": "idx_state_fire_lane", "idx_part_state_fire": "idx_part_state_fire_lane"}
}


@dataclass(frozen=True)
class Tables:
    metadata: MetaData
    meta: Table
    fence: Table
    job: Table
    sharding_item: Table
    trigger: Table
    fired: Table
    followup: Table
    followup_fired: Table
    trigger_supersede: Table
    stop: Table
    kill_request: Table
    executor: Table
    run_log: Table
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
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("handler", String(191), nullable=False),
        Column("params", LONG_TEXT, nullable=False),
        Column("shard_total", Integer, nullable=False, default=1),
        Column("timeout_ms", BigInteger, nullable=False),
        Column("max_retry", Integer, nullable=False, default=0),
        Column("priority", SmallInteger, nullable=False, default=5),
        Column("envelope_size", Integer, nullable=False, default=1),
        Column("explicit_items", SmallInteger, nullable=False, default=0),
        Column("shadow", SmallInteger, nullable=False, default=0),
        # model.Lane; NULL (a store of before lanes, until `db init` fills it): default
        Column("lane", String(16)),
        # model.Block; NULL (every row of before block strategies, and the default): concurrent
        Column("block", String(16)),
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
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("job_id", BigInteger, nullable=False),
        Column("job_code", String(191), nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("kind", String(16), nullable=False),
        Column("cron_expr", String(255)),
        # the Quartz line the cron follows ("2.3", "2.5"); NULL: the default (model.DEFAULT_CRON_DIALECT)
        Column("cron_dialect", String(8)),
        Column("interval_ms", BigInteger),
        Column("time_zone", String(64), nullable=False),
        Column("end_at", BigInteger),
        Column("next_fire_at", BigInteger, nullable=False),
        Column("state", String(16), nullable=False),
        Column("priority", SmallInteger, nullable=False),
        Column("misfire_policy", String(16), nullable=False),
        # the job's lane (model.Lane), copied here so admission budgets per lane on the due
        # read alone; NULL as on dus_job
        Column("lane", String(16)),
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
        # ORDER BY next_fire_at LIMIT ? inside one partition, with no filesort. The lane
        # trails it: a read of one lane (a lane at its budget, acquire.py) skips the other
        # lanes' entries in the index, without a row lookup each, and no second index on
        # the state has to be kept up to date by every CAS (REPLACED_INDEXES)
        trigger_args += [
            Index("idx_state_fire_lane", "state", "next_fire_at", "priority", "lane"),
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
            Index("idx_part_state_fire_lane", "part", "state", "next_fire_at", "priority", "lane"),
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
        # the instance id of the executor process whose result moved the record last (its
        # row in dus_executor); NULL: no result yet, or one from an executor older than it
        Column("executor", String(64)),
        Index("idx_fired_biz_time", "biz_code", "scheduled_at"),
        Index("idx_fired_trigger_time", "trigger_id", "scheduled_at"),
        # the run log across businesses, newest first, and the purge's oldest-first scan
        # (scheduler_core.store.run_log, .purge); a store of before them gets them from `db init`
        Index("idx_fired_time", "scheduled_at"),
        Index("idx_fired_job_time", "job_code", "scheduled_at"),
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
    # A live trigger's schedule edit (scheduler_core.supersede): from effective_at on, the
    # old schedule's published commands at the times `skipped` (a JSON list of epoch ms)
    # are skipped, and the new schedule's times `pending` wait to be published. One row per
    # trigger; `epoch` grows with every edit, so followers keep the latest.
    trigger_supersede = Table(
        "dus_trigger_supersede",
        md,
        Column("trigger_id", BigInteger, primary_key=True, autoincrement=False),
        Column("biz_code", String(64), nullable=False),
        Column("effective_at", BigInteger, nullable=False),
        Column("skipped", LONG_TEXT, nullable=False),
        Column("pending", LONG_TEXT, nullable=False),
        Column("epoch", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
    )
    # Stops (scheduler_core.stops): per scope (a trigger, a job, a business, everything)
    # every window of "no command scheduled in [from, until) runs" it has had, as JSON;
    # `epoch` grows with every change, so followers keep the latest whatever the order.
    # `relayed_*`: the newest epoch a process holding the bus has broadcast, by whom and
    # when (a command run without a bus waits for it and tells the operator).
    stop = Table(
        "dus_stop",
        md,
        Column("scope", String(16), nullable=False),
        Column("scope_key", String(191), nullable=False),
        Column("windows", LONG_TEXT, nullable=False),
        Column("epoch", BigInteger, nullable=False),
        Column("updated_at", BigInteger, nullable=False),
        Column("relayed_epoch", BigInteger),
        Column("relayed_by", String(128)),
        Column("relayed_at", BigInteger),
        PrimaryKeyConstraint("scope", "scope_key"),
    )
    # An operator's request to kill running runs (scheduler_core.kills): one command, or the
    # running runs of a job. Written by `run kill`, relayed on the control channel by
    # whoever holds the bus while fresh (by requested_at). The core's own table.
    kill_request = Table(
        "dus_kill_request",
        md,
        Column("id", ID_TYPE, primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("command_id", String(96)),
        Column("job_code", String(191)),
        Column("requested_at", BigInteger, nullable=False),
        Column("requested_by", String(191), nullable=False, default=""),
        Index("idx_kill_requested", "requested_at"),
    )
    # A run's own log lines (scheduler_core.executor.run_logs): what the handler logged
    # during one attempt of one item, capped (the SDK truncates with a marker), carried with
    # the run's result and written beside it. `fired_id`: the fired record it belongs to
    # (the item's own command id, or its envelope's page record), which the purge follows.
    run_log = Table(
        "dus_run_log",
        md,
        Column("command_id", String(96), nullable=False),
        Column("attempt", Integer, nullable=False),
        Column("fired_id", String(96), nullable=False),
        Column("item_index", Integer, nullable=False),
        Column("logged_at", BigInteger, nullable=False),
        Column("truncated", SmallInteger, nullable=False, default=0),
        Column("log_text", LONG_TEXT, nullable=False),
        PrimaryKeyConstraint("command_id", "attempt"),
        Index("idx_run_log_fired", "fired_id", "item_index"),
    )
    executor = executor_table(md)
    return Tables(
        metadata=md,
        meta=meta,
        fence=fence,
        job=job,
        sharding_item=sharding_item,
        trigger=trigger,
        fired=fired,
        followup=followup,
        followup_fired=followup_fired,
        trigger_supersede=trigger_supersede,
        stop=stop,
        kill_request=kill_request,
        run_log=run_log,
        executor=executor,
        partitions=partitions,
        dialect=dialect,
    )


def executor_table(md: MetaData) -> Table:
    """The executor registry (scheduler_core.store.executors): one row per executor process,
    upserted by its heartbeat (scheduler_core.executor.heartbeat). `last_seen_at` is the
    database's clock at the last beat, so live or lost is judged on one clock whatever the
    hosts' clocks say; `interval_ms` is the process's own beat interval (lost after a few of
    them without a beat); `stopped_at` is set by a clean stop. Independent of the partition
    count: the heartbeat builds it alone, before it knows the store's partitions."""
    return Table(
        "dus_executor",
        md,
        Column("instance_id", String(64), primary_key=True),
        Column("name", String(191), nullable=False),
        Column("biz_codes", String(2048), nullable=False),  # the businesses it serves, comma-separated
        Column("host", String(255), nullable=False),
        Column("pid", Integer, nullable=False),
        Column("version", String(64), nullable=False),
        Column("concurrency", Integer, nullable=False),
        Column("in_flight", Integer, nullable=False),
        Column("interval_ms", BigInteger, nullable=False),
        Column("started_at", BigInteger, nullable=False),
        Column("last_seen_at", BigInteger, nullable=False),
        Column("stopped_at", BigInteger),
        Index("idx_executor_seen", "last_seen_at"),
    )
