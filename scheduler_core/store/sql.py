"""SqlTriggerStore: the trigger store on TiDB/MariaDB (SQLAlchemy Core + PyMySQL) and on
SQLite (the embedded default). One implementation; the differences are the partition
slice and the insert-if-absent spelling."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import String, and_, bindparam, case, func, insert, or_, select, update
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import ColumnElement, Select
from sqlalchemy.sql.elements import BindParameter

from dbkit.capabilities import capabilities
from dbkit.database import Database
from dbkit.translate import translated_methods
from scheduler_core.errors import IllegalTransition
from scheduler_core.fence import Fence, fence_of_stop
from scheduler_core.item_states import ItemState
from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Lane,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerKind,
    parse_command_id,
)
from scheduler_core.model import TriggerState as S
from scheduler_core.occurrences import next_after
from scheduler_core.ports import (
    BusinessSwitchRows,
    CatalogReads,
    Clock,
    FenceStore,
    FiredUpdate,
    Partition,
    RunRecordReads,
    StopReads,
    Transition,
    TriggerStore,
    Wakeups,
)
from scheduler_core.states import check_transition
from scheduler_core.stops import Cause, Scope, SkipWindow
from scheduler_core.store import result_joins, stop_rows
from scheduler_core.store.admin import FENCE_NAME, discover_partitions, tables_for
from scheduler_core.store.catalog import CatalogRows
from scheduler_core.store.followups import FollowupRows
from scheduler_core.store.rows import (
    FINAL_RANK,
    FIRED_COLUMNS,
    FIRED_RANK,
    JOB_READ_COLUMNS,
    MESSAGE_MAX,
    TRIGGER_KEY_COLUMNS,
    TRIGGER_SHAPE_COLUMNS,
    fired_from_row,
    fired_rows,
    job_from_row,
    job_values,
    trigger_from_row,
    trigger_values,
    triggers_from_packed,
)
from scheduler_core.store.run_log_writes import write_logs
from scheduler_core.store.run_records import RunRecordRows, published_by_outcome
from scheduler_core.store.schema import Tables
from scheduler_core.store.switch_rows import SwitchRows
from scheduler_core.times import opt_to_ms, to_ms
from scheduler_core.wakeup import LocalWakeups, notify_added

_IN_CHUNK = 500  # ids per IN (...) list: keeps statements small on every server
# fired rows per fenced INSERT ... SELECT: its row source is a UNION ALL of one SELECT per
# row; SQLite allows at most 500 terms in a compound SELECT, MariaDB takes 1,000 rows (a
# 100K-item fan-out: 2.9 s at 2,000, 3.1 s at 200, 9.4 s as the plain executemany here)
_FENCED_ROWS = 1000
_FENCED_ROWS_SQLITE = 200
_ONE_MS = timedelta(milliseconds=1)
_LETTER = {s.fired_state: s for s in ItemState}  # a page record's items, one letter each


def _chunks(seq: Sequence[Any], size: int = _IN_CHUNK) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


def _check_first_fire(trig: Trigger) -> None:
    """A cron trigger waits for a time its cron produces (issue 28): one stored with any
    other next_fire_at was fired at that time all the same, a run nobody scheduled."""
    if trig.kind is not TriggerKind.CRON or trig.state not in (S.WAITING, S.CREATED, S.PAUSED):
        return
    if trig.cron is not None and "W" in trig.cron.upper():
        # Quartz's `W` depends on where its search starts (docs/cron.md): a fire time found
        # from the migration's start need not be found again from 1 ms before it
        return
    produced = next_after(trig, trig.next_fire_at - _ONE_MS)
    if produced != trig.next_fire_at:
        raise ValueError(
            f"trigger of {trig.job_code}: next_fire_at {trig.next_fire_at.isoformat()} is no fire time of "
            f"cron {trig.cron!r} ({trig.time_zone}); its next one is "
            f"{produced.isoformat() if produced else 'none'} (scheduler_core.jobspec computes it)"
        )


def _per_row_sql(key: str, values: dict[Any, int], otherwise: str) -> str:
    """(CASE key WHEN k1 THEN v1 ... ELSE otherwise END): per-row values in one statement,
    portable to TiDB, MariaDB and SQLite. `key` and `otherwise` are this schema's column
    names (or a number); the keys and values are integers (ids, epoch milliseconds,
    versions) rendered inline: int() admits nothing else."""
    whens = " ".join(f"WHEN {int(k)} THEN {int(v)}" for k, v in values.items())
    return f"(CASE {key} {whens} ELSE {otherwise} END)" if whens else otherwise


@translated_methods  # driver errors leave every public method as the port's StoreError
class SqlTriggerStore(
    FollowupRows,
    RunRecordRows,
    CatalogRows,
    SwitchRows,
    TriggerStore,
    FenceStore,
    RunRecordReads,
    StopReads,
    CatalogReads,
    BusinessSwitchRows,
):
    def __init__(self, engine: Engine, clock: Clock, tables: Tables | None = None) -> None:
        self.engine = engine
        self.clock = clock
        self.t = tables or tables_for(engine)
        self._partitions: list[Partition] | None = None
        self._fired_sql: str | None = None
        # the hot path's repeating statements, built once (SQLAlchemy then only looks up
        # their compiled form instead of building the expression tree per call)
        fence = self.t.fence
        self._fence_epoch = select(fence.c.epoch).where(fence.c.name == bindparam("fence_name"))
        # On MariaDB/MySQL the fired-record insert reads the fence (inside the INSERT, and
        # when it reads it on its own) with a shared lock (LOCK IN SHARE MODE): a claim
        # of a newer epoch waits for an insert that read the old one to commit, and one
        # that committed first is seen, so no insert of a deposed owner lands after its
        # successor claimed the fence. TiDB refuses that clause (a no-op at best), SQLite
        # writes one at a time: a plain read there, as before.
        self._fence_epoch_shared = self._fence_epoch.with_for_update(read=True)
        # the engine's AUTOCOMMIT twin where the database has one (see put_fired_fenced, _reads)
        self.db = Database(engine)
        self._page_update = _page_update_statement(self.t.fired)
        self._item_update = _item_update_statement(self.t.fired)
        # see _due_sql, by (partition index, lane or None)
        self._due_sqls: dict[tuple[int, Lane | None], tuple[str, tuple[str, ...], dict[str, Any]]] = {}
        self._jobs_sqls: dict[int, str] = {}  # get_jobs' read, by the number of codes
        # told of the partitions that got triggers due soon (`add_triggers`), so their
        # loops tick in time; in process by default, across processes when wired to etcd
        self.wakeups: Wakeups | None = LocalWakeups()

    def close(self) -> None:
        """Close every pooled connection of the store (its AUTOCOMMIT twin's too); a later
        call opens new ones. The store's owner calls it when done, instead of reaching
        into the engine."""
        self.db.close()

    # --- partitions ------------------------------------------------------------------

    def partitions(self) -> list[Partition]:
        if self._partitions is None:
            self._partitions = discover_partitions(self.engine, self.t)
        return list(self._partitions)

    def _from_partition(self, stmt: Select[Any], partition: Partition) -> Select[Any]:
        tr = self.t.trigger
        if self.t.sliced_by_column:
            return stmt.where(tr.c.part == partition.index)
        if not partition.name:
            return stmt
        # The name came from information_schema and matched ^p[0-9]+$ (admin.py).
        # "*" because the hint is silently dropped when its dialect name differs.
        return stmt.with_hint(tr, f"PARTITION ({partition.name})", "*")

    # --- jobs and sharding items -------------------------------------------------------

    def put_job(self, job: Job) -> Job:
        j = self.t.job
        now = self.clock.now_ms()
        values = job_values(job, now)
        with self.engine.begin() as conn:
            existing = conn.execute(select(j.c.id).where(j.c.job_code == job.job_code)).scalar_one_or_none()
            if existing is None:
                conn.execute(insert(j).values(created_at=now, **values))
            else:
                conn.execute(update(j).where(j.c.id == existing).values(**values))
            row = conn.execute(select(j).where(j.c.job_code == job.job_code)).mappings().one()
        return job_from_row(row)

    def get_job(self, job_code: JobCode) -> Job | None:
        return self.get_jobs([job_code]).get(job_code)

    def get_jobs(self, job_codes: Sequence[JobCode]) -> dict[JobCode, Job]:
        # once per acquire tick (the definitions its winners fire with): driver SQL, as the
        # due read; the expanding IN of a Core statement is rendered again on every call
        out: dict[JobCode, Job] = {}
        with self._reads().connect() as conn:
            for chunk in _chunks(list(dict.fromkeys(job_codes))):
                for row in conn.exec_driver_sql(self._jobs_sql(len(chunk), conn), tuple(chunk)).mappings():
                    job = job_from_row(row)
                    out[job.job_code] = job
        return out

    def _jobs_sql(self, n: int, conn: Connection) -> str:
        found = self._jobs_sqls.get(n)
        if found is None:
            q = conn.dialect.identifier_preparer.quote
            found = (
                f"SELECT {', '.join(q(c) for c in JOB_READ_COLUMNS)} FROM {q(self.t.job.name)}"
                f" WHERE {q('job_code')} IN ({', '.join([self._mark()] * n)})"
            )
            self._jobs_sqls[n] = found
        return found

    def put_sharding_items(self, job_code: JobCode, items: Sequence[ShardingItem]) -> None:
        j, si = self.t.job, self.t.sharding_item
        with self.engine.begin() as conn:
            job_id = conn.execute(select(j.c.id).where(j.c.job_code == job_code)).scalar_one_or_none()
            if job_id is None:
                raise KeyError(f"no job {job_code!r}")
            conn.execute(si.delete().where(si.c.job_id == job_id))
            if items:
                conn.execute(
                    insert(si), [{"job_id": job_id, "item_index": it.index, "param": it.param} for it in items]
                )

    def sharding_page(self, job_code: JobCode, start: int, limit: int) -> list[ShardingItem]:
        j, si = self.t.job, self.t.sharding_item
        stmt = (
            select(si.c.item_index, si.c.param)
            .select_from(si.join(j, j.c.id == si.c.job_id))
            .where(j.c.job_code == job_code, si.c.item_index >= start)
            .order_by(si.c.item_index)
            .limit(limit)
        )
        with self.engine.connect() as conn:
            return [ShardingItem(job_code=job_code, index=i, param=p) for i, p in conn.execute(stmt)]

    # --- triggers ---------------------------------------------------------------------

    def add_triggers(self, triggers: Sequence[Trigger]) -> list[Trigger]:
        if not triggers:
            return []
        tr = self.t.trigger
        now = self.clock.now_ms()
        jobs = self.get_jobs([t.job_code for t in triggers])
        out: list[Trigger] = []
        rows = []
        for trig in triggers:
            job = jobs.get(trig.job_code)
            if job is None or job.id is None:
                raise KeyError(f"trigger refers to unknown job {trig.job_code!r}")
            _check_first_fire(trig)
            rows.append(trigger_values(trig, job.id, now))
        if len(rows) > 1 and capabilities(self.engine).returning_in_order:
            # one statement (multi-row INSERT ... RETURNING, in the order given) instead of
            # an INSERT and a SELECT per trigger: a producer adding many at once
            with self.engine.begin() as conn:
                result = conn.execute(insert(tr).returning(*tr.c, sort_by_parameter_order=True), rows)
                out = [trigger_from_row(r) for r in result.mappings()]
            notify_added(self.wakeups, out, len(self.partitions()), self.clock.now())
            return out
        with self.engine.begin() as conn:
            for trig in triggers:
                job = jobs[trig.job_code]
                assert job.id is not None
                result = conn.execute(insert(tr).values(**trigger_values(trig, job.id, now)))
                new_id = result.inserted_primary_key[0] if result.inserted_primary_key else None
                if new_id is None:  # pragma: no cover - every supported driver reports it
                    raise RuntimeError("the driver did not report the new trigger id")
                out.append(trigger_from_row(conn.execute(select(tr).where(tr.c.id == new_id)).mappings().one()))
        notify_added(self.wakeups, out, len(self.partitions()), self.clock.now())
        return out

    def get_trigger(self, trigger_id: TriggerId) -> Trigger | None:
        found = self.get_triggers([trigger_id])
        return found[0] if found else None

    def get_triggers(self, ids: Sequence[TriggerId]) -> list[Trigger]:
        tr = self.t.trigger
        out: list[Trigger] = []
        with self.engine.connect() as conn:
            for chunk in _chunks(list(ids)):
                out += [trigger_from_row(r) for r in conn.execute(select(tr).where(tr.c.id.in_(chunk))).mappings()]
        return sorted(out, key=lambda t: t.id or 0)

    def triggers_of(self, *, biz_code: str | None = None, job_code: JobCode | None = None) -> list[Trigger]:
        tr = self.t.trigger
        stmt = select(tr).order_by(tr.c.id)
        if biz_code is not None:
            stmt = stmt.where(tr.c.biz_code == biz_code)
        if job_code is not None:
            stmt = stmt.where(tr.c.job_code == job_code)
        with self.engine.connect() as conn:
            return [trigger_from_row(r) for r in conn.execute(stmt).mappings()]

    def select_due(
        self,
        partition: Partition,
        start: datetime,
        end: datetime,
        limit: int,
        exclude_biz_codes: Collection[str] = (),
        lane: Lane | None = None,
    ) -> list[Trigger]:
        values = {
            "due_state": S.WAITING.value,
            "due_from": to_ms(start),
            "due_to": to_ms(end),
            "due_limit": max(0, limit),
        }
        with self._reads().connect() as conn:
            if exclude_biz_codes:  # a business's pool budget is spent: built per call (rare)
                tr = self.t.trigger
                stmt = self._due_select().where(tr.c.biz_code.not_in(sorted(exclude_biz_codes)))
                if lane is not None:
                    stmt = stmt.where(self._lane_is(lane))
                rows = conn.execute(self._from_partition(stmt, partition), values).all()
            else:
                sql, names, fixed = self._due_sql(partition, conn, lane)
                values.update(fixed)  # the partition's own (SQLite: its `part`)
                # positional drivers (SQLite) take the values in the compiled order, named ones the dict
                rows = conn.exec_driver_sql(sql, tuple(values[n] for n in names) if names else values).all()
        return triggers_from_packed(rows)

    def _due_select(self) -> Select[Any]:
        """The hot read: only the columns the model is built from, those the due rows share
        packed in one (rows.triggers_from_packed)."""
        tr = self.t.trigger
        return (
            select(
                *(tr.c[c] for c in TRIGGER_KEY_COLUMNS),
                func.json_array(*(tr.c[c] for c in TRIGGER_SHAPE_COLUMNS)).label("shape"),
            )
            .where(
                tr.c.state == bindparam("due_state"),
                tr.c.next_fire_at.between(bindparam("due_from"), bindparam("due_to")),
            )
            .order_by(tr.c.next_fire_at, tr.c.priority, tr.c.id)
            .limit(bindparam("due_limit"))
        )

    def _lane_is(self, lane: Lane) -> ColumnElement[bool]:
        """The lane's rows. The lane trails the due index (schema.py): the index range of
        the window is read as without it, the other lanes' entries skipped in the index.
        NULL is `default` (a row written by a version of before lanes during an upgrade)."""
        tr = self.t.trigger
        if lane is Lane.DEFAULT:
            return or_(tr.c.lane == lane.value, tr.c.lane.is_(None))
        return tr.c.lane == lane.value

    def _due_sql(
        self, partition: Partition, conn: Connection, lane: Lane | None = None
    ) -> tuple[str, tuple[str, ...], dict[str, Any]]:
        """The hot read of one partition (of one lane, when given) compiled once: its SQL,
        its parameters' names in the order a positional driver takes them (none for a
        driver that takes names) and the values the statement fixes itself (the
        partition's, the lane's). Sent as driver SQL: building the statement and looking up
        its compiled form per tick cost more CPU than decoding its rows."""
        key = (partition.index, lane)
        found = self._due_sqls.get(key)
        if found is None:
            stmt = self._due_select()
            if lane is not None:
                stmt = stmt.where(self._lane_is(lane))
            compiled = self._from_partition(stmt, partition).compile(dialect=conn.dialect)
            fixed = {k: v for k, v in compiled.params.items() if not k.startswith("due_")}
            found = (compiled.string, tuple(compiled.positiontup or ()), fixed)
            self._due_sqls[key] = found
        return found

    def due_forecast(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[str, Lane, int, int]]:
        """(business, lane, bucket start ms, waiting triggers due in it) for the buckets of
        `bucket_ms` from `start_ms` (a multiple of it) to `end_ms`: one grouped count over
        the due index's range of every partition (the adaptive lookahead's forecast). Reads
        a row per trigger in the range (the business is not in the index)."""
        tr = self.t.trigger
        offset = tr.c.next_fire_at - start_ms
        bucket = (offset - offset % bucket_ms).label("bucket")
        stmt = (
            select(tr.c.biz_code, tr.c.lane, bucket, func.count())
            .where(tr.c.state == S.WAITING.value, tr.c.next_fire_at.between(start_ms, end_ms))
            .group_by(tr.c.biz_code, tr.c.lane, bucket)
        )
        with self._reads().connect() as conn:
            return [(b, Lane.of(lane), start_ms + int(k), int(n)) for b, lane, k, n in conn.execute(stmt)]

    def due_forecast_by_lane(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[Lane, int, int]]:
        """Per lane and bucket, from the due index alone (`state, next_fire_at, priority,
        lane`: every column read is in it, no row lookup): the read the lanes' windows
        need every `forecast_every`, cheap enough over a waiting burst of millions."""
        tr = self.t.trigger
        offset = tr.c.next_fire_at - start_ms
        bucket = (offset - offset % bucket_ms).label("bucket")
        stmt = (
            select(tr.c.lane, bucket, func.count())
            .where(tr.c.state == S.WAITING.value, tr.c.next_fire_at.between(start_ms, end_ms))
            .group_by(tr.c.lane, bucket)
        )
        with self._reads().connect() as conn:
            return [(Lane.of(lane), start_ms + int(k), int(n)) for lane, k, n in conn.execute(stmt)]

    def select_expired(
        self, partition: Partition, now: datetime, live_epoch: Epoch | None, limit: int
    ) -> list[Trigger]:
        tr = self.t.trigger
        stmt = (
            select(tr)
            .where(tr.c.state == S.ACQUIRED.value, tr.c.acquire_deadline < to_ms(now))
            .order_by(tr.c.next_fire_at, tr.c.id)
            .limit(max(0, limit))
        )
        if live_epoch is not None:
            stmt = stmt.where(tr.c.owner_epoch != live_epoch)
        with self.engine.connect() as conn:
            rows = conn.execute(self._from_partition(stmt, partition)).mappings().all()
        return [trigger_from_row(r) for r in rows]

    def cas(self, change: Transition) -> list[Trigger]:
        tr = self.t.trigger
        with self.engine.begin() as conn:
            ids, token, _matched = self._cas_update(conn, change)
            winners: list[Trigger] = []
            for chunk in _chunks(ids):
                rows = conn.execute(select(tr).where(tr.c.id.in_(chunk), tr.c.cas_token == token)).mappings()
                winners += [trigger_from_row(r) for r in rows]
        return winners

    def cas_ids(self, change: Transition) -> list[TriggerId]:
        with self._cas_connection([change]) as conn:
            return self._cas_winners(conn, change)

    def _cas_connection(self, changes: Sequence[Transition]) -> AbstractContextManager[Connection]:
        """Where the transitions' UPDATEs run. One UPDATE (a single transition of at most
        _IN_CHUNK rows, as the acquire tick and a fired chunk's outcome are) on MariaDB/MySQL:
        on the AUTOCOMMIT twin, where the statement commits as it ends, one round trip
        instead of the UPDATE and a COMMIT (the CAS is its own transaction either way; its
        fence is read inside the UPDATE). When the UPDATE matches fewer rows than asked, the
        winners are read back by their token in a statement of their own: a winner changed
        by someone else in between is not counted, as if the change had come just before
        the UPDATE. Anything larger: one transaction on the store's pool, as before."""
        if len(changes) == 1 and len(set(changes[0].ids)) <= _IN_CHUNK and capabilities(self.engine).autocommit_twin:
            return self.db.autocommit.connect()
        return self.engine.begin()

    def _cas_winners(self, conn: Connection, change: Transition) -> list[TriggerId]:
        tr = self.t.trigger
        ids, token, matched = self._cas_update(conn, change)
        if matched == len(ids):
            # every row took the new token (it is unique, so matched == changed on every
            # server): all won, no re-read
            return ids
        won: list[TriggerId] = []
        for chunk in _chunks(ids):
            won += [
                TriggerId(r[0])
                for r in conn.execute(select(tr.c.id).where(tr.c.id.in_(chunk), tr.c.cas_token == token))
            ]
        return won

    def _cas_update(self, conn: Connection, change: Transition) -> tuple[list[TriggerId], str, int]:
        """The conditional UPDATE of a transition, set-based (per-row values as CASE id):
        returns the distinct ids, the token stamped on the winners and the rows matched.

        Written as driver SQL: the statement differs per call (ids and CASE values are
        inline integers), so SQLAlchemy would build, compile and cache a new one every
        time, evicting the statements that do repeat from its compiled cache."""
        check_transition(change.from_state, change.to_state)
        if change.from_state == change.to_state and change.epoch is None and change.next_fire_at is None:
            raise IllegalTransition(str(change.from_state), str(change.to_state))
        ids = list(dict.fromkeys(change.ids))
        token = uuid.uuid4().hex
        if not ids:
            return ids, token, 0
        mark = self._mark()
        # SET: last_fired_at first, so that `last_fired_at = next_fire_at` reads the row's
        # value before this statement on every server (MySQL assigns left to right)
        sets = [
            f"state = {mark}",
            f"cas_token = {mark}",
            "version = version + 1",
            f"updated_at = {int(self.clock.now_ms())}",
        ]
        set_params: list[Any] = [change.to_state.value, token]
        if change.fired_at_next:
            sets.insert(0, "last_fired_at = next_fire_at")
        if change.clear_epoch:
            sets += ["owner_epoch = NULL", "acquire_deadline = NULL"]
        else:
            if change.epoch is not None:
                sets.append(f"owner_epoch = {int(change.epoch)}")
            if change.deadline is not None:
                sets.append(f"acquire_deadline = {int(to_ms(change.deadline))}")
        conds = [f"state = {mark}"]
        cond_params: list[Any] = [change.from_state.value]
        if change.expected_epoch is not None:
            conds.append(f"owner_epoch = {int(change.expected_epoch)}")
        if change.fence_epoch is not None:
            # The fence is checked inside the same UPDATE, so a leader deposed between its
            # last check and this write still cannot land it.
            conds.append(
                f"EXISTS (SELECT 1 FROM {self.t.fence.name} WHERE name = {mark} AND epoch = {int(change.fence_epoch)})"
            )
            cond_params.append(change.fence or FENCE_NAME)
        nexts, lasts, versions = change.next_fire_at or {}, change.last_fired_at or {}, change.expected_version
        matched = 0
        for chunk in _chunks(ids):
            chunk_sets = list(sets)
            chunk_conds = [f"id IN ({', '.join(str(int(i)) for i in chunk)})", *conds]
            # per-row values in one statement; a row missing from a map keeps its value
            if lasts:
                # an explicit map replaces the stamp from the row (one assignment per column)
                chunk_sets = [c for c in chunk_sets if not c.startswith("last_fired_at")]
                chunk_sets.insert(
                    0,
                    "last_fired_at = "
                    + _per_row_sql("id", {i: to_ms(lasts[i]) for i in chunk if i in lasts}, "last_fired_at"),
                )
            if nexts:
                chunk_sets.append(
                    "next_fire_at = "
                    + _per_row_sql("id", {i: to_ms(nexts[i]) for i in chunk if i in nexts}, "next_fire_at")
                )
            if versions is not None:
                # a row the map does not name cannot match (-1 is no version)
                chunk_conds.append(
                    "version = " + _per_row_sql("id", {i: versions[i] for i in chunk if i in versions}, "-1")
                )
            sql = f"UPDATE {self.t.trigger.name} SET {', '.join(chunk_sets)} WHERE {' AND '.join(chunk_conds)}"
            result = conn.exec_driver_sql(sql, (*set_params, *cond_params))
            matched += result.rowcount or 0
        return ids, token, matched

    def _mark(self) -> str:
        """The DBAPI's positional parameter marker, for the driver SQL of the hot path."""
        style = self.engine.dialect.paramstyle
        if style == "qmark":
            return "?"
        if style in ("format", "pyformat"):
            return "%s"
        raise RuntimeError(f"unsupported DBAPI paramstyle {style!r}")  # pragma: no cover - the drivers we ship

    # --- fencing -----------------------------------------------------------------------

    def claim_epoch(self, epoch: Epoch, fence: str | None = None) -> bool:
        f = self.t.fence
        name = fence or FENCE_NAME
        now = self.clock.now_ms()
        with self.engine.begin() as conn:
            raised = conn.execute(
                update(f).where(f.c.name == name, f.c.epoch < epoch).values(epoch=epoch, updated_at=now)
            ).rowcount
            if not raised and fence is not None:
                # a partition's first owner: its fence row does not exist yet (the leader's
                # is made at init). A concurrent first claim may insert it first.
                try:
                    with conn.begin_nested():
                        conn.execute(insert(f).values(name=name, epoch=epoch, updated_at=now))
                except IntegrityError:
                    conn.execute(
                        update(f).where(f.c.name == name, f.c.epoch < epoch).values(epoch=epoch, updated_at=now)
                    )
            current = conn.execute(select(f.c.epoch).where(f.c.name == name)).scalar_one()
        return int(current) == int(epoch)

    def current_epoch(self, fence: str | None = None) -> Epoch:
        f = self.t.fence
        with self.engine.connect() as conn:
            value = conn.execute(select(f.c.epoch).where(f.c.name == (fence or FENCE_NAME))).scalar_one_or_none()
        return Epoch(int(value or 0))

    # --- fired records -----------------------------------------------------------------

    def put_fired(self, records: Sequence[FiredRecord]) -> int:
        if not records:
            return 0
        with self.engine.begin() as conn:
            return self._insert_fired(conn, records)

    def put_fired_fenced(self, records: Sequence[FiredRecord], epoch: Epoch, fence: str | None = None) -> bool:
        """The fence is a condition of the INSERT itself (INSERT ... SELECT ... WHERE the
        fence row holds `epoch`), not a read before it: one statement and the commit per
        chunk instead of a read, the statement and the commit. Fewer rows than records
        inserted means duplicates (a re-fire of the same occurrence) or a moved fence; only
        then is the fence read, to tell which."""
        name = fence or FENCE_NAME
        lock = capabilities(self.engine).shared_lock_reads
        rows = fired_rows(records)
        if lock:
            # MariaDB/MySQL: each statement commits as it ends, so the shared lock on the
            # fence row lasts one statement on the server, never a client round trip. In one
            # transaction, a scheduler paused between the INSERT and its COMMIT held it for
            # as long as it was paused, and the new owner's claim of the fence waited on it
            # (the claim is what lets a new owner take over). A fence that moves between two
            # statements of a large chunk leaves the first one's records: the trigger is
            # still acquired by this epoch, and the new owner re-fires it with the same ids,
            # as after a crash at that point.
            with self.db.autocommit.connect() as conn:
                return self._put_fired_fenced(conn, rows, name, epoch, lock)
        with self.engine.connect() as conn:
            if not self._put_fired_fenced(conn, rows, name, epoch, lock):
                conn.rollback()  # a deposed epoch writes nothing
                return False
            conn.commit()
        return True

    def _put_fired_fenced(
        self, conn: Connection, rows: list[tuple[Any, ...]], name: str, epoch: Epoch, lock: bool
    ) -> bool:
        size = _FENCED_ROWS_SQLITE if self.t.sliced_by_column else _FENCED_ROWS
        inserted = sum(self._insert_fired_fenced(conn, batch, name, epoch, lock) for batch in _chunks(rows, size))
        # nothing to insert proves nothing: the fence is read
        return not ((inserted < len(rows) or not rows) and not self._fence_holds(conn, name, epoch, lock))

    def warm_pools(self, connections: int) -> None:
        """Open up to `connections` pooled connections on each of the store's pools (the
        engine and, on MariaDB/MySQL, its AUTOCOMMIT twin), as a scheduler that has been
        running holds them: a connect costs ~25 ms here, which a short measured burst
        would otherwise pay inside its window (benchmarks call this before the clock)."""
        for engine in {id(e): e for e in (self.engine, self._reads())}.values():
            held = [engine.connect() for _ in range(max(0, connections))]
            for conn in held:
                conn.close()

    def _reads(self) -> Engine:
        """Where the hot one-statement reads go (the due rows, the job definitions): on
        MariaDB/MySQL the AUTOCOMMIT twin, whose statement is its own snapshot, as READ
        COMMITTED gives, with no transaction left open to roll back (a ROLLBACK round trip
        per read on the plain pool); elsewhere the store's engine."""
        return self.db.autocommit

    def _fence_holds(self, conn: Connection, name: str, epoch: Epoch, lock: bool) -> bool:
        # with a shared lock where the server has one (see __init__)
        current = conn.execute(
            self._fence_epoch_shared if lock else self._fence_epoch, {"fence_name": name}
        ).scalar_one_or_none()
        return current is not None and int(current) == int(epoch)

    def _insert_fired_fenced(
        self, conn: Connection, rows: Sequence[tuple[Any, ...]], fence_name: str, epoch: Epoch, lock: bool
    ) -> int:
        """INSERT-if-absent of `rows` (rows.fired_row tuples) on the condition that the fence
        row `fence_name` holds `epoch`, read with a shared lock where the server has one
        (see _fence_holds). Columns whose value every row shares (the state, the epoch,
        the fire time, the empty result columns, most often the job and the run's size)
        are bound once, the others per row: the driver escapes a quarter of the values
        the plain multi-row INSERT made it escape."""
        mark = self._mark()
        columns = list(zip(*rows, strict=True))
        # the command id always varies: the row source needs one column per row
        varying = [i for i, col in enumerate(columns) if i == 0 or len(set(col)) > 1]
        shared = set(range(len(FIRED_COLUMNS))) - set(varying)
        select_list = ", ".join(mark if i in shared else f"v.c{i}" for i in range(len(FIRED_COLUMNS)))
        first = "SELECT " + ", ".join(f"{mark} AS c{i}" for i in varying)
        rest = " UNION ALL SELECT " + ", ".join([mark] * len(varying))
        lock_clause = " LOCK IN SHARE MODE" if lock else ""
        verb = f"INSERT {capabilities(conn).ignore_prefix} INTO"
        # IGNORE only skips the duplicate key here: every value was length-checked in
        # rows.fired_row, so no truncation warning can be swallowed.
        sql = (
            f"{verb} {self.t.fired.name} ({', '.join(FIRED_COLUMNS)}) SELECT {select_list}"
            f" FROM ({first}{rest * (len(rows) - 1)}) v"
            f" WHERE EXISTS (SELECT 1 FROM {self.t.fence.name} WHERE name = {mark} AND epoch = {mark}{lock_clause})"
        )
        params: list[Any] = [rows[0][i] for i in sorted(shared)]
        for row in rows:
            params += [row[i] for i in varying]
        params += [fence_name, int(epoch)]
        result = conn.exec_driver_sql(sql, tuple(params))
        return max(0, result.rowcount or 0)

    def _insert_fired(self, conn: Connection, records: Sequence[FiredRecord]) -> int:
        # The driver's own executemany (PyMySQL sends one multi-row INSERT) with plain
        # tuples: no compile and no per-row parameter processing, which cost more than the
        # statement itself for a chunk of a hundred records.
        result = conn.exec_driver_sql(self._fired_insert_sql(), fired_rows(records))
        return max(0, result.rowcount or 0)

    def _fired_insert_sql(self) -> str:
        if self._fired_sql is None:
            mark = self._mark()
            # IGNORE only skips the duplicate key here: every value was length-checked in
            # rows.fired_row, so no truncation warning can be swallowed.
            verb = f"INSERT {capabilities(self.engine).ignore_prefix} INTO"
            self._fired_sql = (
                f"{verb} {self.t.fired.name} ({', '.join(FIRED_COLUMNS)})"
                f" VALUES ({', '.join([mark] * len(FIRED_COLUMNS))})"
            )
        return self._fired_sql

    def finish_fire(self, changes: Sequence[Transition]) -> list[list[TriggerId]]:
        # the chunk's outcome in one commit (one UPDATE, committing as it ends, for a chunk
        # whose triggers all reschedule or all complete: _cas_connection). No published stamp
        # on the fired records: the outcome CAS is written only after the broker acked the
        # chunk, so a trigger whose last_fired_at reached an occurrence has published it (see
        # `outcome_recorded`); a crash before this commit leaves the triggers acquired,
        # re-fired with the same ids
        with self._cas_connection(changes) as conn:
            return [self._cas_winners(conn, change) for change in changes]

    def mark_published(self, command_ids: Sequence[CommandId], at: datetime) -> int:
        # runs outside the schedule only (follow-ups, a schedule edit's pending runs): a
        # schedule fire's publication is told by its trigger's outcome (outcome_recorded).
        # Driver SQL, like the CAS: one statement per chunk, its IN list as wide as the chunk
        rank = int(FIRED_RANK[FiredState.PUBLISHED])
        mark = self._mark()
        changed = 0
        with self.engine.begin() as conn:
            for chunk in _chunks(list(command_ids)):
                # state before state_rank: MySQL assigns left to right, and both read the old rank
                sql = (
                    f"UPDATE {self.t.fired.name} SET published_at = {int(to_ms(at))},"
                    f" state = CASE WHEN state_rank < {rank} THEN {mark} ELSE state END,"
                    f" state_rank = CASE WHEN state_rank < {rank} THEN {rank} ELSE state_rank END"
                    f" WHERE command_id IN ({', '.join([mark] * len(chunk))}) AND published_at IS NULL"
                )
                changed += conn.exec_driver_sql(sql, (FiredState.PUBLISHED.value, *chunk)).rowcount or 0
        return changed

    def update_fired(self, updates: Sequence[FiredUpdate]) -> int:
        if not updates:
            return 0
        pages = [u for u in updates if u.page_id is not None]
        items = [u for u in updates if u.page_id is None]
        changed = self._update_pages(pages) if pages else 0
        changed += self._update_items(items) if items else 0
        write_logs(self.engine, self.t, updates)  # the handlers' log lines that came with them
        return changed

    def _update_pages(self, updates: Sequence[FiredUpdate]) -> int:
        """Per-item results of envelopes folded into their page records: one UPDATE per
        page, forward-only like the per-item path."""
        fr = self.t.fired
        groups: dict[CommandId, list[FiredUpdate]] = {}
        for u in updates:
            assert u.page_id is not None
            groups.setdefault(u.page_id, []).append(u)
        params = []
        for page_id, group in groups.items():
            _tid, _ms, first = parse_command_id(page_id)
            letters: dict[int, str] = {}
            for u in group:
                letters[parse_command_id(u.command_id)[2] - first] = _LETTER[u.state]
            width = max(letters) + 1
            states = "".join(letters.get(i, ItemState.PENDING) for i in range(width))
            ok = states.count(ItemState.SUCCEEDED)
            failed = states.count(ItemState.FAILED) + states.count(ItemState.TIMED_OUT)
            skipped = states.count(ItemState.SKIPPED)  # by a rollback fence: final, never invoked
            killed = states.count(ItemState.KILLED)  # by an operator (run kill): final, not a failure
            finals = ok + failed + skipped + killed
            first_bad = next((u.message for u in group if u.state in (FiredState.FAILED, FiredState.TIMED_OUT)), "")
            if failed:
                final_state, message = FiredState.FAILED, f"{failed} of {width} item(s) failed: {first_bad}"
            elif killed:
                why = next(u.message for u in group if u.state is FiredState.KILLED)
                final_state, message = FiredState.KILLED, f"{killed} of {width} item(s) killed: {why}"
            elif skipped:
                why = next(u.message for u in group if u.state is FiredState.SKIPPED)
                final_state = FiredState.SUCCEEDED if ok else FiredState.SKIPPED
                message = f"{skipped} of {width} item(s) skipped: {why}" if ok else why
            else:
                final_state, message = FiredState.SUCCEEDED, ""
            received = [u.received_at for u in group if u.received_at is not None]
            started = [u.started_at for u in group if u.started_at is not None]
            # the executor of the group's latest result (one message's items: one executor)
            named = [u for u in group if u.executor]
            executor = max(named, key=lambda u: u.at).executor if named else None
            params.append(
                {
                    "p_cid": page_id,
                    "p_nfinal": finals,
                    "p_rank_partial": FIRED_RANK[FiredState.RECEIVED],
                    "p_attempt": max(u.attempt for u in group),
                    "p_final_state": final_state.value,
                    "p_partial_state": FiredState.RECEIVED.value,
                    "p_states": states,
                    "p_ok": ok,
                    "p_failed": failed,
                    "p_message": message[:MESSAGE_MAX],
                    "p_at": to_ms(max(u.at for u in group)),
                    "p_received": to_ms(min(received)) if received else None,
                    "p_started": to_ms(min(started)) if started else None,
                    "p_executor": executor,
                }
            )
        with self.engine.begin() as conn:
            if capabilities(conn).joined_update:  # one joined UPDATE per batch, not one per page
                return result_joins.update_pages(conn, fr.name, FINAL_RANK, [_unprefixed(p) for p in params])
            result = conn.execute(self._page_update, params)
        return max(0, result.rowcount or 0)

    def _update_items(self, updates: Sequence[FiredUpdate]) -> int:
        fr = self.t.fired
        params = [
            {
                "u_cid": u.command_id,
                "u_rank": FIRED_RANK[u.state],
                "u_attempt": u.attempt,
                "u_state": u.state.value,
                "u_message": u.message[:MESSAGE_MAX],
                "u_at": to_ms(u.at),
                "u_received": opt_to_ms(u.received_at) if u.received_at else to_ms(u.at),
                "u_started": opt_to_ms(u.started_at),
                "u_executor": u.executor,
            }
            for u in updates
        ]
        with self.engine.begin() as conn:
            if capabilities(conn).joined_update:  # one joined UPDATE per batch, not one per item
                return result_joins.update_items(conn, fr.name, FINAL_RANK, [_unprefixed(p) for p in params])
            result = conn.execute(self._item_update, params)
        return max(0, result.rowcount or 0)

    def get_fired(self, command_ids: Sequence[CommandId]) -> dict[CommandId, FiredRecord]:
        fr = self.t.fired
        out: dict[CommandId, FiredRecord] = {}
        with self.engine.connect() as conn:
            for chunk in _chunks(list(command_ids)):
                for row in conn.execute(select(fr).where(fr.c.command_id.in_(chunk))).mappings():
                    rec = fired_from_row(row)
                    out[rec.command_id] = rec
        return out

    def outcome_recorded(self, records: Sequence[FiredRecord]) -> set[CommandId]:
        """The `pending` records among these whose commands were published: those of an
        occurrence whose trigger has recorded its outcome. The one place that tells it.

        The fire path stamps no published state on its records (one row write and one
        statement per chunk less): the outcome CAS, which stamps the trigger's
        `last_fired_at` = the occurrence fired, commits only after the broker acked the
        chunk's messages, and a trigger fires its occurrences in order. So a record with
        last_fired_at >= its scheduled time was published; one whose trigger is still
        acquired for it (or was released after a failed publication) may or may not have
        been, and is fired again with the same command ids.

        Runs outside the schedule (follow-ups, a schedule edit's pending runs) move no
        trigger: they are stamped `published` (`mark_published`) once published, and
        their publishers read that stamp, never this. For such a run left unstamped the
        rule here can answer yes wrongly, when its trigger fired a later occurrence.
        Records read as the store has them now, not as passed."""
        fr = self.t.fired
        ids = [r.command_id for r in records if r.state is FiredState.PENDING and r.published_at is None]
        out: set[CommandId] = set()
        with self.engine.connect() as conn:
            for chunk in _chunks(ids):
                stmt = select(fr.c.command_id).where(fr.c.command_id.in_(chunk), published_by_outcome(self.t))
                out.update(CommandId(c) for c in conn.execute(stmt).scalars())
        return out

    # --- rollback fences (FenceStore): rollback windows of dus_stop --------------------

    def raise_business_fence(self, biz_code: str, from_ms: int) -> tuple[Fence, int]:
        window = SkipWindow(from_ms, None, Cause.ROLLBACK)
        with self.engine.begin() as conn:
            applied = stop_rows.open_window(conn, self.t, Scope.BUSINESS, biz_code, window, self.clock.now_ms())
        fence = fence_of_stop(applied.stop)
        assert fence is not None
        return fence, applied.records

    def lift_business_fence(self, biz_code: str, until_ms: int) -> Fence | None:
        with self.engine.begin() as conn:
            applied = stop_rows.close_window(
                conn, self.t, Scope.BUSINESS, biz_code, until_ms, (Cause.ROLLBACK,), self.clock.now_ms()
            )
        if applied is None:
            return None
        # the closed window itself (a window that ended long ago is pruned from the row: the
        # stop, broadcast all the same, then holds it no more)
        w = applied.window
        return Fence(biz_code, w.from_ms, w.until_ms, applied.stop.epoch, applied.stop)

    def business_fence(self, biz_code: str) -> Fence | None:
        with self.engine.connect() as conn:
            stops = stop_rows.read_stops(conn, self.t, Scope.BUSINESS, biz_code)
        return fence_of_stop(stops[0]) if stops else None

    def business_fences(self) -> list[Fence]:
        with self.engine.connect() as conn:
            stops = stop_rows.read_stops(conn, self.t, Scope.BUSINESS)
        return [f for f in map(fence_of_stop, stops) if f is not None]

    def fired_between(self, biz_code: str | None, start: datetime, end: datetime) -> list[FiredRecord]:
        fr = self.t.fired
        stmt = select(fr).where(fr.c.scheduled_at >= to_ms(start), fr.c.scheduled_at < to_ms(end))
        if biz_code is not None:
            stmt = stmt.where(fr.c.biz_code == biz_code)
        stmt = stmt.order_by(fr.c.scheduled_at, fr.c.trigger_id, fr.c.item_index)
        with self.engine.connect() as conn:
            return [fired_from_row(r) for r in conn.execute(stmt).mappings()]


def _page_update_statement(fr: Any) -> Any:
    """The portable page-record UPDATE (SQLite; MySQL-compatible servers use result_joins)."""
    n_final: BindParameter[int] = bindparam("p_nfinal")
    return (
        update(fr)
        .where(
            fr.c.command_id == bindparam("p_cid"),
            (fr.c.state_rank < case((n_final >= fr.c.item_count, FINAL_RANK), else_=bindparam("p_rank_partial")))
            | and_(fr.c.state_rank == FINAL_RANK, n_final >= fr.c.item_count, fr.c.attempt < bindparam("p_attempt")),
        )
        .values(
            state=case((n_final >= fr.c.item_count, bindparam("p_final_state")), else_=bindparam("p_partial_state")),
            state_rank=case((n_final >= fr.c.item_count, FINAL_RANK), else_=bindparam("p_rank_partial")),
            attempt=bindparam("p_attempt"),
            item_states=bindparam("p_states"),
            succeeded_items=bindparam("p_ok"),
            failed_items=bindparam("p_failed"),
            message=bindparam("p_message"),
            result_at=case((n_final >= fr.c.item_count, bindparam("p_at")), else_=fr.c.result_at),
            received_at=func.coalesce(fr.c.received_at, bindparam("p_received")),
            started_at=func.coalesce(fr.c.started_at, bindparam("p_started")),
            executor=func.coalesce(bindparam("p_executor", type_=String), fr.c.executor),
        )
    )


def _item_update_statement(fr: Any) -> Any:
    """The portable per-item UPDATE (SQLite; MySQL-compatible servers use result_joins)."""
    new_rank: BindParameter[int] = bindparam("u_rank")
    new_attempt: BindParameter[int] = bindparam("u_attempt")
    # Forward-only: a higher rank wins; among final results a later attempt wins; a
    # duplicate or late replay of an older result changes nothing.
    moves = (fr.c.state_rank < new_rank) | and_(
        fr.c.state_rank == new_rank, new_rank == FINAL_RANK, fr.c.attempt < new_attempt
    )
    return (
        update(fr)
        .where(fr.c.command_id == bindparam("u_cid"), moves)
        .values(
            state=bindparam("u_state"),
            state_rank=new_rank,
            attempt=new_attempt,
            message=bindparam("u_message"),
            result_at=case((new_rank == FINAL_RANK, bindparam("u_at")), else_=fr.c.result_at),
            received_at=func.coalesce(fr.c.received_at, bindparam("u_received")),
            started_at=func.coalesce(fr.c.started_at, bindparam("u_started")),
            executor=func.coalesce(bindparam("u_executor", type_=String), fr.c.executor),
        )
    )


def _unprefixed(params: dict[str, Any]) -> dict[str, Any]:
    """`p_x` / `u_x` -> `x`: the joined form's column names (result_joins)."""
    return {k[2:]: v for k, v in params.items()}
