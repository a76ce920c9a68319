"""Writes of the migrator to the target store: jobs, triggers, sharding items and ledger
rows of one chunk in ONE transaction, with an optional change-stream checkpoint in the
same transaction (so a restart neither loses nor doubles a change)."""
from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, bindparam, delete, insert, select, update
from sqlalchemy.engine import Connection

from migrator.mapping import Mapped
from migrator.model import Action, BusinessState, LedgerStatus
from readers.records import StreamPosition
from scheduler_core.model import TriggerState
from scheduler_core.store.rows import job_values, trigger_values
from scheduler_core.store.sql import SqlTriggerStore

_EDITABLE = (TriggerState.CREATED.value, TriggerState.WAITING.value, TriggerState.PAUSED.value)
EXCERPT_MAX = 2000


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    status: LedgerStatus
    content_hash: str
    job_code: str | None


@dataclass(frozen=True, slots=True)
class Write:
    """One planned write: what the plan decided for one source row."""

    action: Action
    source: str
    source_key: str
    business: str
    mapped: Mapped | None = None
    field: str | None = None
    reason: str | None = None
    raw: dict[str, Any] | None = None
    content_hash: str = ""  # of a quarantine: the same bad row again is no new write
    noop: bool = False  # nothing to write: unchanged, or still quarantined for the same reason

class TargetWriter:
    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def ledger(self, source: str, keys: Sequence[str], conn: Connection | None = None) -> dict[str, LedgerEntry]:
        lg = self.t.ledger
        out: dict[str, LedgerEntry] = {}
        if not keys:
            return out
        stmt = select(lg.c.source_key, lg.c.status, lg.c.content_hash, lg.c.target_job_code).where(
            lg.c.source_system == source, lg.c.source_key.in_(list(keys)))
        if conn is None:
            with self.store.engine.connect() as c:
                rows = c.execute(stmt).all()
        else:
            rows = conn.execute(stmt).all()
        for key, status, h, code in rows:
            out[key] = LedgerEntry(LedgerStatus(status), h, code)
        return out

    def business_state(self, biz_code: str) -> BusinessState:
        b = self.t.business
        with self.store.engine.connect() as conn:
            state = conn.execute(select(b.c.state).where(b.c.biz_code == biz_code)).scalar_one_or_none()
        return BusinessState(state) if state else BusinessState.LEGACY

    def apply(
        self, writes: Sequence[Write], checkpoint: tuple[str, StreamPosition] | None = None,
        conn: Connection | None = None,
    ) -> int:
        """Apply one chunk atomically; returns rows written (target + ledger)."""
        if conn is not None:
            return self._apply(conn, writes, checkpoint)
        with self.store.engine.begin() as c:
            return self._apply(c, writes, checkpoint)

    def _apply(self, conn: Connection, writes: Sequence[Write], checkpoint: tuple[str, StreamPosition] | None) -> int:
        now = self.store.clock.now_ms()
        written = 0
        creates = [w for w in writes if w.action is Action.CREATE and w.mapped is not None]
        updates = [w for w in writes if w.action is Action.UPDATE and w.mapped is not None]
        if creates:
            written += self._create(conn, creates, now)
        for w in updates:
            written += self._update(conn, w, now)
        written += self._ledger_many(conn, [(w, LedgerStatus.QUARANTINED, w.content_hash, None)
                                            for w in writes if w.action is Action.QUARANTINE], now)
        for w in writes:
            if w.action is Action.DELETE:
                written += self._delete(conn, w, now)
        for w in businesses_of(writes):
            written += self._ensure_business(conn, w[0], w[1], now)
        if checkpoint is not None:
            self._checkpoint(conn, checkpoint[0], checkpoint[1], now, len(writes))
        return written

    # -- pieces -----------------------------------------------------------------------

    def _create(self, conn: Connection, writes: list[Write], now: int) -> int:
        j, tr, si = self.t.job, self.t.trigger, self.t.sharding_item
        jobs = [w.mapped.job for w in writes]  # type: ignore[union-attr]
        existing = {code for (code,) in conn.execute(select(j.c.job_code).where(j.c.job_code.in_([x.job_code for x in jobs])))}
        fresh = [x for x in jobs if x.job_code not in existing]
        if fresh:
            conn.execute(insert(j), [{**job_values(x, now), "created_at": now} for x in fresh])
        for x in jobs:
            if x.job_code in existing:  # a ledger row lost after its target (repair): update in place
                conn.execute(update(j).where(j.c.job_code == x.job_code).values(**job_values(x, now)))
        ids = dict(conn.execute(select(j.c.job_code, j.c.id).where(j.c.job_code.in_([x.job_code for x in jobs]))).all())
        trig_rows = []
        item_rows = []
        have_trigger = {code for (code,) in conn.execute(
            select(tr.c.job_code).where(tr.c.job_code.in_([x.job_code for x in jobs])))}
        for w in writes:
            m = w.mapped
            assert m is not None
            job_id = ids[m.job.job_code]
            if m.trigger is not None and m.job.job_code not in have_trigger:
                trig_rows.append(trigger_values(m.trigger, job_id, now))
            item_rows += [{"job_id": job_id, "item_index": i.index, "param": i.param} for i in m.items]
        if trig_rows:
            conn.execute(insert(tr), trig_rows)
        if item_rows:
            conn.execute(delete(si).where(si.c.job_id.in_(list({r["job_id"] for r in item_rows}))))
            conn.execute(insert(si), item_rows)
        written = len(fresh) + len(trig_rows) + len(item_rows)
        return written + self._ledger_many(
            conn, [(w, LedgerStatus.MIGRATED, w.mapped.content_hash, w.mapped.job.job_code) for w in writes], now)  # type: ignore[union-attr]

    def _update(self, conn: Connection, w: Write, now: int) -> int:
        j, tr, si = self.t.job, self.t.trigger, self.t.sharding_item
        m = w.mapped
        assert m is not None
        conn.execute(update(j).where(j.c.job_code == m.job.job_code).values(**job_values(m.job, now)))
        job_id = conn.execute(select(j.c.id).where(j.c.job_code == m.job.job_code)).scalar_one()
        conn.execute(delete(si).where(si.c.job_id == job_id))
        if m.items:
            conn.execute(insert(si), [{"job_id": job_id, "item_index": i.index, "param": i.param} for i in m.items])
        written = 1 + len(m.items)
        if m.trigger is not None:
            values = trigger_values(m.trigger, job_id, now)
            for k in ("created_at", "owner_epoch", "acquire_deadline", "version"):
                values.pop(k, None)
            res = conn.execute(update(tr).where(and_(tr.c.job_code == m.job.job_code, tr.c.state.in_(_EDITABLE)))
                               .values(version=tr.c.version + 1, **values))
            if (res.rowcount or 0) == 0:
                busy = conn.execute(select(tr.c.state).where(tr.c.job_code == m.job.job_code)).scalar_one_or_none()
                if busy is None:
                    conn.execute(insert(tr).values(**trigger_values(m.trigger, job_id, now)))
                elif busy == TriggerState.ACQUIRED.value:
                    # Being fired right now: keep the old hash so the next run (or the
                    # next change event) applies this update; nothing is half-written.
                    return written
                # completed/cancelled targets keep their terminal state
            written += 1
        return written + self._ledger(conn, w, LedgerStatus.MIGRATED, m.content_hash, m.job.job_code, now)

    def _delete(self, conn: Connection, w: Write, now: int) -> int:
        tr = self.t.trigger
        lg = self.ledger(w.source, [w.source_key], conn).get(w.source_key)
        code = lg.job_code if lg else None
        if code:
            # a source row deleted by hand: the target stops firing (cancel, not delete: the
            # fired history stays attached to it)
            conn.execute(update(tr).where(tr.c.job_code == code, tr.c.state.in_((*_EDITABLE,)))
                         .values(state=TriggerState.CANCELLED.value, version=tr.c.version + 1, updated_at=now))
        return self._ledger(conn, w, LedgerStatus.DELETED, "", code, now)

    def _ledger(self, conn: Connection, w: Write, status: LedgerStatus, h: str, code: str | None, now: int) -> int:
        return self._ledger_many(conn, [(w, status, h, code)], now)

    def _ledger_many(self, conn: Connection, rows: Sequence[tuple[Write, LedgerStatus, str, str | None]],
                     now: int) -> int:
        """Upsert ledger rows: one read of the keys that exist, then one executemany each
        for updates and inserts (portable: no MySQL- or SQLite-only upsert)."""
        if not rows:
            return 0
        lg = self.t.ledger
        source = rows[0][0].source
        have = {k for (k,) in conn.execute(select(lg.c.source_key).where(
            lg.c.source_system == source, lg.c.source_key.in_([r[0].source_key for r in rows])))}
        inserts, updates = [], []
        for w, status, h, code in rows:
            excerpt = None
            if status is LedgerStatus.QUARANTINED and w.raw is not None:
                excerpt = json.dumps({k: _plain(v) for k, v in w.raw.items()}, ensure_ascii=False,
                                     default=str)[:EXCERPT_MAX]
            values = {"business": w.business, "status": status.value, "content_hash": h, "target_job_code": code,
                      "field": w.field, "reason": (w.reason or "")[:1024] or None, "raw_excerpt": excerpt,
                      "updated_at": now}
            if w.source_key in have:
                updates.append({"k_source": w.source, "k_key": w.source_key, **{f"v_{k}": v for k, v in values.items()}})
            else:
                inserts.append({"source_system": w.source, "source_key": w.source_key, **values})
        if updates:
            cols = ("business", "status", "content_hash", "target_job_code", "field", "reason", "raw_excerpt",
                    "updated_at")
            conn.execute(update(lg).where(lg.c.source_system == bindparam("k_source"),
                                          lg.c.source_key == bindparam("k_key"))
                         .values(**{c: bindparam(f"v_{c}") for c in cols}), updates)
        if inserts:
            conn.execute(insert(lg), inserts)
        return len(rows)

    def _ensure_business(self, conn: Connection, biz: str, source: str, now: int) -> int:
        b = self.t.business
        if conn.execute(select(b.c.biz_code).where(b.c.biz_code == biz)).first() is not None:
            return 0
        conn.execute(insert(b).values(biz_code=biz, source_system=source, state=BusinessState.LEGACY.value,
                                      shadow=0, version=0, updated_at=now))
        return 1

    def _checkpoint(self, conn: Connection, stream_id: str, pos: StreamPosition, now: int, n: int) -> None:
        ck = self.t.checkpoint
        res = conn.execute(update(ck).where(ck.c.stream_id == stream_id).values(
            log_file=pos.log_file, log_pos=pos.log_pos, gtid=pos.gtid, updated_at=now,
            events_applied=ck.c.events_applied + n))
        if (res.rowcount or 0) == 0:
            conn.execute(insert(ck).values(stream_id=stream_id, log_file=pos.log_file, log_pos=pos.log_pos,
                                           gtid=pos.gtid, updated_at=now, events_applied=n))

    def checkpoint(self, stream_id: str) -> StreamPosition | None:
        ck = self.t.checkpoint
        with self.store.engine.connect() as conn:
            row = conn.execute(select(ck.c.log_file, ck.c.log_pos, ck.c.gtid).where(ck.c.stream_id == stream_id)).first()
        return None if row is None else StreamPosition(row[0], int(row[1]), row[2])

    def quarantined(self, business: str | None = None) -> list[dict[str, Any]]:
        lg = self.t.ledger
        stmt = select(lg).where(lg.c.status == LedgerStatus.QUARANTINED.value).order_by(lg.c.source_system, lg.c.source_key)
        if business:
            stmt = stmt.where(lg.c.business == business)
        with self.store.engine.connect() as conn:
            return [dict(r) for r in conn.execute(stmt).mappings()]


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
