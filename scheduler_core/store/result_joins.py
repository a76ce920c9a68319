"""Results applied to fired records as one joined UPDATE per batch, on MySQL-compatible
servers (MariaDB, TiDB).

The portable form is an UPDATE per fired record through executemany, which the MySQL
drivers send as one statement each: a hot minute of 50K one-run results was 50K round
trips, and the server's and scheduler's work for them landed in the very second the
executors needed the CPU. Here a batch becomes

    UPDATE fired AS f JOIN (SELECT %s AS cid, ... UNION ALL SELECT %s, ...) AS v
        ON f.command_id = v.cid
    SET ... WHERE <the same forward-only condition, with v.* for the parameters>

with exactly the portable statement's assignments and condition (`sql.py` keeps that
form for SQLite). Every assignment reads only the row's old values and v's (none reads a
column another one sets), so the multi-table UPDATE's unspecified assignment order
cannot change the outcome. A command id appears at most once per statement: a later
result of the same command id goes into a later statement, so results apply in arrival
order, as executemany applied them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from scheduler_core.store.schema import MYSQL_DIALECTS

# rows per statement: 1,000 x 14 parameters stays far below the 65,535-placeholder limit
ROWS_PER_STATEMENT = 1000


def is_mysql(conn: Connection) -> bool:
    return conn.dialect.name in MYSQL_DIALECTS


def _derived(columns: Sequence[str], n: int) -> str:
    first = "SELECT " + ", ".join(f"%s AS {c}" for c in columns)
    rest = " UNION ALL SELECT " + ", ".join("%s" for _ in columns)
    return first + rest * (n - 1)


def _batches(rows: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Batches of at most ROWS_PER_STATEMENT rows, no command id twice in one batch."""
    out: list[list[dict[str, Any]]] = []
    current: list[dict[str, Any]] = []
    seen: set[str] = set()
    spill: list[dict[str, Any]] = []
    for row in rows:
        cid = row["cid"]
        if cid in seen:
            spill.append(row)
            continue
        seen.add(cid)
        current.append(row)
        if len(current) >= ROWS_PER_STATEMENT:
            out.append(current)
            current, seen = [], set()
    if current:
        out.append(current)
    if spill:  # a later result of the same command id: after the earlier one, as executemany had it
        out.extend(_batches(spill))
    return out


def _run(conn: Connection, sql_head: str, sql_tail: str, columns: Sequence[str], rows: list[dict[str, Any]]) -> int:
    changed = 0
    for batch in _batches(rows):
        params: list[Any] = []
        for row in batch:
            params.extend(row[c] for c in columns)
        sql = f"{sql_head} JOIN ({_derived(columns, len(batch))}) AS v ON f.command_id = v.cid {sql_tail}"
        result = conn.exec_driver_sql(sql, tuple(params))
        changed += max(0, result.rowcount or 0)
    return changed


PAGE_COLUMNS = (
    "cid",
    "nfinal",
    "rank_partial",
    "attempt",
    "final_state",
    "partial_state",
    "states",
    "ok",
    "failed",
    "message",
    "at",
    "received",
    "started",
    "executor",
)


def update_pages(conn: Connection, table: str, final_rank: int, rows: list[dict[str, Any]]) -> int:
    """Page records: `rows` carry the portable statement's parameters without their
    `p_` prefix (sql.py `_update_pages`)."""
    done = "v.nfinal >= f.item_count"
    rank = f"CASE WHEN {done} THEN {final_rank} ELSE v.rank_partial END"
    head = f"UPDATE {table} AS f"
    tail = (
        f"SET f.state = CASE WHEN {done} THEN v.final_state ELSE v.partial_state END, "
        f"f.state_rank = {rank}, f.attempt = v.attempt, f.item_states = v.states, "
        "f.succeeded_items = v.ok, f.failed_items = v.failed, f.message = v.message, "
        f"f.result_at = CASE WHEN {done} THEN v.at ELSE f.result_at END, "
        "f.received_at = COALESCE(f.received_at, v.received), f.started_at = COALESCE(f.started_at, v.started), "
        "f.executor = COALESCE(v.executor, f.executor) "
        f"WHERE f.state_rank < {rank} OR (f.state_rank = {final_rank} AND {done} AND f.attempt < v.attempt)"
    )
    return _run(conn, head, tail, PAGE_COLUMNS, rows)


ITEM_COLUMNS = ("cid", "rank", "attempt", "state", "message", "at", "received", "started", "executor")


def update_items(conn: Connection, table: str, final_rank: int, rows: list[dict[str, Any]]) -> int:
    """Per-item records: `rows` carry `_update_items`' parameters without their `u_` prefix."""
    head = f"UPDATE {table} AS f"
    tail = (
        "SET f.state = v.state, f.state_rank = v.rank, f.attempt = v.attempt, f.message = v.message, "
        f"f.result_at = CASE WHEN v.rank = {final_rank} THEN v.at ELSE f.result_at END, "
        "f.received_at = COALESCE(f.received_at, v.received), f.started_at = COALESCE(f.started_at, v.started), "
        "f.executor = COALESCE(v.executor, f.executor) "
        f"WHERE f.state_rank < v.rank OR (f.state_rank = v.rank AND v.rank = {final_rank} AND f.attempt < v.attempt)"
    )
    return _run(conn, head, tail, ITEM_COLUMNS, rows)
