"""Writes of the migrator to the target store: jobs, triggers, sharding items and ledger
rows of one chunk in ONE transaction, with an optional change-stream checkpoint in the
same transaction (so a restart neither loses nor doubles a change)."""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

from sqlalchemy import insert, select, update
from sqlalchemy.engine import Connection

from dbkit import fastpath
from dbkit.connections import begin, connect
from dbkit.fastpath import driver_tuples, render_plain, takes_rendered
from migrator.edited_state import edited_state
from migrator.ledger_hash import HALF, source_half
from migrator.mapping import Mapped
from migrator.model import Action, BusinessState, LedgerStatus
from migrator.schedule_edits import ScheduleEdit, plan_edit
from migrator.store import MigratorStore
from readers.records import StreamPosition
from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
    Lane,
    ShardingItem,
    Trigger,
    TriggerId,
    TriggerKind,
    TriggerState,
)
from scheduler_core.occurrences import next_after
from scheduler_core.store.definitions import Definition, DefinitionWrites, RenderedDefinitions
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.supersede import MARGIN as SUPERSEDE_MARGIN
from scheduler_core.times import from_ms, to_ms

_STATUS = {s.value: s for s in LedgerStatus}
_EDITABLE_STATES = (TriggerState.CREATED, TriggerState.WAITING, TriggerState.PAUSED)
_EDITABLE = tuple(s.value for s in _EDITABLE_STATES)
# a trigger with no schedule (xxl-job NONE) is stored completed and stays editable: the
# legacy job may get a schedule later, and its trigger then takes it
_NONE = TriggerKind.NONE.value
EXCERPT_MAX = 2000
_LEDGER_SET = ("business", "status", "content_hash", "target_job_code", "field", "reason", "raw_excerpt", "updated_at")


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    status: LedgerStatus
    content_hash: str
    job_code: str | None
    # a quarantined row's field and reason: what a re-run reports for it unread
    field: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class LedgerDigest:
    """What an unchanged re-run compares of a ledger row: its status, the source half of
    its content hash ("" for an old one-part hash: migrator.ledger_hash.source_half), and
    a quarantined row's field and reason."""

    status: LedgerStatus
    source_half: str
    field: str | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """One planned write: what the plan decided for one source row."""

    action: Action
    source: str
    source_key: str
    biz_code: str
    mapped: Mapped | None = None
    field: str | None = None
    reason: str | None = None
    raw: dict[str, Any] | None = None
    content_hash: str = ""  # the ledger hash to store (migrator.ledger_hash): source digest + mapped/quarantine hash
    noop: bool = False  # nothing to write: unchanged, or still quarantined for the same reason
    # batch center: the legacy row's `migrated` flag is still 0 although the target holds it
    # (a failure after the target commit): after_commit sets it, repairing the earlier run
    flag_pending: bool = False
    note: str | None = None  # what the run reports about this row (e.g. an operator's action after cutover)


@dataclass(frozen=True, slots=True)
class Rendered:
    """A chunk's rows as SQL tuple literals (`TargetWriter.render`), made while the chunk
    before it is written: rendering is a fifth of a snapshot's CPU, and on the writing
    thread it ran between the server's statements instead of beside them. Keyed by
    source key: the definitions' rows as the core's store renders them, the ledger rows
    as this package does."""

    now: int  # the chunk's write time (the rows carry it)
    definitions: RenderedDefinitions
    ledger: Mapping[str, str]  # the ledger row the write takes (not for deletes)
    ledger_columns: tuple[str, ...]


class TargetWriter:
    def __init__(self, store: SqlTriggerStore, own: MigratorStore) -> None:
        self.store = store
        self.own = own
        self.defs = DefinitionWrites(store)
        # a live trigger's schedule edit takes effect from now + this (migrator.schedule_edits)
        self.supersede_margin = SUPERSEDE_MARGIN

    def ledger(self, source: str, keys: Sequence[str], conn: Connection | None = None) -> dict[str, LedgerEntry]:
        out: dict[str, LedgerEntry] = {}
        if not keys:
            return out
        if conn is None:
            with connect(self.own.engine) as c:
                rows = self._ledger_rows(c, source, keys)
        else:
            rows = self._ledger_rows(conn, source, keys)
        status_of = _STATUS
        for key, status, h, code, fld, reason in rows:
            out[key] = LedgerEntry(status_of[status], h, code, fld, reason)
        return out

    def ledger_digests(self, source: str, keys: Sequence[str]) -> dict[str, LedgerDigest]:
        """`ledger` as an unchanged re-run compares it, for every row of the table. MySQL:
        the server cuts the hash's source half, and gives a migrated row's field and reason
        as NULLs (the driver decodes each value of each row in Python: the full hash and
        texts nobody reads were most of a re-run's CPU)."""
        if not keys:
            return {}
        with connect(self.own.engine) as conn:
            if not fastpath.fast(conn):
                return {
                    k: LedgerDigest(e.status, source_half(e.content_hash), e.field, e.reason)
                    for k, e in self.ledger(source, keys, conn).items()
                }
            q = conn.dialect.identifier_preparer.quote
            quarantined = f"{q('status')} = '{LedgerStatus.QUARANTINED.value}'"
            columns = (
                q("source_key"),
                q("status"),
                # migrator.ledger_hash.source_half, on the server
                f"IF(CHAR_LENGTH({q('content_hash')}) = {2 * HALF}, LEFT({q('content_hash')}, {HALF}), '')",
                f"IF({quarantined}, {q('field')}, NULL)",
                f"IF({quarantined}, {q('reason')}, NULL)",
            )
            rows = driver_tuples(conn, self._ledger_sql(conn, columns, len(keys)), (source, *keys))
        status_of = _STATUS
        return {key: LedgerDigest(status_of[status], half, fld, reason) for key, status, half, fld, reason in rows}

    def _ledger_rows(self, conn: Connection, source: str, keys: Sequence[str]) -> Sequence[tuple[Any, ...]]:
        lg = self.own.t.ledger
        if fastpath.fast(conn):
            # a re-run reads a ledger row for every source row: plain tuples from the
            # driver, without Core's IN-list rendering and Row objects (half its CPU)
            q = conn.dialect.identifier_preparer.quote
            names = ("source_key", "status", "content_hash", "target_job_code", "field", "reason")
            return driver_tuples(conn, self._ledger_sql(conn, [q(n) for n in names], len(keys)), (source, *keys))
        return conn.execute(
            select(
                lg.c.source_key, lg.c.status, lg.c.content_hash, lg.c.target_job_code, lg.c.field, lg.c.reason
            ).where(lg.c.source_system == source, lg.c.source_key.in_(list(keys)))
        ).all()

    def _ledger_sql(self, conn: Connection, columns: Sequence[str], n_keys: int) -> str:
        """The fast path's read of ledger rows by key (driver placeholders: the source
        system, then `n_keys` keys): the one statement both ledger reads send."""
        q = conn.dialect.identifier_preparer.quote
        return (
            f"SELECT {', '.join(columns)} FROM {q(self.own.t.ledger.name)} WHERE {q('source_system')} = %s "
            f"AND {q('source_key')} IN ({', '.join(['%s'] * n_keys)})"
        )

    def has_migrated(self, source: str) -> bool:
        """Whether any row of this source system is migrated (one indexed probe)."""
        lg = self.own.t.ledger
        with connect(self.own.engine) as conn:
            return (
                conn.execute(
                    select(lg.c.source_key)
                    .where(lg.c.source_system == source, lg.c.status == LedgerStatus.MIGRATED.value)
                    .limit(1)
                ).first()
                is not None
            )

    def business_state(self, biz_code: str, conn: Connection | None = None) -> BusinessState:
        b = self.own.t.business
        stmt = select(b.c.state).where(b.c.biz_code == biz_code)
        if conn is None:
            with connect(self.own.engine) as c:
                state = c.execute(stmt).scalar_one_or_none()
        else:
            state = conn.execute(stmt).scalar_one_or_none()
        return BusinessState(state) if state else BusinessState.LEGACY

    def default_lane(self, biz_code: str, conn: Connection | None = None) -> Lane:
        """The lane a migrated job of the business gets (the business's default; none
        registered yet: `default`)."""
        b = self.own.t.business
        stmt = select(b.c.default_lane).where(b.c.biz_code == biz_code)
        if conn is None:
            with connect(self.own.engine) as c:
                lane = c.execute(stmt).scalar_one_or_none()
        else:
            lane = conn.execute(stmt).scalar_one_or_none()
        return Lane.of(lane)

    def business_states(self, conn: Connection) -> dict[str, BusinessState]:
        """Every business's state in one read (absent: legacy)."""
        b = self.own.t.business
        return {code: BusinessState(state) for code, state in conn.execute(select(b.c.biz_code, b.c.state))}

    def _locked_states(self, conn: Connection, biz_codes: Collection[str]) -> dict[str, BusinessState]:
        """These businesses' states, share-locked until the caller's transaction ends
        (absent: legacy; SQLite takes no row locks, its one writer serializes instead)."""
        b = self.own.t.business
        codes = sorted(biz_codes)
        return {
            code: BusinessState(state)
            for code, state in conn.execute(
                select(b.c.biz_code, b.c.state).where(b.c.biz_code.in_(codes)).with_for_update(read=True)
            )
        }

    def apply(
        self,
        writes: Sequence[Write],
        checkpoint: tuple[str, StreamPosition] | None = None,
        conn: Connection | None = None,
        rendered: Rendered | None = None,
    ) -> int:
        """Apply one chunk atomically; returns rows written (target + ledger). `rendered`:
        these writes' rows as `render` gave them (used where the connection escapes alike)."""
        if conn is not None:
            return self._apply(conn, writes, checkpoint, rendered)
        with begin(self.own.engine) as c:
            return self._apply(c, writes, checkpoint, rendered)

    def render(self, writes: Sequence[Write]) -> Rendered | None:
        """The rows `apply` writes for these writes, rendered now (no I/O); None when one
        cannot be rendered without a connection (then `apply` renders as it writes)."""
        now = self.store.clock.now_ms()
        ledger: dict[str, str] = {}
        ledger_columns: tuple[str, ...] = ()
        puts: dict[str, Definition] = {}
        seen: set[str] = set()
        for w in writes:
            key = w.source_key
            if key in seen:
                return None  # a key twice in one chunk: the keyed literals cannot tell them apart
            seen.add(key)
            row = _ledger_row(w, now)
            if row is not None:
                ledger_columns = ledger_columns or tuple(row)  # every ledger row has the same keys in order
                lit = render_plain(tuple(row.values()))
                if lit is None:
                    return None
                ledger[key] = lit
            m = w.mapped
            if m is not None and w.action in (Action.CREATE, Action.UPDATE):
                puts[key] = Definition(m.job, m.trigger, m.items)
        definitions = self.defs.render(puts, now)
        return None if definitions is None else Rendered(now, definitions, ledger, ledger_columns)

    def _apply(
        self,
        conn: Connection,
        writes: Sequence[Write],
        checkpoint: tuple[str, StreamPosition] | None,
        rendered: Rendered | None = None,
    ) -> int:
        if rendered is not None and not takes_rendered(conn):
            rendered = None
        now = rendered.now if rendered is not None else self.store.clock.now_ms()
        written = 0
        ledger: list[Write] = []  # the writes whose ledger row `_ledger_row` gives
        puts = [w for w in writes if w.action in (Action.CREATE, Action.UPDATE) and w.mapped is not None]
        if puts:
            written += self._put(conn, puts, now, ledger, rendered)
        ledger += [w for w in writes if w.action in (Action.QUARANTINE, Action.UNCHANGED)]
        # the chunk's ledger rows in one statement, before the deletes read the ledger (a
        # row created and deleted in one group of changes must be found by its delete)
        if rendered is not None:
            lits = [rendered.ledger[w.source_key] for w in ledger if w.source_key in rendered.ledger]
            fastpath.write_rendered(conn, self.own.t.ledger, rendered.ledger_columns, lits, _LEDGER_SET)
            written += len(lits)
        else:
            written += self._ledger_many(conn, [row for w in ledger if (row := _ledger_row(w, now)) is not None])
        written += self._delete_many(conn, [w for w in writes if w.action is Action.DELETE], now)
        written += self._ensure_businesses(conn, businesses_of(writes), now)
        if checkpoint is not None:
            self._checkpoint(conn, checkpoint[0], checkpoint[1], now, len(writes))
        return written

    # -- pieces -----------------------------------------------------------------------

    def _put(
        self, conn: Connection, writes: list[Write], now: int, ledger: list[Write], rendered: Rendered | None = None
    ) -> int:
        """Creates and updates together, a fixed number of statements for the whole chunk:
        jobs upserted by job code (an existing job is a ledger row lost after its target:
        repaired in place), sharding items replaced, triggers inserted or updated while
        editable; the ledger rows to write go to `ledger`."""
        defs = self.defs
        codes = [w.mapped.job.job_code for w in writes]  # type: ignore[union-attr]
        if rendered is not None:
            affected: int | None = defs.upsert_rendered_jobs(conn, rendered.definitions, [w.source_key for w in writes])
        else:
            affected = defs.upsert_jobs(conn, [w.mapped.job for w in writes], now)  # type: ignore[union-attr]
        # every job new (one affected row each; an existing one counts 2, see definitions.JOB_TOUCH):
        # no trigger and no sharding item can exist for them, so neither is read or deleted.
        # (A concurrent writer of the same job code makes this insert wait for its commit
        # and then update: 2, and the full path below.)
        all_new = affected == len(writes)
        ids = defs.job_ids(conn, codes)
        existing: dict[str, list[tuple[int, str, tuple[Any, ...]]]] = {}
        if not all_new:
            defs.drop_items(conn, list(ids.values()))
            # lock the existing triggers: a scheduler acquiring one waits for this commit, so
            # the state read here is the state the update meets
            for tid, code, state, *schedule in defs.lock_triggers(conn, codes):
                existing.setdefault(code, []).append((tid, state, tuple(schedule)))
        if rendered is not None:
            n_items = defs.insert_rendered_items(
                conn,
                rendered.definitions,
                [(w.source_key, ids[w.mapped.job.job_code]) for w in writes],  # type: ignore[union-attr]
            )
        else:
            items: dict[int, tuple[ShardingItem, ...]] = {}
            for w in writes:
                m = w.mapped
                assert m is not None
                items[ids[m.job.job_code]] = items.get(ids[m.job.job_code], ()) + m.items
            n_items = defs.insert_items(conn, items)
        fresh: list[tuple[int, Trigger]] = []
        fresh_rendered: list[tuple[str, int]] = []  # (source key, job id) of a rendered new trigger
        states: dict[str, BusinessState] | None = None  # read once, when an existing trigger is edited
        edits: list[tuple[int, Trigger]] = []
        held: set[str] = set()
        schedule_edits: list[ScheduleEdit] = []
        for w in writes:
            m = w.mapped
            assert m is not None
            if m.trigger is None:
                continue
            there = existing.get(m.job.job_code)
            job_id = ids[m.job.job_code]
            if not there and rendered is not None:
                fresh_rendered.append((w.source_key, job_id))
                continue
            if not there:
                fresh.append((job_id, m.trigger))
                continue
            if states is None:
                # read after the triggers are locked, and share-locked: a switch's transition
                # of these businesses waits for this commit (or this read for the transition),
                # so the state an edit admits a trigger in is the business's as it is written
                states = self._locked_states(conn, {x.biz_code for x in writes})
            business = states.get(w.biz_code, BusinessState.LEGACY)
            for tid, state, kept_schedule in there:
                if state in _EDITABLE or (state == TriggerState.COMPLETED.value and kept_schedule[1] == _NONE):
                    edited = replace(_kept(m.trigger, state, kept_schedule, business), id=TriggerId(tid))
                    edits.append((job_id, edited))
                    plan = plan_edit(
                        m.trigger, tid, state, kept_schedule, to_ms(edited.next_fire_at), now, self.supersede_margin
                    )
                    if plan is not None:
                        schedule_edits.append(plan)
                elif state == TriggerState.ACQUIRED.value:
                    # Being fired right now: keep the old ledger hash so the next run (or
                    # the next change event) applies this update; nothing is half-written.
                    held.add(w.source_key)
                # completed/cancelled targets keep their terminal state
        defs.insert_triggers(conn, fresh, now)
        if fresh_rendered:
            defs.insert_rendered_triggers(conn, rendered.definitions, fresh_rendered)  # type: ignore[union-attr]
        defs.update_triggers(conn, edits, now)
        for plan in schedule_edits:  # after the trigger rows, in the same transaction
            defs.record_schedule_edit(conn, plan.trigger_id, plan.biz_code, plan.effective_ms, plan.new_times, now)
        ledger += [w for w in writes if w.source_key not in held]
        return len(writes) + n_items + len(fresh) + len(fresh_rendered) + len(edits)

    def _delete_many(self, conn: Connection, writes: list[Write], now: int) -> int:
        if not writes:
            return 0
        ledger = self.ledger(writes[0].source, [w.source_key for w in writes], conn)
        codes = [e.job_code for e in ledger.values() if e.job_code]
        if codes:
            # a source row deleted: the target stops firing (cancel, not delete: the fired
            # history stays attached to it)
            self.defs.cancel_triggers(conn, codes, _EDITABLE_STATES, now)
        return self._ledger_many(
            conn,
            [
                _ledger_values(
                    w, LedgerStatus.DELETED, "", e.job_code if (e := ledger.get(w.source_key)) else None, now
                )
                for w in writes
            ],
        )

    def _ledger_many(self, conn: Connection, rows: list[dict[str, Any]]) -> int:
        """Upsert ledger rows in one statement."""
        if not rows:
            return 0
        fastpath.write_rows(conn, self.own.t.ledger, rows, ("source_system", "source_key"), _LEDGER_SET)
        return len(rows)

    def _ensure_businesses(self, conn: Connection, wanted: Sequence[tuple[str, str]], now: int) -> int:
        """The business rows of this chunk's jobs, created as legacy where missing (one read)."""
        if not wanted:
            return 0
        b = self.own.t.business
        have = set(conn.execute(select(b.c.biz_code).where(b.c.biz_code.in_([biz for biz, _ in wanted]))).scalars())
        return sum(self._ensure_business(conn, biz, source, now) for biz, source in wanted if biz not in have)

    def _ensure_business(self, conn: Connection, biz: str, source: str, now: int) -> int:
        b = self.own.t.business
        if conn.execute(select(b.c.biz_code).where(b.c.biz_code == biz)).first() is not None:
            return 0
        conn.execute(
            insert(b).values(
                biz_code=biz,
                source_system=source,
                state=BusinessState.LEGACY.value,
                shadow=0,
                version=0,
                updated_at=now,
            )
        )
        return 1

    def write_checkpoint(self, conn: Connection, stream_id: str, pos: StreamPosition, writes: int) -> None:
        """A stream's checkpoint alone, in the caller's transaction (`writes`: how many the
        group applied), for a group whose writes were applied piece by piece before it."""
        self._checkpoint(conn, stream_id, pos, self.store.clock.now_ms(), writes)

    def _checkpoint(self, conn: Connection, stream_id: str, pos: StreamPosition, now: int, n: int) -> None:
        ck = self.own.t.checkpoint
        res = conn.execute(
            update(ck)
            .where(ck.c.stream_id == stream_id)
            .values(
                log_file=pos.log_file,
                log_pos=pos.log_pos,
                gtid=pos.gtid,
                updated_at=now,
                events_applied=ck.c.events_applied + n,
            )
        )
        if (res.rowcount or 0) == 0:
            conn.execute(
                insert(ck).values(
                    stream_id=stream_id,
                    log_file=pos.log_file,
                    log_pos=pos.log_pos,
                    gtid=pos.gtid,
                    updated_at=now,
                    events_applied=n,
                )
            )

    def checkpoint(self, stream_id: str) -> StreamPosition | None:
        ck = self.own.t.checkpoint
        with connect(self.own.engine) as conn:
            row = conn.execute(
                select(ck.c.log_file, ck.c.log_pos, ck.c.gtid).where(ck.c.stream_id == stream_id)
            ).first()
        return None if row is None else StreamPosition(row[0], int(row[1]), row[2])

    def quarantined(self, biz_code: str | None = None) -> list[dict[str, Any]]:
        lg = self.own.t.ledger
        stmt = (
            select(lg)
            .where(lg.c.status == LedgerStatus.QUARANTINED.value)
            .order_by(lg.c.source_system, lg.c.source_key)
        )
        if biz_code:
            stmt = stmt.where(lg.c.business == biz_code)
        with connect(self.own.engine) as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]


def _kept(new: Trigger, state: str, schedule: tuple[Any, ...], business: BusinessState) -> Trigger:
    """`new` as an edit of a live trigger writes it: with what it keeps of the row it updates.

    - Its state follows migrator.edited_state: a legacy row read back never admits or
      withdraws a trigger (the switch's and the operator's), it carries the operator's
      stop and start in the legacy admin; a business cut over owns its triggers' states.
    - A live trigger (waiting, paused) has published its occurrences up to next_fire_at:
      with the same schedule that stays; with a new one it moves to the new schedule's
      first occurrence at or after it, never back over what was published (same command
      ids fired twice) and never into the past.
    """
    old_next, kind, cron, interval_ms, tz, dialect = schedule
    out = replace(new, state=edited_state(TriggerState(state), new.state, business, had_schedule=kind != _NONE))
    if state == TriggerState.CREATED.value or new.kind is TriggerKind.ONCE or old_next is None:
        return out  # not admitted yet (a dual-run start recomputes it), or a one-shot's own time
    interval = new.interval.total_seconds() * 1000 if new.interval else None
    # a cron's dialect is part of its schedule (NULL: stored before there was one, the default)
    old_dialect = (dialect or DEFAULT_CRON_DIALECT) if kind == TriggerKind.CRON.value else None
    same = (kind, cron, interval_ms, tz, old_dialect) == (
        new.kind.value,
        new.cron,
        int(interval) if interval else None,
        new.time_zone,
        new.cron_dialect if new.kind is TriggerKind.CRON else None,
    )
    if same:
        return replace(out, next_fire_at=from_ms(int(old_next)))
    moved = next_after(new, from_ms(int(old_next)) - timedelta(milliseconds=1))
    if moved is not None and moved > new.next_fire_at:
        return replace(out, next_fire_at=moved)
    return out


def _ledger_row(w: Write, now: int) -> dict[str, Any] | None:
    """The ledger row of a put, a quarantine or an unchanged row whose source digest moved
    (migrator.apply); None: the write takes none. The one rule for `_apply` and `render`
    (`_apply` leaves out a put whose trigger is being fired, see `_put`; a delete's row is
    `_delete_many`'s)."""
    if w.action in (Action.CREATE, Action.UPDATE) and w.mapped is not None:
        return _ledger_values(
            w, LedgerStatus.MIGRATED, w.content_hash or w.mapped.content_hash, w.mapped.job.job_code, now
        )
    if w.action is Action.QUARANTINE:
        return _ledger_values(w, LedgerStatus.QUARANTINED, w.content_hash, None, now)
    if w.action is Action.UNCHANGED and not w.noop and w.mapped is not None and w.content_hash:
        return _ledger_values(w, LedgerStatus.MIGRATED, w.content_hash, w.mapped.job.job_code, now)
    return None


def _ledger_values(w: Write, status: LedgerStatus, content_hash: str, code: str | None, now: int) -> dict[str, Any]:
    excerpt = None
    if status is LedgerStatus.QUARANTINED and w.raw is not None:
        excerpt = json.dumps({k: _plain(v) for k, v in w.raw.items()}, ensure_ascii=False, default=str)[:EXCERPT_MAX]
    return {
        "source_system": w.source,
        "source_key": w.source_key,
        "business": w.biz_code,
        "status": status.value,
        "content_hash": content_hash,
        "target_job_code": code,
        "field": w.field,
        "reason": (w.reason or "")[:1024] or None,
        "raw_excerpt": excerpt,
        "updated_at": now,
    }


def businesses_of(writes: Sequence[Write]) -> list[tuple[str, str]]:
    seen: dict[str, str] = {}
    for w in writes:
        if w.action in (Action.CREATE, Action.UPDATE) and w.mapped is not None:
            seen.setdefault(w.mapped.job.biz_code, w.source)
    return list(seen.items())


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.decode("utf-8", errors="replace")
    return v
