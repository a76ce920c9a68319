"""The write of a run's log lines (`dus_run_log`): they come with the run's result, and
`SqlTriggerStore.update_fired` writes them with the same batch of results."""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import insert
from sqlalchemy.engine import Engine

from dbkit.capabilities import capabilities
from dbkit.connections import begin
from scheduler_core.model import parse_command_id
from scheduler_core.ports import FiredUpdate
from scheduler_core.store.schema import Tables
from scheduler_core.times import to_ms

ROWS_PER_INSERT = 200


def write_logs(engine: Engine, t: Tables, updates: Sequence[FiredUpdate]) -> int:
    """The log lines the results carry, one row per (item command id, attempt), insert-if-
    absent: a redelivered result writes nothing twice. Returns the rows offered."""
    rows = []
    for u in updates:
        if not u.logs:
            continue
        _tid, _ms, idx = parse_command_id(u.command_id)
        at = to_ms(u.at)
        for attempt, text, truncated in u.logs:
            rows.append(
                {
                    "command_id": u.command_id,
                    "attempt": int(attempt),
                    "fired_id": u.page_id or u.command_id,
                    "item_index": idx,
                    "logged_at": at,
                    "truncated": int(truncated),
                    "log_text": text,
                }
            )
    if not rows:
        return 0
    verb = capabilities(engine).ignore_prefix
    with begin(engine) as conn:
        for i in range(0, len(rows), ROWS_PER_INSERT):
            conn.execute(insert(t.run_log).prefix_with(verb), rows[i : i + ROWS_PER_INSERT])
    return len(rows)


__all__ = ["write_logs"]
