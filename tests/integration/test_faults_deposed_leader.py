"""A deposed leader, on the real servers: the leader is paused with SIGSTOP in the middle
of firing a burst, its etcd lease runs out, the follower takes over and fences the store,
new due triggers are added, then the old leader is resumed with SIGCONT.

Nothing the old leader does after it lost the lease may land:
- no trigger row is written with owner_epoch = the old epoch after the resume;
- no fired record of the old epoch has a fired_at after the stop (records whose fire
  began before the stop are allowed: that work was admitted while it led);
- on the bus, the old epoch may only finish the chunks that were already running when it
  was stopped (at most fire_workers x chunk_size triggers); starting queued work after the
  resume is a deposed leader firing;
- it notices that it lost leadership (log "lost leadership") within a bounded time;
- and nothing is lost: every occurrence, old and new, is delivered.

The scheduler runs with two fire workers, so that a burst leaves chunks queued in its fire
pool at the moment it is stopped (the dangerous case: work admitted, not yet started).
"""

from __future__ import annotations

import os
import signal
import threading
import time
import uuid
from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import command_topic, decode_commands
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind, TriggerState, command_id
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]
BIZ = "deposed"
FIRE_WORKERS, CHUNK = 2, 100  # CHUNK: SchedulerSettings.chunk_size (the default)
# generous on a loaded machine: the deposed epoch's rows are reclaimed by the new leader
# once this has passed (a leader never reclaims its own queued chunks: they are marked in
# flight when submitted, `scheduler_core.firepath.InFlight.queued`)
ACQUIRE_DEADLINE_S = 10
LOST_BOUND_S = 20.0  # lease TTL 2 s, one keep-alive round trip, joins of the acquire loops


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "?"


def _now_ms() -> int:
    return int(time.time() * 1000)


def _wait(cond, timeout: float, step: float = 0.05) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step)
    return bool(cond())


def test_deposed_leader_is_fenced_after_sigstop_and_sigcont(tmp_path: Path) -> None:
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"dep{uuid.uuid4().hex[:6]}"
    key = f"/sy-deposed/{uuid.uuid4().hex[:6]}"
    with mariadb_database("deposed") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        store.put_job(Job(job_code=JobCode("tick"), biz_code=BIZ, handler="h"))
        now = clock.now()
        burst_at = now + timedelta(seconds=14)
        steady = [
            Trigger(
                job_code=JobCode("tick"),
                biz_code=BIZ,
                kind=TriggerKind.ONCE,
                next_fire_at=now + timedelta(seconds=6 + 30 * i / 100),
            )
            for i in range(100)
        ]
        burst = [
            Trigger(job_code=JobCode("tick"), biz_code=BIZ, kind=TriggerKind.ONCE, next_fire_at=burst_at)
            for _ in range(800)
        ]
        triggers = store.add_triggers(steady + burst)
        burst_ids = [t.id for t in triggers[len(steady) :]]

        # every command the bus delivers: id -> [(epoch, publish time ms)]
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        sub = bus.subscribe(command_topic(BIZ), "executor")
        seen: dict[str, list[tuple[int, int]]] = defaultdict(list)
        lock = threading.Lock()
        stop_collect = threading.Event()

        def collect() -> None:
            while not stop_collect.is_set():
                for r in sub.receive(500, timedelta(milliseconds=200)):
                    published = int(r.receipt.publish_timestamp())  # type: ignore[attr-defined]  # a Pulsar message
                    with lock:
                        for c in decode_commands(r.message.payload):
                            seen[c.command_id].append((int(c.epoch), published))
                    sub.ack(r)

        collector = threading.Thread(target=collect, daemon=True)
        collector.start()
        extra = ["--fire-workers", str(FIRE_WORKERS), "--batch", "300", "--acquire-deadline", str(ACQUIRE_DEADLINE_S)]
        procs = [
            start_scheduler(f"d{i}", tmp_path, url=url, bus=pulsar, etcd=etcd, key=key, prefix=prefix, extra=extra)
            for i in range(2)
        ]
        old: SchedulerProc | None = None
        stopped = False
        timings: dict[str, float] = {}
        try:
            assert _wait(lambda: store.current_epoch() > 0, 40), "no leader: " + procs[0].log_text()[-2000:]
            burst_ms = to_ms(triggers[len(steady)].next_fire_at)  # as stored (whole ms)

            def burst_firing() -> bool:
                with engine.connect() as conn:
                    return (
                        conn.execute(
                            text("SELECT COUNT(*) FROM dus_fired_record WHERE scheduled_at = :t"), {"t": burst_ms}
                        ).scalar_one()
                        > 0
                    )

            assert _wait(burst_firing, 60, step=0.02), "the burst was never fired:\n" + "\n".join(
                f"--- {p.name}\n{p.log_text()[-3000:]}" for p in procs
            )
            old_epoch = int(store.current_epoch())
            old = next(p for p in procs if f"leading with epoch {old_epoch}" in p.log_text())
            os.kill(old.pid, signal.SIGSTOP)
            stopped = True
            stop_ms = _now_ms()
            assert _wait(lambda: _state(old.pid) == "T", 5), f"pid {old.pid} did not stop"
            t_stop = time.monotonic()
            with engine.connect() as conn:
                acquired_at_stop = conn.execute(
                    text("SELECT COUNT(*) FROM dus_job_trigger WHERE state = 'acquired' AND owner_epoch = :e"),
                    {"e": old_epoch},
                ).scalar_one()

            assert _wait(lambda: store.current_epoch() > old_epoch, 30), "the follower never fenced the store"
            timings["takeover_s"] = time.monotonic() - t_stop
            new_epoch = int(store.current_epoch())
            later = clock.now()
            fresh = store.add_triggers(
                [
                    Trigger(
                        job_code=JobCode("tick"),
                        biz_code=BIZ,
                        kind=TriggerKind.ONCE,
                        next_fire_at=later + timedelta(seconds=0.5 + 3.5 * i / 60),
                    )
                    for i in range(60)
                ]
            )
            triggers += fresh

            resume_ms = _now_ms()
            os.kill(old.pid, signal.SIGCONT)
            stopped = False
            t_resume = time.monotonic()
            noticed = _wait(lambda: "lost leadership" in old.log_text(), LOST_BOUND_S, step=0.1)
            timings["noticed_s"] = time.monotonic() - t_resume

            expected = {command_id(t.id, t.next_fire_at, 0) for t in triggers}  # type: ignore[arg-type]
            _wait(lambda: expected <= set(seen), 90, step=0.25)
            _wait(lambda: all(t.state is TriggerState.COMPLETED for t in store.triggers_of()), 15, step=0.25)
            time.sleep(2.0)  # anything late from the old process would land by now
        finally:
            if old is not None and stopped:
                os.kill(old.pid, signal.SIGCONT)
            for p in procs:
                p.stop()
            stop_collect.set()
            collector.join(timeout=10)
            sub.close()
            bus.close()
        logs = {p.name: p.log_text() for p in procs}
        old_log = logs[old.name]

        with engine.connect() as conn:
            late_triggers = conn.execute(
                text("SELECT id, state, updated_at FROM dus_job_trigger WHERE owner_epoch = :e AND updated_at >= :t"),
                {"e": old_epoch, "t": resume_ms},
            ).all()
            late_fired = conn.execute(
                text(
                    "SELECT command_id, fired_at, published_at FROM dus_fired_record WHERE epoch = :e AND fired_at >= :t"
                ),
                {"e": old_epoch, "t": stop_ms},
            ).all()
            states: dict[Any, Any] = dict(
                conn.execute(text("SELECT state, COUNT(*) FROM dus_job_trigger GROUP BY state")).all()
            )
        with lock:
            late_published = {cid: [p for e, p in v if e == old_epoch and p >= resume_ms] for cid, v in seen.items()}
        late_published = {cid: v for cid, v in late_published.items() if v}
        late_trigger_ids = {int(cid.split("-")[0]) for cid in late_published}
        missing = expected - set(seen)
        summary = (
            f"old epoch {old_epoch} (pid {old.pid}), new epoch {new_epoch}; {acquired_at_stop} trigger(s) "
            f"acquired by the old epoch at the stop; takeover {timings.get('takeover_s', -1):.2f}s; lost "
            f"leadership noticed after {timings.get('noticed_s', -1):.2f}s; old-epoch commands published after "
            f"the resume: {len(late_published)} ({len(late_trigger_ids & set(burst_ids))} of the burst); "
            f"delivered {len(seen)} of {len(expected)}; states {states}"
        )
        print(summary)
        tail = f"\n{summary}\n--- old leader log (tail)\n{old_log[-4000:]}"

        assert not late_triggers, (
            f"{len(late_triggers)} trigger row(s) written by the deposed epoch after the resume, "
            f"e.g. {late_triggers[:3]}" + tail
        )
        assert not late_fired, (
            f"{len(late_fired)} fired record(s) of the deposed epoch fired after the stop "
            f"(fired_at >= {stop_ms}), e.g. {late_fired[:3]}" + tail
        )
        assert len(late_trigger_ids) <= FIRE_WORKERS * CHUNK, (
            f"the deposed epoch published {len(late_trigger_ids)} trigger(s)' commands after it was resumed: more "
            f"than the {FIRE_WORKERS * CHUNK} of the chunk(s) running at the stop, so it started queued work after "
            f"losing the lease" + tail
        )
        assert noticed, f"the old leader did not log 'lost leadership' within {LOST_BOUND_S:.0f}s of SIGCONT" + tail
        assert not missing, f"{len(missing)} occurrence(s) never delivered, e.g. {sorted(missing)[:3]}" + tail
        assert states == {"completed": len(triggers)}, f"trigger states {states}" + tail
        engine.dispose()
