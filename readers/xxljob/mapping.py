"""xxl-job's enums and the pure mapping of a decoded `xxl_job_info` row to a definition.

Enum values are matched exactly, as xxl-job's own `match(name, default)` does (a
lower-case 'cron' is not CRON to xxl-job either). Every value the reader cannot take as
it is becomes a Problem naming the legacy column; the row is still returned.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from readers.digest import row_digest
from readers.legacy_ddl.tables import XxlJobLineage
from readers.legacy_ddl.values import INT32_MAX, MAX_TEXT_BYTES, RowDecoder, parse_int, plain
from readers.records import ContentDigest, LegacyDefinition, MisfireRule, ScheduleKind, SourceSystem
from readers.timezones import LegacyTimeZone

MAX_CRON_LENGTH = 128  # the width of schedule_conf / job_cron


class ScheduleType(enum.StrEnum):
    NONE = "NONE"
    CRON = "CRON"
    FIX_RATE = "FIX_RATE"


class MisfireStrategy(enum.StrEnum):
    DO_NOTHING = "DO_NOTHING"
    FIRE_ONCE_NOW = "FIRE_ONCE_NOW"


class RouteStrategy(enum.StrEnum):
    FIRST = "FIRST"
    LAST = "LAST"
    ROUND = "ROUND"
    RANDOM = "RANDOM"
    CONSISTENT_HASH = "CONSISTENT_HASH"
    LEAST_FREQUENTLY_USED = "LEAST_FREQUENTLY_USED"
    LEAST_RECENTLY_USED = "LEAST_RECENTLY_USED"
    FAILOVER = "FAILOVER"
    BUSYOVER = "BUSYOVER"
    SHARDING_BROADCAST = "SHARDING_BROADCAST"


class GlueType(enum.StrEnum):
    BEAN = "BEAN"
    GLUE_GROOVY = "GLUE_GROOVY"
    GLUE_SHELL = "GLUE_SHELL"
    GLUE_PYTHON = "GLUE_PYTHON"
    GLUE_PYTHON2 = "GLUE_PYTHON2"  # 3.2.0+
    GLUE_PHP = "GLUE_PHP"
    GLUE_NODEJS = "GLUE_NODEJS"
    GLUE_POWERSHELL = "GLUE_POWERSHELL"


_MISFIRE = {MisfireStrategy.DO_NOTHING: MisfireRule.SKIP, MisfireStrategy.FIRE_ONCE_NOW: MisfireRule.FIRE_ONCE_NOW}

# columns the legacy scheduler rewrites on every scan: not part of a job's content
VOLATILE_COLUMNS = frozenset({"trigger_last_time", "trigger_next_time", "update_time"})


def glue_handler(glue_type: str, job_id: int) -> str:
    """The handler name of a GLUE job: its source lives in `glue_source` (kept in `raw`),
    so it can only run bridged to an xxl-job executor, keyed by the job id (the executor
    caches GLUE code per job id and `glue_updatetime`)."""
    return f"glue:{glue_type}:{job_id}"


_TEXT_LIMITS = {"executor_param": MAX_TEXT_BYTES}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobContext:
    lineage: XxlJobLineage
    groups: Mapping[int, str]  # xxl_job_group.id -> app_name
    tz: LegacyTimeZone  # the zone of the DATETIME columns (the admin's JDBC serverTimezone)
    text_columns: frozenset[str]
    cron_zone: str = ""  # the zone crons run in (the admin JVM's); "" = `tz`'s
    cron_dialect: str = "2.5"  # the Quartz line of the admin's CronExpression (readers.xxljob.cron_lineage)
    cron_dialect_fallback: str = ""  # the other line, when the version is not known for sure

    @property
    def cron_zone_name(self) -> str:
        return self.cron_zone or self.tz.name

    @property
    def job_name_column(self) -> str:
        return "name" if self.lineage is XxlJobLineage.MASTER else "job_desc"


# the label of the content digest a MySQL-compatible server computed in the same SELECT
# (readers.digest.digest_sql): not a column of the row
SERVER_DIGEST = "_switchyard_digest"


def decode_text(row: Mapping[Any, Any], dec: RowDecoder, text_columns: frozenset[str]) -> dict[str, Any]:
    """The row with its text columns decoded from bytes (UTF-8 and size Problems in `dec`)."""
    out: dict[str, Any] = {}
    for k, val in row.items():
        if k in text_columns:
            # the common case inline (this runs for every text cell of every row read):
            # valid UTF-8 bytes under the size limit
            if type(val) is bytes and k not in _TEXT_LIMITS:
                try:
                    out[k] = val.decode("utf-8")
                    continue
                except UnicodeDecodeError:
                    pass
            out[k] = dec.text(k, val, max_bytes=_TEXT_LIMITS.get(k))
        elif k != SERVER_DIGEST:
            out[k] = val
    return out


_PLAIN = frozenset({str, int})


def _raw(v: Mapping[str, Any]) -> dict[str, Any]:
    # text, ints and NULLs are already plain: `plain` only for the rest (the datetimes)
    return {k: val if val is None or type(val) in _PLAIN else plain(val) for k, val in v.items()}


# each enum's members by exact value: a dict lookup instead of the enum call (four a row)
_MEMBERS: dict[type[enum.StrEnum], dict[str, enum.StrEnum]] = {
    t: {m.value: m for m in t} for t in (ScheduleType, MisfireStrategy, RouteStrategy, GlueType)
}


def _enum(dec: RowDecoder, field: str, value: Any, enum_type: type[enum.StrEnum]) -> Any:
    if type(value) is str:
        member = _MEMBERS[enum_type].get(value)
        if member is not None:
            return member
    if value is None:
        dec.add(field, "missing: NULL where a value is required")
        return None
    try:
        return enum_type(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum_type)
        dec.add(field, f"unknown value {str(value)[:60]!r} (expected one of {allowed})")
        return None


def _schedule(dec: RowDecoder, v: Mapping[str, Any], ctx: JobContext) -> tuple[ScheduleKind, str | None, int | None]:
    if ctx.lineage is XxlJobLineage.V2_2:
        # a 2.2 row is CRON + DO_NOTHING (the shape 2.3.0's own init data gives it)
        kind, conf_field, conf = ScheduleType.CRON, "job_cron", v.get("job_cron")
    else:
        kind = _enum(dec, "schedule_type", v.get("schedule_type"), ScheduleType)
        conf_field, conf = "schedule_conf", v.get("schedule_conf")
    if kind is ScheduleType.CRON:
        cron = (conf or "").strip()
        if not cron:
            dec.add(conf_field, "empty: a CRON job needs a Quartz expression")
        elif len(cron) > MAX_CRON_LENGTH:
            dec.add(conf_field, f"too long: {len(cron)} characters (limit {MAX_CRON_LENGTH})")
        return ScheduleKind.CRON, cron or None, None
    if kind is ScheduleType.FIX_RATE:
        seconds = parse_int(conf) if conf is not None else None
        if seconds is None:
            dec.add(conf_field, f"not an integer: {conf!r} (FIX_RATE needs whole seconds)"[:200])
        elif seconds <= 0:
            dec.add(conf_field, f"not positive: {seconds} (FIX_RATE needs >= 1 second)")
            seconds = None
        elif seconds > INT32_MAX:  # Integer.valueOf would throw
            dec.add(conf_field, f"out of range: {seconds} (more than {INT32_MAX} seconds)")
            seconds = None
        return ScheduleKind.FIXED_RATE, None, seconds
    return ScheduleKind.NONE, None, None


def _misfire(dec: RowDecoder, v: Mapping[str, Any], ctx: JobContext) -> MisfireRule:
    if ctx.lineage is XxlJobLineage.V2_2:
        return MisfireRule.SKIP
    strategy = _enum(dec, "misfire_strategy", v.get("misfire_strategy"), MisfireStrategy)
    return _MISFIRE.get(strategy, MisfireRule.SKIP)


def _handler(dec: RowDecoder, v: Mapping[str, Any], job_id: int) -> tuple[str, datetime | None]:
    """The handler name, and for a GLUE job its source's version (`glue_updatetime` as
    the instant it names: a DATETIME in the database zone)."""
    glue = _enum(dec, "glue_type", v.get("glue_type"), GlueType)
    handler = (v.get("executor_handler") or "").strip()
    if glue is GlueType.BEAN:
        if not handler:
            dec.add("executor_handler", "missing: a BEAN job needs a handler name")
        return handler, None
    if glue is None:
        return handler, None
    # the executor keys the GLUE source by glue_updatetime; xxl-job itself fails on NULL
    if v.get("glue_updatetime") is None:
        dec.add("glue_updatetime", "missing: a GLUE job needs its source version time")
        return glue_handler(glue.value, job_id), None
    return glue_handler(glue.value, job_id), dec.wall_time("glue_updatetime", v.get("glue_updatetime"))


def _int(dec: RowDecoder, field: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """`dec.integer`, with the common case (an int within bounds, as the driver gives
    INT columns) first: five a row."""
    if type(value) is int and (minimum is None or value >= minimum) and (maximum is None or value <= maximum):
        return value
    return dec.integer(field, value, minimum=minimum, maximum=maximum)


def job_digest(row: Mapping[Any, Any], ctx: JobContext) -> ContentDigest | None:
    """The content digest `map_job` would give this row, without mapping it (the change
    stream's cheap test for an image whose content the ledger already holds: most binlog
    traffic on xxl_job_info is the admin's schedule thread moving trigger_last_time and
    trigger_next_time at every fire). None when the row may have problems: map it."""
    dec = RowDecoder(ctx.tz)
    v = decode_text(row, dec, ctx.text_columns)
    group = v.get("job_group")
    if dec.problems or not isinstance(v.get("id"), int) or not isinstance(group, int) or group not in ctx.groups:
        return None
    return ContentDigest(
        source_key=str(v["id"]),
        biz_code=ctx.groups[group],
        digest=row_digest(v, VOLATILE_COLUMNS),
        time_zone=ctx.cron_zone_name,
        cron_dialect=ctx.cron_dialect,
        cron_dialect_fallback=ctx.cron_dialect_fallback,
        broadcast=v.get("executor_route_strategy") == RouteStrategy.SHARDING_BROADCAST.value,
    )


def map_job(row: Mapping[Any, Any], ctx: JobContext) -> LegacyDefinition:
    """One `xxl_job_info` row as read (text columns as bytes or str) as a definition. A
    row read with its server-computed digest (SERVER_DIGEST) keeps it: the same digest
    `row_digest` gives (tests/integration/test_image_decoding.py), without its Python cost."""
    dec = RowDecoder(ctx.tz)
    server = row.get(SERVER_DIGEST)
    v = decode_text(row, dec, ctx.text_columns)
    job_id = _int(dec, "id", v.get("id"))
    group_id = _int(dec, "job_group", v.get("job_group"))
    if group_id not in ctx.groups:
        dec.add("job_group", f"no executor group with id {group_id}")
    kind, cron, interval = _schedule(dec, v, ctx)
    misfire = _misfire(dec, v, ctx)
    route = _enum(dec, "executor_route_strategy", v.get("executor_route_strategy"), RouteStrategy)
    handler, glue_updated_at = _handler(dec, v, job_id)
    status = _int(dec, "trigger_status", v.get("trigger_status"), 0, 1)
    next_fire_at = dec.epoch_ms("trigger_next_time", v.get("trigger_next_time"))
    timeout = _int(dec, "executor_timeout", v.get("executor_timeout"), 0)
    retries = _int(dec, "executor_fail_retry_count", v.get("executor_fail_retry_count"), 0)
    return LegacyDefinition(
        source=SourceSystem.XXL_JOB,
        source_key=str(job_id),
        biz_code=ctx.groups.get(group_id, ""),
        name=v.get(ctx.job_name_column) or "",
        schedule=kind,
        cron=cron,
        interval_seconds=interval,
        next_fire_at=next_fire_at,
        time_zone=ctx.cron_zone_name,
        cron_dialect=ctx.cron_dialect,
        cron_dialect_fallback=ctx.cron_dialect_fallback,
        misfire=misfire,
        enabled=status == 1,
        status="RUNNING" if status == 1 else "STOPPED",
        handler=handler,
        glue_updated_at=glue_updated_at,
        params=v.get("executor_param") or "",
        broadcast=route is RouteStrategy.SHARDING_BROADCAST,
        route_strategy=v.get("executor_route_strategy") or "",
        timeout_seconds=timeout,
        max_retry=retries,
        raw=_raw(v),
        problems=tuple(dec.problems),
        # a row with problems hashes every column: fixing a volatile one must be noticed
        digest=server if server and not dec.problems else row_digest(v, () if dec.problems else VOLATILE_COLUMNS),
    )
