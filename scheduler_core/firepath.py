"""The fire path of an acquired chunk, top to bottom: handed to the fire pool, held or
fired now, published, its outcome recorded.

The path of a held one-shot (a chunk due within `hold_within`, threaded pool), in order:

  acquire-pN thread (`scheduler_core.acquire`)
   1. `PartitionLoop` -> `Admission.tick` -> `PartitionAcquirer.tick`: the due rows of the
      partition selected and CAS'd waiting -> acquired by the owner's epoch.
   2. `PartitionAcquirer.submit` -> `FirePath.hand_over`: each chunk (one business and
      lane) marked in flight (`InFlight.queued`) and handed to the pool
      (`FirePool.try_submit`) with `FirePath.fire_chunk` as its work; one the pool keeps
      refusing is unmarked and released to waiting by the acquirer.
  fire-N thread (the pool)
   3. `FirePath.fire_chunk` decides hold or fire now: a chunk of one-shots, with a hold
      queue, is cut by T (`hold.by_due`); each group the hold accepts is prepared
      (`FirePipeline.prepare`: its fired records written while the epoch holds the
      ownership) and held (`HeldChunks.hold`, delivered by `FirePath.deliver_held`); the
      rest, and every recurring chunk, is fired now (`FirePipeline.fire`: prepare,
      publish, outcome).
  held-chunks thread (`scheduler_core.hold`)
   4. at T (less `hold_read_ahead`) the parts held for one T and owner go to the pool
      (`FirePool.try_submit`) as one piece of work.
  fire-N thread
   5. `FirePath.deliver_held`: the parts merged; what a rollback fence raised meanwhile
      covers is recorded skipped and not published (`fenced_runs`); the rest waits for
      T, then `FirePipeline.deliver`: publication (the bus) and the outcome CAS (the store).

Every step of 3 and 5 runs through `FirePath._step`: nothing for an ownership that was
revoked, an error counted and logged, never raised (the rows stay acquired by the epoch,
reclaimed after their deadline with the same command ids), and the chunk out of flight
once done, unless the step prepared it for a later one. Before publishing, a registry
member's path asks `InFlight.may_publish` (its partition not revoked, its lease alive). A
reclaimed chunk enters at 2 (`Reclaimer` -> `PartitionAcquirer.submit`).

The path calls nothing of the scheduler that owns it (`scheduler_core.scheduler`): what
it needs (the store, the bus, the clock, the settings, the metrics, the pool, the hold
queue, the in-flight book and the figures) is given to it.

Words: an ownership is the right to fire a set of triggers: the single leader's (None)
or one partition's under the shard registry (`ports.partition_fence`). The store keeps
the epoch that holds each ownership (its ownership epoch), and every write of the path
(the fired records, the release, the outcome CAS) holds only while the chunk's epoch is
still it, so a deposed owner's writes are refused. "Fence" means only the rollback
fence of a business (`scheduler_core.fence`); the store port still spells the ownership
and its epoch `fence` and `fence_epoch` (`Transition`, `claim_epoch`, `put_fired_fenced`,
the `dus_fence` table), and the log field is `fence`.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from scheduler_core.fence import Fence
from scheduler_core.fenced_runs import covered, skip_fenced
from scheduler_core.fire import FireOutcome, FirePipeline, Prepared
from scheduler_core.firepool import FirePool
from scheduler_core.hold import HeldChunks, by_due
from scheduler_core.logfields import log_fields
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch, Job, JobCode, Lane, Trigger, TriggerId, TriggerKind
from scheduler_core.ports import Clock, FenceStore, MessageBus, TriggerStore
from scheduler_core.settings import SchedulerSettings

log = logging.getLogger(__name__)


@dataclass
class CoreStats:
    """A scheduler's figures since it started leading (or joined the registry)."""

    ticks: int = 0
    acquired: int = 0
    fired: int = 0
    commands: int = 0
    messages: int = 0
    completed: int = 0
    misfired: int = 0
    skipped: int = 0
    released: int = 0
    reclaimed: int = 0
    lost: int = 0
    fire_errors: int = 0
    last_error: str = ""
    # not a field: the figures stay a plain dataclass (dataclasses.asdict copies them)
    _lock: ClassVar[threading.Lock] = threading.Lock()

    def add(self, out: FireOutcome) -> None:
        with self._lock:
            self.fired += len(out.fired)
            self.commands += out.commands
            self.messages += out.messages
            self.completed += len(out.completed)
            self.misfired += len(out.misfired)
            self.skipped += len(out.skipped)
            self.released += len(out.released)
            self.lost += len(out.lost)

    def add_tick(self, acquired: int, released: int) -> None:
        with self._lock:
            self.ticks += 1
            self.acquired += acquired
            # acquired but refused by the fire pool, and released to waiting: they come back
            # on a later tick, so `acquired` exceeds `fired` by exactly these
            self.released += released

    def add_reclaimed(self, n: int) -> None:
        with self._lock:
            self.reclaimed += n

    def add_skipped(self, n: int) -> None:
        with self._lock:
            self.skipped += n

    def add_error(self, exc: BaseException) -> None:
        with self._lock:
            self.fire_errors += 1
            self.last_error = f"{type(exc).__name__}: {exc}"


class InFlight:
    """The triggers this scheduler has queued or firing, per ownership (the leader's: None,
    or a partition's), and the ownerships it lost.

    A queued or firing trigger is live work: never reclaimable (the reclaimer asks). A
    partition handed over on purpose is released only once its own chunks are done
    (`wait_done`); one whose ownership was lost (`revoke`) has its queued chunks dropped,
    not fired: the new owner reclaims those rows after their deadline, same command ids."""

    def __init__(self, alive: Callable[[], bool] | None = None) -> None:
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._ids: set[TriggerId] = set()
        self._pending: Counter[str | None] = Counter()
        self._revoked: set[tuple[str | None, Epoch]] = set()
        # under the registry: the member's lease is known alive (asked before publishing)
        self._alive = alive if alive is not None else _always

    def queued(self, chunk: Sequence[Trigger], ownership: str | None) -> None:
        with self._lock:
            self._ids.update(_ids(chunk))
            self._pending[ownership] += len(chunk)

    def refused(self, chunk: Sequence[Trigger], ownership: str | None) -> None:
        with self._lock:
            self._ids.difference_update(_ids(chunk))
            self._finished(ownership, len(chunk))

    def started(self, ids: Sequence[TriggerId], ownership: str | None, epoch: Epoch) -> bool:
        """Mark `ids` firing; False when the ownership was revoked (drop them)."""
        with self._lock:
            self._ids.update(ids)
            return (ownership, epoch) not in self._revoked

    def done(self, ids: Sequence[TriggerId], ownership: str | None, n: int) -> None:
        with self._lock:
            self._ids.difference_update(ids)
            self._finished(ownership, n)

    def _finished(self, ownership: str | None, n: int) -> None:
        self._pending[ownership] = max(0, self._pending[ownership] - n)
        self._idle.notify_all()

    def contains(self, trigger_id: TriggerId) -> bool:
        with self._lock:
            return trigger_id in self._ids

    def revoke(self, ownership: str | None, epoch: Epoch) -> None:
        with self._lock:
            self._revoked.add((ownership, epoch))

    def restore(self, ownership: str | None, epoch: Epoch) -> None:
        with self._lock:
            self._revoked.discard((ownership, epoch))

    def wait_done(self, ownership: str | None, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._pending[ownership] <= 0, timeout)

    def may_publish(self, ownership: str, epoch: Epoch) -> bool:
        """The owner's last look at its partition before publishing (registry members)."""
        with self._lock:
            if (ownership, epoch) in self._revoked:
                return False
        return self._alive()


class FirePath:
    """Carries a chunk from its acquisition to its publication and outcome (see the module)."""

    def __init__(
        self,
        *,
        store: TriggerStore,
        bus: MessageBus,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: SchedulerMetrics,
        pool: FirePool,
        held: HeldChunks | None,
        in_flight: InFlight,
        stats: CoreStats,
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.pool = pool
        # chunks due within hold_within, fired at T; None: every chunk fires now
        self.held = held
        self.in_flight = in_flight
        self.stats = stats
        self.pipeline = FirePipeline(store, bus, clock, settings, metrics)
        # the rollback fences, read for a held chunk at its T (the SQL store keeps them)
        self.fences: FenceStore | None = store if isinstance(store, FenceStore) else None

    # -- 2. from acquisition to the pool (the acquire loop's thread) -------------------

    def hand_over(
        self,
        chunk: Sequence[Trigger],
        *,
        biz_code: str,
        lane: Lane,
        epoch: Epoch,
        ownership: str | None,
        jobs: Mapping[JobCode, Job],
    ) -> bool:
        """Queue an acquired chunk (one business and lane) on the fire pool, retrying while
        it is full; False: refused, the caller releases it to waiting. A queued chunk is
        in flight from before it is offered: it must never look reclaimable."""
        s = self.settings
        self.in_flight.queued(chunk, ownership)
        work = partial(self.fire_chunk, chunk, epoch, ownership, jobs)
        for attempt in range(s.submit_retries + 1):
            if self.pool.try_submit(biz_code, len(chunk), work, lane):
                return True
            if attempt < s.submit_retries:
                self.clock.sleep(s.submit_retry_wait.total_seconds())
        self.in_flight.refused(chunk, ownership)
        return False

    # -- 3. hold it or fire it now (a pool thread) -------------------------------------

    def fire_chunk(
        self,
        chunk: Sequence[Trigger],
        epoch: Epoch,
        ownership: str | None = None,
        jobs: Mapping[JobCode, Job] | None = None,
    ) -> None:
        """Fire a chunk acquired by `epoch`, or hold the part of it due shortly.

        Only one-shots are held: a one-shot due shortly is prepared now (its fired records
        written), kept (still queued and in flight for the reclaimer and a handover) and
        delivered at T; a later tick's chunks never wait behind it. Recurring triggers are
        not held: held, a trigger firing every second would publish one occurrence per T
        instead of its lookahead's ahead of time, which rollback fences and a scheduler's
        downtime rely on (the broker holds them). A held chunk is cut by T (none of it is
        published ahead of its T, to the broker's tick) and delivered with what this owner
        holds for the same T (one publication and one CAS at T for all)."""
        if self.held is not None and chunk and all(t.kind is TriggerKind.ONCE for t in chunk):
            chunk = self._hold(self.held, chunk, epoch, ownership, jobs)
            if not chunk:
                return
        self._fire_now(chunk, epoch, ownership, jobs)

    def _hold(
        self,
        held: HeldChunks,
        chunk: Sequence[Trigger],
        epoch: Epoch,
        ownership: str | None,
        jobs: Mapping[JobCode, Job] | None,
    ) -> list[Trigger]:
        """Hold what the hold takes of a chunk of one-shots; returns the rest (fired now)."""
        rest: list[Trigger] = []
        biz_code = chunk[0].biz_code
        for due_ms, group in by_due(chunk, int(self.settings.hold_spread.total_seconds() * 1000)):
            if not held.accepts(due_ms, len(group)):
                rest += group
                continue
            prepared = self._step(
                group, epoch, ownership, partial(self.pipeline.prepare, group, epoch, ownership, jobs)
            )
            if prepared is None:
                continue
            deliver = partial(self.deliver_held, epoch, ownership)
            if not held.hold(due_ms, (biz_code, epoch, ownership), biz_code, len(group), prepared, deliver):
                # the hold of its broker tick filled meanwhile: delivered now, deliver-at = T
                self._step(group, epoch, ownership, partial(self.pipeline.deliver, prepared, epoch, ownership))
        return rest

    def _fire_now(
        self,
        chunk: Sequence[Trigger],
        epoch: Epoch,
        ownership: str | None = None,
        jobs: Mapping[JobCode, Job] | None = None,
    ) -> None:
        self._step(
            chunk,
            epoch,
            ownership,
            lambda: self.pipeline.fire(
                chunk, epoch, ownership=ownership, may_publish=self._check(ownership, epoch), jobs=jobs
            ),
        )

    # -- 5. a held chunk at its T (a pool thread) --------------------------------------

    def deliver_held(self, epoch: Epoch, ownership: str | None, due_ms: int, parts: list[Prepared]) -> None:
        """The parts held for T `due_ms` under one owner, delivered as one."""
        prepared = Prepared.merged(parts)
        self._step(prepared.triggers, epoch, ownership, partial(self._held_at_due, prepared, epoch, ownership, due_ms))

    def _held_at_due(self, prepared: Prepared, epoch: Epoch, ownership: str | None, due_ms: int) -> FireOutcome:
        """Held chunks at their T: what a rollback fence raised while they were held covers
        is not published, only recorded skipped (`scheduler_core.fenced_runs`); the rest is
        published, with the records written at admission."""
        chunk = prepared.triggers
        hit: list[Trigger] = []
        business_fence: Fence | None = None
        if self.fences is not None:
            try:
                hit, _rest, business_fence = covered(self.fences, chunk)
            except Exception:  # the store briefly away: fire as before (the executors follow the fence)
                log.exception(
                    "reading the rollback fence of a held chunk failed; firing it", extra=log_fields(epoch=epoch)
                )
        # handed over up to hold_read_ahead early: nothing is published before T (a chunk
        # handed over earlier, by a stop, goes out now with its deliver-at, as unheld ones)
        ahead_s = (due_ms - self.clock.now_ms()) / 1000
        if ahead_s <= self.settings.hold_read_ahead.total_seconds():
            self.clock.sleep(ahead_s)
        if not hit or business_fence is None:
            return self.pipeline.deliver(prepared, epoch, ownership, self._check(ownership, epoch))
        skipped = {t.id for t in hit}
        records = [r for r in prepared.records if r.trigger_id in skipped]
        done = skip_fenced(self.store, business_fence, hit, records, epoch, ownership, self.clock.now())
        self.stats.add_skipped(len(done))
        rest = [t for t in chunk if t.id not in skipped]
        # a chunk the fence cut (rare: the fence's `from` inside the chunk's few ms): the rest
        # fired afresh, as unheld (its records are there already: the same ids, no-ops;
        # its messages are rebuilt, a packed one may carry runs of both parts)
        jobs = {p.job.job_code: p.job for p in prepared.plans if p.job is not None}
        return (
            self.pipeline.fire(rest, epoch, ownership=ownership, may_publish=self._check(ownership, epoch), jobs=jobs)
            if rest
            else FireOutcome()
        )

    # -- every step ----------------------------------------------------------------------

    def _check(self, ownership: str | None, epoch: Epoch) -> Callable[[], bool] | None:
        """The owner's last look at its partition before publishing (registry members)."""
        return None if ownership is None else partial(self.in_flight.may_publish, ownership, epoch)

    def _step(
        self, chunk: Sequence[Trigger], epoch: Epoch, ownership: str | None, step: Callable[[], FireOutcome | Prepared]
    ) -> Prepared | None:
        """One step of a chunk's fire on a pool thread: nothing for an owner whose ownership
        was revoked, an error counted and logged, never raised (the rows stay acquired by
        this epoch: reclaimed after their deadline, same command ids). The chunk is done
        (out of flight) after the step, unless the step prepared it for a later one."""
        ids = _ids(chunk)
        result: FireOutcome | Prepared | None = None
        try:
            if not self.in_flight.started(ids, ownership, epoch):
                log.warning(
                    "ownership %s of epoch %s lost; %d queued trigger(s) left to the new owner",
                    ownership,
                    epoch,
                    len(ids),
                    extra=log_fields(epoch=epoch, fence=ownership),
                )
                return None
            result = step()
            if isinstance(result, FireOutcome):
                self.stats.add(result)
            return result if isinstance(result, Prepared) else None
        except Exception as exc:  # a chunk must never kill the pool thread
            self.metrics.errors.labels(component="fire").inc()
            self.stats.add_error(exc)
            log.exception(
                "fire of %d trigger(s) failed; they will be reclaimed after their deadline",
                len(ids),
                extra=log_fields(epoch=epoch, fence=ownership),
            )
            return None
        finally:
            if not isinstance(result, Prepared):
                self.in_flight.done(ids, ownership, len(chunk))


def _ids(chunk: Sequence[Trigger]) -> list[TriggerId]:
    return [t.id for t in chunk if t.id is not None]


def _always() -> bool:
    return True
