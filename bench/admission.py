"""Admission: Switchyard triggers/s against the raw SQL acquire cycle, same run, same
server, same table shape.

Switchyard: N one-shot triggers due in the window on a fresh database; the scheduler
ticks until every one is acquired and fired (fired records, publication, outcome CAS),
with a no-op counting bus (admission alone) and again with the real Pulsar bus.

The ceiling: the bare cycle of infra-probe section 1.5 on the same Switchyard tables,
raw PyMySQL, no scheduler logic: SELECT 300 due ids of one partition -> CAS UPDATE of
them -> INSERT 300 fired rows (executemany) -> COMMIT; each connection owns the
partitions p % W == k. Every measurement gets a freshly loaded table.

A second, informational ceiling: the raw full cycle (`raw_full_cycle_worker`), the
statements and commits Switchyard's fire path must send, in raw PyMySQL. Switchyard's
ratio to it is what is left of Python and driver overhead; the rest of the gap to the
first ceiling is the mandated extra writes.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import uuid
from typing import Any

from bench.harness import (
    Deadline,
    Goal,
    Row,
    Section,
    StackEnv,
    bench_prefix,
    delete_topics,
    fresh_database,
    median,
    pymysql_connect,
)
from bench.workload import (
    CountingBus,
    analyze,
    bench_job,
    drive_inline,
    drive_threaded,
    load_triggers,
    make_store,
    now_ms,
)
from scheduler_core.settings import SchedulerSettings

NAME = "admission"
TITLE = "admission triggers/s vs the raw SQL acquire cycle"
PARTITIONS = 16
BATCH = 300
GOAL = Goal("ratio_min", 0.7)
# issue 19's goals: admission inline >= 0.5x the raw cycle (1 connection); end to end with
# Pulsar, threaded >= 0.2x the raw cycle's best connection count
GOAL_INLINE = Goal("ratio_min", 0.5)
GOAL_END_TO_END = Goal("ratio_min", 0.2)


def _prepare(url: str, n: int) -> int:
    """Schema + one job + n one-shot triggers due over the last minute."""
    store = make_store(url, PARTITIONS)
    job = store.put_job(bench_job("adm"))
    t = now_ms()
    load_triggers(url, job, n, first_ms=t - 60_000, spread_ms=60_000)
    analyze(url)
    store.close()
    return t


# --- the raw ceiling ---------------------------------------------------------------------

_VARYING = ("command_id", "trigger_id", "job_code", "biz_code", "scheduled_at", "fired_at")


def fired_insert(epoch: int) -> tuple[str, tuple[Any, ...]]:
    """The fired-record INSERT of the raw cycle: every column the store writes (taken
    from the store's own row mapping, so a new column cannot break the ceiling), the
    per-row ones first, the constant rest bound once."""
    from datetime import datetime, timezone

    from scheduler_core.model import CommandId, Epoch, FiredRecord, JobCode, TriggerId
    from scheduler_core.store.rows import fired_values

    t = datetime.now(timezone.utc)
    template = fired_values(
        FiredRecord(
            command_id=CommandId("x"),
            trigger_id=TriggerId(1),
            job_code=JobCode("j"),
            biz_code="b",
            scheduled_at=t,
            epoch=Epoch(epoch),
            fired_at=t,
        )
    )
    rest = [k for k in template if k not in _VARYING]
    cols = [*_VARYING, *rest]
    sql = f"INSERT INTO dus_fired_record ({', '.join(cols)}) VALUES ({', '.join(['%s'] * len(cols))})"
    return sql, tuple(template[k] for k in rest)


def _window() -> tuple[int, int]:
    """The scheduler's admission window: to now + the 30-min lookahead, from the 7-day
    startup floor below it."""
    hi = now_ms() + 30 * 60_000
    return hi - 7 * 86_400_000 - 30 * 60_000, hi


def _due_rows(conn: Any, cur: Any, partition: int, window: tuple[int, int], columns: str, order: str) -> Any:
    """Up to BATCH waiting rows of one partition due in the window; none: commits the
    empty read and returns ()."""
    cur.execute(
        f"SELECT {columns} FROM dus_job_trigger PARTITION (p{partition})"
        f" WHERE state='waiting' AND next_fire_at BETWEEN %s AND %s ORDER BY {order} LIMIT %s",
        (*window, BATCH),
    )
    rows = cur.fetchall()
    if not rows:
        conn.commit()
    return rows


def raw_cycle_worker(
    url: str, worker: int, workers: int, partitions: int, expected: int, limit_s: float, start: Any = None
) -> dict[str, Any]:
    """One connection: cycle over its own partitions until they are empty."""
    conn = pymysql_connect(url)
    mine = [p for p in range(partitions) if p % workers == worker]
    empty: set[int] = set()
    acquired = cycles = 0
    token_epoch = 1
    window = _window()
    cycle_ms: list[float] = []
    insert_sql, const = fired_insert(token_epoch)
    if start is not None:
        start.wait()
    t0 = time.perf_counter()
    try:
        with conn.cursor() as cur:
            i = 0
            while len(empty) < len(mine) and acquired < expected and time.perf_counter() - t0 < limit_s:
                p = mine[i % len(mine)]
                i += 1
                if p in empty:
                    continue
                c0 = time.perf_counter()
                rows = _due_rows(conn, cur, p, window, "id, next_fire_at, biz_code, job_code", "next_fire_at")
                if not rows:
                    empty.add(p)
                    continue
                token = uuid.uuid4().hex
                ids = [r[0] for r in rows]
                marks = ",".join(["%s"] * len(ids))
                n = cur.execute(
                    f"UPDATE dus_job_trigger SET state='acquired', owner_epoch=%s, cas_token=%s"
                    f" WHERE id IN ({marks}) AND state='waiting'",
                    (token_epoch, token, *ids),
                )
                won = rows
                if n < len(ids):  # only then: who won (no UPDATE ... RETURNING)
                    cur.execute(
                        f"SELECT id, next_fire_at, biz_code, job_code FROM dus_job_trigger"
                        f" WHERE cas_token=%s AND id IN ({marks})",
                        (token, *ids),
                    )
                    won = cur.fetchall()
                now = now_ms()
                cur.executemany(insert_sql, [(f"{r[0]}-{r[1]}-0", r[0], r[3], r[2], r[1], now, *const) for r in won])
                conn.commit()
                acquired += len(won)
                cycles += 1
                cycle_ms.append((time.perf_counter() - c0) * 1000)
    finally:
        conn.close()
    elapsed = time.perf_counter() - t0
    return {
        "worker": worker,
        "acquired": acquired,
        "cycles": cycles,
        "seconds": elapsed,
        "cycle_ms_p50": median(cycle_ms),
    }


# --- the raw full cycle: the statements Switchyard must send, without Switchyard ---------------

RESCHEDULE_MS = 86_400_000  # the ceiling's "next occurrence": a day on, beyond every window


def raw_full_cycle_worker(
    url: str,
    partitions: int,
    expected: int,
    limit_s: float,
    chunk: int = 100,
    epoch: int = 1,
    outcome: str = "reschedule",
) -> dict[str, Any]:
    """One connection, no scheduler logic, the writes and commits of Switchyard's fire
    path as it orders them (scheduler_core/fire.py):
      tx A: SELECT 300 due of one partition; CAS UPDATE waiting -> acquired (epoch, deadline,
            token, version + 1; per-row version check as CASE id; fence EXISTS); COMMIT
      once per tick: SELECT the job definitions of the winners (a read, no transaction)
      per chunk of 100, tx B: INSERT IGNORE the fired rows as INSERT ... SELECT ... WHERE the
            fence row holds the epoch (LOCK IN SHARE MODE); COMMIT (the no-op publish would
            come here)
      per chunk, tx C: UPDATE the triggers acquired -> waiting with a new next_fire_at and last_fired_at per row (CASE id), epoch
            cleared, fenced by the epoch; COMMIT. outcome="complete" instead writes what
            Switchyard writes for a one-shot: acquired -> completed, last_fired_at =
            next_fire_at, one set-based UPDATE. No published stamp on the fired rows
            (Switchyard sends none since issue 19: the outcome says it, FiredState)
    Not in it: the job-definition read, building commands, envelopes and records."""
    conn = pymysql_connect(url)
    empty: set[int] = set()
    acquired = cycles = 0
    window = _window()
    insert_sql, const = fired_insert(epoch)
    insert_sql = insert_sql.replace("INSERT INTO", "INSERT IGNORE INTO", 1)
    fence = "EXISTS (SELECT 1 FROM dus_fence WHERE name = 'scheduler' AND epoch = %s)"
    cycle_ms: list[float] = []
    t0 = time.perf_counter()
    try:
        with conn.cursor() as cur:
            cur.execute(
                "INSERT INTO dus_fence (name, epoch, updated_at) VALUES ('scheduler', %s, %s)"
                " ON DUPLICATE KEY UPDATE epoch = GREATEST(epoch, VALUES(epoch))",
                (epoch, now_ms()),
            )
            conn.commit()
            i = 0
            while len(empty) < partitions and acquired < expected and time.perf_counter() - t0 < limit_s:
                p = i % partitions
                i += 1
                if p in empty:
                    continue
                c0 = time.perf_counter()
                rows = _due_rows(
                    conn, cur, p, window, "id, next_fire_at, biz_code, job_code, version", "next_fire_at, priority, id"
                )
                if not rows:
                    empty.add(p)
                    continue
                token = uuid.uuid4().hex
                ids = [r[0] for r in rows]
                marks = ",".join(["%s"] * len(ids))
                versions = " ".join(f"WHEN {int(r[0])} THEN {int(r[4])}" for r in rows)
                now = now_ms()
                n = cur.execute(
                    "UPDATE dus_job_trigger SET state='acquired', cas_token=%s, version=version+1, updated_at=%s,"
                    f" owner_epoch=%s, acquire_deadline=%s WHERE id IN ({marks}) AND state='waiting'"
                    f" AND {fence} AND version = (CASE id {versions} ELSE -1 END)",
                    (token, now, epoch, now + 60_000, *ids, epoch),
                )
                won = rows
                if n < len(ids):
                    cur.execute(
                        f"SELECT id, next_fire_at, biz_code, job_code, version FROM dus_job_trigger"
                        f" WHERE cas_token=%s AND id IN ({marks})",
                        (token, *ids),
                    )
                    won = cur.fetchall()
                conn.commit()
                cur.execute("SELECT * FROM dus_job WHERE job_code IN (%s)", (won[0][3],))
                cur.fetchall()
                conn.commit()
                for k in range(0, len(won), chunk):
                    part = won[k : k + chunk]
                    now = now_ms()
                    cids = [f"{r[0]}-{r[1]}-0" for r in part]
                    rows = [(c, r[0], r[3], r[2], r[1], now, *const) for c, r in zip(cids, part, strict=True)]
                    inserted = cur.execute(
                        fenced_insert_sql(insert_sql, len(rows)), (*[v for row in rows for v in row], epoch)
                    )
                    if inserted != len(rows):
                        raise RuntimeError("fenced")
                    conn.commit()
                    # no published stamp on the records: the outcome CAS below says it (FiredState)
                    pids = [r[0] for r in part]
                    pmarks = ",".join(["%s"] * len(pids))
                    if outcome == "complete":
                        cur.execute(
                            "UPDATE dus_job_trigger SET state='completed', cas_token=%s, version=version+1,"
                            " updated_at=%s, last_fired_at=next_fire_at"
                            f" WHERE id IN ({pmarks}) AND state='acquired' AND owner_epoch=%s AND {fence}",
                            (uuid.uuid4().hex, now_ms(), *pids, epoch, epoch),
                        )
                    else:
                        nexts = " ".join(f"WHEN {int(r[0])} THEN {int(r[1]) + RESCHEDULE_MS}" for r in part)
                        lasts = " ".join(f"WHEN {int(r[0])} THEN {int(r[1])}" for r in part)
                        cur.execute(
                            "UPDATE dus_job_trigger SET state='waiting', cas_token=%s, version=version+1,"
                            " updated_at=%s, owner_epoch=NULL, acquire_deadline=NULL,"
                            f" next_fire_at=(CASE id {nexts} ELSE next_fire_at END),"
                            f" last_fired_at=(CASE id {lasts} ELSE last_fired_at END)"
                            f" WHERE id IN ({pmarks}) AND state='acquired' AND owner_epoch=%s AND {fence}",
                            (uuid.uuid4().hex, now_ms(), *pids, epoch, epoch),
                        )
                    conn.commit()
                acquired += len(won)
                cycles += 1
                cycle_ms.append((time.perf_counter() - c0) * 1000)
    finally:
        conn.close()
    elapsed = time.perf_counter() - t0
    return {
        "rate": acquired / elapsed if elapsed > 0 else 0.0,
        "acquired": acquired,
        "cycles": cycles,
        "seconds": elapsed,
        "cycle_ms_p50": median(cycle_ms),
    }


def fenced_insert_sql(insert_sql: str, n: int) -> str:
    """The raw full cycle's fired-row INSERT as Switchyard sends it: INSERT ... SELECT from
    a UNION ALL of the rows, on the condition that the fence row holds the epoch."""
    head, values = insert_sql.split(" VALUES ", 1)
    marks = values.strip()[1:-1].split(", ")
    first = "SELECT " + ", ".join(f"{m} AS c{i}" for i, m in enumerate(marks))  # derived columns need names
    union = first + f" UNION ALL SELECT {', '.join(marks)}" * (n - 1)
    return (
        f"{head} SELECT * FROM ({union}) v WHERE EXISTS (SELECT 1 FROM dus_fence WHERE name = 'scheduler'"
        " AND epoch = %s LOCK IN SHARE MODE)"
    )


def raw_full_ceiling(url: str, n: int, limit_s: float, outcome: str = "reschedule") -> dict[str, Any]:
    return raw_full_cycle_worker(url, PARTITIONS, n, limit_s, outcome=outcome)


def _raw_proc(q: Any, start: Any, args: tuple[Any, ...]) -> None:
    try:
        q.put(raw_cycle_worker(*args, start=start))  # type: ignore[misc]  # args stop before `start`
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        q.put({"error": f"{type(exc).__name__}: {exc}"})


def raw_ceiling(url: str, n: int, connections: int, limit_s: float) -> dict[str, Any]:
    if connections == 1:
        r = raw_cycle_worker(url, 0, 1, PARTITIONS, n, limit_s)
        return {
            "rate": r["acquired"] / r["seconds"],
            "acquired": r["acquired"],
            "seconds": r["seconds"],
            "workers": [r],
        }
    ctx = mp.get_context("spawn")
    q, start = ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(target=_raw_proc, args=(q, start, (url, k, connections, PARTITIONS, n, limit_s)), daemon=True)
        for k in range(connections)
    ]
    for p in procs:
        p.start()
    time.sleep(1.0)  # interpreters up and connected before the gun
    start.set()
    results = [q.get(timeout=limit_s + 60) for _ in procs]
    for p in procs:
        p.join(timeout=10)
    errors = [r["error"] for r in results if "error" in r]
    if errors:
        raise RuntimeError("; ".join(errors))
    total = sum(r["acquired"] for r in results)
    secs = max(r["seconds"] for r in results)
    return {"rate": total / secs, "acquired": total, "seconds": secs, "workers": results}


# --- the section --------------------------------------------------------------------------------


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    n = 5_000 if quick else 20_000
    reps = 1 if quick else 2
    conns = [1, 2] if quick else [1, 2, 4]
    limit_s = 60.0 if quick else 120.0
    settings = SchedulerSettings()
    sec = Section(NAME, TITLE)
    sec.settings = {
        "triggers": n,
        "repetitions": reps,
        "partitions": PARTITIONS,
        "batch": settings.batch_size,
        "chunk": settings.chunk_size,
        "fire_pool_capacity": settings.fire_pool_capacity,
        "fire_workers": settings.fire_workers,
        "raw_driver": "PyMySQL raw cursor",
        "switchyard_driver": "SQLAlchemy Core + PyMySQL",
        "raw_connections": conns,
        "due": "one-shot, next_fire_at spread over the minute before the start",
    }
    raw: dict[str, list[dict[str, Any]]] = {}

    def record(key: str, value: dict[str, Any]) -> None:
        raw.setdefault(key, []).append(value)

    from scheduler_core.bus.pulsar import PulsarBus

    prefix = bench_prefix("adm")
    bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
    try:
        for _rep in range(reps):
            for c in conns:
                with fresh_database(env.mariadb_url, "bench_adm") as url:
                    _prepare(url, n)
                    r = raw_ceiling(url, n, c, limit_s)
                    record(f"raw_{c}", r)
            with fresh_database(env.mariadb_url, "bench_adm") as url:
                _prepare(url, n)
                record("raw_full_1", raw_full_ceiling(url, n, limit_s))
            for mode in ("inline", "threaded"):
                for which in ("noop", "pulsar"):
                    with fresh_database(env.mariadb_url, "bench_adm") as url:
                        _prepare(url, n)
                        store = make_store(url, PARTITIONS, pool_size=8)
                        the_bus = CountingBus() if which == "noop" else bus
                        dl = Deadline(limit_s)
                        drive = drive_inline if mode == "inline" else drive_threaded
                        d = drive(store, the_bus, settings, n, dl)
                        store.close()
                        record(
                            f"sy_{mode}_{which}",
                            {
                                "rate": d.rate,
                                "fired": d.fired,
                                "seconds": d.seconds,
                                "ticks": d.ticks,
                                "complete": d.complete,
                                "messages": d.messages,
                            },
                        )
    finally:
        bus.close()
        delete_topics(env.pulsar_admin_url, prefix)

    def med(key: str) -> float | None:
        return median(v["rate"] for v in raw.get(key, []))

    raw1 = med("raw_1")
    raw_multi = max((m for m in (med(f"raw_{c}") for c in conns if c > 1) if m is not None), default=None)
    best_c = max((c for c in conns if c > 1), key=lambda c: med(f"raw_{c}") or 0)
    sec.rows = [
        Row(
            "admission, SchedulerCore inline (1 connection), no-op bus",
            med("sy_inline_noop"),
            raw1,
            "/s",
            GOAL_INLINE,
            note="peer: raw cycle, 1 connection",
        ),
        Row(
            "admission, SchedulerCore inline (1 connection), no-op bus, vs the raw full cycle",
            med("sy_inline_noop"),
            med("raw_full_1"),
            "/s",
            note="peer: raw full cycle, 1 connection: Switchyard's own statements and commits, no scheduler "
            "logic; informational: the gap left is Python and driver overhead",
        ),
        Row(
            "admission, threaded Scheduler, no-op bus",
            med("sy_threaded_noop"),
            raw_multi,
            "/s",
            GOAL,
            note=f"peer: raw cycle, best of {[c for c in conns if c > 1]} connections ({best_c})",
        ),
        Row(
            "end to end with Pulsar, SchedulerCore inline",
            med("sy_inline_pulsar"),
            raw1,
            "/s",
            note="peer: raw cycle, 1 connection; informational",
        ),
        Row(
            "end to end with Pulsar, threaded Scheduler",
            med("sy_threaded_pulsar"),
            raw_multi,
            "/s",
            GOAL_END_TO_END,
            note=f"peer: raw cycle, best of {[c for c in conns if c > 1]} connections ({best_c})",
        ),
    ]
    for c in conns:
        sec.rows.append(Row(f"raw SQL acquire cycle, {c} connection(s)", None, med(f"raw_{c}"), "/s"))
    sec.rows.append(
        Row("raw full cycle (acquire, fired records, outcome), 1 connection", None, med("raw_full_1"), "/s")
    )
    sec.raw = raw
    sec.notes.append(
        f"medians of {reps} run(s) of {n:,} triggers; each run on a freshly created and loaded database "
        f"({PARTITIONS} HASH partitions). Switchyard's fire work per trigger (job lookup, fired record, "
        "outcome CAS with re-read) is counted; the raw cycle does only select/CAS/insert/commit."
    )
    sec.notes.append(
        "raw full cycle: per 300 due, SELECT + CAS acquire (epoch, deadline, version check, fence) + COMMIT, the "
        "job read; per chunk of 100, INSERT IGNORE fired ... SELECT conditioned on the fence row + COMMIT, "
        "then the outcome UPDATE (back to waiting, next_fire_at and last_fired_at per row, "
        "fenced) + COMMIT; no published stamp (Switchyard sends none: the outcome says it). It leaves out all "
        "command/record building. Switchyard completes these one-shot "
        "triggers (one set-based UPDATE) where the ceiling reschedules them (CASE id per row)."
    )
    return sec
