"""Row <-> model conversion for the store. The only place table columns meet the model."""
from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    MisfirePolicy,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
)
from scheduler_core.times import from_ms, opt_from_ms, opt_to_ms, to_ms

# Forward-only ordering of fired states: an update applies only if it moves forward.
FIRED_RANK: dict[FiredState, int] = {
    FiredState.PENDING: 0,
    FiredState.PUBLISHED: 1,
    FiredState.RECEIVED: 2,
    FiredState.SUCCEEDED: 3,
    FiredState.FAILED: 3,
    FiredState.TIMED_OUT: 3,
    FiredState.SKIPPED: 3,
}
FINAL_RANK = 3
MESSAGE_MAX = 1024


def job_values(job: Job, now_ms: int) -> dict[str, Any]:
    return {
        "job_code": job.job_code,
        "biz_code": job.biz_code,
        "handler": job.handler,
        "params": job.params,
        "shard_total": job.shard_total,
        "timeout_ms": int(job.timeout.total_seconds() * 1000),
        "max_retry": job.max_retry,
        "priority": job.priority,
        "envelope_size": job.envelope_size,
        "explicit_items": 1 if job.explicit_items else 0,
        "shadow": 1 if job.shadow else 0,
        "updated_at": now_ms,
    }


def job_from_row(row: Mapping[str, Any]) -> Job:
    return Job(
        id=row["id"],
        job_code=JobCode(row["job_code"]),
        biz_code=row["biz_code"],
        handler=row["handler"],
        params=row["params"],
        shard_total=row["shard_total"],
        timeout=timedelta(milliseconds=row["timeout_ms"]),
        max_retry=row["max_retry"],
        priority=row["priority"],
        envelope_size=row["envelope_size"],
        explicit_items=bool(row["explicit_items"]),
        shadow=bool(row["shadow"]),
    )


def trigger_values(trigger: Trigger, job_id: int, now_ms: int) -> dict[str, Any]:
    return {
        "job_id": job_id,
        "job_code": trigger.job_code,
        "biz_code": trigger.biz_code,
        "kind": trigger.kind.value,
        "cron_expr": trigger.cron,
        "interval_ms": None if trigger.interval is None else int(trigger.interval.total_seconds() * 1000),
        "time_zone": trigger.time_zone,
        "end_at": opt_to_ms(trigger.end_at),
        "next_fire_at": to_ms(trigger.next_fire_at),
        "state": trigger.state.value,
        "priority": trigger.priority,
        "misfire_policy": trigger.misfire_policy.value,
        "owner_epoch": trigger.owner_epoch,
        "acquire_deadline": opt_to_ms(trigger.acquire_deadline),
        "version": trigger.version,
        "created_at": now_ms,
        "updated_at": now_ms,
    }


def trigger_from_row(row: Mapping[str, Any]) -> Trigger:
    interval_ms = row["interval_ms"]
    return Trigger(
        id=TriggerId(row["id"]),
        job_code=JobCode(row["job_code"]),
        biz_code=row["biz_code"],
        kind=TriggerKind(row["kind"]),
        cron=row["cron_expr"],
        interval=None if interval_ms is None else timedelta(milliseconds=interval_ms),
        time_zone=row["time_zone"],
        end_at=opt_from_ms(row["end_at"]),
        next_fire_at=from_ms(row["next_fire_at"]),
        state=TriggerState(row["state"]),
        priority=row["priority"],
        misfire_policy=MisfirePolicy(row["misfire_policy"]),
        owner_epoch=None if row["owner_epoch"] is None else Epoch(row["owner_epoch"]),
        acquire_deadline=opt_from_ms(row["acquire_deadline"]),
        version=row["version"],
    )


def fired_values(rec: FiredRecord) -> dict[str, Any]:
    return {
        "command_id": rec.command_id,
        "trigger_id": rec.trigger_id,
        "job_code": rec.job_code,
        "biz_code": rec.biz_code,
        "scheduled_at": to_ms(rec.scheduled_at),
        "item_index": rec.item_index,
        "item_total": rec.item_total,
        "state": rec.state.value,
        "state_rank": FIRED_RANK[rec.state],
        "epoch": rec.epoch,
        "fired_at": opt_to_ms(rec.fired_at),
        "published_at": opt_to_ms(rec.published_at),
        "received_at": opt_to_ms(rec.received_at),
        "started_at": opt_to_ms(rec.started_at),
        "result_at": opt_to_ms(rec.result_at),
        "attempt": rec.attempt,
        "misfired": 1 if rec.misfired else 0,
        "message": rec.message[:MESSAGE_MAX],
        "item_count": rec.item_count,
        "item_states": rec.item_states or None,
        "succeeded_items": rec.succeeded_items,
        "failed_items": rec.failed_items,
    }


def fired_from_row(row: Mapping[str, Any]) -> FiredRecord:
    return FiredRecord(
        command_id=CommandId(row["command_id"]),
        trigger_id=TriggerId(row["trigger_id"]),
        job_code=JobCode(row["job_code"]),
        biz_code=row["biz_code"],
        scheduled_at=from_ms(row["scheduled_at"]),
        item_index=row["item_index"],
        item_total=row["item_total"],
        state=FiredState(row["state"]),
        epoch=Epoch(row["epoch"]),
        fired_at=opt_from_ms(row["fired_at"]),
        published_at=opt_from_ms(row["published_at"]),
        received_at=opt_from_ms(row["received_at"]),
        started_at=opt_from_ms(row["started_at"]),
        result_at=opt_from_ms(row["result_at"]),
        attempt=row["attempt"],
        misfired=bool(row["misfired"]),
        message=row["message"],
        item_count=row["item_count"],
        item_states=row["item_states"] or "",
        succeeded_items=row["succeeded_items"],
        failed_items=row["failed_items"],
    )
