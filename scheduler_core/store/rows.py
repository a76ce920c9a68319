"""Row <-> model conversion for the store. The only place table columns meet the model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
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

# a stored row by column name: a dict, or SQLAlchemy's RowMapping (keyed by names or columns)
Row = Mapping[Any, Any]

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
# A rollback fence marks records not final yet as skipped at this rank, below final: the
# executor's final result (skipped, or what really ran) still moves them (scheduler_core.fence).
PROVISIONAL_SKIP_RANK = FIRED_RANK[FiredState.RECEIVED]
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


def job_from_row(row: Row) -> Job:
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
        "cron_dialect": trigger.cron_dialect if trigger.kind is TriggerKind.CRON else None,
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


def trigger_from_row(row: Row) -> Trigger:
    return trigger_from_tuple(tuple(row[c] for c in TRIGGER_READ_COLUMNS))


# The trigger columns the model is built from, in the order trigger_from_tuple reads them:
# the hot reads (select_due) name exactly these and take rows as plain tuples.
TRIGGER_READ_COLUMNS = (
    "id",
    "job_code",
    "biz_code",
    "kind",
    "cron_expr",
    "interval_ms",
    "time_zone",
    "end_at",
    "next_fire_at",
    "state",
    "priority",
    "misfire_policy",
    "owner_epoch",
    "acquire_deadline",
    "version",
    "cron_dialect",
)


def trigger_from_tuple(row: Sequence[Any]) -> Trigger:
    (
        id_,
        job_code,
        biz_code,
        kind,
        cron,
        interval_ms,
        tz,
        end_at,
        next_fire_at,
        state,
        priority,
        policy,
        owner_epoch,
        deadline,
        version,
        dialect,
    ) = row
    return Trigger(
        id=TriggerId(id_),
        job_code=JobCode(job_code),
        biz_code=biz_code,
        kind=TriggerKind(kind),
        cron=cron,
        # NULL: written before triggers carried a dialect, evaluated as then
        cron_dialect=dialect or DEFAULT_CRON_DIALECT,
        interval=None if interval_ms is None else timedelta(milliseconds=interval_ms),
        time_zone=tz,
        end_at=opt_from_ms(end_at),
        next_fire_at=from_ms(next_fire_at),
        state=TriggerState(state),
        priority=priority,
        misfire_policy=MisfirePolicy(policy),
        owner_epoch=None if owner_epoch is None else Epoch(owner_epoch),
        acquire_deadline=opt_from_ms(deadline),
        version=version,
    )


# The fired-record columns in the order fired_row gives them: the hot INSERT binds plain
# tuples in this order (no per-row dict, no per-row parameter processing).
FIRED_COLUMNS = (
    "command_id",
    "trigger_id",
    "job_code",
    "biz_code",
    "scheduled_at",
    "item_index",
    "item_total",
    "state",
    "state_rank",
    "epoch",
    "fired_at",
    "published_at",
    "received_at",
    "started_at",
    "result_at",
    "attempt",
    "misfired",
    "message",
    "item_count",
    "item_states",
    "succeeded_items",
    "failed_items",
)


def fired_row(rec: FiredRecord) -> tuple[Any, ...]:
    return (
        rec.command_id,
        rec.trigger_id,
        rec.job_code,
        rec.biz_code,
        to_ms(rec.scheduled_at),
        rec.item_index,
        rec.item_total,
        rec.state.value,
        FIRED_RANK[rec.state],
        rec.epoch,
        opt_to_ms(rec.fired_at),
        opt_to_ms(rec.published_at),
        opt_to_ms(rec.received_at),
        opt_to_ms(rec.started_at),
        opt_to_ms(rec.result_at),
        rec.attempt,
        1 if rec.misfired else 0,
        rec.message[:MESSAGE_MAX],
        rec.item_count,
        rec.item_states or None,
        rec.succeeded_items,
        rec.failed_items,
    )


def fired_values(rec: FiredRecord) -> dict[str, Any]:
    return dict(zip(FIRED_COLUMNS, fired_row(rec), strict=True))


def fired_from_row(row: Row) -> FiredRecord:
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
