"""EtcdWakeups: wake-ups for short delays across processes, as writes of one etcd key.

A process that adds triggers due soon puts `<key>` = "<sender>|<partition>:<earliest
fire time, epoch ms>,...";
every scheduler process watches the key and wakes the loops of the partitions it runs
(under the shard registry, each partition's owner; see `scheduler_core.wakeup`). The same
etcd the election and the registry use: no other server, and one small write per burst of
additions, not per trigger: while a put is on its way, further notifications are merged
into the next one.

Listeners of the notifying process itself are called at once, not through etcd; the
watch skips the process's own writes. A wake-up lost (etcd away, a watch restarting)
leaves the trigger to its partition's next regular tick, so nothing here is retried hard.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Mapping

import aetcd

from scheduler_core.election.etcd import _CHANNEL_OPTIONS, _TRANSIENT, _LoopThread, _one_line, _parse_endpoint
from scheduler_core.election.shutdown import cancel_quietly, close_quietly
from scheduler_core.ports import Wakeups
from scheduler_core.wakeup import Listener, Listeners, merge_due

log = logging.getLogger(__name__)

DEFAULT_KEY = "/switchyard/wake"
_RPC_TIMEOUT_S = 2.0


def encode_wake(sender: str, due: Mapping[int, int]) -> bytes:
    return f"{sender}|{','.join(f'{int(p)}:{int(at)}' for p, at in sorted(due.items()))}".encode()


def decode_wake(value: bytes) -> tuple[str, dict[int, int]]:
    """(sender, partition -> earliest fire time) of a key's value; a malformed item wakes nothing."""
    sender, _, rest = value.decode("utf-8", "replace").partition("|")
    due: dict[int, int] = {}
    for item in rest.split(","):
        p, _, at = item.partition(":")
        if p.strip().isdigit() and at.strip().isdigit():
            merge_due(due, {int(p): int(at)})
    return sender, due


class EtcdWakeups(Wakeups):
    def __init__(self, endpoint: str, *, key: str = DEFAULT_KEY) -> None:
        self._host, self._port = _parse_endpoint(endpoint)
        self._where = f"{self._host}:{self._port}"
        self._key = key.encode()
        self._sender = uuid.uuid4().hex[:12]
        self._listeners = Listeners()
        self._lock = threading.Lock()
        self._pending: dict[int, int] = {}
        self._sending = False
        self._watching = threading.Event()
        self._closed = False
        # loop-thread only:
        self._client: aetcd.Client | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._loop = _LoopThread.acquire()
        self.sent = 0  # key writes made (a burst of notifications is one write)
        self.heard = 0  # other processes' wake-ups received

    def __repr__(self) -> str:
        return f"EtcdWakeups(endpoint={self._where!r}, key={self._key.decode()!r})"

    # --- the blocking API --------------------------------------------------------------

    def notify(self, due: Mapping[int, int]) -> None:
        """Wake this process's listeners now, and the other processes' through one put
        (merged with any notification made while the previous put is on its way)."""
        woken = dict(due)
        if not woken or self._closed:
            return
        self._listeners(woken)
        with self._lock:
            merge_due(self._pending, woken)
            if self._sending:
                return
            self._sending = True
        asyncio.run_coroutine_threadsafe(self._send(), self._loop.loop)

    def listen(self, on_wake: Listener) -> Callable[[], None]:
        remove = self._listeners.add(on_wake)
        with self._lock:
            start = self._watch_task is None and not self._closed
        if start:
            self._loop.call(self._start_watch(), _RPC_TIMEOUT_S * 2, self._where)
        return remove

    def wait_watching(self, timeout: float) -> bool:
        """True once the watch stream is open (wake-ups from other processes are heard)."""
        return self._watching.wait(timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self._loop.call(self._shutdown(), _RPC_TIMEOUT_S * 3, self._where)
        except Exception as exc:
            log.warning("%r: close did not finish cleanly: %s", self, _one_line(exc))
        finally:
            _LoopThread.release(self._loop)

    # --- on the loop -------------------------------------------------------------------

    async def _connected(self) -> aetcd.Client:
        if self._client is None:
            self._client = aetcd.Client(self._host, self._port, timeout=_RPC_TIMEOUT_S, options=dict(_CHANNEL_OPTIONS))
        return self._client

    async def _send(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, {}
                if not batch or self._closed:
                    self._sending = False
                    return
            try:
                client = await self._connected()
                await client.put(self._key, encode_wake(self._sender, batch))
                self.sent += 1
            except _TRANSIENT as exc:
                log.info(
                    "%r: wake-up of %s not sent (%s); the next ticks find the triggers",
                    self,
                    sorted(batch),
                    _one_line(exc),
                )
            except Exception:  # never leave _sending set: every later notify would be dropped
                log.exception("%r: wake-up not sent", self)

    async def _start_watch(self) -> None:
        if self._watch_task is None:
            self._watch_task = asyncio.get_running_loop().create_task(self._watch())

    async def _watch(self) -> None:
        while True:
            watch = None
            try:
                client = await self._connected()
                watch = await client.watch(self._key, kind=aetcd.EventKind.PUT)
                self._watching.set()
                async for event in watch:
                    sender, woken = decode_wake(event.kv.value)
                    if sender != self._sender and woken:
                        self.heard += 1
                        self._listeners(woken)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("%r: watch interrupted (%s); watching again", self, _one_line(exc))
            finally:
                self._watching.clear()
                if watch is not None:
                    with contextlib.suppress(Exception):
                        await watch.cancel()
            await asyncio.sleep(0.5)

    async def _shutdown(self) -> None:
        task, self._watch_task = self._watch_task, None
        if task is not None:
            await cancel_quietly(task)
        client, self._client = self._client, None
        await close_quietly(client, _RPC_TIMEOUT_S)
