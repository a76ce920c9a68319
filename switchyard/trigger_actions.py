"""An operator's pause, resume or cancel of triggers as `switchyard trigger` does it, for
the command and for whatever else acts as an operator (tests): the ownership guard
(`migrator.ownership`), the stop or its lift (`scheduler_core.operations`) with S the
start (or the write, when later) + STOP_LEAD and R the lift + RESUME_LEAD, and the audit note of each business in
dual-run or cut over."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Protocol

from migrator.business import BusinessRegistry
from migrator.model import BusinessState
from migrator.ownership import GuardOutcome, MigratedJobs, guard_trigger_operation
from migrator.store import MigratorStore
from scheduler_core import operations
from scheduler_core.model import TriggerId
from scheduler_core.ports import Clocked, TriggerStore
from scheduler_core.stops import StopService

STOP_LEAD = timedelta(seconds=1)
RESUME_LEAD = timedelta(seconds=2)


def stop_instant(started: datetime, writing: datetime) -> datetime:
    """S of a stop: STOP_LEAD after the command's start, or after the stop is written when
    the command's reads (the store, the guard, opening the bus) took longer than that. The
    lead is the time every executor has to hear the stop before S: counted from the start
    alone, a command slowed past it (a loaded machine) wrote a stop already due and an
    occurrence at or after S ran (the soak found one: docs/soak.md)."""
    return max(started, writing) + STOP_LEAD


class ActedStore(TriggerStore, Clocked, Protocol):
    """What an operator's action on triggers reads and writes of the trigger store."""


def act(
    store: ActedStore,
    own: MigratorStore,
    stops: StopService,
    runs: operations.ResumeRuns,
    action: str,
    ids: list[TriggerId],
    *,
    actor: str,
    reason: str,
    started: datetime,
) -> tuple[operations.OperationReport, GuardOutcome]:
    guard = guard_trigger_operation(store, own, action, ids, reason)
    allowed = guard.allowed
    if action in ("pause", "cancel"):
        stop = operations.pause if action == "pause" else operations.cancel
        report = stop(store, stops, allowed, stop_instant(started, store.clock.now()), actor, reason, runs)
    else:  # R: 2 s after the lift is written (not after the start): every executor hears it first
        report = operations.resume(store, stops, runs, allowed, store.clock.now() + RESUME_LEAD)
        _undo_rolled_back_meanwhile(store, own, stops, report, guard, actor)
    changed = set(report.changed)
    registry = BusinessRegistry(own)
    for biz, tids in guard.audited.items():
        if done := [t for t in tids if t in changed]:
            registry.note(
                biz,
                actor=actor,
                reason=reason or f"trigger {action}",
                detail={"action": f"trigger {action}", "triggers": done, "at": str(report.at)},
            )
    return report, guard


def _undo_rolled_back_meanwhile(
    store: ActedStore,
    own: MigratorStore,
    stops: StopService,
    report: operations.OperationReport,
    guard: GuardOutcome,
    actor: str,
) -> None:
    """A resume whose guard read its business before a rollback's transition and whose
    write landed after the rollback's last look for late admissions (`BusinessSwitch.
    _hand_back_late`) would leave the job live on the new side of a business back on
    legacy, beside its legacy job. Read after the write, the state is the rollback's: such
    a trigger is paused again at once and the resume reported refused. (Until then its
    runs are skipped by the rollback's fence, which stands from before the transition.)"""
    if not report.changed:
        return
    states = {r.biz_code: r.state for r in BusinessRegistry(own).all()}
    triggers = {t.id: t for t in store.get_triggers(report.changed) if t.id is not None}
    is_migrated = MigratedJobs(own)
    late = [
        tid
        for tid in report.changed
        if (t := triggers.get(tid)) is not None
        and states.get(t.biz_code) is BusinessState.LEGACY
        and is_migrated(t)  # a job created here has no legacy twin to fire beside
    ]
    if not late:
        return
    why = (
        "its business was rolled back to legacy while it was being resumed: paused again here "
        "(the legacy job is the one to start)"
    )
    operations.pause(store, stops, late, store.clock.now(), actor, why)
    gone = set(late)
    report.changed = [tid for tid in report.changed if tid not in gone]
    report.run_once = [tid for tid in report.run_once if tid not in gone]
    for tid in late:
        guard.refused[tid] = f"{triggers[tid].job_code}: {why}"


__all__ = ["RESUME_LEAD", "STOP_LEAD", "act", "stop_instant"]
