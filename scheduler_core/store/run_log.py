"""The run log as the console and `switchyard runs` read it: fired records a page at a
time (keyset, newest first, never OFFSET), the handler's own log lines of a run
(`dus_run_log`), and per business and per day the runs by result and the fire-time lag
percentiles. (The log lines are written with the results: `run_log_writes`.)"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, case, func, literal, or_, select

from dbkit.connections import connect
from scheduler_core.model import FiredState
from scheduler_core.store.run_records import published_by_outcome
from scheduler_core.store.sql import SqlTriggerStore

DAY_MS = 86_400_000
MAX_PAGE = 500
# fire-time lag histogram bounds (ms) for the daily percentiles: one aggregate query per
# chart instead of every lag fetched; a percentile is read as its bucket's upper bound
LAG_BOUNDS_MS = (
    1, 2, 5, 10, 20, 50, 100, 200, 300, 500, 750, 1000, 1500, 2000, 3000, 5000,
    10_000, 30_000, 60_000, 300_000, 900_000, 3_600_000,
)  # fmt: skip
PAGE_COLUMNS = (
    "command_id",
    "trigger_id",
    "job_code",
    "biz_code",
    "scheduled_at",
    "item_index",
    "item_total",
    "item_count",
    "state",
    "fired_at",
    "published_at",
    "received_at",
    "started_at",
    "result_at",
    "attempt",
    "misfired",
    "message",
    "executor",
)


@dataclass(frozen=True)
class RunFilter:
    biz_code: str | None = None
    job_code: str | None = None
    states: Sequence[str] = ()
    since_ms: int | None = None
    until_ms: int | None = None


def page(
    store: SqlTriggerStore, f: RunFilter, *, before: tuple[int, str] | None = None, limit: int = 50
) -> tuple[list[dict[str, Any]], tuple[int, str] | None]:
    """One page of runs, newest scheduled first, strictly after the keyset position
    `before` ((scheduled_at, command_id) of the last row of the previous page). Returns the
    rows and the position of the next page (None: this was the last). Served by
    idx_fired_job_time, idx_fired_biz_time or idx_fired_time, whichever the filter names."""
    t = store.t
    fr = t.fired
    limit = max(1, min(limit, MAX_PAGE))
    state = case((published_by_outcome(t), FiredState.PUBLISHED.value), else_=fr.c.state).label("state")
    stmt = select(*(state if c == "state" else fr.c[c] for c in PAGE_COLUMNS))
    if f.job_code is not None:
        stmt = stmt.where(fr.c.job_code == f.job_code)
    if f.biz_code is not None:
        stmt = stmt.where(fr.c.biz_code == f.biz_code)
    if f.since_ms is not None:
        stmt = stmt.where(fr.c.scheduled_at >= f.since_ms)
    if f.until_ms is not None:
        stmt = stmt.where(fr.c.scheduled_at < f.until_ms)
    if before is not None:
        at, cid = before
        stmt = stmt.where(or_(fr.c.scheduled_at < at, and_(fr.c.scheduled_at == at, fr.c.command_id < cid)))
    if f.states:
        wanted = list(f.states)
        derived = {FiredState.PENDING.value, FiredState.PUBLISHED.value}
        # the stored state says it unless pending/published are asked: no subquery per row
        stmt = stmt.where((fr.c.state if derived.isdisjoint(wanted) else state).in_(wanted))
    stmt = stmt.order_by(fr.c.scheduled_at.desc(), fr.c.command_id.desc()).limit(limit + 1)
    with connect(store.engine) as conn:
        rows = [dict(r) for r in conn.execute(stmt).mappings()]
    more = len(rows) > limit
    rows = rows[:limit]
    nxt = (int(rows[-1]["scheduled_at"]), str(rows[-1]["command_id"])) if more and rows else None
    return rows, nxt


def one(store: SqlTriggerStore, fired_id: str) -> dict[str, Any] | None:
    t = store.t
    fr = t.fired
    state = case((published_by_outcome(t), FiredState.PUBLISHED.value), else_=fr.c.state).label("state")
    stmt = select(*(state if c == "state" else fr.c[c] for c in PAGE_COLUMNS), fr.c.item_states).where(
        fr.c.command_id == fired_id
    )
    with connect(store.engine) as conn:
        row = conn.execute(stmt).mappings().first()
    return None if row is None else dict(row)


def logs(store: SqlTriggerStore, fired_id: str, item: int | None = None) -> list[dict[str, Any]]:
    """The log lines kept for the fired record's runs (each item and attempt), in item
    and attempt order."""
    rl = store.t.run_log
    stmt = select(
        rl.c.command_id, rl.c.item_index, rl.c.attempt, rl.c.logged_at, rl.c.truncated, rl.c.log_text.label("lines")
    ).where(rl.c.fired_id == fired_id)
    if item is not None:
        stmt = stmt.where(rl.c.item_index == item)
    with connect(store.engine) as conn:
        rows = conn.execute(stmt.order_by(rl.c.item_index, rl.c.attempt)).mappings().all()
    return [{**dict(r), "truncated": bool(r["truncated"])} for r in rows]


def daily(store: SqlTriggerStore, biz_code: str, since_ms: int, until_ms: int) -> list[dict[str, Any]]:
    """Per UTC day of [since_ms, until_ms): the business's runs by result and the fire-time
    lag (start, else receipt, after the scheduled time) p50/p95/p99 in ms, from one
    aggregate over idx_fired_biz_time (percentiles read from a histogram: each is the
    upper bound of its bucket in LAG_BOUNDS_MS)."""
    t = store.t
    fr = t.fired
    day = (fr.c.scheduled_at - fr.c.scheduled_at % DAY_MS).label("day")
    began = func.coalesce(fr.c.started_at, fr.c.received_at)
    lag = began - fr.c.scheduled_at
    whens = [(lag < b, literal(i)) for i, b in enumerate(LAG_BOUNDS_MS)]
    bucket = case((began.is_(None), literal(-1)), *whens, else_=literal(len(LAG_BOUNDS_MS))).label("bucket")
    stmt = (
        select(day, fr.c.state, bucket, func.count().label("n"))
        .where(fr.c.biz_code == biz_code, fr.c.scheduled_at >= since_ms, fr.c.scheduled_at < until_ms)
        .group_by(day, fr.c.state, bucket)
    )
    days: dict[int, dict[str, Any]] = {}
    with connect(store.engine) as conn:
        for d, state, b, n in conn.execute(stmt).all():
            entry = days.setdefault(int(d), {"by_result": {}, "hist": [0] * (len(LAG_BOUNDS_MS) + 1)})
            entry["by_result"][str(state)] = entry["by_result"].get(str(state), 0) + int(n)
            if int(b) >= 0:
                entry["hist"][int(b)] += int(n)
    out = []
    for d in sorted(days):
        hist = days[d]["hist"]
        out.append(
            {
                "day_ms": d,
                "by_result": days[d]["by_result"],
                "runs": sum(days[d]["by_result"].values()),
                "lag_ms": {q: _percentile(hist, p) for q, p in (("p50", 0.50), ("p95", 0.95), ("p99", 0.99))},
            }
        )
    return out


def _percentile(hist: list[int], p: float) -> int | None:
    total = sum(hist)
    if not total:
        return None
    rank = math.ceil(p * total)
    seen = 0
    for i, n in enumerate(hist):
        seen += n
        if seen >= rank:
            return LAG_BOUNDS_MS[i] if i < len(LAG_BOUNDS_MS) else LAG_BOUNDS_MS[-1] * 10
    return None


__all__ = ["LAG_BOUNDS_MS", "RunFilter", "daily", "logs", "one", "page"]
