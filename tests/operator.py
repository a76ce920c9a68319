"""An operator's `switchyard trigger pause|resume|cancel` on a test's store, as the command
does it (the ownership guard, the stop or the resume at the store's clock, the audit note),
without waiting for a relay to carry the stop to executors: the tests that use it run none."""

from __future__ import annotations

from datetime import timedelta

from migrator.business import BusinessRegistry
from migrator.ownership import guard_trigger_operation
from scheduler_core import operations
from scheduler_core.model import TriggerId
from scheduler_core.stops import StopService
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard.wiring import migrator_store

LEAD = timedelta(seconds=1)


def operate(store: SqlTriggerStore, action: str, tid: TriggerId, reason: str = "", actor: str = "ops") -> bool:
    """`trigger <action> <tid> [--reason]`; True when it changed the trigger, False when
    refused by the guard or left unchanged."""
    own = migrator_store(store)
    guard = guard_trigger_operation(store, own, action, [tid], reason)
    if not guard.allowed:
        return False
    stops, at = StopService(SqlStops(store)), store.clock.now() + LEAD
    if action == "pause":
        report = operations.pause(store, stops, guard.allowed, at, actor, reason)
    elif action == "cancel":
        report = operations.cancel(store, stops, guard.allowed, at, actor, reason)
    else:
        report = operations.resume(store, stops, SqlSupersedes(store), guard.allowed, at)
    for biz, tids in guard.audited.items():
        if done := [t for t in tids if t in set(report.changed)]:
            BusinessRegistry(own).note(
                biz,
                actor=actor,
                reason=reason or f"trigger {action}",
                detail={"action": f"trigger {action}", "triggers": done},
            )
    return tid in report.changed


def resume(store: SqlTriggerStore, tid: TriggerId) -> bool:
    return operate(store, "resume", tid)
