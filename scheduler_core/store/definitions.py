"""Bulk writes of job definitions (jobs, their triggers and sharding items) on a caller's
transaction: the migrator writes a chunk of them and commits its own ledger rows in the
same transaction. The statements are the core's; which rows to write is the caller's.
MySQL-compatible servers take the fast path (dbkit.fastpath), others
the plain SQLAlchemy Core path it is tested against."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy import delete, literal_column, select, update
from sqlalchemy.engine import Connection

from dbkit import fastpath
from scheduler_core.model import Job, ShardingItem, TriggerState
from scheduler_core.store.rows import job_values
from scheduler_core.store.sql import SqlTriggerStore

JOB_SET = (
    "biz_code",
    "handler",
    "params",
    "shard_total",
    "timeout_ms",
    "max_retry",
    "priority",
    "envelope_size",
    "explicit_items",
    "shadow",
    "updated_at",
)
# what an update of a trigger may change: never its lease (owner_epoch, acquire_deadline),
# its creation time or its version (bumped instead)
TRIGGER_SET = (
    "job_id",
    "job_code",
    "biz_code",
    "kind",
    "cron_expr",
    "cron_dialect",
    "interval_ms",
    "time_zone",
    "end_at",
    "next_fire_at",
    "state",
    "priority",
    "misfire_policy",
    "updated_at",
)
# MySQL: an existing job's update always changes the row (updated_at moves forward even
# within the same millisecond), so the upsert's affected rows tell new jobs (1) from
# existing ones (2) for the whole statement
JOB_TOUCH = {"updated_at": "GREATEST(VALUES(`updated_at`), `updated_at` + 1)"}


def new_job_values(job: Job, now_ms: int) -> dict[str, Any]:
    """A job row as an upsert writes it (created now if it is new)."""
    return {**job_values(job, now_ms), "created_at": now_ms}


def item_values(job_id: int, item: ShardingItem) -> dict[str, Any]:
    return {"job_id": job_id, "item_index": item.index, "param": item.param}


class DefinitionWrites:
    def __init__(self, store: SqlTriggerStore) -> None:
        self.t = store.t

    @property
    def job_table(self) -> str:
        return self.t.job.name

    @property
    def trigger_table(self) -> str:
        return self.t.trigger.name

    @property
    def item_table(self) -> str:
        return self.t.sharding_item.name

    def upsert_jobs(self, conn: Connection, rows: list[dict[str, Any]]) -> int | None:
        """Jobs inserted or updated by job code. Fast path: the affected rows (1 a new job,
        2 an existing one: JOB_TOUCH); plain path: None."""
        return fastpath.write_rows(conn, self.t.job, rows, ("job_code",), JOB_SET, mysql_also=JOB_TOUCH)

    def upsert_rendered_jobs(self, conn: Connection, columns: Sequence[str], literals: list[str]) -> int:
        """`upsert_jobs` for rows rendered ahead (fastpath.render_plain; fast path only)."""
        return fastpath.write_rendered(conn, self.t.job, columns, literals, JOB_SET, JOB_TOUCH)

    def job_ids(self, conn: Connection, codes: Sequence[str]) -> dict[str, int]:
        """Job code -> id for these codes. Fast path: on the driver (Core's rendering of a
        1,000-value IN list cost more than the read)."""
        j = self.t.job
        if not fastpath.fast(conn):
            return dict(conn.execute(select(j.c.job_code, j.c.id).where(j.c.job_code.in_(codes))).all())
        q = conn.dialect.identifier_preparer.quote
        return dict(
            fastpath.driver_tuples(
                conn,
                f"SELECT {q('job_code')}, {q('id')} FROM {q(j.name)} "
                f"WHERE {q('job_code')} IN ({', '.join(['%s'] * len(codes))})",
                codes,
            )
        )

    def drop_items(self, conn: Connection, job_ids: Sequence[int]) -> None:
        si = self.t.sharding_item
        conn.execute(delete(si).where(si.c.job_id.in_(list(job_ids))))

    def lock_triggers(self, conn: Connection, codes: Sequence[str]) -> list[tuple[Any, ...]]:
        """(id, job_code, state, next_fire_at, kind, cron_expr, interval_ms, time_zone, cron_dialect) of
        the triggers of these jobs, locked: a scheduler acquiring one waits for this commit,
        so the state read here is the state an update meets."""
        tr = self.t.trigger
        return [
            tuple(r)
            for r in conn.execute(
                select(
                    tr.c.id,
                    tr.c.job_code,
                    tr.c.state,
                    tr.c.next_fire_at,
                    tr.c.kind,
                    tr.c.cron_expr,
                    tr.c.interval_ms,
                    tr.c.time_zone,
                    tr.c.cron_dialect,
                )
                .where(tr.c.job_code.in_(codes))
                .with_for_update()
            )
        ]

    def insert_items(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        fastpath.write_rows(conn, self.t.sharding_item, rows)

    def insert_rendered_items(self, conn: Connection, columns: Sequence[str], literals: list[str]) -> int:
        return fastpath.write_rendered(conn, self.t.sharding_item, columns, literals)

    def insert_triggers(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        fastpath.write_rows(conn, self.t.trigger, rows)

    def insert_rendered_triggers(self, conn: Connection, columns: Sequence[str], literals: list[str]) -> int:
        return fastpath.write_rendered(conn, self.t.trigger, columns, literals)

    def update_triggers(self, conn: Connection, rows: list[dict[str, Any]]) -> None:
        """Triggers updated by id (TRIGGER_SET), each one's version bumped."""
        tr = self.t.trigger
        # a literal, not a bound 1: PyMySQL's multi-row executemany cannot bind in the ON DUPLICATE part
        fastpath.write_rows(
            conn,
            tr,
            rows,
            ("id",),
            TRIGGER_SET,
            {"version": tr.c.version + literal_column("1")},
            {"version": "`version` + 1"},
        )

    def cancel_triggers(self, conn: Connection, codes: Sequence[str], states: Sequence[str], now_ms: int) -> None:
        """The triggers of these jobs that are in one of `states` become cancelled."""
        tr = self.t.trigger
        conn.execute(
            update(tr)
            .where(tr.c.job_code.in_(codes), tr.c.state.in_(states))
            .values(state=TriggerState.CANCELLED.value, version=tr.c.version + 1, updated_at=now_ms)
        )
