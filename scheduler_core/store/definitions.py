"""Bulk writes of job definitions (jobs, their triggers and sharding items) on a caller's
transaction: the migrator writes a chunk of them and commits its own ledger rows in the
same transaction. The caller passes model objects (`Job`, `Trigger`, `ShardingItem`);
the rows, the statements and the literals of rows rendered ahead are the core's.
MySQL-compatible servers take the fast path (dbkit.fastpath), others
the plain SQLAlchemy Core path it is tested against."""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, literal_column, select, update
from sqlalchemy.engine import Connection

from dbkit import fastpath
from scheduler_core.model import Job, ShardingItem, Trigger, TriggerState
from scheduler_core.store.rows import job_values, trigger_values
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.supersedes import SqlSupersedes

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


@dataclass(frozen=True, slots=True)
class Definition:
    """One job as a bulk write takes it: the job, its trigger (None: an API-only job) and
    its sharding items."""

    job: Job
    trigger: Trigger | None
    items: Sequence[ShardingItem]


@dataclass(frozen=True, slots=True)
class RenderedDefinitions:
    """Definitions' rows rendered ahead of their write (`DefinitionWrites.render`), so a
    caller can render a chunk while the chunk before it is written. Keyed by the caller's
    key; a trigger or sharding item row without its leading job id (known only once the
    job is written): "<the other values>)"."""

    now_ms: int  # the write time the rows carry
    jobs: Mapping[str, str]
    triggers: Mapping[str, str]
    items: Mapping[str, tuple[str, ...]]
    columns: Mapping[str, tuple[str, ...]]  # table name -> the rendered rows' columns


class DefinitionWrites:
    """The definition writes of one store, on the caller's connection. Callers pass model
    objects; the rows (and the SQL literals of rows rendered ahead) are this module's."""

    def __init__(self, store: SqlTriggerStore) -> None:
        self.t = store.t
        self._supersedes = SqlSupersedes(store)

    # -- rendered ahead ------------------------------------------------------------------

    def render(self, definitions: Mapping[str, Definition], now_ms: int) -> RenderedDefinitions | None:
        """These definitions' rows as `fastpath.render_plain` literals, made now (no I/O),
        keyed as given; None when a row cannot be rendered without a connection (the
        writes then go through the model-object methods)."""
        jobs: dict[str, str] = {}
        triggers: dict[str, str] = {}
        items: dict[str, tuple[str, ...]] = {}
        columns: dict[str, tuple[str, ...]] = {}
        for key, d in definitions.items():
            row = new_job_values(d.job, now_ms)
            columns.setdefault(self.t.job.name, tuple(row))  # every row of a table has the same keys in order
            lit = fastpath.render_plain(tuple(row.values()))
            if lit is None:
                return None
            jobs[key] = lit
            if d.trigger is not None:
                tv = trigger_values(d.trigger, 0, now_ms)
                columns.setdefault(self.t.trigger.name, tuple(tv))
                lit = _after_job_id(tv)
                if lit is None:
                    return None
                triggers[key] = lit
            its = [_after_job_id(item_values(0, i)) for i in d.items]
            if None in its:
                return None
            if d.items:
                columns.setdefault(self.t.sharding_item.name, tuple(item_values(0, d.items[0])))
            items[key] = tuple(i for i in its if i is not None)
        return RenderedDefinitions(now_ms, jobs, triggers, items, columns)

    def upsert_rendered_jobs(self, conn: Connection, rendered: RenderedDefinitions, keys: Sequence[str]) -> int:
        """`upsert_jobs` for the jobs of these keys as `render` gave them (fast path only:
        `fastpath.takes_rendered`)."""
        j = self.t.job
        return fastpath.write_rendered(
            conn, j, rendered.columns.get(j.name, ()), [rendered.jobs[k] for k in keys], JOB_SET, JOB_TOUCH
        )

    def insert_rendered_items(
        self, conn: Connection, rendered: RenderedDefinitions, job_ids: Sequence[tuple[str, int]]
    ) -> int:
        """`insert_items` for the items of these (key, job id) as `render` gave them;
        returns how many were inserted."""
        si = self.t.sharding_item
        lits = [_with_job_id(job_id, rest) for key, job_id in job_ids for rest in rendered.items[key]]
        fastpath.write_rendered(conn, si, rendered.columns.get(si.name, ()), lits)
        return len(lits)

    def insert_rendered_triggers(
        self, conn: Connection, rendered: RenderedDefinitions, job_ids: Sequence[tuple[str, int]]
    ) -> None:
        """`insert_triggers` for the triggers of these (key, job id) as `render` gave them."""
        tr = self.t.trigger
        lits = [_with_job_id(job_id, rendered.triggers[key]) for key, job_id in job_ids]
        fastpath.write_rendered(conn, tr, rendered.columns.get(tr.name, ()), lits)

    # -- model objects ---------------------------------------------------------------------

    def upsert_jobs(self, conn: Connection, jobs: Sequence[Job], now_ms: int) -> int | None:
        """Jobs inserted or updated by job code (a new one created at `now_ms`). Fast path:
        the affected rows (1 a new job, 2 an existing one: JOB_TOUCH); plain path: None."""
        rows = [new_job_values(job, now_ms) for job in jobs]
        return fastpath.write_rows(conn, self.t.job, rows, ("job_code",), JOB_SET, mysql_also=JOB_TOUCH)

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

    def insert_items(self, conn: Connection, items: Mapping[int, Sequence[ShardingItem]]) -> int:
        """The sharding items of these jobs (job id -> its items); returns how many."""
        rows = [item_values(job_id, i) for job_id, its in items.items() for i in its]
        fastpath.write_rows(conn, self.t.sharding_item, rows)
        return len(rows)

    def insert_triggers(self, conn: Connection, triggers: Sequence[tuple[int, Trigger]], now_ms: int) -> None:
        """New triggers, each of the job whose id it comes with, created at `now_ms`."""
        fastpath.write_rows(conn, self.t.trigger, [trigger_values(t, job_id, now_ms) for job_id, t in triggers])

    def update_triggers(self, conn: Connection, triggers: Sequence[tuple[int, Trigger]], now_ms: int) -> None:
        """Triggers updated by their id (TRIGGER_SET, from the trigger as given, of the job
        whose id it comes with), each one's version bumped."""
        rows = []
        for job_id, t in triggers:
            if t.id is None:
                raise ValueError(f"trigger of job {t.job_code}: an update needs the trigger's id")
            rows.append({**trigger_values(t, job_id, now_ms), "id": t.id})
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

    def cancel_triggers(
        self, conn: Connection, codes: Sequence[str], states: Collection[TriggerState], now_ms: int
    ) -> None:
        """The triggers of these jobs that are in one of `states` become cancelled."""
        tr = self.t.trigger
        conn.execute(
            update(tr)
            .where(tr.c.job_code.in_(codes), tr.c.state.in_([s.value for s in states]))
            .values(state=TriggerState.CANCELLED.value, version=tr.c.version + 1, updated_at=now_ms)
        )

    def record_schedule_edit(
        self, conn: Connection, trigger_id: int, biz_code: str, effective_ms: int, new_times: Iterable[int], now_ms: int
    ) -> None:
        """A live trigger's schedule changed in this transaction (after its row is updated):
        the old schedule's records it supersedes (scheduler_core.store.supersedes)."""
        self._supersedes.record_edit(conn, trigger_id, biz_code, effective_ms, new_times, now_ms)


def _after_job_id(row: dict[str, Any]) -> str | None:
    """A row rendered without its first column, the job id: "<the rest>)"."""
    lit = fastpath.render_plain(tuple(row.values())[1:])
    return None if lit is None else lit[1:]


def _with_job_id(job_id: int, rest: str) -> str:
    """A row `_after_job_id` rendered, with its job id in front again."""
    return f"({int(job_id)},{rest}"
