"""What one admitted trigger costs in statements, round trips and row writes (the table
"Where the time per trigger goes" in bench/README.md).

N one-shot triggers of one job over 16 partitions, due over the last minute, on a fresh
MariaDB database; `SchedulerCore.tick_all()` inline with a no-op bus until every one is
fired. Every statement the store's engine sends is counted by SQLAlchemy's
`after_cursor_execute` event (grouped by its leading words), every COMMIT and ROLLBACK by
the `commit`/`rollback` events, and the rows written by the cursor's rowcount of each
INSERT/UPDATE/DELETE. Loading the triggers is not counted (it runs before the listeners).

    python -m bench.per_trigger [--triggers 6000] [--calls]

`--calls` also counts the Python function calls of the firing (cProfile), per trigger.
Without it, the client's CPU time while firing (this process's, per trigger) is printed
too: with one connection the client's work and the server's do not overlap, so it is the
part of the wall time the scheduler's own code and the driver spend.

Needs SWITCHYARD_MARIADB_URL (the stack's env file). A counting run, not a timing: the
wall time it prints is only there to tell a stalled run.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine

from bench.harness import Deadline, fresh_database
from bench.workload import CountingBus, analyze, bench_job, drive_inline, load_triggers, make_store, now_ms
from scheduler_core.settings import SchedulerSettings

PARTITIONS = 16
BATCH = 300  # triggers a tick takes from one partition (SchedulerSettings.batch_size)
_WRITES = ("INSERT", "UPDATE", "DELETE")


@dataclass
class Counts:
    statements: Counter[str] = field(default_factory=Counter)
    commits: int = 0
    rollbacks: int = 0
    row_writes: Counter[str] = field(default_factory=Counter)
    cpu_s: float = 0.0  # this process's CPU time while firing (listeners and any profile included)

    def round_trips(self) -> int:
        return sum(self.statements.values()) + self.commits + self.rollbacks


def statement_kind(sql: str) -> str:
    """The statement's verb and the table it reads or writes: `UPDATE dus_fired_record`,
    `INSERT dus_fired_record`, `SELECT dus_job_trigger`."""
    words = sql.split()
    verb = words[0].upper() if words else "?"
    table = re.search(r"\b(dus_\w+)", sql)
    return f"{verb} {table.group(1) if table else '?'}"


def count_store(
    url: str, triggers: int, limit_s: float = 600.0, profile: cProfile.Profile | None = None
) -> tuple[Counts, int, float]:
    """Fire `triggers` one-shots inline on a fresh store at `url`; the counts while firing
    (and, with `profile`, the Python calls of the firing alone)."""
    store = make_store(url, PARTITIONS)
    job = store.put_job(bench_job("pertrig"))
    load_triggers(url, job, triggers, first_ms=now_ms() - 60_000, spread_ms=60_000)
    analyze(url)
    counts = Counts()

    def on_execute(_conn: Any, cursor: Any, statement: str, *_rest: Any) -> None:
        kind = statement_kind(statement)
        counts.statements[kind] += 1
        if kind.split(" ", 1)[0] in _WRITES:
            counts.row_writes[kind] += max(0, cursor.rowcount or 0)

    # The store's statements go through its engine and, on MariaDB, the AUTOCOMMIT twin
    # of the fenced insert (scheduler_core.store.engine.autocommit_twin), whose COMMIT and
    # ROLLBACK send nothing: listen on every engine, count only the store engine's ends.
    def on_commit(conn: Any) -> None:
        counts.commits += conn.engine is store.engine

    def on_rollback(conn: Any) -> None:
        counts.rollbacks += conn.engine is store.engine

    event.listen(Engine, "after_cursor_execute", on_execute)
    event.listen(Engine, "commit", on_commit)
    event.listen(Engine, "rollback", on_rollback)
    started, cpu_started = time.perf_counter(), time.process_time()
    try:
        if profile is not None:
            profile.enable()
        try:
            result = drive_inline(store, CountingBus(), SchedulerSettings(), triggers, Deadline(limit_s))
            counts.cpu_s = time.process_time() - cpu_started
        finally:
            if profile is not None:
                profile.disable()
    finally:
        event.remove(Engine, "after_cursor_execute", on_execute)
        event.remove(Engine, "commit", on_commit)
        event.remove(Engine, "rollback", on_rollback)
        store.close()
    return counts, result.fired, time.perf_counter() - started


def report(counts: Counts, fired: int) -> str:
    per = max(fired, 1)
    lines = [
        f"fired {fired} one-shot triggers",
        "",
        "| statement | count | per 300 triggers | rows written per trigger |",
    ]
    lines.append("| --- | ---: | ---: | ---: |")
    for kind, n in sorted(counts.statements.items()):
        rows = counts.row_writes.get(kind)
        lines.append(f"| {kind} | {n} | {n * BATCH / per:.1f} | {'' if rows is None else f'{rows / per:.2f}'} |")
    lines.append(f"| COMMIT | {counts.commits} | {counts.commits * BATCH / per:.1f} | |")
    lines.append(f"| ROLLBACK | {counts.rollbacks} | {counts.rollbacks * BATCH / per:.1f} | |")
    total = counts.round_trips()
    writes = sum(counts.row_writes.values())
    lines.append(f"| **round trips** | {total} | **{total * BATCH / per:.1f}** | **{writes / per:.2f}** |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triggers", type=int, default=6000)
    parser.add_argument("--calls", action="store_true", help="also count Python function calls (cProfile)")
    args = parser.parse_args()
    profile = cProfile.Profile() if args.calls else None
    base = os.environ.get("SWITCHYARD_MARIADB_URL")
    if not base:
        raise SystemExit("SWITCHYARD_MARIADB_URL is not set (source the stack's env file)")
    with fresh_database(base, "pertrig") as url:
        counts, fired, took = count_store(url, args.triggers, profile=profile)
    print(report(counts, fired))
    if profile is not None:
        calls = pstats.Stats(profile).total_calls  # type: ignore[attr-defined]
        print(f"\nPython function calls per trigger (cProfile): {calls / max(fired, 1):.0f}")
    else:
        print(f"\nclient CPU per trigger (process time while firing): {counts.cpu_s / max(fired, 1) * 1e6:.0f} us")
    print(f"\n({took:.1f} s wall, load average {os.getloadavg()[0]:.1f}; a count, not a timing)")
    if fired < args.triggers:
        raise SystemExit(f"only {fired} of {args.triggers} triggers fired before the time limit")


if __name__ == "__main__":
    main()
