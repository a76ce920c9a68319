"""Operator commands on triggers: pause, resume, cancel. They go through the same CAS
API as the scheduler, so a manual change can never leave a state it misreads.

Admission is the cancellation boundary: a trigger already acquired may have commands in
the bus with a future deliver-at. Cancelling it is best-effort and reported as such."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler_core.model import TriggerId, TriggerState
from scheduler_core.ports import Transition, TriggerStore

S = TriggerState


@dataclass
class OperationReport:
    action: str
    changed: list[TriggerId] = field(default_factory=list)
    best_effort: list[TriggerId] = field(default_factory=list)  # cancelled after admission
    unchanged: dict[TriggerId, str] = field(default_factory=dict)  # id -> why

    @property
    def ok(self) -> bool:
        return not self.unchanged


def pause(store: TriggerStore, ids: Sequence[TriggerId]) -> OperationReport:
    return _move(store, "pause", ids, [S.WAITING], S.PAUSED)


def resume(store: TriggerStore, ids: Sequence[TriggerId]) -> OperationReport:
    return _move(store, "resume", ids, [S.PAUSED], S.WAITING)


def cancel(store: TriggerStore, ids: Sequence[TriggerId]) -> OperationReport:
    report = _move(store, "cancel", ids, [S.CREATED, S.WAITING, S.PAUSED, S.ACQUIRED], S.CANCELLED)
    return report


def _move(
    store: TriggerStore, action: str, ids: Sequence[TriggerId], from_states: Sequence[TriggerState], to: TriggerState
) -> OperationReport:
    report = OperationReport(action)
    remaining = list(dict.fromkeys(ids))
    # Each source state is its own CAS: a row that moved between our read and write is
    # simply not won here and is reported with its current state.
    for src in from_states:
        if not remaining:
            break
        won = store.cas(Transition(ids=remaining, from_state=src, to_state=to, clear_epoch=(src is S.ACQUIRED)))
        won_ids = [t.id for t in won if t.id is not None]
        report.changed += won_ids
        if src is S.ACQUIRED:
            report.best_effort += won_ids
        remaining = [i for i in remaining if i not in set(won_ids)]
    if remaining:
        current = {t.id: t for t in store.get_triggers(remaining)}
        for tid in remaining:
            t = current.get(tid)
            if t is None:
                report.unchanged[tid] = "no such trigger"
            elif t.state is to:
                report.unchanged[tid] = f"already {to.value}"
            elif t.state is S.ACQUIRED and action == "pause":
                report.unchanged[tid] = "acquired: being fired now; pause it again after this fire"
            else:
                report.unchanged[tid] = f"is {t.state.value}: cannot {action}"
    return report
