"""The design's terms, and nothing else: job, trigger, sharding item, execution command,
fired record, with their enums and identifier types.

Datetimes here are always aware (UTC in storage); durations are timedelta. Integers in
milliseconds exist only at the storage and wire boundaries.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from operator import attrgetter
from typing import Any, NewType, TypeVar

from scheduler_core.cron_quartz_parser import DIALECTS, Dialect
from scheduler_core.times import require_aware, to_ms

TriggerId = NewType("TriggerId", int)
JobCode = NewType("JobCode", str)
CommandId = NewType("CommandId", str)
Epoch = NewType("Epoch", int)
# The Quartz line a trigger's cron follows when the store has none for it (a trigger
# written before triggers carried one): Quartz 2.5, what every cron was evaluated as then.
DEFAULT_CRON_DIALECT: Dialect = "2.5"


class TriggerState(enum.StrEnum):
    """Values are what the trigger table stores."""

    CREATED = "created"
    WAITING = "waiting"
    ACQUIRED = "acquired"
    COMPLETED = "completed"
    PAUSED = "paused"
    CANCELLED = "cancelled"


class TriggerKind(enum.StrEnum):
    ONCE = "once"
    CRON = "cron"
    FIXED_RATE = "fixed_rate"
    # no schedule of its own (xxl-job NONE): never due; runs only as another trigger's
    # follow-up (a child job) or by hand. Stored `completed`: nothing left to fire by itself
    NONE = "none"


class Lane(enum.StrEnum):
    """Where a job's triggers are admitted and published (issue 29). Each lane has its own
    admission budget per tick, fire-pool share and command topics (settings.LaneBudget,
    codec.command_topic), so an on-the-hour burst never holds another lane's due triggers
    back. Values are what the job and trigger tables store (NULL: `default`)."""

    BURST = "burst"  # on-the-hour SOP and fan-out
    DEFAULT = "default"  # everything that names no lane: today's behaviour
    BULK = "bulk"  # low priority

    @staticmethod
    def of(value: str | None) -> Lane:
        """The stored value's lane: NULL (a row written before lanes) is `default`."""
        return (_LANES.get(value) or Lane(value)) if value else Lane.DEFAULT


class Block(enum.StrEnum):
    """What an executor process does with a run of a job while an earlier run of the same
    job is still in work in that process (xxl-job's block strategy, which is also per
    executor). Held per executor process: two processes of the business can run the job
    at once, as two xxl-job executors can. Values are what the job table stores (NULL:
    `concurrent`)."""

    # today's behaviour: the later run starts on the next free worker of the business's
    # quota, beside the earlier one (xxl-job's CONCURRENT_EXECUTION, which its admin hides)
    CONCURRENT = "concurrent"
    # the later run is not run: it is recorded failed, naming the strategy (xxl-job fails
    # the later trigger with "block strategy effect：Discard Later")
    DISCARD_LATER = "discard_later"
    # the earlier run is killed (cooperatively, as `run kill` does; recorded killed, covered)
    # and the later one runs
    COVER_EARLY = "cover_early"
    # the later run waits in the executor's queue and runs after the earlier one, in
    # arrival order, per job and sharding item (xxl-job's SERIAL_EXECUTION, its default);
    # a stop still skips a queued run, and a full queue answers the run failed
    SERIAL = "serial"

    @staticmethod
    def of(value: str | None) -> Block:
        """The stored or carried value's strategy: NULL, absent or unknown (a newer
        sender's) is `concurrent`, what every executor did before strategies."""
        return _BLOCKS.get(value or "", Block.CONCURRENT)


class MisfirePolicy(enum.StrEnum):
    """What a trigger does when its fire time is older than the misfire threshold."""

    FIRE_ONCE_NOW = "fire_once_now"
    SKIP = "skip"


_LANES = {lane.value: lane for lane in Lane}
_BLOCKS = {block.value: block for block in Block}


# what a shadow-mode executor records for a run it took and did not invoke: its last word
# (the record stays `received`), so the run log's retention purges it as if final
SHADOW_NOTE = "shadow: recorded, not invoked"


class FiredState(enum.StrEnum):
    """The life of one command: persisted before publication, then its result.

    A schedule fire's records stay `pending` until an executor reports: whether their
    messages reached the broker is not stamped on them (it cost a row write per trigger)
    but told by their trigger. The outcome CAS that moves the trigger past an occurrence
    (its `last_fired_at` = that occurrence) commits only after the broker acked the
    chunk's messages, so a pending record whose occurrence's outcome is recorded was
    published; one whose trigger is still acquired for it may or may not have been, and
    is fired again by reclaim with the same command ids. `SqlTriggerStore.outcome_recorded`
    is the one place that derives it. `published` is stamped only on runs outside the
    schedule (follow-ups, a schedule edit's pending runs), which move no trigger."""

    PENDING = "pending"  # persisted; no executor has reported it yet (see above)
    PUBLISHED = "published"  # a run outside the schedule whose publication the broker acked
    RECEIVED = "received"  # an executor took it (shadow mode stops here)
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    TIMED_OUT = "timed_out"
    SKIPPED = "skipped"  # misfire policy SKIP: recorded, never silently dropped
    # an operator's `run kill` reached the handler and it returned (scheduler_core.kills):
    # final, neither a success nor a missing run
    KILLED = "killed"

    @property
    def is_final(self) -> bool:
        return self in _FINAL_FIRED


_FINAL_FIRED = frozenset(
    {FiredState.SUCCEEDED, FiredState.FAILED, FiredState.TIMED_OUT, FiredState.SKIPPED, FiredState.KILLED}
)


def command_id(trigger_id: int, scheduled_at: datetime | int, item_index: int) -> CommandId:
    """A pure function of (trigger, scheduled fire time, item): every re-fire of the same
    occurrence yields the same id, so executors and the callback consumer can be idempotent.

    Readable on purpose: an operator can tell from the id which trigger and fire it is.
    """
    ms = scheduled_at if isinstance(scheduled_at, int) else to_ms(scheduled_at)
    return CommandId(f"{trigger_id}-{ms}-{item_index}")


def parse_command_id(value: str) -> tuple[TriggerId, int, int]:
    """(trigger id, scheduled ms, item index) back from a command id."""
    parts = value.split("-")
    if len(parts) != 3:
        raise ValueError(f"not a command id: {value!r}")
    return TriggerId(int(parts[0])), int(parts[1]), int(parts[2])


@dataclass(frozen=True, slots=True, kw_only=True)
class Job:
    """A registered business definition."""

    job_code: JobCode
    biz_code: str  # the business: it owns a command topic and a fire-pool budget
    handler: str
    params: str = ""
    shard_total: int = 1
    timeout: timedelta = timedelta(seconds=30)
    max_retry: int = 0
    priority: int = 5  # 1 highest .. 9; breaks ties among equal fire times only
    envelope_size: int = 1  # items of one run carried per message (1: one message per item)
    explicit_items: bool = False  # sharding items (with params) are stored, not just 0..shard_total-1
    # shadow: executors receive and record its commands without invoking the handler
    # (dual-run of a business whose handlers are not idempotent)
    shadow: bool = False
    lane: Lane = Lane.DEFAULT  # its triggers' lane (Trigger.lane carries a copy for admission)
    block: Block = Block.CONCURRENT  # a later run's fate while an earlier one is in work (per executor)
    id: int | None = None

    def __post_init__(self) -> None:
        if not self.job_code:
            raise ValueError("job_code must not be empty")
        if self.shard_total < 1:
            raise ValueError(f"job {self.job_code}: shard_total must be >= 1, got {self.shard_total}")
        if not 1 <= self.priority <= 9:
            raise ValueError(f"job {self.job_code}: priority must be 1..9, got {self.priority}")
        if self.envelope_size < 1:
            raise ValueError(f"job {self.job_code}: envelope_size must be >= 1, got {self.envelope_size}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Trigger:
    """The durable schedule of a job. A one-shot trigger is one run; cron and fixed-rate
    triggers keep their next occurrence in next_fire_at."""

    job_code: JobCode
    biz_code: str
    kind: TriggerKind
    next_fire_at: datetime
    state: TriggerState = TriggerState.WAITING
    cron: str | None = None  # Quartz syntax, evaluated in time_zone
    # which Quartz line's CronExpression the cron follows ("2.3" or "2.5", docs/cron.md):
    # the legacy's own, so a migrated job fires exactly as its legacy admin fired it
    cron_dialect: Dialect = DEFAULT_CRON_DIALECT
    interval: timedelta | None = None  # fixed rate, anchored at the first next_fire_at
    time_zone: str = "UTC"
    end_at: datetime | None = None
    misfire_policy: MisfirePolicy = MisfirePolicy.FIRE_ONCE_NOW
    priority: int = 5
    # the job's lane, kept on the trigger so admission budgets per lane without a join
    lane: Lane = Lane.DEFAULT
    owner_epoch: Epoch | None = None
    acquire_deadline: datetime | None = None
    version: int = 0
    id: TriggerId | None = None

    def __post_init__(self) -> None:
        require_aware(self.next_fire_at, "next_fire_at")
        if self.end_at is not None:
            require_aware(self.end_at, "end_at")
        if self.acquire_deadline is not None:
            require_aware(self.acquire_deadline, "acquire_deadline")
        if self.kind is TriggerKind.CRON and not self.cron:
            raise ValueError(f"trigger of {self.job_code}: a cron trigger needs a cron expression")
        if self.cron_dialect not in DIALECTS:
            raise ValueError(
                f"trigger of {self.job_code}: unknown cron dialect {self.cron_dialect!r} "
                f"(expected one of {', '.join(DIALECTS)})"
            )
        if self.kind is TriggerKind.FIXED_RATE and (self.interval is None or self.interval <= timedelta(0)):
            raise ValueError(f"trigger of {self.job_code}: a fixed-rate trigger needs a positive interval")


@dataclass(frozen=True, slots=True, kw_only=True)
class ShardingItem:
    """A fan-out unit inside one run (an audience page, a shard index)."""

    job_code: JobCode
    index: int
    param: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionCommand:
    """One sharding item of one run, as the executor receives it."""

    command_id: CommandId
    trigger_id: TriggerId
    job_code: JobCode
    biz_code: str
    handler: str
    scheduled_at: datetime  # T: deliver-at is T, never the acquire time
    item_index: int = 0
    item_total: int = 1
    item_param: str = ""
    params: str = ""
    attempt: int = 0
    timeout: timedelta = timedelta(seconds=30)
    max_retry: int = 0
    epoch: Epoch = Epoch(0)
    page_id: CommandId | None = None  # the envelope's page record, when it has one
    shadow: bool = False  # published in shadow mode: record, never invoke
    block: Block = Block.CONCURRENT  # the job's block strategy, as the executor applies it


@dataclass(frozen=True, slots=True, kw_only=True)
class FiredRecord:
    """The durable row per (trigger, fire time, item) tracking its result (and, for a run
    outside the schedule, its publication: see FiredState)."""

    command_id: CommandId
    trigger_id: TriggerId
    job_code: JobCode
    biz_code: str
    scheduled_at: datetime
    item_index: int = 0
    item_total: int = 1
    state: FiredState = FiredState.PENDING
    epoch: Epoch = Epoch(0)
    fired_at: datetime | None = None  # when the fire pipeline persisted it
    # stamped only on runs outside the schedule (FiredState): a schedule fire leaves it None
    published_at: datetime | None = None
    received_at: datetime | None = None  # the executor took it: lag SLI = received_at - T
    started_at: datetime | None = None  # handler start: lag SLI = started_at - T
    result_at: datetime | None = None
    attempt: int = 0
    message: str = ""
    misfired: bool = False
    # A page record stands for item_count items of one envelope (items item_index ..
    # item_index + item_count - 1): at 200K commands/s one row per item is more than the
    # store can write, one row per message is not. item_states holds one letter per item
    # once results arrive (S succeeded, F failed, T timed out, R received).
    item_count: int = 1
    item_states: str = ""
    succeeded_items: int = 0
    failed_items: int = 0


# --- building the frozen records on the hot path -----------------------------------------

_Frozen = TypeVar("_Frozen")


def field_names(cls: type) -> tuple[str, ...]:
    """A model dataclass's fields, in declaration order (the order `slot_builder` takes)."""
    return tuple(f.name for f in fields(cls))


def slot_builder(cls: type[_Frozen]) -> Callable[[Sequence[Any]], _Frozen]:
    """A builder of `cls` (a frozen, slotted dataclass of this module) from every field's
    value in declaration order (`field_names`), with the same __post_init__ checks as its
    constructor. The generated __init__ takes keyword arguments and sets each field through
    object.__setattr__: for a Trigger that was half of building one from a row (~2.5 of
    5.7 us), and the admission path builds one per due row, one per winner and a fired
    record per item. Here each slot is set through its descriptor, in a function generated
    once per class as dataclasses generates __init__ (unrolled: a loop over the slots cost
    ~60% more). Every field must be given: a missing or extra value raises ValueError."""
    names = field_names(cls)
    scope: dict[str, Any] = {"new": object.__new__, "cls": cls, "post_init": getattr(cls, "__post_init__", None)}
    scope.update({f"set_{i}": cls.__dict__[name].__set__ for i, name in enumerate(names)})
    values = ", ".join(f"v{i}" for i in range(len(names)))
    source = "\n".join(
        [
            "def build(values):",
            f"    ({values},) = values",
            "    obj = new(cls)",
            *(f"    set_{i}(obj, v{i})" for i in range(len(names))),
            *(["    post_init(obj)"] if scope["post_init"] is not None else []),
            "    return obj",
        ]
    )
    exec(compile(source, f"<slot_builder {cls.__name__}>", "exec"), scope)
    build: Callable[[Sequence[Any]], _Frozen] = scope["build"]
    return build


def slot_replacer(cls: type[_Frozen], *names: str) -> Callable[..., _Frozen]:
    """`replace(obj, *values)`: dataclasses.replace(obj, **dict(zip(names, values))) for
    `cls` (see `slot_builder`), at under half its cost: the fields are read in one C call
    and the copy is built through the slots, with the same __post_init__ checks."""
    all_names = field_names(cls)
    unknown = [n for n in names if n not in all_names]
    if unknown:
        raise TypeError(f"{cls.__name__} has no field(s) {unknown}")
    build = slot_builder(cls)
    read_all = attrgetter(*all_names)
    at = tuple(all_names.index(n) for n in names)

    def replace(obj: _Frozen, *values: Any) -> _Frozen:
        current = list(read_all(obj))
        for i, value in zip(at, values, strict=True):
            current[i] = value
        return build(current)

    return replace
