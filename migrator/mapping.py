"""Neutral legacy definitions -> the trigger model (job, trigger, sharding items).

Pure: no I/O. A definition that cannot be mapped comes back as a `Rejection` naming the
field and the reason; the caller quarantines it and goes on.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from readers.records import LegacyBusiness, LegacyDefinition, MisfireRule, ScheduleKind, SourceSystem
from scheduler_core.cron import DIALECTS, CronExpression, CronSyntaxError, Dialect
from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
    Block,
    Job,
    JobCode,
    Lane,
    MisfirePolicy,
    ShardingItem,
    Trigger,
    TriggerKind,
    TriggerState,
)
from scheduler_core.times import to_ms

MAX_PARAMS_BYTES = 64 * 1024
MAX_SHARDS = 100_000
NO_TIMEOUT = timedelta(hours=24)  # legacy "0 = no timeout": bounded, so a hung handler is still reported
EARLIEST = datetime(1970, 1, 2, tzinfo=ZoneInfo("UTC"))
LATEST = datetime(2100, 1, 1, tzinfo=ZoneInfo("UTC"))
# json.dumps with options builds an encoder per call; these give the very same text
_PARAMS_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode
_HASH_JSON = json.JSONEncoder(sort_keys=True, ensure_ascii=False).encode
SOURCE_PREFIX = {SourceSystem.XXL_JOB: "xxl", SourceSystem.BATCH_CENTER: "bc"}
BRIDGE_HANDLER = {SourceSystem.XXL_JOB: "xxl-job-bridge", SourceSystem.BATCH_CENTER: "batch-center-bridge"}


@dataclass(frozen=True, slots=True)
class MappingOptions:
    # xxl-job: app_name -> business (identity when absent)
    business_map: Mapping[str, str] = field(default_factory=dict)
    # businesses whose xxl-job NONE jobs become jobs without a trigger (fired by API only)
    api_only_businesses: Collection[str] = ()
    # GLUE jobs run through the xxl-job bridge (the executor keeps their source)
    bridge_glue: bool = False


@dataclass(frozen=True, slots=True)
class Mapped:
    job: Job
    trigger: Trigger | None  # None: an API-only job
    items: tuple[ShardingItem, ...]
    content_hash: str


@dataclass(frozen=True, slots=True)
class Rejection:
    field: str
    reason: str


def job_code_of(defn: LegacyDefinition) -> JobCode:
    return JobCode(f"{SOURCE_PREFIX[defn.source]}:{defn.biz_code}:{defn.source_key}"[:191])


def business_of(defn: LegacyDefinition, options: MappingOptions) -> str:
    return options.business_map.get(defn.biz_code, defn.biz_code)


def map_definition(
    defn: LegacyDefinition,
    business: LegacyBusiness | None,
    now: datetime,
    options: MappingOptions = MappingOptions(),
    *,
    active: bool = False,
) -> Mapped | Rejection:
    """Map one definition. `active`: the business is in dual-run (its enabled triggers
    wait to fire) rather than legacy (they are `created`, not admitted)."""
    if defn.problems:
        p = defn.problems[0]
        more = f" (+{len(defn.problems) - 1} more)" if len(defn.problems) > 1 else ""
        return Rejection(p.field, p.reason + more)
    biz = business_of(defn, options)
    if not biz or len(biz) > 64:
        return Rejection("business", f"business code {biz!r} must be 1..64 characters")
    try:
        zone = ZoneInfo(defn.time_zone)
    except (ZoneInfoNotFoundError, ValueError):
        return Rejection("time_zone", f"unknown time zone {defn.time_zone!r}")
    glue = str(defn.raw.get("glue_type") or "BEAN").upper()
    if defn.source is SourceSystem.XXL_JOB and glue != "BEAN" and not options.bridge_glue:
        return Rejection("glue_type", f"GLUE job ({glue}) is not migrated unless bridged (--bridge-glue)")
    params = _params(defn, business, glue)
    if len(params.encode("utf-8")) > MAX_PARAMS_BYTES:
        return Rejection("params", f"params are {len(params.encode('utf-8'))} bytes, more than {MAX_PARAMS_BYTES}")
    items, shard_total, explicit = _items(defn, business)
    if isinstance(items, Rejection):
        return items
    if not 1 <= defn.priority <= 9:
        return Rejection("priority", f"priority {defn.priority} is outside 1..9")
    if defn.max_retry < 0 or defn.max_retry > 100:
        return Rejection("max_retry", f"max_retry {defn.max_retry} is outside 0..100")
    timeout = NO_TIMEOUT if defn.timeout_seconds <= 0 else timedelta(seconds=defn.timeout_seconds)
    code = job_code_of(defn)
    # Legacy handlers keep running unchanged: a migrated job runs through its bridge; a
    # team that rewrites a handler natively registers it under the job code, which the
    # executor looks up first.
    job = Job(
        job_code=code,
        biz_code=biz,
        handler=BRIDGE_HANDLER[defn.source],
        params=params,
        shard_total=shard_total,
        timeout=timeout,
        max_retry=defn.max_retry,
        priority=defn.priority,
        explicit_items=explicit,
        block=_block(defn),
    )
    trigger = _trigger(defn, job, zone, now, options, active)
    if isinstance(trigger, Rejection):
        return trigger
    job_items = tuple(ShardingItem(job_code=code, index=i, param=p) for i, p in enumerate(items)) if explicit else ()
    return Mapped(job, trigger, job_items, _hash(job, trigger, job_items))


def with_lane(mapped: Mapped, lane: Lane) -> Mapped:
    """The mapping with its job and trigger in `lane` (the business's default lane)."""
    if mapped.job.lane is lane:
        return mapped
    trigger = None if mapped.trigger is None else replace(mapped.trigger, lane=lane)
    return replace(mapped, job=replace(mapped.job, lane=lane), trigger=trigger)


def _block(defn: LegacyDefinition) -> Block:
    """The executor's block strategy for the job: an xxl-job job's SERIAL_EXECUTION (also
    what xxl-job does with none or an unknown one, its default) is serial, so a run waits
    in the executor's queue holding no worker (its bridged call would otherwise hold one
    while it waits in the legacy executor's queue). DISCARD_LATER and COVER_EARLY stay
    with the legacy executor, which the bridge sends them to as before; the batch center
    has no block strategy. (Not in the mapping's hash: the strategy is in the params,
    which are.)"""
    if defn.source is not SourceSystem.XXL_JOB:
        return Block.CONCURRENT
    raw = str(defn.raw.get("executor_block_strategy") or "").strip().upper()
    return Block.CONCURRENT if raw in ("DISCARD_LATER", "COVER_EARLY") else Block.SERIAL


def _params(defn: LegacyDefinition, business: LegacyBusiness | None, glue: str) -> str:
    if defn.source is SourceSystem.BATCH_CENTER:
        body: dict[str, object] = {
            "bridge": "batch-center",
            "task_id": defn.source_key,
            "callback_url": defn.callback_url,
            "callback_base_url": business.callback_base_url if business else None,
            "http_method": defn.http_method,
            "callback_timeout_ms": defn.callback_timeout_ms,
            "payload": defn.params,
            "token_ref": f"bc_biz:{defn.biz_code}",  # the token itself stays out of the target tables
        }
    else:
        body = {
            "bridge": "xxl-job",
            "job_id": defn.source_key,
            "executor_handler": defn.handler,
            "executor_param": defn.params,
            "glue_type": glue,
            "route_strategy": defn.route_strategy,
            "block_strategy": defn.raw.get("executor_block_strategy"),
            "child_jobs": defn.raw.get("child_jobid") or "",
            "app_name": defn.biz_code,
            "executor_timeout": defn.timeout_seconds,  # the executor's own timeout (0: none)
        }
        if glue != "BEAN":  # bridged GLUE jobs: the executor needs the source and its version
            body["glue_source"] = defn.raw.get("glue_source") or ""
            # epoch ms of the instant the admin stored (xxl-job sends Date.getTime()); the
            # raw value is the DATETIME's text, which says nothing of its zone
            body["glue_updatetime"] = _epoch_ms(defn.glue_updated_at)
    return _PARAMS_JSON(body)


def _items(
    defn: LegacyDefinition, business: LegacyBusiness | None
) -> tuple[list[str], int, bool] | tuple[Rejection, int, bool]:
    if defn.shard_params is not None:
        if not defn.shard_params:
            return Rejection("shard_params", "an empty shard_params array leaves nothing to run"), 0, False
        if len(defn.shard_params) > MAX_SHARDS:
            return Rejection("shard_params", f"{len(defn.shard_params)} shards, more than {MAX_SHARDS}"), 0, False
        return list(defn.shard_params), len(defn.shard_params), True
    if defn.broadcast:
        # xxl-job SHARDING_BROADCAST: one item per live executor, param = its address
        addresses = list(business.executor_addresses) if business else []
        if not addresses:
            return ["0"], 1, False
        return addresses, len(addresses), True
    if not 1 <= defn.shard_total <= MAX_SHARDS:
        return Rejection("shard_total", f"shard_total {defn.shard_total} is outside 1..{MAX_SHARDS}"), 0, False
    return [], defn.shard_total, False


def _trigger(
    defn: LegacyDefinition, job: Job, zone: ZoneInfo, now: datetime, options: MappingOptions, active: bool
) -> Trigger | Rejection | None:
    misfire = MisfirePolicy.FIRE_ONCE_NOW if defn.misfire is MisfireRule.FIRE_ONCE_NOW else MisfirePolicy.SKIP
    end_at = defn.end_at
    for name, value in (("next_fire_at", defn.next_fire_at), ("end_at", end_at)):
        if value is not None and not EARLIEST <= value < LATEST:
            return Rejection(name, f"{value.isoformat()} is outside 1970-01-02 .. 2100-01-01")
    state = _state(defn, active)
    common: dict[str, Any] = dict(
        job_code=job.job_code,
        biz_code=job.biz_code,
        time_zone=str(zone.key),
        end_at=end_at,
        misfire_policy=misfire,
        priority=job.priority,
        state=state,
    )
    if defn.schedule is ScheduleKind.NONE:
        if job.biz_code in options.api_only_businesses:
            return None
        # xxl-job runs it only as a child job (after a parent's success) or by hand: a
        # trigger with no schedule, never due (completed), that a parent's follow-up fires
        return Trigger(
            kind=TriggerKind.NONE,
            next_fire_at=now,
            **{
                **common,
                "end_at": None,  # type: ignore[arg-type]
                "state": TriggerState.COMPLETED,
            },
        )
    if defn.schedule is ScheduleKind.ONCE:
        if defn.next_fire_at is None:
            return Rejection("fire_time", "a one-shot task needs its fire time")
        return Trigger(kind=TriggerKind.ONCE, next_fire_at=defn.next_fire_at, **common)  # type: ignore[arg-type]
    if defn.schedule is ScheduleKind.CRON:
        if not defn.cron:
            return Rejection("cron", "a cron job needs a cron expression")
        if defn.cron_dialect not in DIALECTS:
            return Rejection(
                "cron", f"unknown Quartz dialect {defn.cron_dialect!r} (expected one of {', '.join(DIALECTS)})"
            )
        dialect: Dialect = defn.cron_dialect  # type: ignore[assignment]
        # Recomputed from the schedule, never a copied legacy next time (xxl-job #2988):
        # the first occurrence strictly after now, in the legacy's own Quartz dialect.
        first = _cron_next(defn.cron, zone, now, dialect)
        if isinstance(first, CronSyntaxError) and defn.cron_dialect_fallback in DIALECTS:
            # the legacy's version is not known for sure, and only the other line accepts
            # it: the admin that saved it runs that line
            other = _cron_next(defn.cron, zone, now, defn.cron_dialect_fallback)  # type: ignore[arg-type]
            if not isinstance(other, CronSyntaxError):
                dialect, first = defn.cron_dialect_fallback, other  # type: ignore[assignment]
        if isinstance(first, CronSyntaxError):
            return Rejection("cron", f"invalid Quartz cron {defn.cron!r} for the legacy's Quartz {dialect}: {first}")
        cron = dict(kind=TriggerKind.CRON, cron=defn.cron, cron_dialect=dialect)
        if first is None or (end_at is not None and first > end_at):
            return Trigger(next_fire_at=now, **cron, **{**common, "state": TriggerState.COMPLETED})  # type: ignore[arg-type]
        return Trigger(next_fire_at=first.astimezone(EARLIEST.tzinfo), **cron, **common)  # type: ignore[arg-type]
    if defn.schedule is ScheduleKind.FIXED_RATE:
        if defn.interval_seconds is None or defn.interval_seconds <= 0:
            return Rejection("interval", f"fixed rate needs a positive interval, got {defn.interval_seconds!r}")
        interval = timedelta(seconds=defn.interval_seconds)
        anchor = defn.next_fire_at or now
        if anchor <= now:
            steps = (now - anchor) // interval + 1
            anchor = anchor + steps * interval
        return Trigger(kind=TriggerKind.FIXED_RATE, interval=interval, next_fire_at=anchor, **common)  # type: ignore[arg-type]
    return Rejection("schedule_type", f"unknown schedule {defn.schedule!r}")


@lru_cache(maxsize=8192)
def _cron_next(cron: str, zone: ZoneInfo, now: datetime, dialect: Dialect) -> datetime | CronSyntaxError | None:
    """The first occurrence after `now`, or the syntax error. Cached: a chunk (or a group of
    change events) maps many rows with the same few expressions at the same `now`, and
    parsing plus stepping a Quartz expression is most of a row's mapping cost."""
    try:
        expr = CronExpression(cron, zone, dialect=dialect)
    except CronSyntaxError as exc:
        return exc
    return expr.next_after(now.astimezone(zone))


def _state(defn: LegacyDefinition, active: bool) -> TriggerState:
    status = defn.status.upper()
    if status in ("SUCCESS", "FAILED"):
        return TriggerState.COMPLETED
    if status == "CANCELLED":
        return TriggerState.CANCELLED
    if not defn.enabled:
        return TriggerState.PAUSED
    return TriggerState.WAITING if active else TriggerState.CREATED


def _hash(job: Job, trigger: Trigger | None, items: tuple[ShardingItem, ...]) -> str:
    """A hash of what the target holds for this definition. The next fire time counts
    only for one-shots: a recurring job's legacy next time moves on every fire and is not
    a change of definition."""
    body: dict[str, object] = {
        "job": [
            job.biz_code,
            job.handler,
            job.params,
            job.shard_total,
            job.timeout.total_seconds(),
            job.max_retry,
            job.priority,
            job.explicit_items,
        ],
        "items": [[i.index, i.param] for i in items],
    }
    if trigger is not None:
        schedule: list[object] = [
            trigger.kind.value,
            trigger.cron,
            trigger.interval.total_seconds() if trigger.interval else None,
            trigger.time_zone,
            trigger.end_at.isoformat() if trigger.end_at else None,
            trigger.misfire_policy.value,
            trigger.priority,
            _enabled_state(trigger.state),
            trigger.next_fire_at.isoformat() if trigger.kind is TriggerKind.ONCE else None,
        ]
        if trigger.cron_dialect != DEFAULT_CRON_DIALECT and trigger.kind is TriggerKind.CRON:
            # only when not the default: a trigger migrated before triggers carried a dialect
            # keeps its hash (nothing rewritten), one of another dialect is updated to carry it
            schedule.append(trigger.cron_dialect)
        body["trigger"] = schedule
    return hashlib.sha256(_HASH_JSON(body).encode()).hexdigest()


def _enabled_state(state: TriggerState) -> str:
    # created (business on legacy) and waiting (dual-run) are the same definition
    return TriggerState.WAITING.value if state is TriggerState.CREATED else state.value


def _epoch_ms(value: object) -> int:
    if isinstance(value, datetime):
        return to_ms(value if value.tzinfo else value.replace(tzinfo=EARLIEST.tzinfo))
    return 0
