"""A job's run once now with a parameter of its own (issue 28, the admin's "run once"):
published by the process that asks for it, as a follow-up's child run is (records first,
then the bus, then the records marked published), outside the job's schedule.

A run without a parameter of its own needs none of this: a one-shot trigger due now is
fired by the scheduler as any other. A parameter, though, belongs to the job, not to a
trigger, and the scheduler fires a trigger with its job's: this run carries it in its
command instead, so it needs a bus here."""

from __future__ import annotations

from dataclasses import replace

from scheduler_core.fire import FirePipeline
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import FiredRecord, Job, Trigger
from scheduler_core.ports import MessageBus
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.sql import SqlTriggerStore


def publish_run(store: SqlTriggerStore, bus: MessageBus, trigger: Trigger, job: Job, params: str) -> list[FiredRecord]:
    """One run of `job` with `params`, on its one-shot `trigger` (stored completed: the
    scheduler never fires it again), at the trigger's time. Store first, then the bus: a
    failed publication leaves records pending that no executor ever reports, visible in
    the run log, never a run without a record."""
    pipeline = FirePipeline(store, bus, store.clock, SchedulerSettings(), SchedulerMetrics())
    records, messages = pipeline.run_now(
        trigger, replace(job, params=params), trigger.next_fire_at, store.current_epoch(), "run once now"
    )
    store.put_fired(records)
    pipeline.publish(messages)
    store.mark_published([r.command_id for r in records], store.clock.now())
    return records


__all__ = ["publish_run"]
