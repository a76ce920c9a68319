"""Receipt stamps: an early "received" result for a run that outlasts a short threshold.

A run's received and started times travel with its result, so a run still executing
seconds after its fire time had no `received_at` in its fired record, and a reader of the
records could not tell it from a command no executor took (the dual-run comparator called
such a run "late, not received by an executor"; it succeeded later). A run that is still
going `after` its receipt gets one extra result message now: every item received (ItemState.RECEIVED),
with the receipt and start times. The store applies it forward-only by command id like any
result (rank `received`, below every final state; `received_at`/`started_at` are only
ever filled, never moved), so a stamp arriving after the final result changes nothing, and
a redelivered or repeated stamp is harmless.

Only runs that last longer than `after` cost the extra message: the common run, done in
milliseconds, is registered and forgotten (two dict operations) and never stamped. One
thread per executor looks at the open runs every `after / 2` (at least every 50 ms).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from scheduler_core.codec import Envelope, EnvelopeResult
from scheduler_core.executor.outbox import result_messages
from scheduler_core.item_states import ItemState
from scheduler_core.ports import Clock, MessageBus

log = logging.getLogger(__name__)
MIN_TICK_S = 0.05
# the message of a stamp: the result consumer leaves its lag to the run's final result
# (observed once per run, not twice)
RECEIPT_MESSAGE = "running (stamped received before its result)"
FORGET_AFTER_MS = 24 * 3600 * 1000  # a run open this long was lost (e.g. its thread died): dropped unstamped


class ReceiptStamps:
    def __init__(
        self,
        bus: MessageBus,
        clock: Clock,
        after: timedelta,
        *,
        compact: bool,
        name: str,
        executor: str | None = None,
    ) -> None:
        self._bus, self._clock, self._compact = bus, clock, compact
        self._executor = executor  # the executor's instance id, named in each stamp
        self._after_ms = max(0, int(after.total_seconds() * 1000))
        self._tick = max(MIN_TICK_S, after.total_seconds() / 2)
        # id(envelope) -> (envelope, received ms, started ms or None while queued): set and
        # popped by the worker threads
        # (single dict operations, atomic in CPython), read by the stamping thread
        self._open: dict[int, tuple[Envelope, int, int | None]] = {}
        # held while stamps are taken and published: a worker whose run was taken for a
        # stamp waits on it in `end`, so its final result is published after the stamp
        self._publishing = threading.Lock()
        self._stop = threading.Event()
        self.stamped = 0  # runs stamped (for tests and metrics)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def begin(self, env: Envelope, received_ms: int, *, queued: bool = False) -> None:
        """A run taken at `received_ms`; it starts then, unless `queued` (a serial job's run
        waiting for an earlier one: `started` says when it does)."""
        self._open[id(env)] = (env, received_ms, None if queued else received_ms)

    def started(self, env: Envelope, started_ms: int) -> None:
        """A queued run starts: a stamp not sent yet carries its start. (One already sent
        said received only; the result carries the start.)"""
        with self._publishing:  # not between a stamp's taking of the run and its publish
            entry = self._open.get(id(env))
            if entry is not None:
                self._open[id(env)] = (env, entry[1], started_ms)

    def end(self, env: Envelope) -> None:
        if self._open.pop(id(env), None) is None:
            with self._publishing:  # taken for a stamp (or never begun): the stamp goes out first
                pass

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _loop(self) -> None:
        while not self._stop.wait(self._tick):
            try:
                self.stamp_due()
            except Exception:  # noqa: BLE001 - a stamp is best effort; the result still carries the times
                log.warning("publishing receipt stamps failed; the results will carry the times", exc_info=True)

    def stamp_due(self) -> int:
        """Publish a stamp for every open run received `after` ago or more (once per run)."""
        with self._publishing:
            return self._stamp_due()

    def _stamp_due(self) -> int:
        now = self._clock.now_ms()
        due: list[EnvelopeResult] = []
        for key, (env, received_ms, started_ms) in list(self._open.items()):
            age = now - received_ms
            if age < self._after_ms:
                continue
            if self._open.pop(key, None) is None:
                continue  # finished meanwhile
            if age > FORGET_AFTER_MS:
                continue
            indices = [idx for idx, _p in env.items]
            due.append(
                EnvelopeResult(
                    trigger_id=env.trigger_id,
                    scheduled_ms=env.scheduled_ms,
                    page_id=env.page_id,
                    indices=indices,
                    letters=ItemState.RECEIVED * len(indices),
                    received_ms=received_ms,
                    # one item starts at receipt (a queued one when it leaves the queue);
                    # later items' starts come with the result (a started_at, once stored,
                    # is never moved)
                    started_ms=started_ms if len(indices) == 1 else None,
                    finished_ms=now,
                    message=RECEIPT_MESSAGE,
                    executor=self._executor,
                )
            )
        if due:
            self._bus.publish(result_messages(due, self._compact))
            self.stamped += len(due)
        return len(due)
