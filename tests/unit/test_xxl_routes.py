"""xxl-job's route strategies (scheduler_core.executor.xxl_routes) against the rules of
the admin's ExecutorRoute* classes."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from scheduler_core.executor.xxl_routes import (
    CACHE_VALID_MS,
    XxlRouter,
    broadcast_address,
    consistent_hash,
    xxl_hash,
)

A = ["http://10.0.0.1:9999/", "http://10.0.0.2:9999/", "http://10.0.0.3:9999/"]


def test_first_and_last() -> None:
    r = XxlRouter()
    assert r.route("FIRST", 1, A).address == A[0]
    assert r.route("LAST", 1, A).address == A[-1]


def test_unknown_strategy_and_empty_list_are_refused() -> None:
    r = XxlRouter()
    assert r.route("NEAREST", 1, A).address is None and "NEAREST" in r.route("NEAREST", 1, A).message
    assert r.route(None, 1, A).address is None
    assert r.route("FIRST", 1, []).address is None


def test_round_starts_at_a_random_count_below_100_then_steps_per_job() -> None:
    rng = random.Random(5)
    start = random.Random(5).randrange(100)
    r = XxlRouter(rng=rng)
    got = [r.route("ROUND", 7, A).address for _ in range(6)]
    assert got == [A[(start + i) % 3] for i in range(6)]
    other = r.route("ROUND", 8, A).address  # a job of its own counter
    assert other in A


def test_round_restarts_above_a_million_and_every_24_hours() -> None:
    now = [1_000]
    r = XxlRouter(rng=random.Random(1), now_ms=lambda: now[0])
    r.route("ROUND", 7, A)
    r._round[7] = 1_000_001
    r.route("ROUND", 7, A)
    assert r._round[7] < 100  # a new random start
    r._round[7] = 500
    now[0] += CACHE_VALID_MS + 1
    r.route("ROUND", 7, A)
    assert r._round[7] < 100  # the map was cleared


def test_random_uses_every_address() -> None:
    r = XxlRouter(rng=random.Random(3))
    assert set(r.route("RANDOM", 1, A).address for _ in range(100)) == set(A)


def test_consistent_hash_matches_xxl_jobs_java() -> None:
    # oracle: the admin's ExecutorRouteConsistentHash (3.4.2) run on a JVM for jobs 1..40
    # over these three addresses printed the index of each job's executor
    addresses = ["http://127.0.0.1:9999/", "http://127.0.0.1:9998/", "http://10.0.0.3:9999/"]
    java = "2201101211112112112111000022122212210212"
    assert "".join(str(addresses.index(consistent_hash(j, addresses))) for j in range(1, 41)) == java
    assert (xxl_hash("7"), xxl_hash("SHARD-x-NODE-0")) == (1608782991, 3005001017)
    r = XxlRouter()
    assert r.route("CONSISTENT_HASH", 5, addresses).address == addresses[int(java[4])]


def test_consistent_hash_moves_few_jobs_when_an_executor_goes() -> None:
    before = {j: consistent_hash(j, A) for j in range(1, 301)}
    after = {j: consistent_hash(j, A[:2]) for j in range(1, 301)}
    moved = [j for j in before if before[j] != after[j]]
    assert moved and all(before[j] == A[2] for j in moved)  # only the gone executor's jobs move


def test_lfu_takes_the_least_used_and_spreads_evenly() -> None:
    r = XxlRouter(rng=random.Random(2))
    counts = Counter(r.route("LEAST_FREQUENTLY_USED", 9, A).address for _ in range(300))
    assert max(counts.values()) - min(counts.values()) <= 3
    assert all(v < 3 + 100 for v in r._lfu[9].values())


def test_lfu_drops_gone_addresses_and_starts_new_ones_randomly_below_n() -> None:
    r = XxlRouter(rng=random.Random(4))
    for _ in range(10):
        r.route("LEAST_FREQUENTLY_USED", 9, A)
    new = "http://10.0.0.9:9999/"
    got = r.route("LEAST_FREQUENTLY_USED", 9, [*A[:2], new]).address
    assert set(r._lfu[9]) == {A[0], A[1], new}
    assert got == new  # its random start (< 3) is below the others' counts (>= 3)


def test_lru_cycles_in_first_seen_order_and_follows_the_list() -> None:
    r = XxlRouter()
    assert [r.route("LEAST_RECENTLY_USED", 3, A).address for _ in range(4)] == [A[0], A[1], A[2], A[0]]
    # A[1] is now the eldest; A[1] goes away, a new address is appended at the end
    new = "http://10.0.0.9:9999/"
    assert r.route("LEAST_RECENTLY_USED", 3, [A[0], A[2], new]).address == A[2]
    assert r.route("LEAST_RECENTLY_USED", 3, [A[0], A[2], new]).address == A[0]
    assert r.route("LEAST_RECENTLY_USED", 3, [A[0], A[2], new]).address == new


def test_failover_takes_the_first_address_that_answers_beat() -> None:
    asked: list[str] = []

    def beat(address: str) -> tuple[bool, str]:
        asked.append(address)
        return address == A[1], "down" if address != A[1] else ""

    r = XxlRouter(beat=beat)
    assert r.route("FAILOVER", 1, A).address == A[1] and asked == A[:2]
    dead = XxlRouter(beat=lambda a: (False, "connection refused"))
    route = dead.route("FAILOVER", 1, A)
    assert route.address is None and route.message.count("connection refused") == 3


def test_busyover_asks_idle_beat_for_the_given_job_and_takes_the_first_idle() -> None:
    asked: list[tuple[str, int]] = []

    def idle(address: str, job_id: int) -> tuple[bool, str]:
        asked.append((address, job_id))
        return address == A[2], "job thread is running or has trigger queue."

    r = XxlRouter(idle_beat=idle)
    assert r.route("BUSYOVER", 7, A, idle_job_id=2**31 - 8).address == A[2]
    assert asked == [(a, 2**31 - 8) for a in A]
    raising = XxlRouter(idle_beat=lambda a, j: (_ for _ in ()).throw(OSError("boom")))
    assert raising.route("BUSYOVER", 7, A).address is None


@pytest.mark.parametrize("index,expected", [(0, A[0]), (2, A[2]), (3, A[0]), (9, A[0])])
def test_sharding_broadcast_item_i_goes_to_address_i_or_the_first(index: int, expected: str) -> None:
    assert broadcast_address(index, A) == expected
    assert XxlRouter().route("SHARDING_BROADCAST", 1, A, index=index).address == expected
