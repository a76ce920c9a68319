"""A packed command message (several runs' envelopes in one message, see
`codec.encode_packed`) is acked only once every one of its runs' results is published.

The runs of a pack are worked one after another on one worker (`PackRun`), as the items
of an envelope are: one quota step and one hand-off for the message instead of one per
run (a hand-off per run capped a hot minute of one-item runs at ~12K runs/s). Each run
keeps its own timeout, retries and result; their results go to the outbox together.
They share one `PackShare` in place of the bus receipt: the last successful result
publish acks the message; the first failure nacks it (once), so the broker redelivers
the whole message and the runs that had succeeded are answered from the executor's
memory instead of running again.
"""

from __future__ import annotations

import threading
from typing import Any

from scheduler_core.codec import Envelope
from scheduler_core.ports import Received, Subscription


class PackShare:
    __slots__ = ("received", "remaining", "failed", "lock")

    def __init__(self, received: Received, runs: int) -> None:
        self.received = received
        self.remaining = runs
        self.failed = False
        self.lock = threading.Lock()


class PackRun:
    """The runs of one message in work on one worker: the next one to start, and the
    results of those done (published together when the last is done). `share` is what
    their results ack: the message's own receipt, or for a packed message a PackShare."""

    __slots__ = ("share", "envs", "pos", "results", "quick", "ready", "stepped", "loose")

    def __init__(self, share: Received | PackShare, envs: list[Envelope]) -> None:
        self.share = share
        self.envs = envs
        self.pos = 0
        # a serial job's run that waited in its queue and may start now (its pack is its
        # own, over the message's share: the message's other runs went on without it)
        self.ready: Any = None
        self.stepped = True  # it holds a step of the executor's quota (given back when done)
        # a copy parked behind its first copy, put back to work without a step while the
        # executor stopped: the stop waits for it by count (sdk.Executor._loose)
        self.loose = False
        self.results: list[tuple[Received | PackShare, Any]] = []
        # the quick runs done (sdk.Executor._quick_run), remembered together
        self.quick: list[Envelope] = []


def ack(sub: Subscription, receipt: Received | PackShare) -> None:
    if not isinstance(receipt, PackShare):
        sub.ack(receipt)
        return
    with receipt.lock:
        receipt.remaining -= 1
        last = receipt.remaining == 0 and not receipt.failed
    if last:
        sub.ack(receipt.received)


def nack(sub: Subscription, receipt: Received | PackShare) -> None:
    if not isinstance(receipt, PackShare):
        sub.nack(receipt)
        return
    with receipt.lock:
        first = not receipt.failed
        receipt.failed = True
    if first:
        sub.nack(receipt.received)
