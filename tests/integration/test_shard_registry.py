"""The shard registry on the real servers: 3 members (`switchyard scheduler run --shards`,
separate processes) admit a burst; one is killed -9 mid-burst, a fourth joins, one is
SIGSTOPped past its lease and resumed. Every due occurrence fires at least once,
duplicates share their command id, no row stays acquired past deadline + reclaim
interval, and no partition is ever admitted by two owners at once: per partition, the
fired records of each epoch span a time interval that overlaps no other epoch's."""

from __future__ import annotations

import itertools
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from scheduler_core.assignment import partitions_of
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.election.registry import EtcdRegistry
from scheduler_core.errors import ElectionError
from scheduler_core.fence import Fence, decode_fence
from scheduler_core.model import Job, JobCode
from scheduler_core.ports import Partition, partition_fence
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.counting import CountingExecutor, assert_burst_done, one_shot_burst
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]
PARTITIONS, TTL_S, DEADLINE_S, RECLAIM_S = 12, 2.0, 3.0, 0.5


def _owners(etcd: str, prefix: str) -> dict[int, tuple[str, int]]:
    """partition -> (owner, epoch), read through one long-lived observer per registry (a
    new gRPC connection per 50 ms poll is what timed out under load, not etcd). A failed
    read is retried for up to 10 s: the observer is not under test, the members are."""
    reader = _OBSERVERS.get((etcd, prefix))
    if reader is None:
        reader = _OBSERVERS[(etcd, prefix)] = EtcdRegistry(etcd, member="observer", prefix=prefix)
    bound = time.monotonic() + 10
    while True:
        try:
            return {p: (o.member, int(o.epoch)) for p, o in reader.view().owners.items()}
        except ElectionError:
            if time.monotonic() > bound:
                raise
            time.sleep(0.2)


_OBSERVERS: dict[tuple[str, str], EtcdRegistry] = {}


@pytest.fixture(autouse=True)
def _close_observers() -> Iterator[None]:
    yield
    while _OBSERVERS:
        _OBSERVERS.popitem()[1].close()


def _wait_owned(etcd: str, prefix: str, ok, bound_s: float) -> float:  # type: ignore[no-untyped-def]
    """Seconds until `ok(owners)` holds (polled every 50 ms), at most bound_s."""
    started = time.monotonic()
    while time.monotonic() - started < bound_s:
        if ok(_owners(etcd, prefix)):
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"registry never settled: {_owners(etcd, prefix)}")


def _assigned(members: set[str]):  # type: ignore[no-untyped-def]
    """The registry settled on the rendezvous assignment of `members`: each partition owned
    by the member the rule gives it. A member starved past its short lease on a loaded box
    drops its partitions and rejoins under the same name, winning the same ones back: the
    settled state is this one whatever lapsed on the way, so the test waits for it rather
    than for the first moment every partition has some owner (which can be a transient
    one, holding a lapsed member's share until it is back)."""
    want = {p: m for m in members for p in partitions_of(m, members, range(PARTITIONS))}
    return lambda o: {p: m for p, (m, _) in o.items()} == want


def _check_no_overlap(records: list, partitions: int) -> dict[int, int]:  # type: ignore[type-arg]
    """Per partition, each epoch's fired records span [first fired_at, last fired_at]; two
    epochs' spans never overlap, and a later span has a higher epoch. Returns epochs seen
    per partition."""
    spans: dict[int, dict[int, list[datetime]]] = defaultdict(lambda: defaultdict(list))
    for r in records:
        spans[r.trigger_id % partitions][int(r.epoch)].append(r.fired_at)
    for p, by_epoch in spans.items():
        ordered = sorted((min(ts), max(ts), e) for e, ts in by_epoch.items())
        for (_s1, e1, ep1), (s2, _e2, ep2) in itertools.pairwise(ordered):
            assert e1 < s2, f"partition {p}: epoch {ep1} admitted until {e1}, epoch {ep2} from {s2}: two owners at once"
            assert ep1 < ep2, f"partition {p}: epoch {ep2} admitted before epoch {ep1}"
    return {p: len(v) for p, v in spans.items()}


def _burst(tmp_path: Path, rounds: int, seed: int) -> None:
    rng = random.Random(seed)
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    topics = f"sh{uuid.uuid4().hex[:6]}"
    registry = f"/sy-shards/{uuid.uuid4().hex[:8]}"
    extra = ["--shards", "--registry-prefix", registry]
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, PARTITIONS)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        store.put_job(Job(job_code=JobCode("burst"), biz_code="sop", handler="h", shard_total=2))

        bus = PulsarBus(pulsar, topic_prefix=topics)
        counter = CountingExecutor(bus, "sop", clock, concurrency=32)
        got = counter.got

        def start(name: str) -> SchedulerProc:
            return start_scheduler(
                name, tmp_path, url=url, bus=pulsar, etcd=etcd, key="/unused", prefix=topics, extra=extra
            )

        procs = {f"m{i}": start(f"m{i}") for i in range(3)}
        handoffs: list[float] = []
        moved: list[int] = []
        joins: list[int] = []
        joined = 3
        try:
            _wait_owned(etcd, registry, _assigned(set(procs)), 60)
            # the burst starts once the three own their partitions: on a loaded machine the
            # members take many seconds to start, and a burst due before that would be over
            # before the first fault
            span_s = 10.0 + 8.0 * rounds
            n = 600
            t0 = clock.now() + timedelta(seconds=4)
            triggers, expected = one_shot_burst(store, "burst", "sop", t0, timedelta(seconds=span_s / n), n, 2)
            for _ in range(rounds):
                # kill -9 one member mid-burst: its partitions go to the others once its lease expires
                time.sleep(rng.uniform(0.5, 2.0))
                victim = rng.choice(sorted(procs))
                before = _owners(etcd, registry)
                theirs = {p for p, (m, _) in before.items() if m == victim}
                procs.pop(victim).kill9()
                handoffs.append(_wait_owned(etcd, registry, _assigned(set(procs)), 60))
                after = _owners(etcd, registry)
                moved.append(sum(1 for p in after if after[p][0] != before[p][0]))
                assert moved[-1] == len(theirs), "a leave moves exactly the leaver's partitions"
                # a new member joins mid-burst
                name = f"m{joined}"
                joined += 1
                before = _owners(etcd, registry)
                procs[name] = start(name)
                # the joiner's whole share arrives, and nothing else moves
                share = set(partitions_of(name, set(procs), range(PARTITIONS)))
                _wait_owned(etcd, registry, _assigned(set(procs)), 60)
                after = _owners(etcd, registry)
                joins.append(sum(1 for p in after if after[p][0] != before[p][0]))
                assert {p for p in after if after[p][0] != before[p][0]} == share, "a join moves only the joiner's"
                # one member paused past its lease, then resumed
                time.sleep(rng.uniform(0.3, 1.5))
                paused = rng.choice(sorted(procs))
                os.kill(procs[paused].pid, signal.SIGSTOP)
                try:
                    _wait_owned(
                        etcd,
                        registry,
                        lambda o, paused=paused: len(o) == PARTITIONS and paused not in {m for m, _ in o.values()},
                        60,
                    )
                finally:
                    os.kill(procs[paused].pid, signal.SIGCONT)
                _wait_owned(etcd, registry, _assigned(set(procs)), 60)
            settle = time.monotonic() + span_s + 40
            while time.monotonic() < settle and not expected <= set(got):
                time.sleep(0.25)
        finally:
            logs = {name: p.log_text() for name, p in procs.items()}
            for p in procs.values():
                p.stop()
            counter.close()
            bus.close()
        assert_burst_done(store, triggers, expected, got, timedelta(seconds=DEADLINE_S + RECLAIM_S))
        records = store.fired_between(None, t0 - timedelta(seconds=1), t0 + timedelta(seconds=span_s + 1))
        assert {r.command_id for r in records} == expected
        epochs = _check_no_overlap(records, PARTITIONS)
        assert any(v > 1 for v in epochs.values()), "no partition changed hands: the faults did not bite"
        assert any("lease lost" in text for text in logs.values()), "the paused member never noticed its lost lease"
        dups = sum(c - 1 for c in got.values())
        print(
            f"rounds={rounds} handoff p50={statistics.median(handoffs):.2f}s max={max(handoffs):.2f}s "
            f"moved on kills={moved} on joins={joins} delivered={len(got)} duplicates={dups} epochs/partition={sorted(epochs.values())}"
        )
        engine.dispose()


def test_three_members_kill_join_pause_mid_burst(tmp_path: Path) -> None:
    _burst(tmp_path, rounds=1, seed=18)


@pytest.mark.slow
def test_long_ten_kills(tmp_path: Path) -> None:
    """`--long`: ten rounds of kill -9, join and pause past the lease."""
    _burst(tmp_path, rounds=10, seed=1018)


def test_members_cli_shows_partitions_and_epochs(tmp_path: Path) -> None:
    """Also: a rollback fence the store has (its own broadcast failed) is relayed by the
    members, by one of them (the owner of the lowest partition), and after a member left by
    the one left."""
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    registry = f"/sy-shards/{uuid.uuid4().hex[:8]}"
    topics = f"cl{uuid.uuid4().hex[:6]}"
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        procs = [
            start_scheduler(
                f"c{i}",
                tmp_path,
                url=url,
                bus=pulsar,
                etcd=etcd,
                key="/unused",
                prefix=topics,
                # a lease that outlives a starved process on a loaded box: ownership must
                # not move by expiry here (a clean stop revokes it at once)
                extra=["--shards", "--registry-prefix", registry, "--lease-ttl", "10"],
            )
            for i in range(2)
        ]
        heard: list[Fence] = []
        follower = PulsarBus(pulsar, topic_prefix=topics)
        feed = follower.follow_control(lambda payload: heard.extend(f for f in [decode_fence(payload)] if f))
        try:
            _wait_owned(etcd, registry, lambda o: len(o) == 4 and len({m for m, _ in o.values()}) == 2, 60)
            out = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "switchyard",
                    "scheduler",
                    "members",
                    "--election",
                    etcd,
                    "--registry-prefix",
                    registry,
                    "--json",
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert out.returncode == 0, out.stderr
            body = json.loads(out.stdout)
            assert sorted(m["member"] for m in body["members"]) == ["c0", "c1"]
            owned = sorted(p["partition"] for m in body["members"] for p in m["partitions"])
            assert owned == [0, 1, 2, 3]
            store = SqlTriggerStore(engine, SystemClock())
            shown = {p["partition"]: p["epoch"] for m in body["members"] for p in m["partitions"]}

            def fences() -> dict[int, int]:
                return {i: int(store.current_epoch(partition_fence(Partition(i, f"p{i}")))) for i in shown}

            # the epoch shown is the one the store's partition fence holds (claimed just
            # after the etcd key was created: polled, at most 20 s)
            bound = time.monotonic() + 20
            while fences() != shown and time.monotonic() < bound:
                time.sleep(0.1)
            assert fences() == shown
            # a fence in the store only (a rollback whose broadcast failed): relayed once
            at_ms = int(time.time() * 1000) + 60_000
            fence, _ = store.raise_business_fence("relayed", at_ms)
            assert until(lambda: fence in heard, 30), f"no member relayed the stored fence: {heard}"
            time.sleep(2)  # ten relay rounds of each member
            assert heard.count(fence) == 1, f"the fence was relayed more than once: {heard}"
            # a clean stop revokes the lease: the other member owns everything soon after
            procs[0].stop()
            _wait_owned(etcd, registry, lambda o: len(o) == 4 and {m for m, _ in o.values()} == {"c1"}, 30)
            lifted = store.lift_business_fence("relayed", at_ms + 1000)
            assert lifted is not None
            assert until(lambda: lifted in heard, 30), f"the member left did not relay the fence: {heard}"
        finally:
            feed.close()
            follower.close()
            for p in procs:
                p.stop()
            engine.dispose()
