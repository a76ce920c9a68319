"""The callback consumer: results from executors update fired records idempotently by
command_id. A duplicate or a late replay of an older result changes nothing (the store's
updates are forward-only)."""
from __future__ import annotations

import logging
from datetime import timedelta

from scheduler_core.codec import CALLBACK_TOPIC, CodecError, decode_results
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import parse_command_id
from scheduler_core.ports import FiredUpdate, MessageBus, TriggerStore
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
SUBSCRIPTION = "scheduler-results"


class ResultConsumer:
    def __init__(self, bus: MessageBus, store: TriggerStore, metrics: SchedulerMetrics) -> None:
        self.store = store
        self.metrics = metrics
        self.sub = bus.subscribe(CALLBACK_TOPIC, SUBSCRIPTION)
        self.applied = 0
        self.malformed = 0

    def poll(self, max_messages: int = 500, timeout: timedelta = timedelta(milliseconds=200)) -> int:
        """Apply one batch of results; returns how many records changed."""
        got = self.sub.receive(max_messages, timeout)
        if not got:
            return 0
        updates: list[FiredUpdate] = []
        for r in got:
            try:
                updates += decode_results(r.message.payload)
            except CodecError as exc:
                # a poison message must not block the topic: count, log, ack
                self.malformed += 1
                log.error("dropping malformed result message: %s", exc)
        changed = self.store.update_fired(updates) if updates else 0
        for r in got:
            self.sub.ack(r)  # acked only after the store applied the batch
        for u in updates:
            self.metrics.results.labels(state=u.state.value).inc()
            self._observe_lag(u)
        self.applied += changed
        self.metrics.results_applied.inc(changed)
        return changed

    def _observe_lag(self, u: FiredUpdate) -> None:
        try:
            _tid, scheduled_ms, _idx = parse_command_id(u.command_id)
        except ValueError:
            return
        domain = ""  # the result carries no domain; lag per domain comes from fired records
        if u.received_at is not None:
            self.metrics.fire_lag.labels(domain=domain, stage="received").observe(
                (to_ms(u.received_at) - scheduled_ms) / 1000
            )
        if u.started_at is not None:
            self.metrics.fire_lag.labels(domain=domain, stage="started").observe((to_ms(u.started_at) - scheduled_ms) / 1000)

    def close(self) -> None:
        self.sub.close()
