"""xxl-job's executor route strategies (`ExecutorRouteStrategyEnum` and the classes under
`route/strategy`, admin 2.3–3.4.2), for the xxl-job bridge.

The admin routes each trigger over its executor group's live, sorted address list; the
stateful strategies keep per-job maps in static fields of the admin JVM. Here one
`XxlRouter` holds that state for one bridge (one process), with the same rules:

* FIRST / LAST: the first / last address.
* ROUND: a per-job counter starting at a random 0..99, +1 per trigger, restarted at a
  new random start above 1,000,000; address = list[count % n]. Every map is cleared
  24 h after its last clearing (the admin's CACHE_VALID_TIME).
* RANDOM: a uniformly random address.
* CONSISTENT_HASH: 100 virtual nodes per address, `hash("SHARD-" + address + "-NODE-" + i)`,
  the job at the first node at or after `hash(str(jobId))` on the ring, wrapping round;
  hash = the first four bytes of the MD5 digest, little-endian, as an unsigned 32-bit
  number (3.x; the same value the 2.x code computes).
* LEAST_FREQUENTLY_USED: a per-job count per address, a new (or >1,000,000) address
  starting at a random 0..n-1; gone addresses are dropped; the address with the
  smallest count is taken and its count incremented. Java sorts a HashMap's entries
  stably, so equal counts are taken in the HashMap's iteration order; here they are
  taken in address order (the one documented difference: which of two equally used
  executors goes first).
* LEAST_RECENTLY_USED: a per-job access-ordered map; new addresses are appended, gone
  ones dropped, and the eldest entry is taken (and so moves to the end).
* FAILOVER: `beat` each address in order, the first that answers code 200.
* BUSYOVER: `idleBeat {jobId}` each address in order, the first that answers 200 (its
  job thread neither running nor queued).
* SHARDING_BROADCAST: not a router: item i goes to list[i], or list[0] when i is past
  the end (`broadcast_address`).

An unknown or empty strategy name is refused, as the admin's trigger fails on it
(`match(...)` returns null).
"""

from __future__ import annotations

import hashlib
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

VIRTUAL_NODE_NUM = 100
CACHE_VALID_MS = 24 * 60 * 60 * 1000
COUNT_RESET_ABOVE = 1_000_000

STRATEGIES = (
    "FIRST",
    "LAST",
    "ROUND",
    "RANDOM",
    "CONSISTENT_HASH",
    "LEAST_FREQUENTLY_USED",
    "LEAST_RECENTLY_USED",
    "FAILOVER",
    "BUSYOVER",
    "SHARDING_BROADCAST",
)

# (ok, message) of one probe; the message is the executor's msg or the error text
Probe = Callable[[str], "tuple[bool, str]"]
IdleProbe = Callable[[str, int], "tuple[bool, str]"]


@dataclass(frozen=True, slots=True)
class Route:
    address: str | None
    message: str = ""


def xxl_hash(key: str) -> int:
    """ExecutorRouteConsistentHash.hash: MD5, bytes 0..3 little-endian, unsigned."""
    d = hashlib.md5(key.encode("utf-8")).digest()
    return (d[3] << 24) | (d[2] << 16) | (d[1] << 8) | d[0]


def consistent_hash(job_id: int, addresses: Sequence[str]) -> str:
    ring: dict[int, str] = {}
    for address in addresses:
        for i in range(VIRTUAL_NODE_NUM):
            ring[xxl_hash(f"SHARD-{address}-NODE-{i}")] = address  # a later address wins a collision (TreeMap.put)
    job_hash = xxl_hash(str(job_id))
    keys = sorted(ring)
    for k in keys:  # ceilingEntry
        if k >= job_hash:
            return ring[k]
    return ring[keys[0]]


def broadcast_address(index: int, addresses: Sequence[str]) -> str:
    return addresses[index] if index < len(addresses) else addresses[0]


class XxlRouter:
    def __init__(
        self,
        *,
        beat: Probe | None = None,
        idle_beat: IdleProbe | None = None,
        rng: random.Random | None = None,
        now_ms: Callable[[], int] | None = None,
    ) -> None:
        self._beat = beat
        self._idle_beat = idle_beat
        self._rng = rng or random.Random()
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._lock = threading.Lock()
        self._round: dict[int, int] = {}
        self._round_valid = 0
        self._lfu: dict[int, dict[str, int]] = {}
        self._lfu_valid = 0
        self._lru: dict[int, OrderedDict[str, None]] = {}
        self._lru_valid = 0

    def route(
        self,
        strategy: str | None,
        job_id: int,
        addresses: Sequence[str],
        *,
        idle_job_id: int | None = None,
        index: int = 0,
    ) -> Route:
        """The address for one trigger of `job_id`. `idle_job_id`: the job id BUSYOVER asks
        about (the bridge's own job thread on the executor); `index`: the broadcast item."""
        if not addresses:
            return Route(None, "executor address list is empty")
        name = (strategy or "").strip()
        if name == "FIRST":
            return Route(addresses[0])
        if name == "LAST":
            return Route(addresses[-1])
        if name == "ROUND":
            return Route(addresses[self._round_count(job_id) % len(addresses)])
        if name == "RANDOM":
            return Route(addresses[self._rng.randrange(len(addresses))])
        if name == "CONSISTENT_HASH":
            return Route(consistent_hash(job_id, addresses))
        if name == "LEAST_FREQUENTLY_USED":
            return Route(self._lfu_pick(job_id, addresses))
        if name == "LEAST_RECENTLY_USED":
            return Route(self._lru_pick(job_id, addresses))
        if name == "FAILOVER":
            return self._first_ok(addresses, lambda a: self._probe_beat(a), "beat")
        if name == "BUSYOVER":
            probe_id = job_id if idle_job_id is None else idle_job_id
            return self._first_ok(addresses, lambda a: self._probe_idle(a, probe_id), "idleBeat")
        if name == "SHARDING_BROADCAST":
            return Route(broadcast_address(index, addresses))
        return Route(None, f"route strategy {strategy!r} is not one of xxl-job's ({', '.join(STRATEGIES)})")

    # -- the stateful strategies -------------------------------------------------------

    def _round_count(self, job_id: int) -> int:
        with self._lock:
            now = self._now_ms()
            if now > self._round_valid:
                self._round.clear()
                self._round_valid = now + CACHE_VALID_MS
            count = self._round.get(job_id)
            count = self._rng.randrange(100) if count is None or count > COUNT_RESET_ABOVE else count + 1
            self._round[job_id] = count
            return count

    def _lfu_pick(self, job_id: int, addresses: Sequence[str]) -> str:
        with self._lock:
            now = self._now_ms()
            if now > self._lfu_valid:
                self._lfu.clear()
                self._lfu_valid = now + CACHE_VALID_MS
            counts = self._lfu.setdefault(job_id, {})
            for a in addresses:
                if a not in counts or counts[a] > COUNT_RESET_ABOVE:
                    counts[a] = self._rng.randrange(len(addresses))
            live = set(addresses)
            for gone in [a for a in counts if a not in live]:
                del counts[gone]
            order = {a: i for i, a in enumerate(addresses)}
            pick = min(counts, key=lambda a: (counts[a], order[a]))
            counts[pick] += 1
            return pick

    def _lru_pick(self, job_id: int, addresses: Sequence[str]) -> str:
        with self._lock:
            now = self._now_ms()
            if now > self._lru_valid:
                self._lru.clear()
                self._lru_valid = now + CACHE_VALID_MS
            seen = self._lru.setdefault(job_id, OrderedDict())
            for a in addresses:
                if a not in seen:
                    seen[a] = None
            live = set(addresses)
            for gone in [a for a in seen if a not in live]:
                del seen[gone]
            eldest = next(iter(seen))
            seen.move_to_end(eldest)  # LinkedHashMap(accessOrder=true).get
            return eldest

    # -- the probing strategies --------------------------------------------------------

    def _probe_beat(self, address: str) -> tuple[bool, str]:
        if self._beat is None:
            raise RuntimeError("FAILOVER needs a beat probe")
        return self._beat(address)

    def _probe_idle(self, address: str, job_id: int) -> tuple[bool, str]:
        if self._idle_beat is None:
            raise RuntimeError("BUSYOVER needs an idleBeat probe")
        return self._idle_beat(address, job_id)

    @staticmethod
    def _first_ok(addresses: Sequence[str], probe: Callable[[str], tuple[bool, str]], what: str) -> Route:
        seen: list[str] = []
        for address in addresses:
            try:
                ok, msg = probe(address)
            except Exception as exc:  # noqa: BLE001 - a probe that fails is a "no", like the admin's catch
                ok, msg = False, f"{type(exc).__name__}: {exc}"
            if ok:
                return Route(address)
            seen.append(f"{what} {address}: {msg}")
        return Route(None, "; ".join(seen))
