"""The small typed interfaces the scheduler is built on. Each has an embedded
implementation (SQLite, in-process bus, local election) and a real one (TiDB/MariaDB,
Pulsar, etcd); one contract test suite runs over both.

Only domain types cross a port: no SQLAlchemy rows, Pulsar messages or etcd leases.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from scheduler_core.errors import BusError
from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Lane,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
)

if TYPE_CHECKING:
    from scheduler_core.fence import Fence
    from scheduler_core.stops import Stop


class Clock(Protocol):
    @abstractmethod
    def now(self) -> datetime: ...

    @abstractmethod
    def now_ms(self) -> int: ...

    @abstractmethod
    def sleep(self, seconds: float) -> None: ...

    @abstractmethod
    def monotonic(self) -> float: ...


class Clocked(Protocol):
    """Something with the clock its writes are stamped by (a store: a caller that stamps
    an operator's action or a scan with the store's now)."""

    @property
    @abstractmethod
    def clock(self) -> Clock: ...


# --- trigger store -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Partition:
    """One slice of the trigger table. `name` comes only from table metadata."""

    index: int
    name: str


LEADER_FENCE = "scheduler"


def partition_fence(partition: Partition) -> str:
    """The fence row of one partition when partitions have owners of their own (the shard
    registry): its epoch is the partition's current ownership, and every fenced write to
    the partition's rows checks it. The single leader fences everything with
    LEADER_FENCE instead."""
    return f"partition/{partition.name or partition.index}"


def partition_of(trigger_id: int, partitions: int) -> int:
    """The index of a trigger's partition: id mod the partition count (the store's
    HASH(id) partitions on MariaDB/MySQL/TiDB, the `part` column slice on SQLite)."""
    return int(trigger_id) % partitions


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A conditional state change of a set of triggers (CAS).

    Rows change only where state == from_state (and owner_epoch == expected_epoch when
    given); stamps are written on the winners. `next_fire_at` may differ per row (cron
    triggers each move to their own next occurrence). `fence_epoch`, when given, makes the
    change land only while that epoch is still the store's current leader epoch, so a
    deposed leader's writes are refused. `fence` names the fence row checked: the
    leader's (None) or a partition's (`partition_fence`).
    """

    ids: Sequence[TriggerId]
    from_state: TriggerState
    to_state: TriggerState
    expected_epoch: Epoch | None = None
    epoch: Epoch | None = None
    clear_epoch: bool = False
    deadline: datetime | None = None
    next_fire_at: Mapping[TriggerId, datetime] | None = None
    last_fired_at: Mapping[TriggerId, datetime] | None = None
    fence_epoch: Epoch | None = None
    fence: str | None = None
    # stamp last_fired_at = the row's own next_fire_at (a one-shot completing): one
    # set-based UPDATE instead of one statement per row
    fired_at_next: bool = False
    # optimistic check per row: the row changes only while its version is still the one
    # read (a definition rewritten since the read loses and is read again next time)
    expected_version: Mapping[TriggerId, int] | None = None


@dataclass(frozen=True, slots=True)
class FiredUpdate:
    """A result or progress step for one command, applied only if it moves the record
    forward (so a duplicate or late result never overwrites a final one)."""

    command_id: CommandId
    state: FiredState
    at: datetime
    attempt: int = 0
    message: str = ""
    received_at: datetime | None = None
    started_at: datetime | None = None
    # set when the item's fired record is an envelope's page record (one row per message)
    page_id: CommandId | None = None
    # the handler's own log lines of this item, per attempt: (attempt, text, truncated)
    # (scheduler_core.executor.run_logs); kept in dus_run_log
    logs: tuple[tuple[int, str, bool], ...] = ()
    # the executor process that ran it: the instance id it heartbeats with into the
    # executor registry (dus_executor); None from an executor older than the field
    executor: str | None = None


class TriggerStore(Protocol):
    @abstractmethod
    def partitions(self) -> list[Partition]: ...

    @abstractmethod
    def put_job(self, job: Job) -> Job:
        """Insert or update by job_code; returns the stored job (with id)."""

    @abstractmethod
    def get_job(self, job_code: JobCode) -> Job | None: ...

    @abstractmethod
    def get_jobs(self, job_codes: Sequence[JobCode]) -> dict[JobCode, Job]: ...

    @abstractmethod
    def put_sharding_items(self, job_code: JobCode, items: Sequence[ShardingItem]) -> None:
        """Replace the job's sharding items."""

    @abstractmethod
    def sharding_page(self, job_code: JobCode, start: int, limit: int) -> list[ShardingItem]:
        """Items with index >= start, in index order, at most limit."""

    @abstractmethod
    def add_triggers(self, triggers: Sequence[Trigger]) -> list[Trigger]:
        """Insert new triggers; returns them with ids."""

    @abstractmethod
    def get_trigger(self, trigger_id: TriggerId) -> Trigger | None: ...

    @abstractmethod
    def get_triggers(self, ids: Sequence[TriggerId]) -> list[Trigger]: ...

    @abstractmethod
    def triggers_of(self, *, biz_code: str | None = None, job_code: JobCode | None = None) -> list[Trigger]: ...

    @abstractmethod
    def select_due(
        self,
        partition: Partition,
        start: datetime,
        end: datetime,
        limit: int,
        exclude_biz_codes: Collection[str] = (),
        lane: Lane | None = None,
    ) -> list[Trigger]:
        """`waiting` triggers of one partition with start <= next_fire_at <= end, ordered by
        next_fire_at then priority, leaving out the given businesses (biz_codes); with
        `lane`, only that lane's."""

    def due_forecast(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[str, Lane, int, int]]:
        """(business, lane, bucket start ms, waiting triggers due in it) per `bucket_ms` from
        `start_ms` to `end_ms` (the adaptive lookahead's forecast); none by default."""
        return []

    def due_forecast_by_lane(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[Lane, int, int]]:
        """As `due_forecast`, summed over businesses: what the lanes' windows are planned
        with. A store whose due index holds the lane answers it from the index alone."""
        sums: dict[tuple[Lane, int], int] = {}
        for _biz, lane, bucket, n in self.due_forecast(start_ms, end_ms, bucket_ms):
            sums[lane, bucket] = sums.get((lane, bucket), 0) + n
        return [(lane, bucket, n) for (lane, bucket), n in sums.items()]

    @abstractmethod
    def select_expired(
        self, partition: Partition, now: datetime, live_epoch: Epoch | None, limit: int
    ) -> list[Trigger]:
        """`acquired` triggers whose deadline has passed (of an epoch other than
        live_epoch, when given)."""

    @abstractmethod
    def cas(self, change: Transition) -> list[Trigger]:
        """Apply the transition; returns the winners, re-read. Losing is a normal result."""

    @abstractmethod
    def cas_ids(self, change: Transition) -> list[TriggerId]:
        """Apply the transition; returns the winners' ids only, without re-reading rows
        (the hot path: the caller already holds what it needs)."""

    @abstractmethod
    def claim_epoch(self, epoch: Epoch, fence: str | None = None) -> bool:
        """Record epoch as the fence's current epoch (the leader's fence when None, or a
        partition's) if it is newer than the one recorded; True when epoch is now current.
        Fenced writes check it."""

    @abstractmethod
    def current_epoch(self, fence: str | None = None) -> Epoch:
        """The fence's current epoch (0 for a partition fence never claimed)."""

    @abstractmethod
    def put_fired(self, records: Sequence[FiredRecord]) -> int:
        """Insert records that do not exist yet (by command_id); returns how many were new."""

    @abstractmethod
    def put_fired_fenced(self, records: Sequence[FiredRecord], epoch: Epoch, fence: str | None = None) -> bool:
        """put_fired, only while `epoch` is the fence's current epoch (the leader's fence
        when None): the fence is checked in the same transaction as the insert (by the
        SQL store, as a condition of the INSERT itself). False: fenced, nothing written."""

    @abstractmethod
    def mark_published(self, command_ids: Sequence[CommandId], at: datetime) -> int:
        """Bulk pending -> published (never moves a record back). Only for runs outside
        the schedule (follow-ups, a schedule edit's pending runs), which move no trigger:
        a schedule fire's records stay `pending`, its publication told by the trigger's
        outcome (`FiredState`)."""

    @abstractmethod
    def finish_fire(self, changes: Sequence[Transition]) -> list[list[TriggerId]]:
        """One transaction for a fired chunk's outcome: each transition as cas_ids would
        apply it; returns each one's winners. Called only once the chunk's messages are
        published: a recorded outcome is what says they were."""

    @abstractmethod
    def update_fired(self, updates: Sequence[FiredUpdate]) -> int:
        """Apply forward-only updates; returns how many records changed."""

    @abstractmethod
    def get_fired(self, command_ids: Sequence[CommandId]) -> dict[CommandId, FiredRecord]: ...

    @abstractmethod
    def fired_between(self, biz_code: str | None, start: datetime, end: datetime) -> list[FiredRecord]: ...

    # on-success follow-ups (scheduler_core.followups)
    @abstractmethod
    def set_followups(self, links: Mapping[TriggerId, Sequence[TriggerId]], now_ms: int) -> None:
        """Each parent trigger's follow-ups become exactly links[parent] (empty: none)."""

    @abstractmethod
    def followups_of(self, parents: Sequence[TriggerId] | None = None) -> dict[TriggerId, list[TriggerId]]:
        """Parent trigger -> its follow-ups, in order (`parents` None: every parent)."""

    @abstractmethod
    def followup_claims(
        self, pairs: Sequence[tuple[CommandId, TriggerId]]
    ) -> dict[tuple[CommandId, TriggerId], CommandId]:
        """The child command ids already claimed for (parent command id, child trigger)."""

    @abstractmethod
    def claim_followup(
        self, parent: CommandId, child: TriggerId, records: Sequence[FiredRecord], now_ms: int
    ) -> CommandId:
        """Claim (parent, child) and insert the child run's records in one transaction;
        returns the child command id that won the claim."""


@runtime_checkable
class FenceStore(Protocol):
    """Where the rollback fences live (`scheduler_core.fence`): rollback windows of the
    business's stop (`dus_stop`), its epoch grown by every change."""

    @abstractmethod
    def raise_business_fence(self, biz_code: str, from_ms: int) -> tuple[Fence, int]:
        """In one transaction: a rollback window [from_ms, open) with the next epoch (an
        open one ends where it starts), and the business's fired records scheduled at or
        after from_ms that are not final marked skipped (provisionally: a final result
        still moves them) with the fence's message. Returns the fence and how many
        records were marked."""

    @abstractmethod
    def lift_business_fence(self, biz_code: str, until_ms: int) -> Fence | None:
        """The open rollback window becomes [from, until_ms) with the next epoch; the
        records it marked at or after until_ms wait for their result again. None: no
        fence stands."""

    @abstractmethod
    def business_fence(self, biz_code: str) -> Fence | None: ...

    @abstractmethod
    def business_fences(self) -> list[Fence]: ...


class RunRecordReads(Protocol):
    """A business's run records as a comparison of the two sides reads them (dual-run,
    the post-cutover watch, the cutover boundary): plain tuples of the named columns of
    the fired records, and the follow-up runs claimed."""

    @abstractmethod
    def fired_rows_of(
        self,
        biz_code: str,
        start_ms: int,
        end_ms: int,
        columns: Sequence[str],
        *,
        fenced_as: str | None = None,
        stopped_as: str | None = None,
        by_time: bool = False,
    ) -> list[tuple[Any, ...]]:
        """The `columns` of the business's fired records scheduled in [start_ms, end_ms);
        "state" as read (published derived from the trigger's outcome; a rollback fence's
        skip named `fenced_as`, an operator's stop's `stopped_as`, when given); `by_time`:
        in scheduled order."""

    @abstractmethod
    def followup_claims_of(self, biz_code: str, from_ms: int, until_ms: int) -> list[tuple[str, str]]:
        """(child job code, child command id) of the business's follow-up runs claimed in
        [from_ms, until_ms)."""

    @abstractmethod
    def runs_oldest_first(
        self,
        *,
        biz_code: str,
        job_code: str,
        since_ms: int,
        after: tuple[int, str] | None = None,
        limit: int = 1000,
    ) -> list[dict[str, Any]]:
        """A job's fired records scheduled at or after `since_ms`, oldest first, at most
        `limit`, after `after` (the (scheduled_at, command_id) of the page before): what an
        alert's detection reads of a run, by column name."""


@dataclass(frozen=True, slots=True)
class TriggerBrief:
    """What a view over every job needs of a trigger (which side fires it, the job's
    state); its full row, for the few shown: `TriggerStore.get_triggers`."""

    id: TriggerId
    job_code: str
    biz_code: str
    kind: TriggerKind
    state: TriggerState
    has_job: bool = True  # a job row of its code exists


class CatalogReads(Protocol):
    """What the store holds, in brief: the views' and checks' reads over every job."""

    @abstractmethod
    def trigger_briefs(self, biz_codes: Collection[str] | None = None) -> list[TriggerBrief]:
        """The triggers of these businesses (None: all), in id order."""

    @abstractmethod
    def job_biz_codes(self) -> set[str]:
        """Every business that has a job."""

    @abstractmethod
    def has_fired_records(self, biz_code: str) -> bool:
        """Whether any run record belongs to the business."""


class BusinessSwitchRows(Protocol):
    """What a business switch (dual-run start, cutover, rollback) writes and asks of the
    new side beyond moving triggers."""

    @abstractmethod
    def set_shadow(self, biz_code: str, shadow: bool) -> None:
        """Every job of the business records only (shadow) or runs its handlers."""

    @abstractmethod
    def published_after(self, biz_code: str, at_ms: int) -> bool:
        """Whether the business has a run record scheduled after `at_ms`."""

    @abstractmethod
    def add_pending(self, trigger: Trigger, times_ms: Sequence[int]) -> None:
        """Runs of `trigger` at `times_ms` outside its schedule, for whoever holds the bus
        to publish (command ids of (trigger, time): a repeat is a redelivery)."""


class StopReads(Protocol):
    """The standing operator stops (pause, cancel, freeze: `scheduler_core.stops`)."""

    @abstractmethod
    def stops(self) -> list[Stop]: ...


# --- command bus ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BusMessage:
    """What travels on the bus. `topic` is logical (e.g. "cmd.sop-audience", "callback");
    each adapter maps it to its own naming."""

    topic: str
    payload: bytes
    deliver_at_ms: int | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    key: str | None = None


@dataclass(frozen=True, slots=True)
class Received:
    message: BusMessage
    receipt: object  # adapter-specific handle for ack/nack
    redelivery_count: int = 0


class Subscription(Protocol):
    @abstractmethod
    def receive(self, max_messages: int, timeout: timedelta) -> list[Received]: ...

    @abstractmethod
    def ack(self, received: Received) -> None: ...

    @abstractmethod
    def nack(self, received: Received) -> None:
        """Ask for redelivery later."""

    @abstractmethod
    def close(self) -> None: ...


class ControlFeed(Protocol):
    """A follower of the bus's control channel (`MessageBus.follow_control`)."""

    @abstractmethod
    def synced(self) -> bool:
        """True while the follower is known to have handed over every control message
        published up to a recent confirmation (the adapter's staleness bound); False
        before its first catch-up and while it cannot reach the broker."""

    @abstractmethod
    def wait_synced(self, timeout: timedelta) -> bool:
        """Block until synced() or the timeout passes; returns synced()."""

    @abstractmethod
    def close(self) -> None: ...


class MessageBus(Protocol):
    @abstractmethod
    def publish(self, messages: Sequence[BusMessage]) -> None:
        """Publish all; returns when each is acknowledged by the bus, or raises PublishError."""

    @abstractmethod
    def subscribe(self, topic: str, subscription: str) -> Subscription:
        """A shared subscription: consumers of the same name split the messages."""

    @abstractmethod
    def ensure_subscription(self, topic: str, subscription: str) -> None:
        """Create the subscription if it does not exist, with no consumer attached: the
        bus keeps every message published from then on for it (a subscription sees only
        messages published after it was created). Idempotent, and cheap once it exists
        (the fire pipeline calls it before every publish): an implementation remembers."""

    @abstractmethod
    def close(self) -> None: ...

    # The control channel: broadcast, not shared. Commands travel on Shared subscriptions
    # (each message reaches one executor); a control message must reach every follower,
    # including one that starts later. Not abstract, so that a bus without one (a bench's
    # counting bus) still stands; such a bus refuses.

    def publish_control(self, key: str, payload: bytes) -> None:
        """Broadcast to every follower, present and future: the bus keeps every control
        message, and a follower hands them over in publish order. Returns when the bus
        has acknowledged it, or raises BusError."""
        raise BusError(f"{type(self).__name__} has no control channel")

    def follow_control(self, on_message: Callable[[bytes], None]) -> ControlFeed:
        """Call `on_message` with every control message ever published (from the first),
        then with each new one as it comes, on a thread of the adapter's (or the
        publisher's, in process). `on_message` must be quick and must not raise."""
        raise BusError(f"{type(self).__name__} has no control channel")


# --- election ------------------------------------------------------------------------


class Election(Protocol):
    """One candidate. Leadership is held through a lease; the epoch strictly increases with
    every new leader and fences the store's writes."""

    @abstractmethod
    def campaign(self, timeout: timedelta) -> Epoch | None:
        """Block until this candidate leads (returns its epoch) or the timeout passes (None)."""

    @abstractmethod
    def is_leader(self) -> bool:
        """False as soon as the lease is known to be lost."""

    @abstractmethod
    def epoch(self) -> Epoch | None: ...

    @abstractmethod
    def resign(self) -> None: ...

    @abstractmethod
    def close(self) -> None: ...


# --- shard registry ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Ownership:
    """A partition's current owner and the ownership's fencing epoch."""

    partition: int
    member: str
    epoch: Epoch


@dataclass(frozen=True, slots=True)
class RegistryView:
    """The registry as read at one revision: live members (id -> what each published)
    and partition owners."""

    revision: int
    members: Mapping[str, Mapping[str, object]] = field(default_factory=dict)
    owners: Mapping[int, Ownership] = field(default_factory=dict)


class Registry(Protocol):
    """One member of the shard registry: a lease, and partitions owned under it. A
    partition is taken only while nobody owns it; its epoch strictly increases per
    partition and fences the store's writes to it."""

    member: str

    @abstractmethod
    def join(self) -> None:
        """Join (again, after a lost lease) with a new lease."""

    @abstractmethod
    def alive(self) -> bool:
        """False as soon as the lease is known or feared lost."""

    @abstractmethod
    def view(self) -> RegistryView: ...

    @abstractmethod
    def take(self, partition: int) -> Epoch | None:
        """Own the partition if nobody does: the ownership's epoch, or None."""

    @abstractmethod
    def release(self, partition: int, epoch: Epoch) -> None: ...

    @abstractmethod
    def wait_change(self, timeout: float) -> bool:
        """Block until the registry changed or the timeout passed."""

    @abstractmethod
    def leave(self) -> None:
        """Leave at once: every partition still owned is freed with the lease."""

    @abstractmethod
    def close(self) -> None: ...


# --- wake-ups ------------------------------------------------------------------------


class Wakeups(Protocol):
    """Tells the owners of partitions that triggers due soon were added there, so their
    acquire loops tick in time instead of after their idle wait. Best effort by design: a
    wake-up lost (a process away, the network) only leaves the trigger to the loop's next
    regular tick, as before wake-ups existed. A wake-up is partition index -> the earliest
    fire time (epoch ms) of the triggers added there."""

    @abstractmethod
    def notify(self, due: Mapping[int, int]) -> None:
        """Wake the loops of these partitions, wherever they run. Must not block the
        caller on a remote round trip."""

    @abstractmethod
    def listen(self, on_wake: Callable[[Mapping[int, int]], None]) -> Callable[[], None]:
        """Call `on_wake` with every wake-up from now on (on a thread of the adapter's, or
        the notifier's in process; it must be quick and must not raise); returns the call
        that stops it."""

    @abstractmethod
    def close(self) -> None: ...
