"""Neutral legacy records: what the readers hand on, in plain Python types.

Readers know nothing of the scheduler core: these records carry legacy facts, already
decoded (times as aware UTC datetimes, JSON parsed where the contract says JSON), plus
the problems the reader found, so that the migrator can quarantine a row with the field
and the reason instead of guessing.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any


class SourceSystem(enum.StrEnum):
    XXL_JOB = "xxl-job"
    BATCH_CENTER = "batch-center"


class ScheduleKind(enum.StrEnum):
    CRON = "cron"
    FIXED_RATE = "fixed_rate"
    ONCE = "once"
    NONE = "none"  # xxl-job NONE: only fired by hand or as a child job


class MisfireRule(enum.StrEnum):
    FIRE_ONCE_NOW = "fire_once_now"
    SKIP = "skip"  # xxl-job DO_NOTHING, batch center SKIP


class ExecStatus(enum.StrEnum):
    RUNNING = "running"
    SUCCESS = "success"
    FAIL = "fail"
    TIMEOUT = "timeout"
    NOT_DISPATCHED = "not_dispatched"


@dataclass(frozen=True, slots=True)
class Problem:
    """Why a row cannot be taken as it is: the field and the reason."""

    field: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyBusiness:
    source: SourceSystem
    biz_code: str  # xxl-job: the executor group's app_name; batch center: bc_biz.biz_code
    name: str
    enabled: bool = True
    callback_base_url: str | None = None  # batch center
    access_token: str | None = field(default=None, repr=False)  # a secret: never in repr or logs
    executor_addresses: tuple[str, ...] = ()  # xxl-job: live executors (registry, or the group's list)
    source_id: int | None = None  # xxl-job group id


@dataclass(frozen=True, slots=True, kw_only=True)
class RegisteredExecutor:
    """xxl-job: one executor's row of the admin's registry (`xxl_job_registry`, group
    EXECUTOR), judged by the admin's own rule: alive while its last registration is within
    90 s of the database's clock (the admin deletes it a while after)."""

    app: str  # registry_key: the executor app (the business's biz_code)
    address: str  # registry_value: the executor's base URL
    updated_at: datetime | None  # the last registration, aware UTC (NULL: never)
    age: timedelta | None  # how long before the database's "now" that was
    alive: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyDefinition:
    """One legacy job or task, decoded."""

    source: SourceSystem
    source_key: str  # unique within the source system: xxl-job job id, batch center task id
    biz_code: str  # biz_code
    name: str
    schedule: ScheduleKind
    cron: str | None = None  # Quartz syntax
    interval_seconds: int | None = None
    next_fire_at: datetime | None = None  # aware UTC: the next time the legacy side is due
    end_at: datetime | None = None
    time_zone: str = "Asia/Shanghai"  # the zone the cron is evaluated in
    # the Quartz line of the legacy's CronExpression ("2.3" or "2.5"): what it accepts and
    # when it fires differ in places (docs/cron.md); xxl-job: by version, batch center: 2.5
    cron_dialect: str = "2.5"
    # when the legacy's version is not known for sure: the other line it may run, taken
    # for an expression `cron_dialect` rejects (that admin saved it, so it runs it)
    cron_dialect_fallback: str = ""
    misfire: MisfireRule = MisfireRule.SKIP
    enabled: bool = True  # xxl-job trigger_status = 1; batch center WAITING (not PAUSED/...)
    status: str = ""  # the legacy status, in the legacy's own words
    handler: str = ""  # xxl-job executor_handler; batch center: the callback URL
    # xxl-job GLUE: the source's version (`glue_updatetime`, aware UTC): the executor
    # reloads the source when the version it is sent differs from the one it holds
    glue_updated_at: datetime | None = None
    params: str = ""
    shard_total: int = 1
    shard_params: tuple[str, ...] | None = None  # per-shard params (batch center shard_params)
    broadcast: bool = False  # xxl-job SHARDING_BROADCAST: one item per live executor
    route_strategy: str = ""
    timeout_seconds: int = 0  # 0: none
    max_retry: int = 0
    priority: int = 5
    # batch center callback details (the legacy handler the bridge keeps calling)
    callback_url: str | None = None
    http_method: str = "POST"
    callback_timeout_ms: int | None = None
    version: int | None = None  # batch center optimistic-lock counter
    migrated_flag: bool | None = None  # batch center `migrated`
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # the row as read, for hashing and excerpts
    problems: tuple[Problem, ...] = ()
    # readers.digest of the row's content columns: equal digests, equal definitions (the
    # migrator's "unchanged" test before mapping); "" when the reader gives none
    digest: str = field(default="", repr=False)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass(frozen=True, slots=True)
class ContentDigest:
    """A definition's `digest` as the legacy server computed it, without the row."""

    source_key: str
    biz_code: str  # the legacy business code (as LegacyDefinition.biz_code)
    digest: str
    time_zone: str
    broadcast: bool = False  # as LegacyDefinition.broadcast: its digest counts the executor addresses
    cron_dialect: str = "2.5"  # as LegacyDefinition.cron_dialect
    cron_dialect_fallback: str = ""  # as LegacyDefinition.cron_dialect_fallback
    flag_pending: bool = False  # batch center: `migrated` is not 1 (the row is read, to repair the flag)


@dataclass(frozen=True, slots=True, kw_only=True)
class LegacyExecution:
    """One legacy execution attempt (xxl_job_log row, bc_task_exec_log row)."""

    source: SourceSystem
    biz_code: str
    source_key: str  # the definition's key
    log_id: int
    scheduled_at: datetime | None  # batch center stores it; xxl-job does not (None)
    triggered_at: datetime | None  # dispatch / callback sent
    finished_at: datetime | None
    status: ExecStatus
    shard_index: int = 0
    shard_total: int = 1
    attempt: int = 0
    message: str = ""


class ChangeOp(enum.StrEnum):
    INSERT = "insert"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class StreamPosition:
    """Where a change stream stands: binlog file + position (and the GTID), or for the
    polling fallback the high-water update time in `log_pos` (epoch ms) with `log_file`
    set to 'poll'."""

    log_file: str
    log_pos: int
    gtid: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RowChange:
    """One row change of a legacy table, as the stream decoded it."""

    op: ChangeOp
    schema: str
    table: str
    before: dict[str, Any] | None
    after: dict[str, Any] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class ChangeBatch:
    """The row changes of one committed transaction, and the position just after its
    commit: the checkpoint to store in the same target transaction as the changes."""

    changes: tuple[RowChange, ...]
    position: StreamPosition
    committed_at: datetime | None = None
