"""Shard registry: admission triggers/s with 1, 2 and 3 scheduler processes (members of
one etcd registry) on the same database, in the same run as the raw SQL acquire cycle
with 1, 2 and 4 connections; the ratio N members / 1 member; CPU per trigger of each
member process and of the database server.

Each member is a child process running `ShardedScheduler` with a no-op counting bus
(admission alone: select, CAS, fired records, outcome) on a fresh registry prefix. The
members join and settle their partitions first; every trigger is due at the gun (a few
seconds after the start, lookahead 0, so nothing is admitted before it), and the clock
runs from the gun until every trigger's outcome is recorded (the members' own counts,
read from shared memory; the fired records are counted in the database once, after).
Joins and takeovers are therefore outside the figure; the handoff figures are the fault
tests' (tests/integration/test_shard_registry.py).
"""

from __future__ import annotations

import multiprocessing as mp
import os
import time
import uuid
from typing import Any

from bench.admission import PARTITIONS, _prepare, raw_ceiling
from bench.cpu import busy_share, machine_busy, server_cpu_s
from bench.harness import Deadline, Row, Section, StackEnv, fresh_database, median, pymysql_connect
from bench.workload import (
    CountingBus,
    analyze,
    bench_job,
    drive_threaded,
    load_triggers,
    make_store,
    now_ms,
)
from scheduler_core.settings import SchedulerSettings

SETTLE_S = 6.0  # members up, joined and owning their partitions before the triggers fall due


def _prepare_at(url: str, n: int, due_ms: int) -> None:
    """Schema + one job + n one-shot triggers all due at due_ms (within 10 ms)."""
    store = make_store(url, PARTITIONS)
    job = store.put_job(bench_job("shd"))
    load_triggers(url, job, n, first_ms=due_ms, spread_ms=10)
    analyze(url)
    store.close()


NAME = "shards"
TITLE = "admission with 1/2/3 shard-registry members vs the raw SQL acquire cycle"


# InnoDB's own counters of row lock waits: whether writers serialize on a row (the
# partition fence read in share mode, the CAS) shows here, not in the throughput
_LOCK_STATUS = ("Innodb_row_lock_waits", "Innodb_row_lock_time", "Innodb_deadlocks")


def _lock_status(cur: Any) -> dict[str, int]:
    names = ", ".join(f"'{n}'" for n in _LOCK_STATUS)
    cur.execute(f"SHOW GLOBAL STATUS WHERE Variable_name IN ({names})")
    return {str(k): int(v) for k, v in cur.fetchall()}


def _member(
    url: str, etcd: str, prefix: str, name: str, gun_ms: int, start: Any, stop: Any, q: Any, progress: Any
) -> None:
    import threading
    from datetime import timedelta

    from bench.workload import CountingBus, make_store
    from scheduler_core.election.registry import EtcdRegistry
    from scheduler_core.settings import SchedulerSettings
    from scheduler_core.shards import ShardedScheduler

    try:
        store = make_store(url, PARTITIONS)
        registry = EtcdRegistry(etcd, member=name, prefix=prefix)
        # lookahead 0: nothing is admitted before the gun; a short idle wait so that every
        # loop looks again right at it (a tick that finds work does not wait either way)
        settings = SchedulerSettings(lookahead=timedelta(0), idle_wait=timedelta(milliseconds=50), jitter=timedelta(0))
        member = ShardedScheduler(store, CountingBus(), registry, store.clock, settings, consume=False)
        stopping = threading.Event()

        def relay_stop() -> None:
            stop.wait()
            stopping.set()

        threading.Thread(target=relay_stop, daemon=True).start()
        at_gun: list[float] = []

        def mark_gun() -> None:  # this process's CPU is counted from the gun
            time.sleep(max(0.0, gun_ms / 1000 - time.time()))
            at_gun.append(time.process_time())

        def report() -> None:  # triggers whose outcome is recorded, for the parent's clock
            while not stopping.wait(0.02):
                progress.value = member.status.stats.fired

        start.wait()
        threading.Thread(target=mark_gun, daemon=True).start()
        threading.Thread(target=report, daemon=True).start()
        member.run(stopping)
        cpu = time.process_time() - (at_gun[0] if at_gun else 0.0)
        q.put(
            {
                "member": name,
                "fired": member.status.stats.fired,
                "acquired": member.status.stats.acquired,
                "cpu_s": cpu,
                "rebalances": member.status.rebalances,
            }
        )
        registry.close()
        store.close()
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        q.put({"member": name, "error": f"{type(exc).__name__}: {exc}"})


def members_run(url: str, etcd: str, n: int, members: int, limit_s: float) -> dict[str, Any]:
    gun_ms = now_ms() + int((SETTLE_S + 4.0) * 1000)
    _prepare_at(url, n, gun_ms)
    ctx = mp.get_context("spawn")
    q, start, stop = ctx.Queue(), ctx.Event(), ctx.Event()
    progress = [ctx.Value("q", 0, lock=False) for _ in range(members)]
    prefix = f"/switchyard-bench/{uuid.uuid4().hex[:8]}"
    procs = [
        ctx.Process(target=_member, args=(url, etcd, prefix, f"b{k}", gun_ms, start, stop, q, progress[k]), daemon=True)
        for k in range(members)
    ]
    for p in procs:
        p.start()
    start.set()  # join now; the triggers fall due at the gun
    wait_s = gun_ms / 1000 - time.time()
    if wait_s < 1.0:
        raise RuntimeError(f"the members were not up {SETTLE_S} s before the gun (load?)")
    # The clock stops when every trigger's outcome is recorded (the members' own count, as
    # the single leader's figure is taken), read from shared memory: counting the fired
    # records every 0.1 s cost the server a scan of the table (~5 ms of CPU at 30,000
    # rows) and this process a connect, inside the window and on the members' cores, and
    # stopped the clock before the last outcome. The records are counted once, after.
    conn = pymysql_connect(url, autocommit=True)
    try:
        with conn.cursor() as cur:
            time.sleep(wait_s)
            locks0, machine0, server0 = _lock_status(cur), machine_busy(), server_cpu_s()
            t0 = time.monotonic()
            dl = Deadline(limit_s)
            fired = 0
            while not dl.expired():
                fired = sum(int(v.value) for v in progress)
                if fired >= n:
                    break
                time.sleep(0.02)
            seconds = time.monotonic() - t0
            server1, machine1, locks1 = server_cpu_s(), machine_busy(), _lock_status(cur)
            cur.execute("SELECT COUNT(*) FROM dus_fired_record")
            records = int(cur.fetchone()[0])
    finally:
        conn.close()
    stop.set()
    results = [q.get(timeout=120) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    server_cpu = None if server0 is None or server1 is None else server1 - server0
    busy = busy_share(machine0, machine1)
    member_cpu = sum(r["cpu_s"] for r in results)
    # CPU of the measured processes (members + server) per trigger, and what the machine's
    # cores would admit at that cost with nothing else running: the box's ceiling
    total_ms = None if server_cpu is None else 1000 * (member_cpu + server_cpu) / max(1, fired)
    cores = os.cpu_count() or 1
    return {
        "rate": fired / seconds,
        "fired": fired,
        "seconds": seconds,
        "complete": fired >= n and records >= n,
        "fired_records": records,
        "members": results,
        "server_cpu_s": server_cpu,
        "machine_busy": busy,
        "lock_waits": {k: locks1[k] - locks0[k] for k in _LOCK_STATUS},
        "total_cpu_ms_per_trigger": total_ms,
        "box_ceiling": None if not total_ms else 1000 * cores / total_ms,
        "fired_per_member": sorted(r["fired"] for r in results),
        "member_cpu_ms_per_trigger": [1000 * r["cpu_s"] / max(1, r["fired"]) for r in results],
        "server_cpu_ms_per_trigger": None if server_cpu is None else 1000 * server_cpu / max(1, fired),
    }


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    n = 5_000 if quick else 30_000
    reps = 1 if quick else 2
    limit_s = 90.0 if quick else 180.0
    sec = Section(NAME, TITLE)
    if not env.etcd_url:
        raise RuntimeError("the shards bench needs etcd (SWITCHYARD_ETCD_URL)")
    load_start = os.getloadavg()
    sec.settings = {
        "triggers": n,
        "repetitions": reps,
        "partitions": PARTITIONS,
        "members": [1, 2, 3],
        "raw_connections": [1, 2, 4],
        "bus": "no-op counting bus",
        "load_average_at_start": load_start,
    }
    raw: dict[str, list[dict[str, Any]]] = {}
    for _rep in range(reps):
        for c in (1, 2, 4):
            with fresh_database(env.mariadb_url, "bench_sh") as url:
                _prepare(url, n)
                raw.setdefault(f"raw_{c}", []).append(raw_ceiling(url, n, c, limit_s))
        with fresh_database(env.mariadb_url, "bench_sh") as url:
            # the single leader (threaded Scheduler, in this process) on the same data: what
            # one member is measured against
            _prepare(url, n)
            store = make_store(url, PARTITIONS, pool_size=8)
            d = drive_threaded(store, CountingBus(), SchedulerSettings(), n, Deadline(limit_s))
            store.close()
            raw.setdefault("leader", []).append(
                {"rate": d.rate, "fired": d.fired, "seconds": d.seconds, "complete": d.complete}
            )
        for m in (1, 2, 3):
            with fresh_database(env.mariadb_url, "bench_sh") as url:
                raw.setdefault(f"members_{m}", []).append(members_run(url, env.etcd_url, n, m, limit_s))

    def med(key: str, field: str = "rate") -> float | None:
        return median(v[field] for v in raw.get(key, []) if v.get(field) is not None)

    one = med("members_1")
    for m in (1, 2, 3):
        per_member = [x for v in raw.get(f"members_{m}", []) for x in v["member_cpu_ms_per_trigger"]]
        raw4 = med("raw_4")
        rate = med(f"members_{m}")
        server = med(f"members_{m}", "server_cpu_ms_per_trigger")
        busy = med(f"members_{m}", "machine_busy")
        ceiling = med(f"members_{m}", "box_ceiling")
        waits = [v["lock_waits"]["Innodb_row_lock_waits"] for v in raw.get(f"members_{m}", [])]
        shares = [v["fired_per_member"] for v in raw.get(f"members_{m}", [])]
        sec.rows.append(
            Row(
                f"admission, {m} member process(es), no-op bus",
                rate,
                one,
                "/s",
                note="peer: 1 member (ratio N/1); "
                + (f"{rate / raw4:.2f}x of the raw cycle on 4 connections; " if rate and raw4 else "")
                + f"member CPU ms/trigger {[round(x, 3) for x in per_member]}; server CPU ms/trigger "
                + ("-" if server is None else f"{server:.3f}")
                + "; machine busy "
                + ("-" if busy is None else f"{100 * busy:.0f}%")
                + "; box ceiling at these costs "
                + ("-" if ceiling is None else f"{ceiling:,.0f}/s")
                + f"; InnoDB row lock waits {waits}; fired per member {shares}",
            )
        )
    sec.rows.append(
        Row(
            "admission, the single leader (threaded Scheduler), no-op bus",
            med("leader"),
            one,
            "/s",
            note="peer: 1 member; the registry's cost on one process",
        )
    )
    for c in (1, 2, 4):
        sec.rows.append(Row(f"raw SQL acquire cycle, {c} connection(s)", None, med(f"raw_{c}"), "/s"))
    if one:
        best = med("members_1", "box_ceiling")
        if best:
            sec.notes.append(
                f"ceiling of the ratio on this machine: {best:,.0f}/s (every core busy with only the 1-member "
                f"run's member + server CPU per trigger) / {one:,.0f}/s (1 member) = {best / one:.2f}x; a second "
                "member can only use the idle share left, and its CPU per trigger is higher, not lower."
            )
    sec.raw = raw
    load_end = os.getloadavg()
    sec.notes.append(
        f"load average (1/5/15 min) at start {tuple(round(x, 1) for x in load_start)}, at the end "
        f"{tuple(round(x, 1) for x in load_end)}: the machine is shared, so figures move with it."
    )
    return sec
