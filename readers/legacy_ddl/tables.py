"""The legacy tables as SQLAlchemy Core, for databases the .sql files cannot create.

The .sql files in this folder are the MySQL/MariaDB DDL and the reference: a MySQL-
compatible server always gets exactly those statements. Any other database (SQLite for
the embedded demo and the unit tests) gets these Core tables instead: the same tables,
columns, nullability, defaults and index names, with types that keep what the readers
depend on (TEXT vs VARCHAR for `executor_param`, whole-second vs millisecond DATETIMEs).
A unit test compares the two, table by table, so they cannot drift apart.

SQLite has no DATETIME type and no ON UPDATE: DATETIMEs are stored as the text MySQL
would print ('2026-12-02 08:00:00', '... 08:00:00.250000' for DATETIME(3)), so range
queries compare like for like, and `bc_task.update_time` is kept by a trigger (see
`loader.py`). CURRENT_TIMESTAMP defaults there use the legacy zone's current UTC offset,
since the legacy servers write local time.
"""

from __future__ import annotations

import enum
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    BigInteger,
    Column,
    DateTime,
    Index,
    Integer,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects import mysql, sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from dbkit.capabilities import for_dialect


class XxlJobLineage(enum.StrEnum):
    """xxl-job schema lineages: releases whose tables differ in columns or column types."""

    V2_2 = "2.2"  # 2.1.0 - 2.2.x: `job_cron`
    V2_4 = "2.4"  # 2.3.0 - 3.3.x: schedule_type / schedule_conf / misfire_strategy
    V3_4 = "3.4"  # 3.4.x: as 2.4, `executor_param` text and wider columns
    MASTER = "master"  # after 3.4.2: `job_desc` -> `name`, `title` -> `name`, group `access_token`


class WallTime(TypeDecorator[datetime]):
    """A legacy DATETIME(fsp): naive wall-clock values only, truncated to the column's
    precision on the way in (MySQL would round; truncation keeps both dialects equal)."""

    impl = DateTime
    cache_ok = True

    def __init__(self, fsp: int = 0) -> None:
        super().__init__()
        self.fsp = fsp

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        caps = for_dialect(dialect.name)
        if caps.mysql_sql:
            return dialect.type_descriptor(mysql.DATETIME(fsp=self.fsp or None))
        if caps.datetime_as_text:
            fmt = "%(year)04d-%(month)02d-%(day)02d %(hour)02d:%(minute)02d:%(second)02d"
            if self.fsp:
                fmt += ".%(microsecond)06d"
            return dialect.type_descriptor(sqlite.DATETIME(storage_format=fmt))  # type: ignore[no-untyped-call]
        return dialect.type_descriptor(DateTime())

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is not None:
            raise ValueError("legacy DATETIME columns hold naive wall-clock times: convert with readers.timezones")
        step = 10 ** (6 - self.fsp)
        return value.replace(microsecond=value.microsecond // step * step)


def _id(*, big: bool) -> TypeEngine[int]:
    # SQLite autoincrements only an INTEGER PRIMARY KEY (the rowid alias)
    return (BigInteger() if big else Integer()).with_variant(Integer(), "sqlite")


_TinyInt = SmallInteger().with_variant(mysql.TINYINT(), "mysql").with_variant(mysql.TINYINT(), "mariadb")
_MediumText = Text().with_variant(mysql.MEDIUMTEXT(), "mysql").with_variant(mysql.MEDIUMTEXT(), "mariadb")


def _zero() -> Any:
    return text("'0'")


def xxljob_metadata(lineage: XxlJobLineage | str) -> MetaData:
    """Core tables of one xxl-job lineage (the same shape as `xxl_job_<lineage>.sql`)."""
    lin = XxlJobLineage(lineage)
    modern = lin is not XxlJobLineage.V2_2
    wide = lin in (XxlJobLineage.V3_4, XxlJobLineage.MASTER)
    master = lin is XxlJobLineage.MASTER
    param_type: TypeEngine[str] = Text() if wide else String(512)
    md = MetaData()
    _xxl_info(md, modern=modern, master=master, param_type=param_type)
    _xxl_log(md, lin, param_type=param_type)
    Table(
        "xxl_job_log_report",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("trigger_day", WallTime()),
        Column("running_count", Integer, nullable=False, server_default=_zero()),
        Column("suc_count", Integer, nullable=False, server_default=_zero()),
        Column("fail_count", Integer, nullable=False, server_default=_zero()),
        *([Column("update_time", WallTime())] if modern else []),
        UniqueConstraint("trigger_day", name="i_trigger_day"),
    )
    Table(
        "xxl_job_logglue",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_id", Integer, nullable=False),
        Column("glue_type", String(50)),
        Column("glue_source", _MediumText),
        Column("glue_remark", String(128), nullable=False),
        Column("add_time", WallTime()),
        Column("update_time", WallTime()),
    )
    registry = Table(
        "xxl_job_registry",
        md,
        Column("id", _id(big=wide), primary_key=True, autoincrement=True),
        Column("registry_group", String(50), nullable=False),
        Column("registry_key", String(255), nullable=False),
        Column("registry_value", String(255), nullable=False),
        Column("update_time", WallTime()),
    )
    Index("i_g_k_v", registry.c.registry_group, registry.c.registry_key, registry.c.registry_value, unique=wide)
    _xxl_group(md, modern=modern, wide=wide, master=master)
    Table(
        "xxl_job_user",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("username", String(50), nullable=False),
        Column("password", String(100 if wide else 50), nullable=False),
        *([Column("token", String(100))] if wide else []),
        Column("role", _TinyInt, nullable=False),
        Column("permission", String(255)),
        UniqueConstraint("username", name="i_username"),
    )
    Table("xxl_job_lock", md, Column("lock_name", String(50), primary_key=True))
    return md


def _xxl_info(md: MetaData, *, modern: bool, master: bool, param_type: TypeEngine[str]) -> Table:
    schedule = (
        [
            Column("schedule_type", String(50), nullable=False, server_default=text("'NONE'")),
            Column("schedule_conf", String(128)),
            Column("misfire_strategy", String(50), nullable=False, server_default=text("'DO_NOTHING'")),
        ]
        if modern
        else []
    )
    return Table(
        "xxl_job_info",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("job_group", Integer, nullable=False),
        *([] if modern else [Column("job_cron", String(128), nullable=False)]),
        Column("name" if master else "job_desc", String(255), nullable=False),
        Column("add_time", WallTime()),
        Column("update_time", WallTime()),
        Column("author", String(64)),
        Column("alarm_email", String(255)),
        *schedule,
        Column("executor_route_strategy", String(50)),
        Column("executor_handler", String(255)),
        Column("executor_param", param_type),
        Column("executor_block_strategy", String(50)),
        Column("executor_timeout", Integer, nullable=False, server_default=_zero()),
        Column("executor_fail_retry_count", Integer, nullable=False, server_default=_zero()),
        Column("glue_type", String(50), nullable=False),
        Column("glue_source", _MediumText),
        Column("glue_remark", String(128)),
        Column("glue_updatetime", WallTime()),
        Column("child_jobid", String(255)),
        Column("trigger_status", _TinyInt, nullable=False, server_default=_zero()),
        Column("trigger_last_time", BigInteger, nullable=False, server_default=_zero()),
        Column("trigger_next_time", BigInteger, nullable=False, server_default=_zero()),
    )


def _xxl_log(md: MetaData, lin: XxlJobLineage, *, param_type: TypeEngine[str]) -> Table:
    log = Table(
        "xxl_job_log",
        md,
        Column("id", _id(big=True), primary_key=True, autoincrement=True),
        Column("job_group", Integer, nullable=False),
        Column("job_id", Integer, nullable=False),
        Column("executor_address", String(255)),
        Column("executor_handler", String(255)),
        Column("executor_param", param_type),
        Column("executor_sharding_param", String(20)),
        Column("executor_fail_retry_count", Integer, nullable=False, server_default=_zero()),
        Column("trigger_time", WallTime()),
        Column("trigger_code", Integer, nullable=False),
        Column("trigger_msg", Text),
        Column("handle_time", WallTime()),
        Column("handle_code", Integer, nullable=False),
        Column("handle_msg", Text),
        Column("alarm_status", _TinyInt, nullable=False, server_default=_zero()),
    )
    if lin is XxlJobLineage.MASTER:
        names = ("i_trigger_time", "i_handle_code", "i_job_group", "i_job_id")
    else:
        names = ("I_trigger_time", "I_handle_code", "I_jobgroup", "I_jobid")
    Index(names[0], log.c.trigger_time)
    Index(names[1], log.c.handle_code)
    if lin in (XxlJobLineage.V3_4, XxlJobLineage.MASTER):
        Index(names[2], log.c.job_group)
        Index(names[3], log.c.job_id)
    return log


def _xxl_group(md: MetaData, *, modern: bool, wide: bool, master: bool) -> Table:
    return Table(
        "xxl_job_group",
        md,
        Column("id", Integer, primary_key=True, autoincrement=True),
        Column("app_name", String(64), nullable=False),
        Column("name" if master else "title", String(64 if wide else 12), nullable=False),
        Column("address_type", _TinyInt, nullable=False, server_default=_zero()),
        Column("address_list", Text() if modern else String(512)),
        *([Column("update_time", WallTime())] if modern else []),
        *([Column("access_token", String(255))] if master else []),
        *([UniqueConstraint("app_name", name="i_app_name")] if master else []),
    )


def batch_center_metadata(*, local_offset: timedelta = timedelta(hours=8)) -> MetaData:
    """Core tables of the batch center (the same shape as `batch_center.sql`).

    `local_offset` is the legacy zone's UTC offset, for SQLite's CURRENT_TIMESTAMP
    defaults (the batch center writes local time; SQLite's clock is UTC)."""
    now_local = _sqlite_local_now(local_offset)
    md = MetaData()
    Table(
        "bc_biz",
        md,
        Column("biz_code", String(64), primary_key=True),
        Column("biz_name", String(128)),
        Column("callback_base_url", String(512)),
        Column("access_token", String(128)),
        Column("enabled", _TinyInt, nullable=False, server_default=text("1")),
    )
    task = Table(
        "bc_task",
        md,
        Column("id", _id(big=True), primary_key=True, autoincrement=True),
        Column("biz_code", String(64), nullable=False),
        Column("task_key", String(128), nullable=False),
        Column("task_name", String(255), nullable=False, server_default=text("''")),
        Column("task_type", _TinyInt, nullable=False),
        Column("cron_expr", String(128)),
        Column("interval_sec", Integer),
        Column("fire_time", WallTime(), nullable=False),
        Column("end_time", WallTime()),
        Column("callback_url", String(512), nullable=False),
        Column("http_method", String(8), nullable=False, server_default=text("'POST'")),
        Column("callback_timeout_ms", Integer, nullable=False, server_default=text("30000")),
        Column("payload", Text),
        Column("shard_total", Integer, nullable=False, server_default=text("1")),
        Column("shard_params", _MediumText),
        Column("priority", _TinyInt, nullable=False, server_default=text("5")),
        Column("max_retry", Integer, nullable=False, server_default=text("0")),
        Column("misfire_policy", _TinyInt, nullable=False, server_default=text("1")),
        Column("status", _TinyInt, nullable=False, server_default=text("0")),
        Column("migrated", _TinyInt, nullable=False, server_default=text("0")),
        Column("version", Integer, nullable=False, server_default=text("0")),
        Column("create_time", WallTime(), nullable=False, server_default=now_local),
        Column("update_time", WallTime(), nullable=False, server_default=now_local),
        UniqueConstraint("biz_code", "task_key", name="uk_biz_task_key"),
    )
    Index("idx_due", task.c.status, task.c.fire_time)
    Index("idx_biz", task.c.biz_code, task.c.status)
    log = Table(
        "bc_task_exec_log",
        md,
        Column("id", _id(big=True), primary_key=True, autoincrement=True),
        Column("task_id", BigInteger, nullable=False),
        Column("biz_code", String(64), nullable=False),
        Column("shard_index", Integer, nullable=False, server_default=text("0")),
        Column("attempt", Integer, nullable=False, server_default=text("0")),
        Column("scheduled_time", WallTime(3), nullable=False),
        Column("start_time", WallTime(3)),
        Column("end_time", WallTime(3)),
        Column("status", _TinyInt, nullable=False),
        Column("http_status", Integer),
        Column("worker_host", String(128)),
        Column("error_msg", Text),
    )
    Index("idx_task", log.c.task_id, log.c.scheduled_time)
    Index("idx_biz_time", log.c.biz_code, log.c.scheduled_time)
    return md


def _sqlite_local_now(offset: timedelta) -> Any:
    minutes = int(offset.total_seconds() // 60)
    return text(f"(strftime('%Y-%m-%d %H:%M:%S', 'now', '{minutes:+d} minutes'))")


def sqlite_update_time_trigger(offset: timedelta) -> str:
    """SQLite's stand-in for `update_time ... ON UPDATE CURRENT_TIMESTAMP` on bc_task:
    a row updated without setting `update_time` gets the local now (like MySQL, an
    explicit new value wins)."""
    minutes = int(offset.total_seconds() // 60)
    return (
        "CREATE TRIGGER bc_task_update_time AFTER UPDATE ON bc_task FOR EACH ROW "
        "WHEN NEW.update_time IS OLD.update_time BEGIN "
        f"UPDATE bc_task SET update_time = strftime('%Y-%m-%d %H:%M:%S', 'now', '{minutes:+d} minutes') "
        "WHERE id = NEW.id; END"
    )
