"""The batch center's codes and the pure mapping of its rows to neutral records.

Every code is mapped once here (contract: shared/legacy/batch_center.md). A value the
contract does not allow becomes a Problem naming the column; the row is still returned.
"""

from __future__ import annotations

import enum
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from readers.digest import row_digest
from readers.legacy_ddl.values import MAX_TEXT_BYTES, RowDecoder, plain, raw_text
from readers.records import (
    ContentDigest,
    ExecStatus,
    LegacyBusiness,
    LegacyDefinition,
    LegacyExecution,
    MisfireRule,
    ScheduleKind,
    SourceSystem,
)
from readers.timezones import LegacyTimeZone

MAX_CRON_LENGTH = 128  # the width of cron_expr
MESSAGE_LIMIT = 1000
_TEXT_LIMITS = {"payload": MAX_TEXT_BYTES, "shard_params": 16 * 1024 * 1024}

# columns the batch center (or our flag) rewrites as it runs: not part of a task's content
VOLATILE_COLUMNS = frozenset({"fire_time", "status", "version", "migrated", "update_time"})
# columns left out of a task's content digest: `status` is content (it maps to the trigger
# state) and so is `fire_time` of a one-shot (its only fire); a recurring task's
# fire_time moves on every fire and is recomputed from the schedule
DIGEST_SKIP = frozenset({"version", "migrated", "update_time"})
DIGEST_MASKED = frozenset({"fire_time"})  # of a CRON / FIXED_RATE task (task_type 2, 3)
RECURRING_TYPES = (2, 3)


class TaskType(enum.IntEnum):
    DELAY = 1
    CRON = 2
    FIXED_RATE = 3


class TaskStatus(enum.IntEnum):
    WAITING = 0
    RUNNING = 1
    SUCCESS = 2
    FAILED = 3
    CANCELLED = 4
    PAUSED = 5


class BcMisfirePolicy(enum.IntEnum):
    FIRE_ONCE_NOW = 1
    SKIP = 2


class LogStatus(enum.IntEnum):
    RUNNING = 0
    SUCCESS = 1
    FAIL = 2
    TIMEOUT = 3


_KIND = {
    TaskType.DELAY: ScheduleKind.ONCE,
    TaskType.CRON: ScheduleKind.CRON,
    TaskType.FIXED_RATE: ScheduleKind.FIXED_RATE,
}
_MISFIRE = {BcMisfirePolicy.FIRE_ONCE_NOW: MisfireRule.FIRE_ONCE_NOW, BcMisfirePolicy.SKIP: MisfireRule.SKIP}
_EXEC = {
    LogStatus.RUNNING: ExecStatus.RUNNING,
    LogStatus.SUCCESS: ExecStatus.SUCCESS,
    LogStatus.FAIL: ExecStatus.FAIL,
    LogStatus.TIMEOUT: ExecStatus.TIMEOUT,
}
ACTIVE = frozenset({TaskStatus.WAITING, TaskStatus.RUNNING})  # still scheduled by the batch center


def map_business(row: Mapping[Any, Any]) -> LegacyBusiness:
    code = raw_text(row.get("biz_code"))[0] or ""
    return LegacyBusiness(
        source=SourceSystem.BATCH_CENTER,
        biz_code=code,
        name=raw_text(row.get("biz_name"))[0] or code,
        enabled=row.get("enabled") not in (0, "0", None),
        callback_base_url=raw_text(row.get("callback_base_url"))[0] or None,
        access_token=raw_text(row.get("access_token"))[0] or None,
    )


def resolve_callback(url: str, base: str | None) -> tuple[str | None, str | None]:
    """(absolute URL, error). A relative URL is appended to the business's base URL with
    exactly one '/' between them."""
    url = url.strip()
    if not url:
        return None, "missing: empty callback URL"
    parts = urlsplit(url)
    if parts.scheme:
        if parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            return None, f"not an http(s) URL: {url[:100]!r}"
        return url, None
    if not base:
        return None, "relative URL and the business has no callback_base_url"
    absolute = base.rstrip("/") + "/" + url.lstrip("/")
    return resolve_callback(absolute, None)


@dataclass(frozen=True, slots=True, kw_only=True)
class TaskContext:
    tz: LegacyTimeZone
    businesses: Mapping[str, LegacyBusiness]
    text_columns: frozenset[str]


def _code(dec: RowDecoder, field: str, value: Any, codes: type[enum.IntEnum]) -> Any:
    number = dec.integer(field, value, default=-1)
    try:
        return codes(number)
    except ValueError:
        if number != -1 or value is not None:
            allowed = ", ".join(f"{m.value} {m.name}" for m in codes)
            dec.add(field, f"unknown value {plain(value)!r} (expected {allowed})")
        return None


def _schedule(dec: RowDecoder, v: Mapping[str, Any]) -> tuple[ScheduleKind, str | None, int | None]:
    kind = _code(dec, "task_type", v.get("task_type"), TaskType)
    if kind is TaskType.CRON:
        cron = (v.get("cron_expr") or "").strip()
        if not cron:
            dec.add("cron_expr", "empty: a CRON task needs a Quartz expression")
        elif len(cron) > MAX_CRON_LENGTH:
            dec.add("cron_expr", f"too long: {len(cron)} characters (limit {MAX_CRON_LENGTH})")
        return ScheduleKind.CRON, cron or None, None
    if kind is TaskType.FIXED_RATE:
        interval = v.get("interval_sec")
        if interval is None:
            dec.add("interval_sec", "missing: a FIXED_RATE task needs interval_sec")
            return ScheduleKind.FIXED_RATE, None, None
        seconds = dec.integer("interval_sec", interval)
        if seconds <= 0:
            dec.add("interval_sec", f"not positive: {seconds} (FIXED_RATE needs > 0 seconds)")
            return ScheduleKind.FIXED_RATE, None, None
        return ScheduleKind.FIXED_RATE, None, seconds
    return _KIND.get(kind, ScheduleKind.NONE), None, None


def _payload(dec: RowDecoder, text: str | None) -> str:
    if text is None:
        return ""
    try:
        value = json.loads(text)
    except ValueError as exc:
        dec.add("payload", f"invalid JSON: {exc}"[:200])
        return text
    if not isinstance(value, dict):
        dec.add("payload", f"not a JSON object: got {type(value).__name__}")
    return text


def _shard_params(dec: RowDecoder, text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        dec.add("shard_params", f"invalid JSON: {exc}"[:200])
        return None
    if not isinstance(value, list):
        dec.add("shard_params", f"not a JSON array: got {type(value).__name__}")
        return None
    if not value:
        dec.add("shard_params", "empty JSON array: a task needs at least one shard")
        return None
    # one element per shard: strings as they are, anything else as compact JSON
    return tuple(e if isinstance(e, str) else json.dumps(e, ensure_ascii=False, separators=(",", ":")) for e in value)


def _callback(dec: RowDecoder, v: Mapping[str, Any], business: LegacyBusiness | None) -> tuple[str, str]:
    url, error = resolve_callback(v.get("callback_url") or "", business.callback_base_url if business else None)
    if error and business is not None:
        dec.add("callback_url", error)
    method = (v.get("http_method") or "").strip().upper()
    if method not in ("POST", "GET"):
        dec.add("http_method", f"unknown value {v.get('http_method')!r} (expected POST or GET)")
    return url or "", method or "POST"


def _texts(dec: RowDecoder, row: Mapping[Any, Any], ctx: TaskContext) -> dict[str, Any]:
    """The row with its text columns decoded (bytes or str, size-checked): what the
    mapping and the content digest both read."""
    return {k: dec.text(k, x, max_bytes=_TEXT_LIMITS.get(k)) if k in ctx.text_columns else x for k, x in row.items()}


def _digest(v: Mapping[str, Any], *, recurring: bool, problems: bool) -> str:
    # a row with problems is quarantined: every column counts, so any edit is seen
    if problems:
        return row_digest(v)
    return row_digest(v, DIGEST_SKIP, DIGEST_MASKED if recurring else ())


def task_digest(row: Mapping[Any, Any], ctx: TaskContext) -> ContentDigest | None:
    """The content digest `map_task` would give this row, without mapping it (the change
    stream's cheap test for an image whose content the ledger already holds: most binlog
    traffic on bc_task is the batch center moving a recurring task's fire_time and
    version). None when the text columns alone already have problems: map the row."""
    dec = RowDecoder(ctx.tz)
    v = _texts(dec, row, ctx)
    if dec.problems:
        return None
    return ContentDigest(
        source_key=str(v.get("id")),
        biz_code=v.get("biz_code") or "",
        digest=_digest(v, recurring=v.get("task_type") in RECURRING_TYPES, problems=False),
        time_zone=ctx.tz.name,
        flag_pending=v.get("migrated") != 1,
    )


def map_task(row: Mapping[Any, Any], ctx: TaskContext) -> LegacyDefinition:
    """One `bc_task` row as read (text columns as bytes or str) as a definition."""
    dec = RowDecoder(ctx.tz)
    v = _texts(dec, row, ctx)
    task_id = dec.integer("id", v.get("id"))
    biz = v.get("biz_code") or ""
    business = ctx.businesses.get(biz)
    if business is None:
        dec.add("biz_code", f"unknown business {biz[:64]!r}: no bc_biz row")
    kind, cron, interval = _schedule(dec, v)
    fire_at = dec.wall_time("fire_time", v.get("fire_time"), required=True)
    end_at = dec.wall_time("end_time", v.get("end_time"))
    url, method = _callback(dec, v, business)
    timeout_ms = dec.integer("callback_timeout_ms", v.get("callback_timeout_ms"), minimum=1, default=30000)
    params = _payload(dec, v.get("payload"))
    shard_params = _shard_params(dec, v.get("shard_params"))
    shard_total = dec.integer("shard_total", v.get("shard_total"), minimum=1, default=1)
    priority = dec.integer("priority", v.get("priority"), minimum=1, maximum=9, default=5)
    max_retry = dec.integer("max_retry", v.get("max_retry"), minimum=0)
    misfire = _code(dec, "misfire_policy", v.get("misfire_policy"), BcMisfirePolicy)
    status = _code(dec, "status", v.get("status"), TaskStatus)
    migrated = dec.integer("migrated", v.get("migrated"), minimum=0, maximum=1)
    version = dec.integer("version", v.get("version"))
    return LegacyDefinition(
        source=SourceSystem.BATCH_CENTER,
        source_key=str(task_id),
        biz_code=biz,
        name=v.get("task_name") or v.get("task_key") or "",
        schedule=kind,
        cron=cron,
        interval_seconds=interval,
        next_fire_at=fire_at,
        end_at=end_at,
        time_zone=ctx.tz.name,
        misfire=_MISFIRE.get(misfire, MisfireRule.FIRE_ONCE_NOW),
        enabled=status in ACTIVE,
        status=status.name if status is not None else f"UNKNOWN({plain(v.get('status'))})",
        handler=url,
        params=params,
        shard_total=len(shard_params) if shard_params else shard_total,
        shard_params=shard_params,
        timeout_seconds=math.ceil(timeout_ms / 1000),
        max_retry=max_retry,
        priority=priority,
        callback_url=url or None,
        http_method=method,
        callback_timeout_ms=timeout_ms,
        version=version,
        migrated_flag=migrated == 1,
        raw={k: plain(x) for k, x in v.items()},
        problems=tuple(dec.problems),
        digest=_digest(v, recurring=kind in (ScheduleKind.CRON, ScheduleKind.FIXED_RATE), problems=bool(dec.problems)),
    )


def shard_count(shard_total: Any, shard_params: Any) -> int:
    """A task's shard count as the batch center fans out: the shard_params array's
    length when it is one, else shard_total (1 when neither is usable)."""
    text = raw_text(shard_params)[0]
    if text:
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if isinstance(value, list) and value:
            return len(value)
    return shard_total if isinstance(shard_total, int) and shard_total >= 1 else 1


def map_exec(row: Mapping[Any, Any], tz: LegacyTimeZone, shard_totals: Mapping[int, int]) -> LegacyExecution:
    """One `bc_task_exec_log` row as an execution attempt. start_time NULL means the
    callback was never sent (NOT_DISPATCHED), whatever the status says."""
    dec = RowDecoder(tz)
    task_id = dec.integer("task_id", row.get("task_id"))
    started = dec.wall_time("start_time", row.get("start_time"))
    code = dec.integer("status", row.get("status"), default=-1)
    try:
        status = ExecStatus.NOT_DISPATCHED if row.get("start_time") is None else _EXEC[LogStatus(code)]
    except ValueError:
        status = ExecStatus.FAIL
    http_status = row.get("http_status")
    error = " ".join((raw_text(row.get("error_msg"))[0] or "").split())
    parts = ([f"http {http_status}"] if http_status is not None else []) + ([error] if error else [])
    if code not in {s.value for s in LogStatus}:
        parts.insert(0, f"unknown status {plain(row.get('status'))!r}")
    return LegacyExecution(
        source=SourceSystem.BATCH_CENTER,
        biz_code=raw_text(row.get("biz_code"))[0] or "",
        source_key=str(task_id),
        log_id=dec.integer("id", row.get("id")),
        scheduled_at=dec.wall_time("scheduled_time", row.get("scheduled_time")),
        triggered_at=started,
        finished_at=dec.wall_time("end_time", row.get("end_time")),
        status=status,
        shard_index=dec.integer("shard_index", row.get("shard_index")),
        shard_total=shard_totals.get(task_id, 1),
        attempt=dec.integer("attempt", row.get("attempt")),
        message="; ".join(parts)[:MESSAGE_LIMIT],
    )
