"""The small typed interfaces the scheduler is built on. Each has an embedded
implementation (SQLite, in-process bus, local election) and a real one (TiDB/MariaDB,
Pulsar, etcd); one contract test suite runs over both.

Only domain types cross a port: no SQLAlchemy rows, Pulsar messages or etcd leases.
"""
from __future__ import annotations

from abc import abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerState,
)


class Clock(Protocol):
    @abstractmethod
    def now(self) -> datetime: ...

    @abstractmethod
    def now_ms(self) -> int: ...

    @abstractmethod
    def sleep(self, seconds: float) -> None: ...

    @abstractmethod
    def monotonic(self) -> float: ...


# --- trigger store -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Partition:
    """One slice of the trigger table. `name` comes only from table metadata."""

    index: int
    name: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Transition:
    """A conditional state change of a set of triggers (CAS).

    Rows change only where state == from_state (and owner_epoch == expected_epoch when
    given); stamps are written on the winners. `next_fire_at` may differ per row (cron
    triggers each move to their own next occurrence). `fence_epoch`, when given, makes the
    change land only while that epoch is still the store's current leader epoch, so a
    deposed leader's writes are refused.
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
        exclude_domains: Collection[str] = (),
    ) -> list[Trigger]:
        """`waiting` triggers of one partition with start <= next_fire_at <= end, ordered by
        next_fire_at then priority, leaving out the given business domains."""

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
    def claim_epoch(self, epoch: Epoch) -> bool:
        """Record epoch as the store's current leader epoch if it is newer than the one
        recorded; True when epoch is now current. Fenced writes check it."""

    @abstractmethod
    def current_epoch(self) -> Epoch: ...

    @abstractmethod
    def put_fired(self, records: Sequence[FiredRecord]) -> int:
        """Insert records that do not exist yet (by command_id); returns how many were new."""

    @abstractmethod
    def put_fired_fenced(self, records: Sequence[FiredRecord], epoch: Epoch) -> bool:
        """put_fired, only while `epoch` is the store's current leader epoch: the fence is
        read in the same transaction, before the insert. False: fenced, nothing written."""

    @abstractmethod
    def mark_published(self, command_ids: Sequence[CommandId], at: datetime) -> int:
        """Bulk pending -> published (never moves a record back)."""

    @abstractmethod
    def finish_fire(
        self, published: Sequence[CommandId], at: datetime, changes: Sequence[Transition]
    ) -> list[list[TriggerId]]:
        """One transaction for a fired chunk's outcome: mark_published(published, at),
        then each transition as cas_ids would apply it; returns each one's winners."""

    @abstractmethod
    def update_fired(self, updates: Sequence[FiredUpdate]) -> int:
        """Apply forward-only updates; returns how many records changed."""

    @abstractmethod
    def get_fired(self, command_ids: Sequence[CommandId]) -> dict[CommandId, FiredRecord]: ...

    @abstractmethod
    def fired_between(self, biz_code: str | None, start: datetime, end: datetime) -> list[FiredRecord]: ...


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
