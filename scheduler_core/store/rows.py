"""Row <-> model conversion for the store. The only place table columns meet the model."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import case

from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
    Block,
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Lane,
    MisfirePolicy,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
    field_names,
    slot_builder,
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
    FiredState.KILLED: 3,
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
        "lane": job.lane.value,
        # NULL for the default: a row reads as every row of before block strategies
        "block": None if job.block is Block.CONCURRENT else job.block.value,
        "updated_at": now_ms,
    }


# the job columns job_from_row reads (SqlTriggerStore.get_jobs selects exactly these)
JOB_READ_COLUMNS = (
    "id",
    "job_code",
    "biz_code",
    "handler",
    "params",
    "shard_total",
    "timeout_ms",
    "max_retry",
    "priority",
    "envelope_size",
    "explicit_items",
    "shadow",
    "lane",
    "block",
)


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
        lane=Lane.of(row["lane"]),
        block=Block.of(row["block"]),
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
        "lane": trigger.lane.value,
        "owner_epoch": trigger.owner_epoch,
        "acquire_deadline": opt_to_ms(trigger.acquire_deadline),
        "version": trigger.version,
        "created_at": now_ms,
        "updated_at": now_ms,
    }


def trigger_from_row(row: Row) -> Trigger:
    return trigger_from_tuple(tuple(row[c] for c in TRIGGER_READ_COLUMNS))


# The trigger columns the model is built from, in the order trigger_from_tuple reads them.
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
    "lane",
)


# Trigger's fields in declaration order, as `_build_trigger` takes them: checked here, so a
# field added to or moved in the model fails at import instead of landing in another slot
_TRIGGER_FIELDS = (
    "job_code",
    "biz_code",
    "kind",
    "next_fire_at",
    "state",
    "cron",
    "cron_dialect",
    "interval",
    "time_zone",
    "end_at",
    "misfire_policy",
    "priority",
    "lane",
    "owner_epoch",
    "acquire_deadline",
    "version",
    "id",
)
if field_names(Trigger) != _TRIGGER_FIELDS:  # pragma: no cover - a model change not made here
    raise RuntimeError(f"rows.trigger_from_tuple is out of step with Trigger's fields {field_names(Trigger)}")
_build_trigger = slot_builder(Trigger)
# stored value -> member, a dict lookup instead of the enum's call; an unknown value still
# raises the enum's ValueError (the call below)
_KINDS = {k.value: k for k in TriggerKind}
_STATES = {s.value: s for s in TriggerState}
_POLICIES = {p.value: p for p in MisfirePolicy}


# The hot read (select_due) takes as columns only what differs from one due row to the next
# (TRIGGER_KEY_COLUMNS) and the rest, what the due rows of a job mostly share, as one JSON
# array (the SQL function json_array, on MariaDB, MySQL, TiDB and SQLite alike), decoded once
# per distinct value: PyMySQL decodes each column of each row in Python, and 16 columns per
# row were half of the read's client time.
TRIGGER_KEY_COLUMNS = ("id", "next_fire_at", "version")
# in the order _shape takes them: TRIGGER_READ_COLUMNS without the key columns
TRIGGER_SHAPE_COLUMNS = tuple(c for c in TRIGGER_READ_COLUMNS if c not in TRIGGER_KEY_COLUMNS)
_KEY_AT = tuple(TRIGGER_READ_COLUMNS.index(c) for c in TRIGGER_KEY_COLUMNS)
_SHAPE_AT = tuple(TRIGGER_READ_COLUMNS.index(c) for c in TRIGGER_SHAPE_COLUMNS)


def trigger_from_tuple(row: Sequence[Any]) -> Trigger:
    """A trigger from its TRIGGER_READ_COLUMNS values: the key columns and the shape's,
    picked by position from the same column lists as the packed read (one order)."""
    id_, next_fire_at, version = (row[i] for i in _KEY_AT)
    return _trigger(id_, next_fire_at, version, _shape([row[i] for i in _SHAPE_AT]))


def triggers_from_packed(rows: Iterable[Sequence[Any]]) -> list[Trigger]:
    """Triggers from rows of (id, next_fire_at, version, json_array(TRIGGER_SHAPE_COLUMNS)):
    each as trigger_from_tuple makes it from the plain columns; each distinct array is
    decoded and converted once per call."""
    shapes: dict[str, tuple[Any, ...]] = {}
    out: list[Trigger] = []
    for id_, next_fire_at, version, packed in rows:
        shape = shapes.get(packed)
        if shape is None:
            shape = shapes[packed] = _shape(json.loads(packed))
        out.append(_trigger(id_, next_fire_at, version, shape))
    return out


def _shape(values: Sequence[Any]) -> tuple[Any, ...]:
    """The TRIGGER_SHAPE_COLUMNS values, converted to the model's types, in the order
    _trigger takes them."""
    (
        job_code,
        biz_code,
        kind,
        cron,
        interval_ms,
        tz,
        end_at,
        state,
        priority,
        policy,
        owner_epoch,
        deadline,
        dialect,
        lane,
    ) = values
    return (
        job_code,
        biz_code,
        _KINDS.get(kind) or TriggerKind(kind),
        _STATES.get(state) or TriggerState(state),
        cron,
        # NULL: written before triggers carried a dialect, evaluated as then
        dialect or DEFAULT_CRON_DIALECT,
        None if interval_ms is None else timedelta(milliseconds=interval_ms),
        tz,
        None if end_at is None else from_ms(end_at),
        _POLICIES.get(policy) or MisfirePolicy(policy),
        priority,
        Lane.of(lane),
        owner_epoch,
        None if deadline is None else from_ms(deadline),
    )


def _trigger(id_: int, next_fire_at: int, version: int, shape: tuple[Any, ...]) -> Trigger:
    # the fields in _TRIGGER_FIELDS order, the same checks as Trigger(...) (TriggerId,
    # JobCode and Epoch are the plain values at run time)
    (
        job_code,
        biz_code,
        kind,
        state,
        cron,
        dialect,
        interval,
        tz,
        end_at,
        policy,
        priority,
        lane,
        owner_epoch,
        deadline,
    ) = shape
    return _build_trigger(
        (
            job_code,
            biz_code,
            kind,
            from_ms(next_fire_at),
            state,
            cron,
            dialect,
            interval,
            tz,
            end_at,
            policy,
            priority,
            lane,
            owner_epoch,
            deadline,
            version,
            id_,
        )
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
    return _fired_row(rec, to_ms)


def fired_rows(records: Iterable[FiredRecord]) -> list[tuple[Any, ...]]:
    """fired_row of each record. A fire's records share their fire time, and a run's items
    their T: each distinct time is converted once (to_ms checks and converts, ~0.6 us)."""
    seen: dict[datetime, int] = {}

    def ms_of(value: datetime) -> int:
        found = seen.get(value)
        if found is None:
            found = seen[value] = to_ms(value)
        return found

    return [_fired_row(r, ms_of) for r in records]


def _fired_row(rec: FiredRecord, ms_of: Callable[[datetime], int]) -> tuple[Any, ...]:
    published, received, started, result = rec.published_at, rec.received_at, rec.started_at, rec.result_at
    return (
        rec.command_id,
        rec.trigger_id,
        rec.job_code,
        rec.biz_code,
        ms_of(rec.scheduled_at),
        rec.item_index,
        rec.item_total,
        rec.state.value,
        FIRED_RANK[rec.state],
        rec.epoch,
        None if rec.fired_at is None else ms_of(rec.fired_at),
        None if published is None else ms_of(published),
        None if received is None else ms_of(received),
        None if started is None else ms_of(started),
        None if result is None else ms_of(result),
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


def unskipped_values(fr: Any) -> dict[str, Any]:
    """What a record only provisionally skipped (a rollback fence, a schedule edit) goes
    back to when the skip is lifted, waiting for its executor's result again: `published`
    if it was stamped so (a run outside the schedule), else `pending` (a schedule fire,
    whose publication its trigger tells: `SqlTriggerStore.outcome_recorded`)."""
    unstamped = fr.c.published_at.is_(None)
    return {
        "state": case((unstamped, FiredState.PENDING.value), else_=FiredState.PUBLISHED.value),
        "state_rank": case((unstamped, FIRED_RANK[FiredState.PENDING]), else_=FIRED_RANK[FiredState.PUBLISHED]),
        "message": "",
        "result_at": None,
    }
