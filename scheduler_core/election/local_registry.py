"""LocalRegistry: the shard registry inside one process, on the injected clock.

A `LocalRegistryGroup` plays etcd's part for members that share it (driven-clock tests,
the embedded default): each member has a lease that its keep-alive refreshes until
`pause_keepalive` (a hung process), after which it expires TTL after the last refresh
and takes the member and its partition ownerships with it. Epochs come from one revision
counter, as etcd's create_revision does: strictly increasing per partition.
"""

from __future__ import annotations

import threading
from datetime import timedelta

from scheduler_core.model import Epoch
from scheduler_core.ports import Clock, Ownership, Registry, RegistryView


class LocalRegistryGroup:
    def __init__(self, clock: Clock, ttl: timedelta = timedelta(seconds=10)) -> None:
        self.clock = clock
        self.ttl_ms = int(ttl.total_seconds() * 1000)
        self._lock = threading.Lock()
        self._revision = 0
        self._leases: dict[int, tuple[LocalRegistry, int]] = {}  # lease -> (member, expires at ms)
        self._members: dict[str, int] = {}  # member id -> lease
        self._owners: dict[int, tuple[str, int, int]] = {}  # partition -> (member, epoch, lease)
        self._changed = threading.Condition(self._lock)

    def _bump(self) -> int:
        self._revision += 1
        self._changed.notify_all()
        return self._revision

    def _sweep(self) -> None:
        """Refresh the leases whose keep-alive runs; drop the expired ones with their keys."""
        now = self.clock.now_ms()
        for lease, (who, expires) in list(self._leases.items()):
            if not who._paused:
                self._leases[lease] = (who, now + self.ttl_ms)
            elif now >= expires:
                self._drop_lease(lease)

    def _drop_lease(self, lease: int) -> None:
        self._leases.pop(lease, None)
        for m, lid in list(self._members.items()):
            if lid == lease:
                del self._members[m]
        for p, (_m, _e, lid) in list(self._owners.items()):
            if lid == lease:
                del self._owners[p]
        self._bump()


class LocalRegistry(Registry):
    def __init__(self, group: LocalRegistryGroup, member: str) -> None:
        self.group = group
        self.member = member
        self._lease: int | None = None
        self._paused = False

    def join(self) -> None:
        g = self.group
        with g._lock:
            if self._lease is not None:
                g._drop_lease(self._lease)
            self._paused = False
            self._lease = g._bump()
            g._leases[self._lease] = (self, g.clock.now_ms() + g.ttl_ms)
            g._members[self.member] = self._lease
            g._bump()

    def alive(self) -> bool:
        g = self.group
        with g._lock:
            g._sweep()
            return self._lease is not None and self._lease in g._leases

    def view(self) -> RegistryView:
        g = self.group
        with g._lock:
            g._sweep()
            return RegistryView(
                g._revision,
                {m: {} for m in g._members},
                {p: Ownership(p, m, Epoch(e)) for p, (m, e, _l) in g._owners.items()},
            )

    def take(self, partition: int) -> Epoch | None:
        g = self.group
        with g._lock:
            g._sweep()
            if self._lease is None or self._lease not in g._leases or partition in g._owners:
                return None
            epoch = g._bump()
            g._owners[partition] = (self.member, epoch, self._lease)
            return Epoch(epoch)

    def release(self, partition: int, epoch: Epoch) -> None:
        g = self.group
        with g._lock:
            owner = g._owners.get(partition)
            if owner is not None and owner[1] == int(epoch):
                del g._owners[partition]
                g._bump()

    def wait_change(self, timeout: float) -> bool:
        g = self.group
        with g._lock:
            seen = g._revision
            return g._changed.wait_for(lambda: g._revision != seen, timeout)

    def pause_keepalive(self) -> None:
        """Stop refreshing the lease without revoking it, as a hung member would."""
        with self.group._lock:
            self._paused = True

    def leave(self) -> None:
        g = self.group
        with g._lock:
            if self._lease is not None:
                g._drop_lease(self._lease)
            self._lease = None

    def close(self) -> None:
        self.leave()
