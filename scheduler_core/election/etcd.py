"""EtcdElection: leader election on etcd leases, with the leader key's create_revision as
the fencing epoch.

The recipe (measured on etcd 3.4, see the infra probe notes):
- campaign: grant a lease, then one transaction "if create_revision(key) == 0: put(key,
  name, lease) + get(key) else get(key)". The winner's epoch is the key's create_revision,
  which strictly increases across leaders because every new key gets a new revision.
- followers watch the key for a DELETE from header.revision + 1 of their failed campaign
  (so no deletion between the two calls is missed), then campaign again.
- the leader refreshes the lease every TTL/4 and re-reads the key; no client library does
  this in the background for us.

`aetcd` is asyncio-only. All instances of a process share one event loop on one daemon
thread (see `_LoopThread` for why not one per instance); the public API is synchronous and
each call hands a coroutine to that loop. Only this module imports `aetcd`: nothing
etcd-shaped crosses the port.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import math
import random
import threading
from collections.abc import Coroutine
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import aetcd

from scheduler_core.clock import SystemClock
from scheduler_core.election.shutdown import cancel_quietly, close_quietly
from scheduler_core.errors import ElectionError
from scheduler_core.metrics import election_error, election_reconnect
from scheduler_core.model import Epoch
from scheduler_core.ports import Clock, Election

log = logging.getLogger(__name__)

T = TypeVar("T")

# etcd grants at least 2 s whatever is asked (the minimum follows its election timeout).
MIN_TTL_SECONDS = 2

# What a call to etcd raises when the server is down, slow or restarting. Anything else is
# a bug and is left to propagate.
_TRANSIENT: tuple[type[BaseException], ...] = (
    aetcd.ClientError,
    aetcd.rpc.AioRpcError,
    asyncio.TimeoutError,
    OSError,
)

# gRPC backs reconnects off up to 120 s by default: after an etcd restart the channel could
# stay "down" long after the server is back, and the lease would expire for nothing.
_CHANNEL_OPTIONS = {
    "grpc.initial_reconnect_backoff_ms": 100,
    "grpc.min_reconnect_backoff_ms": 100,
    "grpc.max_reconnect_backoff_ms": 1000,
}

LOOP_THREAD_NAME = "switchyard-etcd-loop"


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _LoopThread:
    """The asyncio loop (on a daemon thread) that every EtcdElection of the process uses.

    One loop, not one per instance: gRPC's asyncio stack anchors its completion-queue
    poller to the first loop that uses it and forwards other loops' events through that
    one, and gRPC documents a single loop as the supported setup. One shared loop keeps
    us on that path, costs one thread whatever the number of candidates (tests run two or
    three per process), and is cheap because every etcd call is a non-blocking coroutine.
    The loop is reference-counted: the last instance to close stops it and joins the
    thread, so nothing of ours keeps running after close().
    """

    _guard = threading.Lock()
    _current: _LoopThread | None = None
    _users = 0

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self._main, name=LOOP_THREAD_NAME, daemon=True)
        self.thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
        finally:
            # Whatever is still scheduled (nothing, when every instance closed cleanly) is
            # cancelled, so the loop closes without "task was destroyed" noise.
            pending = asyncio.all_tasks(self.loop)
            for task in pending:
                task.cancel()
            if pending:
                self.loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            self.loop.close()

    @classmethod
    def acquire(cls) -> _LoopThread:
        with cls._guard:
            if cls._current is None:
                cls._current = _LoopThread()
            cls._users += 1
            return cls._current

    @classmethod
    def release(cls, used: _LoopThread) -> None:
        with cls._guard:
            if cls._current is not used:
                return
            cls._users -= 1
            if cls._users > 0:
                return
            cls._current = None
            # Joined under the guard, so a new instance never races a loop still stopping.
            used.loop.call_soon_threadsafe(used.loop.stop)
            used.thread.join(timeout=5)

    def call(self, coro: Coroutine[Any, Any, T], budget: float, where: str) -> T:
        """Run coro on the loop and wait for it, at most `budget` seconds."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise RuntimeError("EtcdElection's blocking API was called from its own event loop")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout=budget)
        except concurrent.futures.TimeoutError:
            # Every coroutine here bounds its own waits; this is the last line of defence.
            future.cancel()
            raise ElectionError(f"etcd at {where}: no answer within {budget:.1f}s") from None


@dataclass(slots=True)
class _Term:
    """One leadership term of this candidate. Written on the loop thread, read by callers,
    always under EtcdElection._lock."""

    epoch: Epoch
    lease_id: int
    ttl: float  # as granted by etcd
    # Monotonic time at which the last successful refresh was *sent*. The server refreshed
    # the lease after that, so the lease lives at least until confirmed_at + ttl: deciding
    # from this instant errs on the side of "not leader".
    confirmed_at: float
    lost: str | None = None


@dataclass(frozen=True, slots=True)
class _Won:
    epoch: Epoch


@dataclass(frozen=True, slots=True)
class _Taken:
    watch_from: int  # revision after the failed campaign: a DELETE from here frees the seat


class _StreamEnded(Exception):
    """A watch stream stopped without an event or an error (treated like a lost connection)."""


class EtcdElection(Election):
    def __init__(
        self,
        endpoint: str,
        *,
        name: str,
        ttl: timedelta = timedelta(seconds=10),
        key: str = "/switchyard/scheduler/leader",
        backoff: timedelta = timedelta(milliseconds=200),
        max_backoff: timedelta = timedelta(seconds=5),
        clock: Clock | None = None,
    ) -> None:
        """`clock` is read for deadlines and lease ages only; the waits themselves are real
        (etcd's leases run on real time), so pass a clock that follows real time."""
        self._host, self._port = _parse_endpoint(endpoint)
        self._where = f"{self._host}:{self._port}"
        self.name = name
        self._key = key.encode("utf-8")
        self._ttl_s = max(MIN_TTL_SECONDS, math.ceil(ttl.total_seconds()))
        self._backoff = max(0.01, backoff.total_seconds())
        self._max_backoff = max(self._backoff, max_backoff.total_seconds())
        self._clock: Clock = clock or SystemClock()
        # Every RPC gets a deadline of at most TTL/4 (one keep-alive interval), so a hung
        # call stalls neither a campaign's deadline nor the keep-alive's retries for long.
        self._rpc_timeout = min(2.0, max(0.5, self._ttl_s / 4))

        self._lock = threading.Lock()
        self._term: _Term | None = None
        self._paused = False
        self._closed = False
        self._ever_reached = False
        # loop-thread only:
        self._outage = False
        self._client: aetcd.Client | None = None
        self._keepalive_task: asyncio.Task[None] | None = None

        self._loop = _LoopThread.acquire()

    def __repr__(self) -> str:
        return f"EtcdElection(name={self.name!r}, endpoint={self._where!r}, key={self._key.decode()!r})"

    # --- the port --------------------------------------------------------------------

    def campaign(self, timeout: timedelta) -> Epoch | None:
        """Lead (the epoch) or, once the timeout passed, None.

        etcd being down for a while within the timeout is ridden out with back-off. If
        etcd was never reached at all by this instance (wrong URL, server not up), the
        timeout ends in ElectionError instead, so a misconfiguration is reported rather
        than looking like an eternal follower.
        """
        self._check_open()
        seconds = max(0.0, timeout.total_seconds())
        return self._loop.call(self._campaign(seconds), seconds + 3 * self._rpc_timeout + 5, self._where)

    def is_leader(self) -> bool:
        with self._lock:
            term = self._term
            if term is None or term.lost is not None:
                return False
            # No I/O here: the keep-alive task re-verifies the lease and the key every TTL/4.
            # Past the TTL without a confirmation the lease may be gone, so we say no.
            return self._clock.monotonic() - term.confirmed_at < term.ttl

    def epoch(self) -> Epoch | None:
        with self._lock:
            term = self._term
        return term.epoch if term is not None and self.is_leader() else None

    def pause_keepalive(self) -> None:
        """Stop refreshing the lease without revoking it, as a hung or crashed leader would."""
        with self._lock:
            self._paused = True

    def resign(self) -> None:
        """Give the seat up: delete the key if it is still ours, revoke the lease. When etcd
        cannot be reached this only logs: the lease is no longer refreshed and expires."""
        if self._closed:
            return
        self._loop.call(self._resign(), 3 * self._rpc_timeout + 5, self._where)

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            self._loop.call(self._shutdown(), 4 * self._rpc_timeout + 5, self._where)
        except ElectionError as exc:
            log.warning("%r: close did not finish cleanly: %s", self, exc)
        finally:
            _LoopThread.release(self._loop)

    # --- on the loop -----------------------------------------------------------------

    async def _campaign(self, timeout_s: float) -> Epoch | None:
        deadline = self._clock.monotonic() + timeout_s
        delay = self._backoff
        last_error: BaseException | None = None
        while True:
            try:
                outcome = await self._attempt()
                self._reached()
                last_error = None
                delay = self._backoff
                if isinstance(outcome, _Won):
                    return outcome.epoch
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    return None
                # Re-check at least once per TTL even without an event: a watch stream can
                # die quietly, and one transaction per TTL is not a busy loop.
                freed = await self._wait_for_vacancy(outcome.watch_from, min(remaining, float(self._ttl_s)))
                if not freed and self._clock.monotonic() >= deadline:
                    return None
            except _TRANSIENT + (_StreamEnded,) as exc:  # noqa: RUF005 - mypy reads a starred tuple as no exception type
                self._unreached(exc)
                last_error = exc
                remaining = deadline - self._clock.monotonic()
                if remaining <= 0:
                    break
                # exponential back-off with jitter, so a crowd of followers spreads out
                await asyncio.sleep(min(remaining, random.uniform(delay / 2, delay)))
                delay = min(delay * 2, self._max_backoff)
        assert last_error is not None
        if not self._ever_reached:
            raise ElectionError(f"etcd unreachable at {self._where}: {_one_line(last_error)}")
        return None

    def _reached(self) -> None:
        self._ever_reached = True
        if self._outage:
            log.info("%r: etcd answers again", self)
            election_reconnect("campaign")
            self._outage = False

    def _unreached(self, exc: BaseException) -> None:
        election_error("campaign")  # every failed call is counted...
        # ...but logged once per outage, not once per retry: the scheduler campaigns every second
        if not self._outage:
            log.warning("%r: etcd call failed, retrying: %s", self, _one_line(exc))
            self._outage = True

    async def _attempt(self) -> _Won | _Taken:
        client = await self._connected()
        tx = client.transactions
        sent = self._clock.monotonic()
        lease = await client.lease(self._ttl_s)
        try:
            won, responses = await client.transaction(
                compare=[tx.create(self._key) == 0],
                success=[tx.put(self._key, self.name.encode("utf-8"), lease=lease.id), tx.get(self._key)],
                failure=[tx.get(self._key)],
            )
        except BaseException:
            # The put may have landed without us hearing of it: revoking frees the seat now
            # instead of after a TTL of nobody leading.
            await self._revoke_quietly(lease.id)
            raise
        if won:
            kv = responses[1][0][1]
            self._start_term(_Term(Epoch(kv.create_revision), lease.id, float(lease.ttl), sent))
            return _Won(Epoch(kv.create_revision))
        # The seat is taken; this lease would only expire unused.
        await self._revoke_quietly(lease.id)
        found = responses[0]
        if not found:
            raise _StreamEnded("the leader key vanished inside a transaction")
        kv = found[0][1]
        with self._lock:
            term = self._term
        if term is not None and term.lost is None and kv.lease == term.lease_id and kv.create_revision == term.epoch:
            # Still ours (campaign again while leading, or after an outage the lease
            # survived). The key only proves the lease is alive *now*, not for how long:
            # refresh it, and count the lease's life from that refresh.
            refreshed_at = self._clock.monotonic()
            reply = await client.refresh_lease(term.lease_id)
            if reply is not None and reply.TTL > 0:
                with self._lock:
                    self._paused = False
                    term.confirmed_at = max(term.confirmed_at, refreshed_at)
                if self._keepalive_task is None or self._keepalive_task.done():
                    self._keepalive_task = asyncio.get_running_loop().create_task(self._keep_alive(term))
                return _Won(term.epoch)
            self._lose(term, "the lease expired")
        return _Taken(kv.header.revision + 1)

    def _start_term(self, term: _Term) -> None:
        if self._keepalive_task is not None:
            self._keepalive_task.cancel()
        with self._lock:
            self._term = term
            self._paused = False
        self._keepalive_task = asyncio.get_running_loop().create_task(self._keep_alive(term))

    async def _wait_for_vacancy(self, watch_from: int, wait_s: float) -> bool:
        """True when the key was deleted, False when wait_s passed first."""
        client = await self._connected()
        try:
            watch = await client.watch(self._key, start_revision=watch_from, kind=aetcd.EventKind.DELETE)
        except aetcd.RevisionCompactedError:
            return True  # history is gone: just campaign again
        events = aiter(watch)
        try:
            async with asyncio.timeout(wait_s):
                async for _event in events:
                    return True
        except TimeoutError:
            return False
        finally:
            with contextlib.suppress(Exception):
                await watch.cancel()
            with contextlib.suppress(Exception):
                await events.aclose()
        raise _StreamEnded("watch stream ended")

    async def _keep_alive(self, term: _Term) -> None:
        """Refresh the lease and re-read the key every TTL/4 until the term is lost.

        Failures are retried (an etcd restart keeps the lease: leases are persisted and
        renewed when the server comes back); the term is lost only when etcd says the lease
        is gone or the key is no longer ours. Meanwhile is_leader() says no once a TTL has
        passed without a confirmation.
        """
        interval = term.ttl / 4
        failing = False
        client = await self._connected()
        while True:
            await asyncio.sleep(min(interval, 0.5) if failing else interval)
            with self._lock:
                paused = self._paused
            if paused:
                continue  # a hung leader: nothing is sent, the lease runs out
            sent = self._clock.monotonic()
            try:
                reply = await client.refresh_lease(term.lease_id)
                if reply is None:
                    raise _StreamEnded("keep-alive stream ended without a reply")
                if reply.TTL <= 0:
                    self._lose(term, "the lease expired")
                    return
                kv = await client.get(self._key)
                if kv is None or kv.create_revision != term.epoch or kv.lease != term.lease_id:
                    self._lose(term, "the leader key is no longer ours")
                    await self._revoke_quietly(term.lease_id)
                    return
                with self._lock:
                    term.confirmed_at = max(term.confirmed_at, sent)
                if failing:
                    log.info("%r: keep-alive of epoch %s recovered", self, term.epoch)
                    election_reconnect("keepalive")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never let the task die: a dead task is a silent loss
                election_error("keepalive")
                if not failing:
                    log.warning("%r: keep-alive of epoch %s failed, retrying: %s", self, term.epoch, _one_line(exc))
                failing = True

    def _lose(self, term: _Term, reason: str) -> None:
        with self._lock:
            term.lost = reason
        log.warning("%r: lost leadership of epoch %s: %s", self, term.epoch, reason)

    async def _resign(self) -> None:
        task, self._keepalive_task = self._keepalive_task, None
        if task is not None:
            await cancel_quietly(task)
        with self._lock:
            term, self._term = self._term, None
        if term is None or term.lost is not None or self._client is None:
            return
        client = self._client
        tx = client.transactions
        try:
            # Only our key: a successor's key has another create_revision.
            await client.transaction(
                compare=[tx.create(self._key) == term.epoch], success=[tx.delete(self._key)], failure=[]
            )
        except _TRANSIENT as exc:
            election_error("resign")
            log.warning("%r: could not delete the leader key (the lease will expire): %s", self, _one_line(exc))
        await self._revoke_quietly(term.lease_id)

    async def _shutdown(self) -> None:
        try:
            await self._resign()
        finally:
            client, self._client = self._client, None
            await close_quietly(client, self._rpc_timeout * 2)

    async def _revoke_quietly(self, lease_id: int) -> None:
        if self._client is None:
            return
        try:
            await self._client.revoke_lease(lease_id)
        except _TRANSIENT:
            pass  # already gone, or etcd is away: the lease expires by itself

    async def _connected(self) -> aetcd.Client:
        # Created on the loop thread: the client's asyncio primitives belong to this loop.
        if self._client is None:
            self._client = aetcd.Client(
                self._host, self._port, timeout=self._rpc_timeout, options=dict(_CHANNEL_OPTIONS)
            )
        return self._client

    def _check_open(self) -> None:
        if self._closed:
            raise ElectionError(f"{self!r} is closed")


def _parse_endpoint(endpoint: str) -> tuple[str, int]:
    """ "http://host:port" or "host:port" (etcd's client URL). TLS is not supported here."""
    raw = endpoint.strip()
    parts = urlsplit(raw if "://" in raw else f"http://{raw}")
    if parts.scheme != "http":
        raise ValueError(f"unsupported etcd endpoint scheme {parts.scheme!r}: only http:// is supported")
    try:
        port = parts.port
    except ValueError:
        port = None
    if not parts.hostname or port is None:
        raise ValueError(f"etcd endpoint must be host:port, got {endpoint!r}")
    return parts.hostname, port
