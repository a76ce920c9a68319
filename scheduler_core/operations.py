"""Operator commands on triggers: pause, resume, cancel. Each is a stop
(`scheduler_core.stops`), so it takes effect in seconds whatever the lookahead, plus the
trigger's own state change through the scheduler's CAS (admission stops too).

- pause / cancel at S: the trigger's stop window [S, open) is stored first (the fired
  records at or after S are marked skipped with the operator and reason), then the
  trigger moves to paused / cancelled. A trigger being fired at that moment (acquired)
  is paused as soon as its fire ends; its commands are covered by the stop whatever its
  state says.
- resume at R: the trigger waits again; its window ends at R, and the records at or
  after R that the pause marked wait for their executors again (their commands run: the
  executors heard the lift before R). The occurrences in [S, R) follow the trigger's
  misfire policy, as the legacy schedulers do: SKIP (xxl-job's DO_NOTHING) leaves them
  skipped; FIRE_ONCE_NOW runs the trigger once at R (`ResumeRuns`, published by whoever
  holds the bus, command id of (trigger, R)). A trigger whose next occurrence fell inside
  the pause moves to its first occurrence at or after R (a one-shot completes).

S and R are chosen by the caller (`switchyard trigger`: S = the command's start + 1 s,
R = + 2 s): far enough ahead that every executor has heard the stop or its lift first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from scheduler_core.model import MisfirePolicy, Trigger, TriggerId, TriggerState
from scheduler_core.occurrences import next_after, times_until
from scheduler_core.ports import Transition, TriggerStore
from scheduler_core.stops import Cause, Scope, SkipWindow, Stop, StopService, StopStore
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)
S = TriggerState
# a trigger being fired (acquired) is paused once its fire ends: tried again this long
ACQUIRED_WAIT = timedelta(seconds=3)

ONE_MS = timedelta(milliseconds=1)


class ResumeRuns(Protocol):
    """Where a resume's one run at R waits for whoever holds the bus to publish it
    (`scheduler_core.store.supersedes.SqlSupersedes.add_pending`)."""

    def add_pending(self, trigger: Trigger, times_ms: Sequence[int]) -> None: ...


@dataclass
class OperationReport:
    action: str
    at: datetime | None = None  # S (pause, cancel) or R (resume)
    changed: list[TriggerId] = field(default_factory=list)
    unchanged: dict[TriggerId, str] = field(default_factory=dict)  # id -> why
    # the unchanged ones that failed (they should have changed and did not), as opposed to
    # those with nothing to do (already paused, finished): only these make the call fail,
    # so an operation run twice, or on a business with finished one-shots, succeeds
    failed: set[TriggerId] = field(default_factory=set)
    records: int = 0  # fired records marked skipped (pause, cancel) or revived (resume)
    run_once: list[TriggerId] = field(default_factory=list)  # resumed with one run at R (FIRE_ONCE_NOW)
    # stopped, but its state could not follow yet (still being fired): the stop covers it
    still_acquired: list[TriggerId] = field(default_factory=list)
    # stopped while the scheduler was behind on it: its occurrences before S, handed out as
    # runs (`_stop_behind`), by trigger
    backlog: dict[TriggerId, int] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed

    def fail(self, tid: TriggerId, why: str) -> None:
        self.unchanged[tid] = why
        self.failed.add(tid)


def pause(
    store: TriggerStore,
    stops: StopService,
    ids: Sequence[TriggerId],
    at: datetime,
    actor: str = "",
    reason: str = "",
    runs: ResumeRuns | None = None,
) -> OperationReport:
    """`runs`: where the occurrences due before S of a trigger the scheduler is behind on
    go out as runs (`_stop_behind`); None leaves them to a resume."""
    return _stop(store, stops, "pause", ids, at, Cause.PAUSE, S.PAUSED, (S.WAITING,), actor, reason, runs)


def cancel(
    store: TriggerStore,
    stops: StopService,
    ids: Sequence[TriggerId],
    at: datetime,
    actor: str = "",
    reason: str = "",
    runs: ResumeRuns | None = None,
) -> OperationReport:
    return _stop(
        store,
        stops,
        "cancel",
        ids,
        at,
        Cause.CANCEL,
        S.CANCELLED,
        (S.CREATED, S.WAITING, S.PAUSED, S.ACQUIRED),
        actor,
        reason,
        runs,
    )


def _stop(
    store: TriggerStore,
    stops: StopService,
    action: str,
    ids: Sequence[TriggerId],
    at: datetime,
    cause: Cause,
    to: TriggerState,
    from_states: tuple[TriggerState, ...],
    actor: str,
    reason: str,
    runs: ResumeRuns | None = None,
) -> OperationReport:
    report = OperationReport(action, at=at)
    wanted = list(dict.fromkeys(ids))
    current = {t.id: t for t in store.get_triggers(wanted)}
    live: list[TriggerId] = []
    published_only: set[TriggerId] = set()
    for tid in wanted:
        t = current.get(tid)
        if t is None:
            report.fail(tid, "no such trigger")
        elif t.state is to:
            report.unchanged[tid] = f"already {to.value}"
        elif t.state is S.COMPLETED and t.next_fire_at >= at:
            # a one-shot admitted ahead: its run waits on the bus for T; the stop is what
            # stops it (the state stays completed: nothing is left to admit)
            live.append(tid)
            published_only.add(tid)
        elif t.state not in (*from_states, S.ACQUIRED):
            report.unchanged[tid] = f"is {t.state.value}: cannot {action}"
        else:
            live.append(tid)
    # the stop first, every trigger's in one transaction: from S on nothing runs,
    # whatever the state change below finds
    if live:
        _applied, report.records = stops.stop_many(Scope.TRIGGER, [str(tid) for tid in live], at, cause, actor, reason)
    report.changed = live
    pending = [tid for tid in live if tid not in published_only]
    if runs is not None:
        pending = _stop_behind(store, runs, [current[tid] for tid in pending], at, to, report)
    deadline = time.monotonic() + ACQUIRED_WAIT.total_seconds()
    while pending:
        for src in from_states:
            if not pending:
                break
            won = store.cas(Transition(ids=pending, from_state=src, to_state=to, clear_epoch=(src is S.ACQUIRED)))
            won_ids = {t.id for t in won}
            pending = [i for i in pending if i not in won_ids]
        if not pending or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # acquired: its fire ends in milliseconds, then it waits again
    report.still_acquired = pending
    for tid in pending:
        log.warning("trigger %s is still being fired: stopped from %s, its state follows after this fire", tid, at)
    return report


def _stop_behind(
    store: TriggerStore,
    runs: ResumeRuns,
    triggers: Sequence[Trigger],
    at: datetime,
    to: TriggerState,
    report: OperationReport,
) -> list[TriggerId]:
    """The waiting triggers the scheduler is behind on (occurrences before S not fired yet:
    the broker or a leader away) move to `to` past S, each in one conditional update, and
    their occurrences before S go out as runs, as a resume hands them out (`_behind`). A
    stop stops what is at or after S only; left inside a paused or cancelled trigger, those
    ran if it was resumed and never if not. Returns the others (and one fired meanwhile:
    moved below as any other, its backlog left to a resume as before)."""
    rest: list[TriggerId] = []
    for t in triggers:
        assert t.id is not None
        if t.state is not S.WAITING or t.next_fire_at >= at:
            rest.append(t.id)
            continue
        due = times_until(t, t.next_fire_at, at, BACKLOG_CAP)
        nxt = next_after(t, at - ONE_MS)
        won = store.cas(
            Transition(
                ids=[t.id],
                from_state=S.WAITING,
                to_state=to,
                next_fire_at={t.id: at if nxt is None else nxt},
                expected_version={t.id: t.version},
            )
        )
        if not won:
            rest.append(t.id)
            continue
        if due:
            runs.add_pending(t, due)
            report.backlog[t.id] = len(due)
            log.info("trigger %s: %d occurrence(s) due before the stop at %s handed out as runs", t.id, len(due), at)
    return rest


def settle(store: TriggerStore, stop_store: StopStore, stops: Sequence[Stop]) -> list[Stop]:
    """The trigger states a pause or a cancel could not set when it was given (the trigger
    was being fired then, e.g. by a leader that died holding it: it waits again only once
    reclaimed): each trigger whose open pause or cancel window stands while it waits is
    moved to paused / cancelled now, under the stop row's lock (`StopStore.settle_trigger`:
    a resume lifting the window meanwhile wins, never a stale read of it). Returns the stops
    whose trigger is still acquired, to settle on a later round (`StopRelay` calls this
    each round)."""
    wanted: dict[TriggerId, TriggerState] = {}
    for stop in stops:
        if stop.scope is not Scope.TRIGGER:
            continue
        w = stop.open_window((Cause.PAUSE, Cause.CANCEL))
        if w is not None:
            wanted[TriggerId(int(stop.key))] = S.CANCELLED if w.cause is Cause.CANCEL else S.PAUSED
    if not wanted:
        return []
    later: set[TriggerId] = set()
    for t in store.get_triggers(list(wanted)):  # one read: most are paused already, nothing to do
        assert t.id is not None
        to = wanted[t.id]
        if t.state is S.ACQUIRED:
            later.add(t.id)
        elif t.state is S.WAITING and stop_store.settle_trigger(t.id, to):
            log.info("trigger %s: %s as its stop says (it was being fired when the stop came)", t.id, to.value)
    return [s for s in stops if s.scope is Scope.TRIGGER and TriggerId(int(s.key)) in later]


def resume(
    store: TriggerStore, stops: StopService, runs: ResumeRuns, ids: Sequence[TriggerId], at: datetime
) -> OperationReport:
    """R = `at`: the caller chooses it far enough ahead (the CLI: its start + 2 s) that every
    executor hears the lift before R; the reads and the lift are batched, so a resume of
    many triggers takes about as long as one."""
    report = OperationReport("resume", at=at)
    wanted = list(dict.fromkeys(ids))
    current = {t.id: t for t in store.get_triggers(wanted)}
    windows: dict[TriggerId, SkipWindow] = {}
    for stop in stops.store.stops_of(Scope.TRIGGER, [str(tid) for tid in wanted]):
        w = stop.open_window((Cause.PAUSE,))
        if w is not None:
            windows[TriggerId(int(stop.key))] = w
    todo: list[Trigger] = []
    for tid in wanted:
        t = current.get(tid)
        if t is None:
            report.fail(tid, "no such trigger")
        elif t.state is not S.PAUSED and tid not in windows:
            report.unchanged[tid] = f"is {t.state.value}: not paused"
        else:
            todo.append(t)
    if not todo:
        return report
    # an occurrence fell in the pause: one published and skipped, or one never admitted
    # (only a pause's window counts: a trigger migrated paused has no window to catch up);
    # the records read once for every trigger of the call
    since = min((w.from_ms for w in windows.values()), default=to_ms(at))
    fired_in_pause = {
        (r.trigger_id, to_ms(r.scheduled_at))
        for biz in {t.biz_code for t in todo if t.id in windows}
        for r in store.fired_between(biz, from_ms(since), at)
    }
    # the windows end first, all in one transaction: a relay settling states (`settle`)
    # must never see a trigger waiting while its pause still stands, or it would pause it again
    keys = [str(t.id) for t in todo if t.id in windows]
    if keys:
        _applied, report.records = stops.lift_many(Scope.TRIGGER, keys, at, (Cause.PAUSE,))
    for t in todo:
        assert t.id is not None
        window = windows.get(t.id)
        missed = window is not None and (
            t.next_fire_at < at or any(tid == t.id and window.from_ms <= ms for tid, ms in fired_in_pause)
        )
        behind = _behind(t, window) if t.state is S.PAUSED else []
        if t.state is S.PAUSED and not _wake(store, t, at):
            report.fail(t.id, "changed while resuming: run resume again")
            continue
        if behind:  # due before S, never stopped: published as runs, as an edit's pending ones
            runs.add_pending(t, behind)
        if missed and t.misfire_policy is MisfirePolicy.FIRE_ONCE_NOW:
            runs.add_pending(t, [to_ms(at)])
            report.run_once.append(t.id)
        report.changed.append(t.id)
    return report


BACKLOG_CAP = 1000  # occurrences before S a resume publishes at most (a trigger days behind: the first ones)


def _behind(t: Trigger, window: SkipWindow | None) -> list[int]:
    """The occurrences of a paused trigger due before its pause's S that it never fired:
    the scheduler was behind on it when the pause came (a leader failing over). The pause
    stops only what is at or after S, so these still run; `_wake` moves the trigger past
    the pause, so the resume publishes them as runs (command ids of their own times)."""
    if window is None:
        return []
    return times_until(t, t.next_fire_at, from_ms(window.from_ms), BACKLOG_CAP)


def _wake(store: TriggerStore, t: Trigger, at: datetime) -> bool:
    """PAUSED -> WAITING at its first occurrence at or after `at` (the ones before fell in
    the pause), or -> COMPLETED when it has none left."""
    assert t.id is not None
    if t.next_fire_at >= at:
        return bool(store.cas(Transition(ids=[t.id], from_state=S.PAUSED, to_state=S.WAITING)))
    nxt = next_after(t, at - ONE_MS)
    if nxt is None:
        return bool(store.cas(Transition(ids=[t.id], from_state=S.PAUSED, to_state=S.COMPLETED)))
    return bool(store.cas(Transition(ids=[t.id], from_state=S.PAUSED, to_state=S.WAITING, next_fire_at={t.id: nxt})))


__all__ = ["ACQUIRED_WAIT", "OperationReport", "ResumeRuns", "cancel", "pause", "resume", "settle"]
