"""EtcdRegistry: the shard registry. Members, and who owns which partition, in etcd.

Keys under a prefix (default /switchyard/shards):
- `members/<id>`: one per live member, attached to the member's own lease. A clean stop
  revokes the lease (the key goes at once); a dead member's key goes when its lease
  expires.
- `owners/<partition index>`: the partition's owner, attached to the owner's lease and
  created only if absent, in one transaction. Its create_revision is the partition's
  fencing epoch: every new key gets a new, higher revision, so epochs strictly increase
  per partition (and are unique across partitions).

A partition is taken only when its owner key is absent: released by its previous owner
(a rebalance; the key is deleted once its chunks are done), or gone with that owner's
lease. The member refreshes its lease every TTL/4 on the shared etcd loop thread
(`election.etcd._LoopThread`), and watches the prefix so a membership change is seen at
once; `alive()` says no as soon as a TTL passed without a confirmed refresh.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import threading
from datetime import timedelta
from typing import Any

import aetcd

from scheduler_core.clock import SystemClock
from scheduler_core.election.etcd import (
    _CHANNEL_OPTIONS,
    _TRANSIENT,
    MIN_TTL_SECONDS,
    _LoopThread,
    _one_line,
    _parse_endpoint,
)
from scheduler_core.election.pacing import KeepAlivePace
from scheduler_core.election.shutdown import cancel_quietly, close_quietly
from scheduler_core.errors import ElectionError
from scheduler_core.model import Epoch
from scheduler_core.ports import Clock, Ownership, Registry, RegistryView

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "/switchyard/shards"


class EtcdRegistry(Registry):
    def __init__(
        self,
        endpoint: str,
        *,
        member: str,
        ttl: timedelta = timedelta(seconds=10),
        prefix: str = DEFAULT_PREFIX,
        clock: Clock | None = None,
        info: dict[str, Any] | None = None,
    ) -> None:
        self._host, self._port = _parse_endpoint(endpoint)
        self._where = f"{self._host}:{self._port}"
        if "/" in member or not member:
            raise ValueError(f"member id {member!r}: must be non-empty and without '/'")
        self.member = member
        self._prefix = prefix.rstrip("/")
        self._ttl_s = max(MIN_TTL_SECONDS, math.ceil(ttl.total_seconds()))
        self._rpc_timeout = min(2.0, max(0.5, self._ttl_s / 4))
        self._clock: Clock = clock or SystemClock()
        self._info = dict(info or {})
        self._lock = threading.Lock()
        self._lease_id: int | None = None
        self._confirmed_at = -1e18
        self._lease_ttl = float(self._ttl_s)
        self._lost: str | None = None
        self._paused = False
        self._closed = False
        self._changed = threading.Event()
        # loop-thread only:
        self._client: aetcd.Client | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._loop = _LoopThread.acquire()

    def __repr__(self) -> str:
        return f"EtcdRegistry(member={self.member!r}, endpoint={self._where!r}, prefix={self._prefix!r})"

    # --- keys ------------------------------------------------------------------------

    def _member_key(self, member: str) -> bytes:
        return f"{self._prefix}/members/{member}".encode()

    def _owner_key(self, partition: int) -> bytes:
        return f"{self._prefix}/owners/{int(partition)}".encode()

    # --- the blocking API --------------------------------------------------------------

    def _call(self, coro: Any, budget: float | None = None) -> Any:
        if self._closed:
            coro.close()
            raise ElectionError(f"{self!r} is closed")
        try:
            return self._loop.call(coro, budget or 4 * self._rpc_timeout + 5, self._where)
        except _TRANSIENT as exc:  # etcd down or unreachable: the callers retry, the CLI says so
            raise ElectionError(f"etcd at {self._where}: {_one_line(exc)}") from exc

    def join(self) -> None:
        """A new lease, this member's key on it, the keep-alive and the watch. Called again
        after the lease was lost: the member comes back as a new incarnation."""
        self._call(self._join())

    def alive(self) -> bool:
        """The lease is known alive: refreshed within its TTL and never reported gone."""
        with self._lock:
            if self._lease_id is None or self._lost is not None:
                return False
            return self._clock.monotonic() - self._confirmed_at < self._lease_ttl

    def view(self) -> RegistryView:
        return self._call(self._view())  # type: ignore[no-any-return]

    def take(self, partition: int) -> Epoch | None:
        """Own `partition` if nobody does: its epoch, or None (owned, or we are not live)."""
        return self._call(self._take(partition))  # type: ignore[no-any-return]

    def release(self, partition: int, epoch: Epoch) -> None:
        """Give `partition` up (only the key of this ownership: a successor's has another epoch)."""
        self._call(self._release(partition, epoch))

    def wait_change(self, timeout: float) -> bool:
        """Wait for a change under the prefix (a member or an owner came or went) or the timeout."""
        changed = self._changed.wait(timeout)
        self._changed.clear()
        return changed

    def pause_keepalive(self) -> None:
        """Stop refreshing the lease without revoking it, as a hung member would (tests)."""
        with self._lock:
            self._paused = True

    def leave(self) -> None:
        """Revoke the lease: this member's key and every partition it still owns go at once."""
        if not self._closed:
            self._call(self._leave())

    def close(self) -> None:
        if self._closed:
            return
        try:
            self._call(self._shutdown())
        except ElectionError as exc:
            log.warning("%r: close did not finish cleanly: %s", self, exc)
        finally:
            self._closed = True
            _LoopThread.release(self._loop)

    # --- on the loop -------------------------------------------------------------------

    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            self._client = aetcd.Client(
                self._host, self._port, timeout=self._rpc_timeout, options=dict(_CHANNEL_OPTIONS)
            )
        return self._client

    async def _join(self) -> None:
        await self._stop_tasks()
        client = await self._connected()
        old = self._lease_id
        if old is not None:
            with contextlib.suppress(*_TRANSIENT):
                await client.revoke_lease(old)
        sent = self._clock.monotonic()
        lease = await client.lease(self._ttl_s)
        body = json.dumps({**self._info, "lease": lease.id}).encode()
        await client.put(self._member_key(self.member), body, lease=lease.id)
        with self._lock:
            self._lease_id = lease.id
            self._lease_ttl = float(lease.ttl)
            self._confirmed_at = sent
            self._lost = None
            self._paused = False
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._keep_alive(lease.id, float(lease.ttl))), loop.create_task(self._watch())]
        self._changed.set()

    def _is_paused(self) -> bool:
        with self._lock:
            return self._paused

    async def _keep_alive(self, lease_id: int, ttl: float) -> None:
        pace = KeepAlivePace(ttl, self._is_paused)
        client = await self._connected()
        while True:
            await pace.next_round()
            sent = self._clock.monotonic()
            try:
                reply = await client.refresh_lease(lease_id)
                if reply is None or reply.TTL <= 0:
                    with self._lock:
                        self._lost = "the lease expired"
                    log.warning("%r: the member's lease expired", self)
                    self._changed.set()
                    return
                with self._lock:
                    self._confirmed_at = max(self._confirmed_at, sent)
                pace.failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the task die: a dead task is a silent loss
                if not pace.failing:
                    log.warning("%r: keep-alive failed, retrying: %s", self, _one_line(exc))
                pace.failing = True

    async def _watch(self) -> None:
        """Flag every change under the prefix; re-watch when the stream breaks (the member
        loop also re-reads on a timer, so a broken watch only delays, never hides, a change)."""
        client = await self._connected()
        while True:
            watch = None
            try:
                watch = await client.watch_prefix(self._prefix.encode() + b"/")
                async for _event in watch:
                    self._changed.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("%r: watch interrupted (%s); watching again", self, _one_line(exc))
            finally:
                if watch is not None:  # the server-side watcher too, not only our iterator
                    with contextlib.suppress(Exception):
                        await watch.cancel()
            await asyncio.sleep(0.5)
            self._changed.set()

    async def _view(self) -> RegistryView:
        client = await self._connected()
        found = await client.get_prefix(self._prefix.encode() + b"/")
        members: dict[str, dict[str, Any]] = {}
        owners: dict[int, Ownership] = {}
        base = self._prefix + "/"
        for kv in found:
            rest = kv.key.decode()[len(base) :]
            kind, _, name = rest.partition("/")
            if kind == "members":
                try:
                    members[name] = json.loads(kv.value.decode() or "{}")
                except ValueError:
                    members[name] = {}
            elif kind == "owners" and name.isdigit():
                owners[int(name)] = Ownership(int(name), kv.value.decode(), Epoch(kv.create_revision))
        return RegistryView(found.header.revision, members, owners)

    async def _take(self, partition: int) -> Epoch | None:
        with self._lock:
            lease_id = self._lease_id if self._lost is None else None
        if lease_id is None:
            return None
        client = await self._connected()
        tx = client.transactions
        key = self._owner_key(partition)
        won, responses = await client.transaction(
            compare=[tx.create(key) == 0],
            success=[tx.put(key, self.member.encode(), lease=lease_id), tx.get(key)],
            failure=[],
        )
        if not won:
            return None
        kv = responses[1][0][1]
        return Epoch(kv.create_revision)

    async def _release(self, partition: int, epoch: Epoch) -> None:
        client = await self._connected()
        tx = client.transactions
        key = self._owner_key(partition)
        await client.transaction(compare=[tx.create(key) == int(epoch)], success=[tx.delete(key)], failure=[])

    async def _leave(self) -> None:
        await self._stop_tasks()
        with self._lock:
            lease_id, self._lease_id = self._lease_id, None
        if lease_id is not None and self._client is not None:
            try:
                await self._client.revoke_lease(lease_id)
            except _TRANSIENT as exc:
                log.warning("%r: could not revoke the lease (it will expire): %s", self, _one_line(exc))

    async def _stop_tasks(self) -> None:
        tasks, self._tasks = self._tasks, []
        await cancel_quietly(*tasks)

    async def _shutdown(self) -> None:
        try:
            await self._leave()
        finally:
            client, self._client = self._client, None
            await close_quietly(client, self._rpc_timeout * 2)


def read_registry(endpoint: str, prefix: str = DEFAULT_PREFIX) -> RegistryView:
    """The registry as it is now, for `switchyard scheduler members` and tests: reads only."""
    reader = EtcdRegistry(endpoint, member="reader", prefix=prefix)
    try:
        return reader.view()
    finally:
        reader.close()
