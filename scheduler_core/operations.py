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
from scheduler_core.occurrences import next_after
from scheduler_core.ports import Transition, TriggerStore
from scheduler_core.stops import Cause, Scope, StopService
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
    records: int = 0  # fired records marked skipped (pause, cancel) or revived (resume)
    run_once: list[TriggerId] = field(default_factory=list)  # resumed with one run at R (FIRE_ONCE_NOW)
    # stopped, but its state could not follow yet (still being fired): the stop covers it
    still_acquired: list[TriggerId] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.unchanged


def pause(
    store: TriggerStore, stops: StopService, ids: Sequence[TriggerId], at: datetime, actor: str = "", reason: str = ""
) -> OperationReport:
    return _stop(store, stops, "pause", ids, at, Cause.PAUSE, S.PAUSED, (S.WAITING,), actor, reason)


def cancel(
    store: TriggerStore, stops: StopService, ids: Sequence[TriggerId], at: datetime, actor: str = "", reason: str = ""
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
) -> OperationReport:
    report = OperationReport(action, at=at)
    wanted = list(dict.fromkeys(ids))
    current = {t.id: t for t in store.get_triggers(wanted)}
    live: list[TriggerId] = []
    published_only: set[TriggerId] = set()
    for tid in wanted:
        t = current.get(tid)
        if t is None:
            report.unchanged[tid] = "no such trigger"
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
    # the stop first: from S on nothing runs, whatever the state change below finds
    for tid in live:
        applied = stops.stop(Scope.TRIGGER, str(tid), at, cause, actor, reason)
        report.records += applied.records
    report.changed = live
    pending = [tid for tid in live if tid not in published_only]
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


def resume(
    store: TriggerStore, stops: StopService, runs: ResumeRuns, ids: Sequence[TriggerId], at: datetime
) -> OperationReport:
    report = OperationReport("resume", at=at)
    at_ms = to_ms(at)
    for tid in dict.fromkeys(ids):
        t = store.get_trigger(tid)
        if t is None:
            report.unchanged[tid] = "no such trigger"
            continue
        stop = stops.store.stop_of(Scope.TRIGGER, str(tid))
        window = None if stop is None else stop.open_window((Cause.PAUSE,))
        if t.state is not S.PAUSED and window is None:
            report.unchanged[tid] = f"is {t.state.value}: not paused"
            continue
        # an occurrence fell in the pause: one published and skipped, or one never admitted
        # (only a pause's window counts: a trigger migrated paused has no window to catch up)
        missed = window is not None and (
            t.next_fire_at < at
            or any(r.trigger_id == tid for r in store.fired_between(t.biz_code, from_ms(window.from_ms), at))
        )
        if t.state is S.PAUSED and not _wake(store, t, at):
            report.unchanged[tid] = "changed while resuming: run resume again"
            continue
        if window is not None:
            applied = stops.lift(Scope.TRIGGER, str(tid), at_ms, (Cause.PAUSE,))
            report.records += 0 if applied is None else applied.records
        if missed and t.misfire_policy is MisfirePolicy.FIRE_ONCE_NOW:
            runs.add_pending(t, [at_ms])
            report.run_once.append(tid)
        report.changed.append(tid)
    return report


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


__all__ = ["ACQUIRED_WAIT", "OperationReport", "ResumeRuns", "cancel", "pause", "resume"]
