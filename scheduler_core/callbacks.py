"""The callback consumer: results from executors update fired records idempotently by
command_id. A duplicate or a late replay of an older result changes nothing (the store's
updates are forward-only).

Result messages come in either wire form (`codec`: per item, or compact per envelope);
both decode to per-item `FiredUpdate`s, so idempotency stays the store's, by command id.
An envelope's items always arrive in one message, so a page record is updated from a
whole envelope at a time."""

from __future__ import annotations

import logging
from collections import Counter, OrderedDict
from datetime import timedelta
from typing import Any

from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, CodecError, decode_results
from scheduler_core.executor.receipts import RECEIPT_MESSAGE
from scheduler_core.followups import Followups
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, FiredRecord, FiredState, parse_command_id
from scheduler_core.ports import Clock, FiredUpdate, MessageBus, TriggerStore
from scheduler_core.republish import republish
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import MESSAGE_PREFIX, ROLLBACK_PREFIX, StopIndex, StopStore
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
SUBSCRIPTION = "scheduler-results"
# How many times one command skipped under a lifted stop is published again (each a
# second later) before its skip is taken as it came: an executor hears the lift within a
# relay round or two once the broker is back, so this bounds a loop a healthy system never
# comes near.
REPUBLISH_LIMIT = 20
REPUBLISH_DELAY_MS = 1_000  # a command published again is delivered no sooner than this
_REMEMBERED = 10_000  # commands published again, remembered for the bound (oldest dropped)


class ResultConsumer:
    def __init__(self, bus: MessageBus, store: TriggerStore, metrics: SchedulerMetrics, *,
                 clock: Clock | None = None, settings: SchedulerSettings | None = None,
                 stops: StopStore | None = None) -> None:  # fmt: skip
        """`stops`: where the stops live; given, a run an executor skipped under a stop the
        store no longer holds is published again (`_lifted_skips`)."""
        self.store = store
        self.bus = bus
        self.stops = stops
        self.republished = 0
        self._republished: OrderedDict[CommandId, int] = OrderedDict()
        # after a successful run, its trigger's follow-ups (child jobs) are fired
        # (the clock: the given one, else the store's, so a driven clock drives both)
        clock = clock or getattr(store, "clock", None) or SystemClock()
        self.clock = clock
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
            again = self._lifted_skips(updates)
            if again:
                # every item of each: a page record's items answer under their own ids
                gone = {(int(r.trigger_id), to_ms(r.scheduled_at)) for r in again}
                updates = [u for u in updates if _occurrence(u) not in gone]
                # a second later: time for the lift to reach the executor that skipped it
                not_before = self.clock.now_ms() + REPUBLISH_DELAY_MS
                self.republished += republish(self.store, self.bus, again, not_before_ms=not_before)
            changed = self.store.update_fired(updates) if updates else 0
        except Exception:
            # handed back, not left unacked: Pulsar redelivers an unacked message only when
            # its consumer disconnects (no ack timeout is set), so a batch that met a
            # database restart stayed with this consumer and its records pending for good
            self._hand_back(got)
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
            self._hand_back(got)
            raise
        for r in got:
            self.sub.ack(r)  # acked only after the store applied the batch and its follow-ups
        return changed

    def _hand_back(self, got: list[Any]) -> None:
        for r in got:
            self.sub.nack(r)

    def _lifted_skips(self, updates: list[FiredUpdate]) -> list[FiredRecord]:
        """The records of runs an executor answered skipped under a stop window (an
        operator's or a rollback's) that the store says no longer covers them: a lift (a
        resume, an unfreeze, a dual-run's fence lift) the executor had not heard yet. Its
        messages and the commands it let through travel on different topics, and after a
        broker restart the commands came first: three runs after an unfreeze were skipped
        as frozen (the chaos soak, seed 23). They are published again, same command ids,
        and the skip is not recorded; a record already final is left as it is."""
        if self.stops is None:
            return []
        skips = [
            u
            for u in updates
            if u.state is FiredState.SKIPPED and u.message.startswith((MESSAGE_PREFIX, ROLLBACK_PREFIX))
        ]
        if not skips:
            return []
        records = self.store.get_fired([u.command_id for u in skips])
        if not records:
            return []
        index = StopIndex({(st.scope, st.key): st for st in self.stops.stops()})
        out: list[FiredRecord] = []
        for u in skips:
            r = records.get(u.command_id)
            if r is None or r.state.is_final or r in out:
                continue
            if index.covering(r.trigger_id, r.job_code, r.biz_code, to_ms(r.scheduled_at)) is not None:
                continue  # the stop stands over it: the skip is the stop's
            n = self._republished.pop(r.command_id, 0) + 1
            self._republished[r.command_id] = n
            while len(self._republished) > _REMEMBERED:
                self._republished.popitem(last=False)
            if n > REPUBLISH_LIMIT:
                log.warning(
                    "%s: skipped again under a lifted stop after %d publications; recorded skipped", r.command_id, n - 1
                )
                continue
            out.append(r)
        if out:
            log.info(
                "%d run(s) skipped under a stop the store no longer holds (an executor had not heard its lift): "
                "published again",
                len(out),
            )
        return out

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


def _occurrence(u: FiredUpdate) -> tuple[int, int] | None:
    """(trigger id, T ms) of a result, from its command id."""
    try:
        tid, scheduled_ms, _idx = parse_command_id(u.command_id)
    except ValueError:
        return None
    return int(tid), scheduled_ms
