"""A packed command message (several runs' envelopes in one message, see
`codec.encode_packed`) is acked only once every one of its runs' results is published.

Each run of a pack is worked like a message of its own (its own quota step, worker,
timeout and result); they share one `PackShare` in place of the bus receipt. The last
successful result publish acks the message; the first failure nacks it (once), so the
broker redelivers the whole message and the runs that had succeeded are answered from
the executor's memory instead of running again.
"""
from __future__ import annotations

import threading

from scheduler_core.ports import Received, Subscription


class PackShare:
    __slots__ = ("received", "remaining", "failed", "lock")

    def __init__(self, received: Received, runs: int) -> None:
        self.received = received
        self.remaining = runs
        self.failed = False
        self.lock = threading.Lock()


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
