"""kill -9 of the scheduler leader in the middle of a burst, on the real servers:
every due occurrence is fired (a re-fire after a takeover repeats its command id, and the
one executor process answers a repeat from memory: each command id is invoked exactly
once, a second invocation is a bug), no
trigger stays acquired past its deadline plus the reclaim interval, and a follower
takes over after each kill (how soon, the lease TTL plus back-off here, is printed: a
process starved on a loaded box keeps no wall-clock limit)."""

from __future__ import annotations

import random
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.model import Job, JobCode
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.counting import CountingExecutor, assert_burst_done, one_shot_burst
from tests.integration.procs import start_scheduler
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]
DEADLINE_S, RECLAIM_S = 3.0, 0.5  # as tests.integration.procs starts the schedulers (lease 2 s)


def _burst(kills: int, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"fo{uuid.uuid4().hex[:6]}"
    key = f"/sy-failover/{uuid.uuid4().hex[:6]}"
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 8)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        store.put_job(Job(job_code=JobCode("burst"), biz_code="sop", handler="h", shard_total=3))
        span_s = 6.0 + 4.0 * kills
        t0 = clock.now() + timedelta(seconds=3)
        triggers, expected = one_shot_burst(store, "burst", "sop", t0, timedelta(seconds=span_s / 400), 400, 3)
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        counter = CountingExecutor(bus, "sop", clock, concurrency=32)
        got = counter.got
        procs = [
            start_scheduler(f"s{i}", tmp_path, url=url, bus=pulsar, etcd=etcd, key=key, prefix=prefix) for i in range(2)
        ]
        takeovers: list[float] = []
        try:
            deadline = time.monotonic() + 30
            while store.current_epoch() == 0 and time.monotonic() < deadline:
                time.sleep(0.1)
            assert store.current_epoch() > 0, "no leader elected: " + procs[0].log_text()[-2000:]
            for k in range(kills):
                time.sleep(rng.uniform(0.5, 3.0))  # a random point of the burst
                epoch = store.current_epoch()
                leader = next(
                    p for p in procs if p.proc.poll() is None and f"leading with epoch {epoch}" in p.log_text()
                )
                leader.kill9()
                killed_at = time.monotonic()
                procs.remove(leader)
                procs.append(start_scheduler(f"r{k}", tmp_path, url=url, bus=pulsar, etcd=etcd, key=key, prefix=prefix))
                while store.current_epoch() == epoch and time.monotonic() - killed_at < 60:
                    time.sleep(0.05)
                assert store.current_epoch() > epoch, f"no follower took over within 60 s of kill {k}"
                takeovers.append(time.monotonic() - killed_at)
            settle = time.monotonic() + span_s + 30
            while time.monotonic() < settle and not expected <= set(got):
                time.sleep(0.25)
        finally:
            for p in procs:
                p.stop()
            counter.close()
            bus.close()
        assert_burst_done(store, triggers, expected, got, timedelta(seconds=DEADLINE_S + RECLAIM_S))
        twice = {cid: n for cid, n in got.items() if n > 1}
        assert not twice, f"{len(twice)} command id(s) invoked more than once by one executor: {sorted(twice)[:5]}"
        print(f"kills={kills} takeovers={[round(t, 2) for t in takeovers]} delivered={len(got)}, each once")
        engine.dispose()


def test_leader_killed_mid_burst(tmp_path: Path) -> None:
    _burst(kills=1, tmp_path=tmp_path, seed=1)


@pytest.mark.slow
def test_leader_killed_ten_times(tmp_path: Path) -> None:
    _burst(kills=10, tmp_path=tmp_path, seed=10)
