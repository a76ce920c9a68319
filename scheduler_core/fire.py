"""The fire pipeline: for a chunk of acquired triggers, compute the next occurrence,
expand sharding items page by page, persist fired records, publish each command with
deliver-at = T, then record the outcome with a CAS that holds only while the chunk's epoch
still holds its ownership (the leader's, or the chunk's partition's: the store keeps the
epoch that holds each, its ownership epoch).

Order of writes (two transactions per chunk), and what a crash at each point leaves:
  1. the fired records inserted (INSERT-if-absent by command_id, state `pending`) on the
     condition that the epoch still holds the ownership, in one transaction; a deposed
     owner writes and publishes nothing. Afterwards the trigger is still `acquired` by
     this epoch: reclaimed after its deadline and fired again, same command ids;
  2. commands published -> same, the re-fire publishes duplicates with the same ids;
  3. one transaction: the trigger CAS (next occurrence or completed, last_fired_at = the
     occurrence), the ownership epoch checked inside each UPDATE. The records are not touched:
     this outcome, written only after the broker's ack, is what says they were published
     (`FiredState`; `SqlTriggerStore.outcome_recorded`), one row write per trigger less.
A crash therefore leaves a re-firable trigger or a fired record, never a silent loss.

`fire` is `prepare` (step 1) then `deliver` (steps 2 and 3). A held chunk
(`scheduler_core.hold`) is prepared when admitted and delivered at its T: between the two
it is in the state a crash after step 1 leaves, and is reclaimed as such.
"""

from __future__ import annotations

import logging
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from scheduler_core.codec import (
    EXECUTOR_SUBSCRIPTION,
    command_topic,
    encode_run,
    pack_encoded,
    run_header,
    run_header_json,
)
from scheduler_core.errors import BusError, PublishError
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import (
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
    command_id,
    field_names,
    slot_builder,
)
from scheduler_core.occurrences import count_between, next_after
from scheduler_core.ports import BusMessage, Clock, MessageBus, Transition, TriggerStore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
SLOW_PUBLISH_S = 2.0


@dataclass
class FireOutcome:
    fired: list[TriggerId] = field(default_factory=list)  # occurrences published
    completed: list[TriggerId] = field(default_factory=list)
    rescheduled: list[TriggerId] = field(default_factory=list)
    misfired: list[TriggerId] = field(default_factory=list)
    skipped: list[TriggerId] = field(default_factory=list)
    released: list[TriggerId] = field(default_factory=list)  # publication failed: back to waiting
    lost: list[TriggerId] = field(default_factory=list)  # final CAS lost (ownership lost, or reclaimed)
    commands: int = 0
    messages: int = 0


@dataclass(slots=True, kw_only=True)
class _Plan:
    trigger: Trigger
    job: Job | None
    occurrence: datetime  # T: the scheduled time the command ids are built from
    deliver_at: datetime  # T, or now when a misfire fires once now
    next_at: datetime | None
    misfired: bool
    skip: bool  # misfire policy SKIP: record, publish nothing
    note: str = ""


@dataclass(slots=True, kw_only=True)
class Prepared:
    """A chunk whose fired records are written (owner-checked) and whose messages are built, not
    yet published: what a held chunk keeps until its T (`FirePipeline.deliver`)."""

    plans: list[_Plan]
    records: list[FiredRecord]
    messages: list[BusMessage]

    @property
    def triggers(self) -> list[Trigger]:
        return [p.trigger for p in self.plans]

    @staticmethod
    def merged(parts: Sequence[Prepared]) -> Prepared:
        return Prepared(
            plans=[p for part in parts for p in part.plans],
            records=[r for part in parts for r in part.records],
            messages=[m for part in parts for m in part.messages],
        )


# the one page of a run of one implicit item (most triggers): no generator per run
_ONE_ITEM: tuple[tuple[tuple[int, str], ...]] = (((0, ""),),)


class FirePipeline:
    def __init__(
        self,
        store: TriggerStore,
        bus: MessageBus,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: SchedulerMetrics,
    ) -> None:
        self.store = store
        self.bus = bus
        self.clock = clock
        self.settings = settings
        self.metrics = metrics

    def fire(
        self,
        triggers: Sequence[Trigger],
        epoch: Epoch,
        ownership: str | None = None,
        may_publish: Callable[[], bool] | None = None,
        jobs: Mapping[JobCode, Job] | None = None,
    ) -> FireOutcome:
        """Fire a chunk acquired by `epoch`; every write holds only while `epoch` still
        holds `ownership` (the leader's when None, the chunk's partition's under the
        registry). `may_publish`, asked between the fired records and the publication, is
        the owner's last look at its lease: the broker checks no epoch, so an owner that knows
        it lost the partition (a pause past its lease) publishes nothing. `jobs`: the
        chunk's job definitions as read at admission (one read per tick, not per chunk);
        read here when not given."""
        prepared = self.prepare(triggers, epoch, ownership, jobs)
        if isinstance(prepared, FireOutcome):
            return prepared
        return self.deliver(prepared, epoch, ownership, may_publish)

    def prepare(
        self,
        triggers: Sequence[Trigger],
        epoch: Epoch,
        ownership: str | None = None,
        jobs: Mapping[JobCode, Job] | None = None,
    ) -> Prepared | FireOutcome:
        """Step 1: the chunk's fired records written while `epoch` holds `ownership`, and
        its messages built; nothing published. A FireOutcome (all lost) when the epoch
        no longer holds it. A
        held chunk is prepared at admission and only delivered at T (`scheduler_core.hold`):
        its records are in the store from admission on, as a chunk published ahead."""
        out = FireOutcome()
        if not triggers:
            return out
        now = self.clock.now()
        if jobs is None:
            jobs = self.store.get_jobs([t.job_code for t in triggers])
        plans = [self._plan(t, jobs.get(t.job_code), now) for t in triggers]

        records: list[FiredRecord] = []
        messages: list[BusMessage] = []
        small: list[_Envelope] = []
        headers: dict[str, str] = {}  # per job: one header for every run of the chunk
        for plan in plans:
            recs, envs = self._expand(plan, epoch, now, headers)
            records += recs
            for e in envs:
                if e.packable:
                    small.append(e)
                else:
                    messages.append(e.message())
        messages += _pack(small, int(self.settings.pack_window.total_seconds() * 1000))
        # 1. fired records first, the ownership epoch read in the same transaction: from
        # here on the occurrence can never be lost silently, and a deposed owner (a newer
        # epoch claimed the ownership) writes and publishes nothing; its rows stay acquired
        # by the dead epoch and the new owner reclaims them (same command ids)
        if not self.store.put_fired_fenced(records, epoch, ownership):
            out.lost = [p.trigger.id for p in plans if p.trigger.id is not None]
            self.metrics.cas_losses.labels(stage="fenced").inc(len(out.lost))
            log.warning(
                "epoch %s no longer holds its ownership; dropping a chunk of %d trigger(s) for the new owner",
                epoch,
                len(out.lost),
            )
            return out
        return Prepared(plans=plans, records=records, messages=messages)

    def deliver(
        self,
        prepared: Prepared,
        epoch: Epoch,
        ownership: str | None = None,
        may_publish: Callable[[], bool] | None = None,
    ) -> FireOutcome:
        """Steps 2 and 3 of a prepared chunk: publish, then the outcome CAS."""
        out = FireOutcome()
        plans, records, messages = prepared.plans, prepared.records, prepared.messages
        if not plans:
            return out
        if may_publish is not None and not may_publish():
            out.lost = [p.trigger.id for p in plans if p.trigger.id is not None]
            self.metrics.cas_losses.labels(stage="fenced").inc(len(out.lost))
            log.warning(
                "ownership of epoch %s lost before publication; %d trigger(s) left to the new owner",
                epoch,
                len(out.lost),
            )
            return out
        # 2. publish with deliver-at = T
        published_ok = True
        if messages:
            started = self.clock.monotonic()
            try:
                self._ensure_subscriptions(messages)
                self.bus.publish(messages)
                took = self.clock.monotonic() - started
                if took > SLOW_PUBLISH_S:
                    # a broker outage shorter than the client's send timeout only shows as
                    # blocked sends: say so, and count it, so it is not silent
                    self.metrics.errors.labels(component="bus").inc()
                    log.warning(
                        "publication slow: %d message(s) took %.1f s (broker unreachable or overloaded?)",
                        len(messages),
                        took,
                    )
            except PublishError as exc:
                published_ok = False
                self.metrics.publish_failures.inc(exc.failed)
                log.warning("publication failed for %d of %d messages: %s", exc.failed, len(messages), exc)
            except BusError as exc:  # the subscription could not be made: nothing was sent
                published_ok = False
                self.metrics.publish_failures.inc(len(messages))
                log.warning("publication of %d message(s) not attempted: %s", len(messages), exc)
        if not published_ok:
            # Release to waiting with the same next_fire_at: the next tick fires the same
            # occurrence again with the same command ids.
            ids = [p.trigger.id for p in plans if p.trigger.id is not None]
            out.released = self.store.cas_ids(_settle(ids, TriggerState.WAITING, epoch, ownership, clear_epoch=True))
            return out
        out.commands = sum(r.item_count for r in records if r.state is FiredState.PENDING)
        out.messages = len(messages)
        # one counter update per business, not per message
        for biz_code, n in Counter(m.properties.get("biz_code", "") for m in messages).items():
            self.metrics.published.labels(biz_code=biz_code).inc(n)
        # 3. the outcome, checked against the ownership epoch: recorded only now, after the broker's ack, it
        # is what says the chunk's records were published (no stamp on them: FiredState)
        self._record_outcome(plans, epoch, self.clock.now(), out, ownership)
        return out

    def run_now(
        self, trigger: Trigger, job: Job, occurrence: datetime, epoch: Epoch, note: str = ""
    ) -> tuple[list[FiredRecord], list[BusMessage]]:
        """One run of `trigger` at `occurrence` outside its schedule (a follow-up fire): its
        fired records and messages, delivered now; the trigger is not moved."""
        now = self.clock.now()
        plan = _Plan(
            trigger=trigger,
            job=job,
            occurrence=occurrence,
            deliver_at=now,
            next_at=None,
            misfired=False,
            skip=False,
            note=note,
        )
        records, envelopes = self._expand(plan, epoch, now)
        return records, [e.message() for e in envelopes]

    def publish(self, messages: Sequence[BusMessage]) -> None:
        """Publish after making sure the executors' subscription exists (raises BusError /
        PublishError: nothing is recorded as published)."""
        if messages:
            self._ensure_subscriptions(messages)
            self.bus.publish(messages)

    def _ensure_subscriptions(self, messages: Sequence[BusMessage]) -> None:
        """The executors' subscription exists on every topic before anything is sent to
        it: a command published to a topic nobody subscribed to yet (a business whose
        executors start after the scheduler) is dropped by the broker, a silent loss."""
        for topic in dict.fromkeys(m.topic for m in messages):
            self.bus.ensure_subscription(topic, EXECUTOR_SUBSCRIPTION)  # a lookup once it exists

    # -- planning ---------------------------------------------------------------------

    def _plan(self, trigger: Trigger, job: Job | None, now: datetime) -> _Plan:
        t = trigger.next_fire_at
        late = now - t
        misfired = late > self.settings.misfire_threshold
        if not misfired:
            return _Plan(
                trigger=trigger,
                job=job,
                occurrence=t,
                deliver_at=t,
                next_at=self._next(trigger, t),
                misfired=False,
                skip=False,
            )
        # A misfire follows the trigger's policy and is recorded, never silently dropped.
        nxt = self._next(trigger, now)
        missed = count_between(trigger, t, now) if trigger.kind is not TriggerKind.ONCE else 0
        if trigger.misfire_policy is MisfirePolicy.SKIP:
            note = f"misfire: skipped (late {late}); {missed} later occurrence(s) also passed"
            return _Plan(
                trigger=trigger, job=job, occurrence=t, deliver_at=now, next_at=nxt, misfired=True, skip=True, note=note
            )
        note = f"misfire: fired once now (late {late}); {missed} later occurrence(s) folded into it"
        return _Plan(
            trigger=trigger, job=job, occurrence=t, deliver_at=now, next_at=nxt, misfired=True, skip=False, note=note
        )

    def _next(self, trigger: Trigger, after: datetime) -> datetime | None:
        try:
            return next_after(trigger, after)
        except ValueError as exc:
            # an unparsable schedule cannot fire again; completing it is recorded in the log
            log.error("trigger %s: schedule cannot be evaluated (%s); completing it", trigger.id, exc)
            return None

    def _expand(
        self, plan: _Plan, epoch: Epoch, now: datetime, headers: dict[str, str] | None = None
    ) -> tuple[list[FiredRecord], list[_Envelope]]:
        trig, job = plan.trigger, plan.job
        assert trig.id is not None
        # T in milliseconds once per run: every command id of the run is built from it
        occ_ms = to_ms(plan.occurrence)
        if job is None:
            # The job was deleted under its trigger: record the fire as failed, publish nothing.
            rec = _record(plan, trig.id, occ_ms, epoch, now, state=FiredState.FAILED, note="job definition not found")
            return [rec], []
        if plan.skip:
            return [_record(plan, trig.id, occ_ms, epoch, now, state=FiredState.SKIPPED)], []
        records: list[FiredRecord] = []
        envelopes: list[_Envelope] = []
        deliver_ms = occ_ms if plan.deliver_at is plan.occurrence else to_ms(plan.deliver_at)
        props = {
            "job_code": job.job_code,
            "biz_code": job.biz_code,
            "scheduled_at": str(occ_ms),
            "trigger_id": str(trig.id),
        }
        # the trigger's lane, as admission budgeted it (a lane edit takes the next admission)
        topic = command_topic(job.biz_code, trig.lane)
        # the run's header: the job's fields, built and encoded once per job and chunk
        header = headers.get(job.job_code) if headers is not None else None
        if header is None:
            header = run_header_json(
                run_header(
                    job_code=job.job_code,
                    biz_code=job.biz_code,
                    handler=job.handler,
                    params=job.params,
                    item_total=job.shard_total,
                    timeout=job.timeout,
                    max_retry=job.max_retry,
                    epoch=epoch,
                    block=job.block,
                )
            )
            if headers is not None:
                headers[job.job_code] = header
        k = job.envelope_size
        paged = k > 1 and self.settings.page_records
        for page in _ONE_ITEM if job.shard_total == 1 and not job.explicit_items else self._pages(job):
            # per item only what must be per item: ids (and records when not paged); a
            # 100K fan-out never builds a command object per item
            if not paged:
                records += [_record(plan, trig.id, occ_ms, epoch, now, idx) for idx, _param in page]
            for i in range(0, len(page), k):
                group = page[i : i + k]
                first = group[0][0]
                head_id = command_id(trig.id, occ_ms, first)
                if paged:
                    records.append(_record(plan, trig.id, occ_ms, epoch, now, first, len(group)))
                envelopes.append(
                    _Envelope(
                        topic,
                        encode_run(header, trig.id, occ_ms, group, page_record=paged, shadow=job.shadow),
                        deliver_ms,
                        props,
                        head_id,
                        len(group),
                        k,
                        job.job_code,
                    )
                )
        if len(envelopes) == 1 and envelopes[0].items < k:
            # a run smaller than an envelope may share a message with other runs of its
            # job due together (see _pack)
            envelopes[0].packable = True
        return records, envelopes

    def _pages(self, job: Job) -> Iterator[list[tuple[int, str]]]:
        """Sharding items page by page: the job's explicit items from the store, or
        indexes 0..shard_total-1. Pages keep a 100K-item fan-out out of memory at once."""
        size = self.settings.sharding_page
        if not job.explicit_items:
            for start in range(0, job.shard_total, size):
                yield [(i, "") for i in range(start, min(job.shard_total, start + size))]
            return
        start = 0
        while True:
            items = self.store.sharding_page(JobCode(job.job_code), start, size)
            if not items:
                return
            yield [(it.index, it.param) for it in items]
            if len(items) < size:
                return
            start = items[-1].index + 1

    # -- outcome ----------------------------------------------------------------------

    def _record_outcome(
        self,
        plans: list[_Plan],
        epoch: Epoch,
        now: datetime,
        out: FireOutcome,
        ownership: str | None = None,
    ) -> None:
        reschedule = {p.trigger.id: p.next_at for p in plans if p.next_at is not None and p.trigger.id is not None}
        complete = [p.trigger.id for p in plans if p.next_at is None and p.trigger.id is not None]
        fired_at = {p.trigger.id: p.occurrence for p in plans if p.trigger.id is not None}
        # each transition under its outcome's name: the store answers each one's winners
        # in the order given, paired back here by name, not by position
        changes: dict[str, Transition] = {}
        if reschedule:
            ids = list(reschedule)
            changes["rescheduled"] = _settle(
                ids,
                TriggerState.WAITING,
                epoch,
                ownership,
                clear_epoch=True,
                next_fire_at=reschedule,
                last_fired_at={i: fired_at[i] for i in ids},
            )
        if complete:
            # a completing trigger's next_fire_at is the occurrence just fired: stamped
            # from the row itself, in one statement for the whole chunk
            changes["completed"] = _settle(complete, TriggerState.COMPLETED, epoch, ownership, fired_at_next=True)
        answered = self.store.finish_fire(list(changes.values()))
        winners = dict(zip(changes, answered, strict=True))
        out.rescheduled = winners.get("rescheduled", [])
        out.completed = winners.get("completed", [])
        won: set[TriggerId] = set(out.rescheduled) | set(out.completed)
        for p in plans:
            tid = p.trigger.id
            if tid is None:
                continue
            if tid not in won:
                out.lost.append(tid)
                continue
            if p.skip:
                out.skipped.append(tid)
            else:
                out.fired.append(tid)
            if p.misfired:
                out.misfired.append(tid)
        if out.lost:
            # Ownership lost or rows reclaimed: the newer owner fires the same occurrence with the same ids.
            self.metrics.cas_losses.labels(stage="outcome").inc(len(out.lost))
            log.warning(
                "lost the outcome CAS for %d trigger(s) (epoch %s lost its ownership, or they were reclaimed)",
                len(out.lost),
                epoch,
            )
        for p in plans:
            if p.misfired:
                self.metrics.misfires.labels(policy=p.trigger.misfire_policy.value).inc()
        lag = (now - min(p.occurrence for p in plans)).total_seconds()
        self.metrics.lookahead_lag.set(lag)


def _settle(
    ids: Sequence[TriggerId],
    to_state: TriggerState,
    epoch: Epoch,
    ownership: str | None,
    *,
    clear_epoch: bool = False,
    next_fire_at: Mapping[TriggerId, datetime] | None = None,
    last_fired_at: Mapping[TriggerId, datetime] | None = None,
    fired_at_next: bool = False,
) -> Transition:
    """A chunk's triggers out of ACQUIRED, back to waiting or completed: only the rows
    `epoch` still holds change, and only while `epoch` still holds `ownership`, so a
    deposed or reclaimed owner's release or outcome is refused. (`Transition`'s
    `fence`/`fence_epoch` are the store port's names for the ownership and its epoch.)"""
    return Transition(
        ids=ids,
        from_state=TriggerState.ACQUIRED,
        to_state=to_state,
        expected_epoch=epoch,
        clear_epoch=clear_epoch,
        fence_epoch=epoch,
        fence=ownership,
        next_fire_at=next_fire_at,
        last_fired_at=last_fired_at,
        fired_at_next=fired_at_next,
    )


def _record(
    plan: _Plan,
    trigger_id: TriggerId,
    occ_ms: int,
    epoch: Epoch,
    now: datetime,
    item_index: int = 0,
    item_count: int = 1,
    *,
    state: FiredState = FiredState.PENDING,
    note: str | None = None,
) -> FiredRecord:
    """One fired record of `plan`'s run (an item, a page of `item_count` items, or the
    run's single failed or skipped record); a final state is its own result, at `now`."""
    trig, job = plan.trigger, plan.job
    # one per item fired: built through the slots (_RECORD_FIELDS order), not FiredRecord(...)
    return _build_record(
        (
            command_id(trigger_id, occ_ms, item_index),
            trigger_id,
            job.job_code if job is not None else trig.job_code,
            job.biz_code if job is not None else trig.biz_code,
            plan.occurrence,  # scheduled_at
            item_index,
            job.shard_total if job is not None else 1,  # item_total
            state,
            epoch,
            now,  # fired_at
            None,  # published_at
            None,  # received_at
            None,  # started_at
            now if state.is_final else None,  # result_at
            0,  # attempt
            plan.note if note is None else note,  # message
            plan.misfired and job is not None,  # misfired: a fire of a deleted job fired nothing
            item_count,
            "",  # item_states
            0,  # succeeded_items
            0,  # failed_items
        )
    )


_RECORD_FIELDS = (
    "command_id",
    "trigger_id",
    "job_code",
    "biz_code",
    "scheduled_at",
    "item_index",
    "item_total",
    "state",
    "epoch",
    "fired_at",
    "published_at",
    "received_at",
    "started_at",
    "result_at",
    "attempt",
    "message",
    "misfired",
    "item_count",
    "item_states",
    "succeeded_items",
    "failed_items",
)
if field_names(FiredRecord) != _RECORD_FIELDS:  # pragma: no cover - a model change not made in _record
    raise RuntimeError(f"fire._record is out of step with FiredRecord's fields {field_names(FiredRecord)}")
_build_record = slot_builder(FiredRecord)


@dataclass
class _Envelope:
    topic: str
    body: bytes  # the envelope's encoded body (codec.encode_run)
    deliver_ms: int
    props: dict[str, str]
    key: str
    items: int
    capacity: int  # the job's envelope_size: items per message
    job_code: str
    packable: bool = False

    def message(self) -> BusMessage:
        return BusMessage(self.topic, self.body, deliver_at_ms=self.deliver_ms, properties=self.props, key=self.key)


def _pack(envelopes: Sequence[_Envelope], window_ms: int = 0) -> list[BusMessage]:
    """Runs of one job due together, each smaller than the job's envelope size, share
    messages of up to that many items: with envelope_size K, a hot minute of 50K
    one-item triggers of a job goes out as about 50K/K messages instead of 50K (the
    client sends a few thousand deliver-at messages a second on this box). Each run keeps
    its own command ids, fired record, T and results; only the message is shared.

    "Together" is within `window_ms` of the group's first T, in T order, and the message
    is delivered at the latest deliver-at of its runs: no run is delivered before its T,
    and none more than the window after it."""
    groups: dict[tuple[str, str], list[_Envelope]] = defaultdict(list)
    for e in envelopes:
        groups[(e.topic, e.job_code)].append(e)
    out: list[BusMessage] = []
    for group in groups.values():
        group.sort(key=lambda e: e.deliver_ms)
        batch: list[_Envelope] = []
        items = 0
        for e in group:
            if batch and (items + e.items > e.capacity or e.deliver_ms - batch[0].deliver_ms > window_ms):
                out.append(_packed_message(batch))
                batch, items = [], 0
            batch.append(e)
            items += e.items
        if batch:
            out.append(_packed_message(batch))
    return out


def _packed_message(batch: Sequence[_Envelope]) -> BusMessage:
    head, last = batch[0], batch[-1]  # sorted by deliver-at: the last is the latest
    props = head.props if len(batch) == 1 else {**head.props, "runs": str(len(batch))}
    return BusMessage(
        head.topic,
        pack_encoded([e.body for e in batch]),
        deliver_at_ms=last.deliver_ms,
        properties=props,
        key=head.key,
    )
