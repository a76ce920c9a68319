"""A job and its schedule as an operator writes them (issue 28): checked field by field, and
turned into the model's Job and Trigger with the first fire time COMPUTED from the
schedule, never taken from the caller (a cron trigger stored with a time its cron never
produces would fire at that time all the same).

Pure: no store. `switchyard.jobs` is the one path that writes what this builds."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler_core.alert_rule import AlertRule
from scheduler_core.cron import CronExpression
from scheduler_core.cron_quartz_parser import DIALECTS, Dialect
from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
    Block,
    Job,
    JobCode,
    Lane,
    MisfirePolicy,
    Trigger,
    TriggerKind,
    TriggerState,
)
from scheduler_core.occurrences import next_after

# the store's column widths (dus_job.job_code, biz_code): longer would be cut or refused there
JOB_CODE_MAX = 191
BIZ_CODE_MAX = 64
# the smallest fixed rate: a finer one is a busy loop, not a schedule
MIN_INTERVAL = timedelta(seconds=1)


class JobInputError(ValueError):
    """Bad input, naming the field and the reason (the CLI's exit 2)."""

    def __init__(self, field_name: str, reason: str) -> None:
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """When a job runs: a Quartz cron in a zone, a fixed rate, one time, or none (a child
    job, run only after its parent or by hand)."""

    kind: TriggerKind
    cron: str | None = None
    dialect: Dialect = DEFAULT_CRON_DIALECT
    time_zone: str = "UTC"
    interval: timedelta | None = None
    at: datetime | None = None  # one-shot only
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE_NOW
    end_at: datetime | None = None

    def check(self) -> None:
        try:
            ZoneInfo(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise JobInputError("zone", f"unknown time zone {self.time_zone!r}") from None
        if self.dialect not in DIALECTS:
            raise JobInputError("dialect", f"unknown Quartz dialect {self.dialect!r} (one of {', '.join(DIALECTS)})")
        if self.kind is TriggerKind.CRON:
            if not self.cron:
                raise JobInputError("cron", "a cron schedule needs an expression")
            try:
                CronExpression(self.cron, self.time_zone, dialect=self.dialect)
            except ValueError as exc:
                raise JobInputError("cron", str(exc)) from None
        elif self.cron:
            raise JobInputError("cron", f"given for a {self.kind.value} schedule")
        if self.kind is TriggerKind.FIXED_RATE:
            if self.interval is None or self.interval < MIN_INTERVAL:
                raise JobInputError("every", f"a fixed rate needs an interval of at least {MIN_INTERVAL.seconds} s")
        elif self.interval is not None:
            raise JobInputError("every", f"given for a {self.kind.value} schedule")
        if self.kind is TriggerKind.ONCE and self.at is None:
            raise JobInputError("at", "a one-shot schedule needs its time")
        if self.kind is not TriggerKind.ONCE and self.at is not None:
            raise JobInputError("at", f"given for a {self.kind.value} schedule")
        for name, value in (("at", self.at), ("end", self.end_at)):
            if value is not None and value.tzinfo is None:
                raise JobInputError(name, "needs a zone offset (e.g. 2026-12-06T12:00:00+00:00)")

    def first_fire(self, now: datetime) -> datetime | None:
        """The first occurrence after `now`; None for a schedule that never fires by itself.
        Raises JobInputError when a schedule has no occurrence left (a one-shot in the past,
        a cron that never matches again, an end before the first fire)."""
        self.check()
        if self.kind is TriggerKind.NONE:
            return None
        if self.kind is TriggerKind.ONCE:
            assert self.at is not None
            if self.at < now:
                raise JobInputError("at", f"{self.at.isoformat()} is in the past")
            return self.at
        if self.kind is TriggerKind.FIXED_RATE:
            assert self.interval is not None
            first: datetime | None = now + self.interval
        else:
            first = next_after(self._probe(now), now)
        if first is None:
            raise JobInputError("cron", f"{self.cron!r} has no fire time after {now.isoformat()}")
        if self.end_at is not None and first > self.end_at:
            raise JobInputError("end", f"{self.end_at.isoformat()} is before the first fire {first.isoformat()}")
        return first

    def next_times(self, now: datetime, n: int) -> list[datetime]:
        """The next `n` fire times after `now` (a preview: the cron in its zone and dialect)."""
        first = self.first_fire(now)
        if first is None:
            return []
        out = [first]
        probe = self._probe(first)
        while len(out) < n:
            nxt = next_after(probe, out[-1])
            if nxt is None:
                break
            out.append(nxt)
        return out

    def trigger(self, job: Job, now: datetime, state: TriggerState = TriggerState.WAITING) -> Trigger:
        """The job's trigger, its first fire computed. A schedule of none is stored
        completed (nothing to fire by itself) at `now`."""
        first = self.first_fire(now)
        return Trigger(
            job_code=job.job_code,
            biz_code=job.biz_code,
            kind=self.kind,
            next_fire_at=first if first is not None else now,
            state=TriggerState.COMPLETED if first is None else state,
            cron=self.cron if self.kind is TriggerKind.CRON else None,
            cron_dialect=self.dialect,
            interval=self.interval,
            time_zone=self.time_zone,
            end_at=self.end_at,
            misfire_policy=self.misfire_policy,
            priority=job.priority,
            lane=job.lane,
        )

    def _probe(self, anchor: datetime) -> Trigger:
        """A throwaway trigger for `next_after` (the one evaluator of every schedule)."""
        return Trigger(
            job_code=JobCode("probe"),
            biz_code="probe",
            kind=self.kind,
            next_fire_at=anchor,
            cron=self.cron,
            cron_dialect=self.dialect,
            interval=self.interval,
            time_zone=self.time_zone,
            end_at=self.end_at,
        )

    @staticmethod
    def of(t: Trigger) -> Schedule:
        return Schedule(
            kind=t.kind,
            cron=t.cron,
            dialect=t.cron_dialect,
            time_zone=t.time_zone,
            interval=t.interval,
            at=t.next_fire_at if t.kind is TriggerKind.ONCE else None,
            misfire_policy=t.misfire_policy,
            end_at=t.end_at,
        )

    def same_timing(self, other: Schedule) -> bool:
        """Whether both fire at the same times (what a schedule edit supersedes by)."""
        return (self.kind, self.cron, self.dialect if self.kind is TriggerKind.CRON else None, self.time_zone) == (
            other.kind,
            other.cron,
            other.dialect if other.kind is TriggerKind.CRON else None,
            other.time_zone,
        ) and (self.interval, self.at, self.end_at) == (other.interval, other.at, other.end_at)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSpec:
    """Everything an operator sets on a job: the Job's fields, its schedule, its sharding
    items' parameters (explicit items; none: items 0..shards-1), its child jobs (run
    once after each successful run) and its alert targets."""

    job_code: str
    biz_code: str
    handler: str
    schedule: Schedule
    params: str = ""
    shard_total: int = 1
    items: tuple[str, ...] = ()
    timeout: timedelta = timedelta(seconds=30)
    max_retry: int = 0
    priority: int = 5
    # the job's lane; None: its business's default (`switchyard.jobs` resolves it)
    lane: Lane | None = None
    # what a later run does while an earlier one of the job is in work in an executor process
    block: Block = Block.CONCURRENT
    children: tuple[str, ...] = field(default_factory=tuple)
    alerts: AlertRule = field(default_factory=AlertRule)  # stored beside the job by switchyard.alerts, not in Job

    def check(self) -> None:
        _code("job", self.job_code, JOB_CODE_MAX)
        _code("business", self.biz_code, BIZ_CODE_MAX)
        if ":" in self.biz_code:
            raise JobInputError("business", "must not contain ':' (it separates business and job in business:job)")
        if not self.handler.strip():
            raise JobInputError("handler", "must not be empty")
        if self.shard_total < 1:
            raise JobInputError("shards", f"must be at least 1, got {self.shard_total}")
        if self.items and len(self.items) != self.shard_total:
            raise JobInputError("item", f"{len(self.items)} item parameters for {self.shard_total} shards")
        if self.timeout <= timedelta(0):
            raise JobInputError("timeout", "must be positive")
        if self.max_retry < 0:
            raise JobInputError("retries", f"must be 0 or more, got {self.max_retry}")
        if not 1 <= self.priority <= 9:
            raise JobInputError("priority", f"must be 1..9, got {self.priority}")
        if self.job_code in self.children:
            raise JobInputError("child", "a job cannot be its own child")
        try:
            self.alerts.check()
        except ValueError as exc:
            raise JobInputError("alert", str(exc)) from None
        self.schedule.check()

    def job(self) -> Job:
        self.check()
        return Job(
            job_code=JobCode(self.job_code),
            biz_code=self.biz_code,
            handler=self.handler,
            params=self.params,
            shard_total=self.shard_total,
            timeout=self.timeout,
            max_retry=self.max_retry,
            priority=self.priority,
            explicit_items=bool(self.items),
            lane=self.lane or Lane.DEFAULT,
            block=self.block,
        )

    def with_changes(self, **changes: object) -> JobSpec:
        return replace(self, **changes)  # type: ignore[arg-type]


def parse_lane(value: str, field_name: str = "lane") -> Lane:
    """A lane by its name, or a JobInputError naming the lanes there are."""
    try:
        return Lane(value.strip().lower())
    except ValueError:
        raise JobInputError(field_name, f"unknown lane {value!r} (one of {', '.join(Lane)})") from None


def parse_block(value: str, field_name: str = "block") -> Block:
    """A block strategy by its name, or a JobInputError naming the strategies there are."""
    try:
        return Block(value.strip().lower())
    except ValueError:
        raise JobInputError(field_name, f"unknown block strategy {value!r} (one of {', '.join(Block)})") from None


def _code(name: str, value: str, longest: int) -> None:
    if not value or not value.strip():
        raise JobInputError(name, "must not be empty")
    if value != value.strip() or any(c.isspace() for c in value):
        raise JobInputError(name, f"{value!r} contains white space")
    if len(value) > longest:
        raise JobInputError(name, f"longer than {longest} characters")


__all__ = ["JobInputError", "JobSpec", "Schedule", "parse_block", "parse_lane"]
