"""An operator's `switchyard trigger pause|resume|cancel` on a test's store, as the command
does it (`switchyard.trigger_actions.act`: the ownership guard, the stop or the resume, the
audit note), without the command's wait for a relay to carry the stop to executors: the
tests that use it run none."""

from __future__ import annotations

from scheduler_core.model import TriggerId
from scheduler_core.stops import StopService
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard.trigger_actions import act
from switchyard.wiring import migrator_store


def operate(store: SqlTriggerStore, action: str, tid: TriggerId, reason: str = "", actor: str = "ops") -> bool:
    """`trigger <action> <tid> [--reason]`; True when it changed the trigger, False when
    refused by the guard or left unchanged."""
    stops = StopService(SqlStops(store))
    report, _guard = act(
        store,
        migrator_store(store),
        stops,
        SqlSupersedes(store),
        action,
        [tid],
        actor=actor,
        reason=reason,
        started=store.clock.now(),
    )
    return tid in report.changed


def resume(store: SqlTriggerStore, tid: TriggerId) -> bool:
    return operate(store, "resume", tid)
