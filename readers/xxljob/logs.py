"""The pure mapping of an `xxl_job_log` row to a `LegacyExecution` (notes §2.11).

- `trigger_time` is the admin's dispatch wall time, not the nominal fire time (xxl-job
  does not store that), so `scheduled_at` is None.
- status: `handle_code` 200 success, 502 timeout, any other non-zero fail; with
  `handle_code` 0 (no result yet): `trigger_code` 200 running, 0 not dispatched (the
  admin inserted the row but never recorded the dispatch), anything else a failed
  trigger (no address, routing or HTTP failure), which xxl-job's UI counts as failed and
  whose finish time is the trigger time.
- `executor_sharding_param` "i/n" gives the shard (broadcast only; otherwise 0 of 1).
- `executor_fail_retry_count` is the retries *remaining*; the attempt number is the
  job's configured retry count minus that (0 when the job is gone).
- the trigger type (CRON / MANUAL / RETRY / PARENT / API / MISFIRE) exists only as
  localized text inside `trigger_msg`; it leads the message as "[CRON] ...", since the
  neutral record has no field for it; `message_trigger_type` reads it back.
"""

from __future__ import annotations

import enum
import html
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from readers.legacy_ddl.values import RowDecoder, raw_text
from readers.records import ExecStatus, LegacyExecution, SourceSystem
from readers.timezones import LegacyTimeZone

MESSAGE_LIMIT = 1000  # characters of handle_msg / trigger_msg carried into the record


class TriggerType(enum.StrEnum):
    CRON = "CRON"  # also FIX_RATE fires
    MANUAL = "MANUAL"
    RETRY = "RETRY"
    PARENT = "PARENT"
    API = "API"
    MISFIRE = "MISFIRE"
    UNKNOWN = "UNKNOWN"


# i18n titles (resources/i18n/message_{zh_CN,zh_TC,en}.properties, jobconf_trigger_type_*)
_TITLES = {
    "Cron触发": TriggerType.CRON, "Cron觸發": TriggerType.CRON, "Cron trigger": TriggerType.CRON,
    "手动触发": TriggerType.MANUAL, "手動觸發": TriggerType.MANUAL, "Manual trigger": TriggerType.MANUAL,
    "失败重试触发": TriggerType.RETRY, "失敗重試觸發": TriggerType.RETRY, "Fail retry trigger": TriggerType.RETRY,
    "父任务触发": TriggerType.PARENT, "父任務觸發": TriggerType.PARENT, "Parent job trigger": TriggerType.PARENT,
    "API触发": TriggerType.API, "API觸發": TriggerType.API, "Api trigger": TriggerType.API,
    "调度过期补偿": TriggerType.MISFIRE, "調度過期補償": TriggerType.MISFIRE,
    "Misfire compensation trigger": TriggerType.MISFIRE,
}  # fmt: skip
# the type is the first line: "<label>：<title><br>..." (the retry monitor later appends a
# retry banner to the *old* row, so the title must be read after the label, not anywhere)
_TYPE_LINE = re.compile(r"(?:任务触发类型|任務觸發類型|Job trigger type)\s*[:：]\s*([^<\n]+)")
_TAG = re.compile(r"<[^>]+>")
_SHARD = re.compile(r"(\d+)/(\d+)")


def trigger_type(trigger_msg: str | None) -> TriggerType:
    match = _TYPE_LINE.search(trigger_msg or "")
    if match is None:
        return TriggerType.UNKNOWN
    return _TITLES.get(match.group(1).strip(), TriggerType.UNKNOWN)


def exec_status(trigger_code: int, handle_code: int) -> ExecStatus:
    if handle_code == 200:
        return ExecStatus.SUCCESS
    if handle_code == 502:
        return ExecStatus.TIMEOUT
    if handle_code != 0:
        return ExecStatus.FAIL
    if trigger_code == 200:
        return ExecStatus.RUNNING
    if trigger_code == 0:
        return ExecStatus.NOT_DISPATCHED
    return ExecStatus.FAIL


def shard(sharding_param: str | None) -> tuple[int, int]:
    """(index, total) from "i/n"; (0, 1) when absent or malformed."""
    match = _SHARD.fullmatch((sharding_param or "").strip())
    if match is None:
        return 0, 1
    index, total = int(match.group(1)), int(match.group(2))
    return (index, total) if 0 <= index < total else (0, 1)


def _message(kind: TriggerType, trigger_code: int, handle_msg: str | None, trigger_msg: str | None) -> str:
    """ "[TYPE] " + the executor's message, or for a failed trigger the admin's account of
    it (trigger_msg without its HTML)."""
    body = handle_msg or ""
    if not body and trigger_code not in (0, 200):
        body = _TAG.sub(" ", html.unescape(trigger_msg or ""))
    body = " ".join(body.split())[:MESSAGE_LIMIT]
    return f"[{kind.value}] {body}".rstrip()


@dataclass(frozen=True, slots=True, kw_only=True)
class LogContext:
    tz: LegacyTimeZone
    groups: Mapping[int, str]  # group id -> app_name
    retry_counts: Mapping[int, int]  # job id -> configured executor_fail_retry_count


def map_log(row: Mapping[Any, Any], ctx: LogContext) -> LegacyExecution:
    """One `xxl_job_log` row as read (text columns as bytes) as an execution attempt.
    Undecodable times become None: an execution record has no problems list."""
    dec = RowDecoder(ctx.tz)
    trigger_code = dec.integer("trigger_code", row.get("trigger_code"))
    handle_code = dec.integer("handle_code", row.get("handle_code"))
    status = exec_status(trigger_code, handle_code)
    triggered_at = dec.wall_time("trigger_time", row.get("trigger_time"))
    finished_at = dec.wall_time("handle_time", row.get("handle_time")) if handle_code != 0 else None
    if status is ExecStatus.FAIL and handle_code == 0:
        finished_at = triggered_at  # a failed trigger ends when it is tried
    trigger_msg = raw_text(row.get("trigger_msg"))[0]
    kind = trigger_type(trigger_msg)
    index, total = shard(raw_text(row.get("executor_sharding_param"))[0])
    job_id = dec.integer("job_id", row.get("job_id"))
    remaining = dec.integer("executor_fail_retry_count", row.get("executor_fail_retry_count"), minimum=0)
    configured = ctx.retry_counts.get(job_id)
    return LegacyExecution(
        source=SourceSystem.XXL_JOB,
        biz_code=ctx.groups.get(dec.integer("job_group", row.get("job_group")), ""),
        source_key=str(job_id),
        log_id=dec.integer("id", row.get("id")),
        scheduled_at=None,
        triggered_at=triggered_at,
        finished_at=finished_at,
        status=status,
        shard_index=index,
        shard_total=total,
        attempt=max(0, configured - remaining) if configured is not None else 0,
        message=_message(kind, trigger_code, raw_text(row.get("handle_msg"))[0], trigger_msg),
    )


def message_trigger_type(message: str) -> TriggerType:
    """The trigger type a `LegacyExecution.message` of this reader starts with."""
    match = re.match(r"\[([A-Z]+)\]", message)
    try:
        return TriggerType(match.group(1)) if match else TriggerType.UNKNOWN
    except ValueError:
        return TriggerType.UNKNOWN
