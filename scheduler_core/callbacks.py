"""The callback consumer: results from executors update fired records idempotently by
command_id. A duplicate or a late replay of an older result changes nothing (the store's
updates are forward-only).

Result messages come in either wire form (`codec`: per item, or compact per envelope);
both decode to per-item `FiredUpdate`s, so idempotency stays the store's, by command id.
An envelope's items always arrive in one message, so a page record is updated from a
whole envelope at a time."""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta
from typing import Any

from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, CodecError, decode_results
from scheduler_core.executor.receipts import RECEIPT_MESSAGE
from scheduler_core.followups import Followups
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import parse_command_id
from scheduler_core.ports import Clock, FiredUpdate, MessageBus, TriggerStore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
SUBSCRIPTION = "scheduler-results"


class ResultConsumer:
    def __init__(self, bus: MessageBus, store: TriggerStore, metrics: SchedulerMetrics, *,
                 clock: Clock | None = None, settings: SchedulerSettings | None = None) -> None:  # fmt: skip
        self.store = store
        # after a successful run, its trigger's follow-ups (child jobs) are fired
        # (the clock: the given one, else the store's, so a driven clock drives both)
        clock = clock or getattr(store, "clock", None) or SystemClock()
        self.followups = Followups(store, bus, clock, settings or SchedulerSettings(), metrics)
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
        try:
            changed = self.store.update_fired(updates) if updates else 0
        except Exception:
            # handed back, not left unacked: Pulsar redelivers an unacked message only when
            # its consumer disconnects (no ack timeout is set), so a batch that met a
            # database restart stayed with this consumer and its records pending for good
            for r in got:
                self.sub.nack(r)
            raise
        # label lookups once per batch, not per item (tens of thousands per poll)
        for state, n in Counter(u.state.value for u in updates).items():
            self.metrics.results.labels(state=state).inc(n)
        biz_code = ""  # the result carries no biz_code; lag per business comes from fired records
        received = self.metrics.fire_lag.labels(biz_code=biz_code, stage="received")
        started = self.metrics.fire_lag.labels(biz_code=biz_code, stage="started")
        for u in updates:
            if u.message != RECEIPT_MESSAGE:  # a receipt stamp: the run's result observes its lag, once
                self._observe_lag(u, received, started)
        self.applied += changed
        self.metrics.results_applied.inc(changed)
        try:
            self.followups.after([(u.command_id, u.state) for u in updates])
        except Exception:
            # a child run not published: the results come again (applying them again
            # changes nothing) and the same child runs are published then
            for r in got:
                self.sub.nack(r)
            raise
        for r in got:
            self.sub.ack(r)  # acked only after the store applied the batch and its follow-ups
        return changed

    @staticmethod
    def _observe_lag(u: FiredUpdate, received: Any, started: Any) -> None:
        try:
            _tid, scheduled_ms, _idx = parse_command_id(u.command_id)
        except ValueError:
            return
        if u.received_at is not None:
            received.observe((to_ms(u.received_at) - scheduled_ms) / 1000)
        if u.started_at is not None:
            started.observe((to_ms(u.started_at) - scheduled_ms) / 1000)

    def close(self) -> None:
        self.sub.close()
