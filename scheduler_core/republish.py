"""Commands published again from their fired records: same command ids, deliver-at T.

Two callers: `switchyard serve` on start (its in-process bus lost what the last process
published and nobody took), and the result consumer (`scheduler_core.callbacks`) for a run
an executor skipped under a stop the store no longer holds (it had not heard the lift)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from scheduler_core.codec import EXECUTOR_SUBSCRIPTION, command_topic, encode_packed, envelope_body
from scheduler_core.model import ExecutionCommand, FiredRecord, Job
from scheduler_core.ports import BusMessage, MessageBus, TriggerStore
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)


def _items(store: TriggerStore, job: Job, first: int, count: int) -> list[tuple[int, str]]:
    if not job.explicit_items:
        return [(i, "") for i in range(first, first + count)]
    return [(it.index, it.param) for it in store.sharding_page(job.job_code, first, count)]


def republish(
    store: TriggerStore, bus: MessageBus, records: Sequence[FiredRecord], *, not_before_ms: int | None = None
) -> int:
    """Publish these records' commands again (same command ids, deliver-at T, or
    `not_before_ms` when later): one message per record (a page record carries its
    envelope's items). Returns the messages sent."""
    jobs = store.get_jobs(list({r.job_code for r in records}))
    messages: list[BusMessage] = []
    for r in records:
        job = jobs.get(r.job_code)
        if job is None:
            log.warning("command %s: its job %s is gone; not published again", r.command_id, r.job_code)
            continue
        run = ExecutionCommand(
            command_id=r.command_id,
            trigger_id=r.trigger_id,
            job_code=job.job_code,
            biz_code=job.biz_code,
            handler=job.handler,
            scheduled_at=r.scheduled_at,
            item_index=r.item_index,
            item_total=r.item_total,
            params=job.params,
            timeout=job.timeout,
            max_retry=job.max_retry,
            epoch=r.epoch,
            shadow=job.shadow,
            block=job.block,
        )
        items = _items(store, job, r.item_index, r.item_count)
        if not items:
            continue
        body = envelope_body(run, items, page_record=r.item_count > 1)
        props = {
            "job_code": job.job_code,
            "biz_code": job.biz_code,
            "scheduled_at": str(to_ms(r.scheduled_at)),
            "trigger_id": str(r.trigger_id),
        }
        messages.append(
            BusMessage(
                command_topic(job.biz_code, job.lane),
                encode_packed([body]),
                deliver_at_ms=max(to_ms(r.scheduled_at), not_before_ms or 0),
                properties=props,
                key=r.command_id,
            )
        )
    for topic in {m.topic for m in messages}:
        bus.ensure_subscription(topic, EXECUTOR_SUBSCRIPTION)
    if messages:
        bus.publish(messages)
    return len(messages)


__all__ = ["republish"]
