"""The pace of an etcd lease keep-alive loop, shared by the leader election and the shard
registry: one refresh every TTL/4, every 0.5 s at most while refreshes fail (so a lease
survives a short outage), and none while the member is paused (a hung process: its lease
runs out, as it would for real)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class KeepAlivePace:
    def __init__(self, ttl: float, paused: Callable[[], bool]) -> None:
        self.interval = ttl / 4
        self.failing = False  # the last refresh failed: retry sooner
        self._paused = paused

    async def next_round(self) -> None:
        """Wait until the next refresh is due and the member is not paused."""
        while True:
            await asyncio.sleep(min(self.interval, 0.5) if self.failing else self.interval)
            if not self._paused():
                return
