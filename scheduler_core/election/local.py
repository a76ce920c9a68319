"""LocalElection: leases and epochs inside one process, on the injected clock.

A `LocalElectionGroup` plays etcd's part (several candidates may share one, as tests do).
A live leader keeps its lease alive, as the etcd adapter's keep-alive thread does; once
its keep-alive stops (`pause_keepalive`, the stand-in for a hung process) the lease
expires TTL after the last refresh.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from scheduler_core.model import Epoch
from scheduler_core.ports import Clock, Election


class LocalElectionGroup:
    def __init__(self, clock: Clock, ttl: timedelta = timedelta(seconds=10)) -> None:
        self.clock = clock
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self._lock = threading.Lock()
        self._leader: LocalElection | None = None
        self._expires_ms = 0
        self._epoch = 0

    def _alive(self, now: int) -> bool:
        if self._leader is None:
            return False
        if self._leader._keepalive:
            self._expires_ms = now + self.ttl_ms  # the leader's keep-alive is running
        return now < self._expires_ms

    def _try_take(self, who: LocalElection) -> Epoch | None:
        with self._lock:
            now = self.clock.now_ms()
            self._alive(now)
            if self._leader is not None and self._leader is not who and now < self._expires_ms:
                return None
            if self._leader is who and now < self._expires_ms:
                return who._epoch
            self._epoch += 1
            self._leader = who
            self._expires_ms = now + self.ttl_ms
            return Epoch(self._epoch)

    def _refresh(self, who: LocalElection) -> bool:
        with self._lock:
            return self._leader is who and self._alive(self.clock.now_ms())

    def _release(self, who: LocalElection) -> None:
        with self._lock:
            if self._leader is who:
                self._leader = None
                self._expires_ms = 0


class LocalElection(Election):
    def __init__(
        self, group: LocalElectionGroup, name: str = "local", backoff: timedelta = timedelta(milliseconds=200)
    ) -> None:
        self.group = group
        self.name = name
        self.backoff = backoff
        self._epoch: Epoch | None = None
        self._keepalive = True

    def campaign(self, timeout: timedelta) -> Epoch | None:
        clock = self.group.clock
        deadline = clock.monotonic() + timeout.total_seconds()
        delay = self.backoff.total_seconds()
        while True:
            epoch = self.group._try_take(self)
            if epoch is not None:
                self._epoch = epoch
                self._keepalive = True
                return epoch
            if clock.monotonic() >= deadline:
                return None
            clock.sleep(min(delay, max(0.0, deadline - clock.monotonic())))
            delay = min(delay * 2, 5.0)  # exponential back-off for followers

    def is_leader(self) -> bool:
        if self._epoch is None:
            return False
        if not self.group._refresh(self):
            self._epoch = None
            return False
        return True

    def epoch(self) -> Epoch | None:
        return self._epoch if self.is_leader() else None

    def pause_keepalive(self) -> None:
        """Stop refreshing the lease without resigning, as a hung or crashed leader would."""
        self._keepalive = False

    def resign(self) -> None:
        self.group._release(self)
        self._epoch = None

    def close(self) -> None:
        self.resign()
