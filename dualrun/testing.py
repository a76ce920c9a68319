"""Helpers that tests, the demo and the benchmark share: a `LegacyReader` over records
in memory, and generators of legacy logs and fired records for a schedule where the
truth is known (procrastinate-style: shipped, so downstream users can use them too)."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar

from readers.ports import LegacyReader
from readers.records import (
    ExecStatus,
    LegacyBusiness,
    LegacyDefinition,
    LegacyExecution,
    ScheduleKind,
    SourceSystem,
)
from scheduler_core.cron import CronExpression
from scheduler_core.model import CommandId, FiredRecord, FiredState, JobCode, TriggerId, command_id

UTC = timezone.utc


class RecordReader(LegacyReader):
    """An xxl-job-shaped legacy source over records in memory (executions ordered and
    windowed by trigger time, as the xxl-job reader does)."""

    system: ClassVar[SourceSystem] = SourceSystem.XXL_JOB

    def __init__(
        self, definitions: Iterable[LegacyDefinition] = (), executions: Iterable[LegacyExecution] = ()
    ) -> None:
        self.defs = list(definitions)
        self.execs = list(executions)

    def _time(self, e: LegacyExecution) -> datetime | None:
        return e.triggered_at

    def businesses(self) -> list[LegacyBusiness]:
        names = sorted({d.biz_code for d in self.defs} | {e.biz_code for e in self.execs})
        return [LegacyBusiness(source=self.system, biz_code=n, name=n) for n in names]

    def definitions(self, biz_codes: Collection[str] | None = None) -> Iterator[LegacyDefinition]:
        for d in sorted(self.defs, key=lambda d: d.source_key):
            if biz_codes is None or d.biz_code in biz_codes:
                yield d

    def definition(self, key: str) -> LegacyDefinition | None:
        return next((d for d in self.defs if d.source_key == key), None)

    def definitions_by_keys(self, keys: Collection[str]) -> dict[str, LegacyDefinition]:
        wanted = set(keys)
        return {d.source_key: d for d in self.definitions() if d.source_key in wanted}

    def executions(self, biz_code: str, since: datetime, until: datetime) -> Iterator[LegacyExecution]:
        rows = [
            e for e in self.execs if e.biz_code == biz_code and (t := self._time(e)) is not None and since <= t < until
        ]
        yield from sorted(rows, key=lambda e: (self._time(e), e.log_id))


class BatchRecordReader(RecordReader):
    """The batch-center shape: executions windowed and ordered by scheduled time."""

    system: ClassVar[SourceSystem] = SourceSystem.BATCH_CENTER

    def _time(self, e: LegacyExecution) -> datetime | None:
        return e.scheduled_at


def cron_definition(
    key: str,
    biz_code: str,
    cron: str,
    *,
    source: SourceSystem = SourceSystem.XXL_JOB,
    time_zone: str = "Asia/Shanghai",
    **kw: Any,
) -> LegacyDefinition:
    return LegacyDefinition(
        source=source,
        source_key=key,
        biz_code=biz_code,
        name=f"job {key}",
        schedule=ScheduleKind.CRON,
        cron=cron,
        time_zone=time_zone,
        **kw,
    )  # type: ignore[arg-type]


def occurrences(defn: LegacyDefinition, start: datetime, end: datetime) -> list[datetime]:
    """What Quartz says the definition fires in [start, end)."""
    assert defn.cron is not None
    out = []
    expr = CronExpression(defn.cron, defn.time_zone, dialect=defn.cron_dialect)  # type: ignore[arg-type]
    for at in expr.iter_after(start - timedelta(milliseconds=1)):
        if at >= end:
            break
        out.append(at.astimezone(UTC))
    return out


@dataclass
class LogWriter:
    """Writes legacy log rows for given fire times, the way each legacy system logs them."""

    source: SourceSystem = SourceSystem.XXL_JOB
    next_id: int = 1
    rows: list[LegacyExecution] = field(default_factory=list)

    def fire(
        self,
        defn: LegacyDefinition,
        at: datetime,
        *,
        lag: timedelta = timedelta(milliseconds=400),
        status: ExecStatus = ExecStatus.SUCCESS,
        shard: int = 0,
        shards: int = 1,
        attempt: int = 0,
        message: str = "",
        run: timedelta = timedelta(seconds=1),
    ) -> LegacyExecution:
        triggered = at + lag
        if self.source is SourceSystem.XXL_JOB:  # DATETIME without fractional seconds
            triggered = triggered.replace(microsecond=0)
        row = LegacyExecution(
            source=self.source,
            biz_code=defn.biz_code,
            source_key=defn.source_key,
            log_id=self.next_id,
            scheduled_at=at if self.source is SourceSystem.BATCH_CENTER else None,
            triggered_at=triggered,
            finished_at=None if status is ExecStatus.RUNNING else triggered + run,
            status=status,
            shard_index=shard,
            shard_total=shards,
            attempt=attempt,
            message=message,
        )
        self.next_id += 1
        self.rows.append(row)
        return row

    def fires(self, defn: LegacyDefinition, times: Sequence[datetime], **kw: Any) -> None:
        for at in times:
            self.fire(defn, at, **kw)  # type: ignore[arg-type]


def fired(
    job_code: str,
    biz: str,
    trigger_id: int,
    at: datetime,
    *,
    lag: timedelta = timedelta(milliseconds=50),
    state: FiredState = FiredState.SUCCEEDED,
    item: int = 0,
    items: int = 1,
    attempt: int = 0,
    misfired: bool = False,
) -> FiredRecord:
    """One fired record as the new path leaves it after the callback."""
    received = None if state in (FiredState.PENDING, FiredState.PUBLISHED, FiredState.SKIPPED) else at + lag
    final = state in (FiredState.SUCCEEDED, FiredState.FAILED, FiredState.TIMED_OUT)
    return FiredRecord(
        command_id=CommandId(command_id(trigger_id, at, item)),
        trigger_id=TriggerId(trigger_id),
        job_code=JobCode(job_code),
        biz_code=biz,
        scheduled_at=at,
        item_index=item,
        item_total=items,
        state=state,
        fired_at=at - timedelta(minutes=5),
        # a schedule fire stamps no published_at (FiredState); `published` here stands for
        # a record read as published (its trigger recorded the occurrence, or a follow-up)
        published_at=(at - timedelta(minutes=5)) if state is FiredState.PUBLISHED else None,
        received_at=received,
        started_at=received,
        result_at=(received + timedelta(seconds=1)) if final and received else None,
        attempt=attempt,
        misfired=misfired,
    )
