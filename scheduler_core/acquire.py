"""Admission: one acquire loop per partition, each scanning only its own partition.

This module is the whole acquire side: the tick (`PartitionAcquirer`), the lock that
serializes admission across the loops (`Admission`) and the thread that runs one
partition's loop while its owner holds it (`PartitionLoop`).

A tick: window = [misfire floor, now + lookahead]; select `waiting` rows in the window
ordered by next_fire_at (priority breaks ties only), limit = min(batch, free pool
capacity), leaving out businesses whose pool budget is spent; per lane (issue 29) at most
its tick budget, the rest of the tick going to the other lanes' due rows, and none of a
lane whose pool share is spent (`select_within_lanes`); CAS waiting -> acquired with
the epoch and a deadline; hand chunks to the fire pool, retrying; release what the pool
keeps refusing (the hand-over and everything after it: `scheduler_core.firepath`). Nothing is lost: a row is either waiting, or acquired by an epoch that
fires it or lets a newer epoch reclaim it after its deadline.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_core.firepath import CoreStats, FirePath
from scheduler_core.firepool import FirePool, group_by_biz_code
from scheduler_core.logfields import log_fields
from scheduler_core.lookahead import AdaptiveLookahead
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch, Lane, Trigger, TriggerId, TriggerState, slot_replacer
from scheduler_core.ports import Clock, Partition, Transition, TriggerStore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.times import UTC, from_ms, to_ms

log = logging.getLogger(__name__)
BEGINNING = datetime(1970, 1, 1, tzinfo=UTC)
# a winner as the acquire CAS left it: (trigger, state, owner_epoch, acquire_deadline, version)
_as_acquired = slot_replacer(Trigger, "state", "owner_epoch", "acquire_deadline", "version")


@dataclass(frozen=True, slots=True)
class AdmissionWindow:
    start: datetime
    end: datetime


def plan_window(
    now: datetime, last_seen: datetime | None, settings: SchedulerSettings, *, sweep: bool = False
) -> AdmissionWindow:
    """The tick's window. The floor is the older of the partition's last seen
    next_fire_at and now - misfire threshold; before anything was seen (start-up) it
    reaches back to the startup floor. A sweep tick reaches back to the beginning, so a
    row stranded below every floor is still found and goes through its misfire policy."""
    threshold_floor = now - settings.misfire_threshold
    if sweep:
        floor = BEGINNING
    elif last_seen is None:
        floor = now - settings.startup_floor
    else:
        floor = min(last_seen, threshold_floor)
    return AdmissionWindow(floor, now + settings.lookahead)


@dataclass(frozen=True, slots=True)
class TickResult:
    selected: int = 0
    acquired: int = 0
    lost: int = 0
    submitted: int = 0
    released: int = 0
    wait: timedelta = timedelta(0)


def chunked(triggers: Sequence[Trigger], size: int) -> list[Sequence[Trigger]]:
    return [triggers[i : i + size] for i in range(0, len(triggers), size)]


class PartitionAcquirer:
    def __init__(
        self,
        *,
        partition: Partition,
        store: TriggerStore,
        pool: FirePool,
        path: FirePath,
        clock: Clock,
        settings: SchedulerSettings,
        metrics: SchedulerMetrics,
        epoch: Epoch,
        rng: random.Random | None = None,
        ownership: str | None = None,
        lookahead: AdaptiveLookahead | None = None,
    ) -> None:
        self.partition = partition
        # each lane's own window (settings.adaptive_lookahead); None: `settings.lookahead` for all
        self.lookahead = lookahead
        self.store = store
        # read for its free capacity and spent budgets; chunks go to it through `path`
        self.pool = pool
        # where each acquired chunk is handed over, to be fired or held
        self.path = path
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.epoch = epoch
        # the ownership the epoch is checked against: the leader's (None), or this
        # partition's own when the shard registry gives partitions owners of their own
        self.ownership = ownership
        self.last_seen: datetime | None = None
        self.ticks = 0
        self.rng = rng or random.Random()

    def tick(self) -> TickResult:
        started = self.clock.monotonic()
        try:
            return self._tick()
        finally:
            self.metrics.acquire_cycle.labels(partition=self.partition.name).observe(
                max(0.0, self.clock.monotonic() - started)
            )

    def _tick(self) -> TickResult:
        s = self.settings
        now = self.clock.now()
        sweep = self.ticks > 0 and self.ticks % s.stale_sweep_every == 0
        self.ticks += 1
        window = plan_window(now, self.last_seen, s, sweep=sweep)
        limit = min(s.batch_size, self.pool.free())
        if limit <= 0:
            return TickResult(wait=s.busy_wait)
        ends = None
        if self.lookahead is not None:
            ends = self.lookahead.windows(now)
            window = AdmissionWindow(window.start, max(ends.values()))
        due, more = self.select_within_lanes(window, limit, ends)
        admission_lag = self.metrics.admission_lag.labels(partition=self.partition.name)
        if not due:
            if more:  # every lane with due rows is at its pool share: look again soon
                return TickResult(wait=s.busy_wait)
            admission_lag.set(float("nan"))  # idle: no lag to speak of
            return TickResult(wait=s.idle_wait + timedelta(seconds=self.rng.uniform(0, s.jitter.total_seconds())))
        newest = max(t.next_fire_at for t in due)
        # a full batch leaves more due behind it: admission has reached `newest`, not the window's end
        admission_lag.set(max(0.0, (window.end - newest).total_seconds()) if more else 0.0)
        self.last_seen = newest if self.last_seen is None else max(self.last_seen, newest)
        deadline = from_ms(to_ms(now + s.acquire_deadline))  # as stored: whole milliseconds
        won_ids = set(
            self.store.cas_ids(
                Transition(
                    ids=[t.id for t in due if t.id is not None],
                    from_state=TriggerState.WAITING,
                    to_state=TriggerState.ACQUIRED,
                    epoch=self.epoch,
                    deadline=deadline,
                    fence_epoch=self.epoch,
                    fence=self.ownership,
                    # the rows just read are fired as read: one rewritten since (a migration,
                    # a cutover) loses here and is read again on the next tick
                    expected_version={t.id: t.version for t in due if t.id is not None},
                )
            )
        )
        # the winners as the UPDATE left them, without reading them back
        won = [
            _as_acquired(t, TriggerState.ACQUIRED, self.epoch, deadline, t.version + 1) for t in due if t.id in won_ids
        ]
        lost = len(due) - len(won)
        if lost:
            self.metrics.cas_losses.labels(stage="acquire").inc(lost)
        self.metrics.acquired.labels(partition=self.partition.name).inc(len(won))
        if self.lookahead is not None:
            self._observe_lanes(now, won, more)
        submitted, released = self.submit(won)
        return TickResult(
            selected=len(due),
            acquired=len(won),
            lost=lost,
            submitted=submitted,
            released=released,
            wait=timedelta(0) if more else s.busy_wait,
        )

    def _observe_lanes(self, now: datetime, won: Sequence[Trigger], more: bool) -> None:
        assert self.lookahead is not None
        self.lookahead.admitted(won)
        newest: dict[Lane, datetime] = {}
        for t in won:
            if t.lane not in newest or t.next_fire_at > newest[t.lane]:
                newest[t.lane] = t.next_fire_at
        for lane, frontier in newest.items():
            self.lookahead.observe(lane, now, frontier, more)

    def select_within_lanes(
        self, window: AdmissionWindow, limit: int, ends: Mapping[Lane, datetime] | None = None
    ) -> tuple[list[Trigger], bool]:
        """The tick's due rows, each lane within its budgets; and whether more are due
        behind them (a read came back full, or a lane was held to its budget).

        One read as before lanes while no lane is over its tick budget, none has spent its
        pool share and the lanes share one window end (a store of one lane always). Else
        the lanes still under budget are read one by one (`lane = ?`, the lane trailing the
        due index: the other lanes' entries are skipped in the index, no row lookups), each
        up to its budget and its own window end (`ends`, the adaptive lookahead's): a lane
        at its budget waits, the others' due rows are admitted in the same tick."""
        s = self.settings
        exclude = self.pool.saturated_biz_codes()
        spent = self.pool.saturated_lanes()
        start, end = window.start, window.end
        one_end = ends is None or len(set(ends.values())) == 1
        if not spent and one_end:
            due = self.store.select_due(self.partition, start, end, limit, exclude)
            full = len(due) >= limit
            counts = Counter(t.lane for t in due)
            capped = {lane for lane, n in counts.items() if n > s.lane_tick_budget(lane)}
            if not capped:
                return due, full
            kept: list[Trigger] = []
            taken: Counter[Lane] = Counter()
            for t in due:  # in due order: each capped lane keeps its earliest rows
                if t.lane not in capped or taken[t.lane] < s.lane_tick_budget(t.lane):
                    kept.append(t)
                    taken[t.lane] += 1
            if not full:  # the read had every due row: the other lanes' are all in it
                return kept, True
            more = True  # the capped lanes have more due
        else:
            capped, kept, taken, more = spent, [], Counter(), False
        seen = {t.id for t in kept}
        for lane in Lane:
            room = min(limit - len(kept), s.lane_tick_budget(lane) - taken[lane])
            if lane in capped or room <= 0:
                continue
            # the lane's rows of the first read are the head of its own read (one order)
            lane_end = end if ends is None else ends.get(lane, end)
            got = self.store.select_due(self.partition, start, lane_end, taken[lane] + room, exclude, lane)
            kept += [t for t in got if t.id not in seen]
            more = more or len(got) >= taken[lane] + room
        kept.sort(key=_due_order)
        return kept, more

    def submit(self, won: Sequence[Trigger]) -> tuple[int, int]:
        """Chunks per business and lane handed over to the fire path (the pool, with
        retries); release what keeps being refused. The job definitions are read once here
        for every chunk, not once per chunk."""
        jobs = self.store.get_jobs(list(dict.fromkeys(t.job_code for t in won))) if won else {}
        submitted = 0
        refused: list[TriggerId] = []
        for (biz_code, lane), triggers in group_by_biz_code(won).items():
            for chunk in chunked(triggers, self.settings.chunk_size):
                if self.path.hand_over(
                    chunk, biz_code=biz_code, lane=lane, epoch=self.epoch, ownership=self.ownership, jobs=jobs
                ):
                    submitted += len(chunk)
                else:
                    refused += [t.id for t in chunk if t.id is not None]
        released = 0
        if refused:
            back = self.store.cas_ids(
                Transition(
                    ids=refused,
                    from_state=TriggerState.ACQUIRED,
                    to_state=TriggerState.WAITING,
                    expected_epoch=self.epoch,
                    clear_epoch=True,
                    fence_epoch=self.epoch,
                    fence=self.ownership,
                )
            )
            released = len(back)
            self.metrics.released.inc(released)
            log.info(
                "partition %s: fire pool refused %d trigger(s); released to waiting",
                self.partition.name,
                released,
                extra=log_fields(partition=self.partition.index, epoch=self.epoch, fence=self.ownership),
            )
        return submitted, released


def _due_order(t: Trigger) -> tuple[datetime, int, int]:
    return (t.next_fire_at, t.priority, t.id or 0)


class Admission:
    """One admission at a time across the partition loops of a scheduler.

    A tick reads the pool's free capacity and business budgets before its SELECT and spends
    them at submit, so loops ticking side by side each saw the same headroom and acquired
    what the pool then refused (released, selected and acquired again: 1.5x the
    acquisitions for the same fires, and twice the ticks, in bench/admission). The loops
    still each own their partition; only the admit step (select, CAS, hand-off) is
    serialized, and the fire pool's work runs outside it. Reclaim hands chunks to the pool
    too, so it takes the same lock. Each tick is counted in `stats` (the scheduler's figures).
    """

    def __init__(self, stats: CoreStats | None = None) -> None:
        self.lock = threading.Lock()
        self.stats = stats if stats is not None else CoreStats()

    def tick(self, acq: PartitionAcquirer) -> TickResult:
        with self.lock:
            result = acq.tick()
        self.stats.add_tick(result.acquired, result.released)
        return result


class PartitionLoop:
    """The thread running one partition's acquire loop: tick, wait what the tick asked,
    again; until the scheduler stops, or `owns()` says the partition (or the leadership
    it came with) is no longer ours, or `halt()` is called. Waits are cut short by either,
    and by `wake()`: triggers due soon were added to the partition (a wake-up), so it
    ticks by their T minus `wake_lead` instead of after its idle wait."""

    def __init__(
        self,
        acq: PartitionAcquirer,
        tick: Callable[[PartitionAcquirer], TickResult],
        stop: threading.Event,
        owns: Callable[[], bool],
        metrics: SchedulerMetrics,
    ) -> None:
        self.acq = acq
        self._tick = tick
        self._stop = stop
        self._owns = owns
        self._metrics = metrics
        self.lost = threading.Event()  # set when the loop ended because ownership was lost
        self._halted = threading.Event()
        # set by wake() and halt(): the wait between ticks looks again at once
        self._woken = threading.Event()
        self._wake_lock = threading.Lock()
        self._tick_by: float | None = None  # monotonic time a wake-up asks the next tick by
        self.wakeups = 0  # waits cut short by a wake-up
        self.thread = threading.Thread(target=self._run, name=f"acquire-{acq.partition.name}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def halt(self) -> None:
        self._halted.set()
        self._woken.set()

    def wake(self, due_ms: int | None = None) -> None:
        """Tick by `due_ms` (the earliest new trigger's T, epoch ms) minus `wake_lead`; at
        once when that has passed or no time is given. A wake-up during a tick is kept for
        the wait after it: the tick's SELECT may have run before the triggers committed."""
        lead = self.acq.settings.wake_lead.total_seconds()
        ahead = 0.0 if due_ms is None else (due_ms - self.acq.clock.now_ms()) / 1000 - lead
        by = time.monotonic() + max(0.0, ahead)
        with self._wake_lock:
            self._tick_by = by if self._tick_by is None else min(self._tick_by, by)
        self._woken.set()

    def join(self, timeout: float) -> None:
        if self.thread.is_alive():
            self.thread.join(timeout=timeout)

    def running(self) -> bool:
        return not self._halted.is_set() and not self._stop.is_set() and not self.lost.is_set()

    def _run(self) -> None:
        while self.running():
            if not self._owns():
                self.lost.set()
                return
            # taken before the tick, never after: a wake-up arriving during it is kept
            with self._wake_lock:
                self._tick_by = None
            try:
                wait = self._tick(self.acq).wait.total_seconds()
            except Exception:
                self._metrics.errors.labels(component="store").inc()
                log.exception(
                    "partition %s: tick failed; retrying",
                    self.acq.partition.name,
                    extra=log_fields(
                        partition=self.acq.partition.index, epoch=self.acq.epoch, fence=self.acq.ownership
                    ),
                )
                wait = 1.0
            # at most max_wait between ticks (1 s, as before); real time, whatever the clock,
            # and cut short by a wake-up's time, a stop, a halt or a lost ownership (looked
            # at every 0.25 s)
            end = time.monotonic() + min(wait, self.acq.settings.max_wait.total_seconds())
            while wait > 0 and self.running():
                self._woken.clear()  # before reading the wake-up time: a later wake-up sets it again
                with self._wake_lock:
                    by = self._tick_by
                woken = by is not None and by < end
                left = (by if woken else end) - time.monotonic()  # type: ignore[operator]
                if left <= 0:
                    if woken:
                        self.wakeups += 1
                    break
                if not self._owns():
                    break
                self._woken.wait(min(left, 0.25))
