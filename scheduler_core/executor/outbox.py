"""Publishing results off the worker threads.

A worker that published its envelope's result and waited for the broker's ack before
taking the next message would pay one round trip per envelope. The outbox takes
whatever results have queued up, packs them into as few messages as fit (whole
envelopes only: a page record is updated from one message's items at a time), publishes
them in one `bus.publish` (one wait for all the broker acks), and only then acks the
command messages they answer, so a message is still acked only after all of its items'
results are published. If the publish fails, those command messages are nacked and
redelivered; items that succeeded are answered from the executor's memory.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Sequence
from typing import cast

from scheduler_core.codec import CALLBACK_TOPIC, EnvelopeResult, encode_envelope_results, encode_results
from scheduler_core.executor.packs import PackShare, ack, nack
from scheduler_core.model import command_id
from scheduler_core.ports import BusMessage, MessageBus, Received, Subscription

log = logging.getLogger(__name__)

# Items per result message: ~2-3 bytes per item plus the exceptions, far below Pulsar's
# 5 MB default, and small enough that one slow store batch stays small.
MAX_ITEMS_PER_MESSAGE = 20_000
# the handlers' log lines a message may carry before the next envelope goes in another
# (each envelope's are capped at 1 MiB: executor.run_logs), well below Pulsar's 5 MB
MAX_LOG_BYTES_PER_MESSAGE = 2 * 1024 * 1024
_STOP = object()
# what put_many queues: a message's runs with their results
_Done = list[tuple[Received | PackShare, EnvelopeResult]]


def result_messages(results: Sequence[EnvelopeResult], compact: bool) -> list[BusMessage]:
    """The callback messages for finished envelopes, each envelope whole in one message."""
    if not compact:  # the per-item form, one message per envelope (schedulers before "e")
        return [BusMessage(CALLBACK_TOPIC, encode_results(r.updates()), key=_key(r)) for r in results]
    out: list[BusMessage] = []
    group: list[EnvelopeResult] = []
    items = logged = 0
    for r in results:
        size = sum(len(text) for _i, _a, text, _c in r.logs) if r.logs else 0
        if group and (items + len(r.indices) > MAX_ITEMS_PER_MESSAGE or logged + size > MAX_LOG_BYTES_PER_MESSAGE):
            out.append(BusMessage(CALLBACK_TOPIC, encode_envelope_results(group), key=_key(group[0])))
            group, items, logged = [], 0, 0
        group.append(r)
        items += len(r.indices)
        logged += size
    if group:
        out.append(BusMessage(CALLBACK_TOPIC, encode_envelope_results(group), key=_key(group[0])))
    return out


def _key(r: EnvelopeResult) -> str:
    return command_id(r.trigger_id, r.scheduled_ms, r.indices[0])


def publish_and_ack(
    bus: MessageBus, sub: Subscription, done: Sequence[tuple[Received | PackShare, EnvelopeResult]], compact: bool
) -> bool:
    """Publish the results, then ack their command messages; on failure nack them."""
    try:
        bus.publish(result_messages([res for _r, res in done], compact))
    except Exception as exc:
        log.error("publishing %d result(s) failed; their commands will be redelivered: %s", len(done), exc)
        for r, _res in done:
            try:
                nack(sub, r)
            except Exception:  # noqa: BLE001 - the broker redelivers unacked messages anyway
                pass
        return False
    for r, _res in done:
        ack(sub, r)
    return True


class ResultOutbox:
    def __init__(self, bus: MessageBus, sub: Subscription, *, compact: bool, capacity: int, name: str) -> None:
        self._bus = bus
        self._sub = sub
        self._compact = compact
        # bounded (in entries: an envelope's result, or all of a packed message's): when
        # the broker is slow, workers wait here instead of piling up results
        self._q: queue.Queue[object] = queue.Queue(maxsize=capacity)
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def put_many(self, done: list[tuple[Received | PackShare, EnvelopeResult]]) -> None:
        """The results of a message's runs: one queue step for all of them."""
        if done:
            self._q.put(done)

    def close(self) -> None:
        """Publish what is queued, then stop."""
        self._q.put(_STOP)
        self._thread.join()

    def _loop(self) -> None:
        stop = False
        while not stop:
            first = self._q.get()
            if first is _STOP:
                return
            batch: _Done = list(cast(_Done, first))
            items = sum(len(res.indices) for _r, res in batch)
            while items < 4 * MAX_ITEMS_PER_MESSAGE:
                try:
                    nxt = self._q.get_nowait()
                except queue.Empty:
                    break
                if nxt is _STOP:
                    stop = True
                    break
                more = cast(_Done, nxt)
                batch.extend(more)
                items += sum(len(res.indices) for _r, res in more)
            try:
                publish_and_ack(self._bus, self._sub, batch, self._compact)
            except Exception:  # an ack failing must not stop the outbox
                log.exception("acknowledging command messages failed; they will be redelivered")
