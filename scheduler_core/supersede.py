"""Schedule edits of a live trigger: the new schedule takes effect from an instant E.

A trigger has published its commands up to one lookahead ahead (deliver-at = their fire
time). When an operator edits its schedule, the legacy admin applies the new schedule
from about now + 5 s; the new side applies it from E = now + a margin the same way:

- the old schedule's commands already published for times >= E that the new schedule
  does not have are *superseded*: their fired records are marked skipped (provisionally,
  as a rollback fence does: a result of a run that had already started still moves them)
  with `skip_message(E)`, and the executors skip them, never invoking the handler;
- the new schedule's occurrences in [E, the trigger's next_fire_at) that have no command
  yet are *pending*: whoever has the bus publishes them (same command ids as everywhere:
  command_id(trigger, scheduled_ms, item)); an occurrence both schedules have keeps its
  already published command and is published no second time.

The edit writes both lists to the store (`dus_trigger_supersede`, one row per trigger,
its epoch grown by every edit) in the transaction of the edit itself. The superseded
times are a stop (`scheduler_core.stops`, the one mechanism of every stop): windows
[T, T + 1 ms) of cause "edit" of the trigger's stop, written in the same transaction,
which the executors learn on the bus's control channel as every other stop (`StopRelay`).
The pending runs are published by the process with the bus (`SupersedeRelay`: the
scheduler leader, `switchyard serve`, or under the shard registry the owner of the
trigger's partition, see `scheduler_core.control`), which reads the store every few
hundred ms, well inside the margin. Store first, then the bus: a crash between the
steps loses nothing, the next relay round does it again with the same ids.
"""

from __future__ import annotations

import logging
from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from scheduler_core.control import EVERYTHING, RELAY_EVERY, Owned, RelayScope
from scheduler_core.model import CommandId, Epoch, FiredRecord, Job, JobCode, Trigger, TriggerId
from scheduler_core.ports import BusMessage
from scheduler_core.stops import EDIT_PREFIX, edit_message
from scheduler_core.times import from_ms

log = logging.getLogger(__name__)

# Every fired record and result skipped by a schedule edit carries a message starting with
# this (dual-run tells it from a misfire policy's skip by it).
MESSAGE_PREFIX = EDIT_PREFIX
# E = now + MARGIN: like the legacy admin's pre-read (5 s), and long enough for the relay
# (every control.RELAY_EVERY) and the executors to hear of it before E.
MARGIN = timedelta(seconds=5)
# after its first round a relay reads only the rows changed this recently (updated_at, the
# writer's clock): far more than a round, to cover clocks apart between hosts
RECENT = timedelta(minutes=2)


def skip_message(effective_ms: int) -> str:
    return edit_message(effective_ms)


@dataclass(frozen=True, slots=True)
class Supersede:
    """The commands of `trigger_id` scheduled at the times `skipped_ms` are skipped; the
    new schedule's times `pending_ms` wait for their publication. Times are epoch ms."""

    trigger_id: int
    biz_code: str
    effective_ms: int
    skipped_ms: frozenset[int]
    pending_ms: tuple[int, ...]
    epoch: int

    def covers(self, scheduled_ms: int) -> bool:
        return scheduled_ms in self.skipped_ms

    @property
    def message(self) -> str:
        return skip_message(self.effective_ms)

    def __str__(self) -> str:
        return (
            f"schedule edit of trigger {self.trigger_id} ({self.biz_code}) effective "
            f"{from_ms(self.effective_ms).isoformat()}: {len(self.skipped_ms)} superseded, "
            f"{len(self.pending_ms)} pending, epoch {self.epoch}"
        )


class SupersedeStore(Protocol):
    """Where the schedule edits' supersedes live (`scheduler_core.store.supersedes`)."""

    @abstractmethod
    def supersedes(self, changed_within: timedelta | None = None) -> list[Supersede]:
        """All, or those changed within the last `changed_within` and those with runs
        still pending."""

    @abstractmethod
    def claim_pending(self, s: Supersede, records: list[FiredRecord], owned: Owned | None = None) -> bool:
        """Insert the pending runs' fired records (if absent) while `s.epoch` is still the
        trigger's supersede epoch and, with an `owned.fence`, while that fence still holds
        `owned.epoch`; False (nothing written) when a later edit changed the row or
        another owner took the partition."""

    @abstractmethod
    def pending_published(self, s: Supersede, command_ids: list[CommandId]) -> None:
        """The pending runs are published: their records say so and the row's pending
        list is emptied (only while `s.epoch` still stands)."""


class TriggersAndJobs(Protocol):
    def get_trigger(self, trigger_id: TriggerId) -> Trigger | None: ...

    def get_jobs(self, codes: list[JobCode]) -> dict[JobCode, Job]: ...

    def current_epoch(self, fence: str | None = None) -> Epoch: ...


class PendingRuns(Protocol):
    """What builds and publishes a run outside the schedule (`FirePipeline.run_now`/`publish`)."""

    def run_now(
        self, trigger: Trigger, job: Job, occurrence: datetime, epoch: Epoch, note: str = ""
    ) -> tuple[list[FiredRecord], list[BusMessage]]: ...

    def publish(self, messages: list[BusMessage]) -> None: ...


class SupersedeRelay:
    """Publishes the pending runs of the stored supersedes (their superseded times reach
    the executors as the trigger's stop, through `StopRelay`). Call `relay()` every
    RELAY_EVERY. `scope`: the triggers this process relays, and under which ownership
    (`scheduler_core.control`)."""

    def __init__(
        self,
        supersedes: SupersedeStore,
        triggers: TriggersAndJobs,
        runs: PendingRuns,
        scope: RelayScope = EVERYTHING,
    ) -> None:
        self.supersedes = supersedes
        self.triggers = triggers
        self.runs = runs
        self.scope = scope
        self._whole_read: int | None = None  # the scope's generation at the last whole read

    def relay(self) -> int:
        """One round; returns how many supersedes had pending runs to publish."""
        published = 0
        # the first round (and the first after this process took over more triggers) reads
        # every row: a previous owner may have died before publishing; later rounds only
        # the rows changed lately and those with runs still pending, so a store with many
        # edited triggers is not read whole every few hundred ms
        generation = self.scope.generation()
        whole = self._whole_read != generation
        for s in self.supersedes.supersedes(None if whole else RECENT):
            owned = self.scope.owner(s.trigger_id)
            if owned is None:
                continue  # another process relays this trigger
            if s.pending_ms:
                self._publish_pending(s, owned)
                published += 1
        self._whole_read = generation  # only once a whole round went through
        return published

    def _publish_pending(self, s: Supersede, owned: Owned) -> None:
        trigger = self.triggers.get_trigger(TriggerId(s.trigger_id))
        job = None if trigger is None else self.triggers.get_jobs([trigger.job_code]).get(trigger.job_code)
        if trigger is None or job is None:
            # deleted since the edit: nothing to publish; the list is emptied so it is not read again
            self.supersedes.pending_published(s, [])
            return
        epoch = self.triggers.current_epoch() if owned.epoch is None else owned.epoch
        records: list[FiredRecord] = []
        messages: list[BusMessage] = []
        for t in s.pending_ms:
            recs, msgs = self.runs.run_now(trigger, job, from_ms(t), epoch)
            records += recs
            messages += msgs
        # deliver-at: run_now delivers at once; the runs are due at their own time
        messages = [BusMessage(m.topic, m.payload, _scheduled_of(m), m.properties, m.key) for m in messages]
        if not self.supersedes.claim_pending(s, records, owned):
            return  # a later edit (the next round reads its lists), or the partition is another's now
        self.runs.publish(messages)
        self.supersedes.pending_published(s, [r.command_id for r in records])
        log.info("published %d run(s) of the new schedule of trigger %s", len(s.pending_ms), s.trigger_id)


def _scheduled_of(m: BusMessage) -> int | None:
    at = m.properties.get("scheduled_at")
    return int(at) if at else m.deliver_at_ms


__all__ = [
    "MARGIN",
    "MESSAGE_PREFIX",
    "RELAY_EVERY",
    "Supersede",
    "SupersedeRelay",
    "SupersedeStore",
    "skip_message",
]
