"""The alerts' store (switchyard.alerts.tables) in the trigger store's database: each job's
targets, the incidents and their counted events, the messages sent, the scan checkpoints.
Built by `switchyard.wiring.alert_store`.

Every write that decides what is told is a conditional update inside one transaction, so
two alerters on one store (a `switchyard alerts run` beside a `serve`) count an event once
and send a message once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import and_, delete, insert, select, update
from sqlalchemy.engine import Connection, Engine

from dbkit.connections import begin, connect
from dbkit.errors import StoreConflict
from scheduler_core.alert_rule import AlertRule
from scheduler_core.ports import Clock
from scheduler_core.times import from_ms
from switchyard.alerts.tables import alert_tables

OPEN, RESOLVED, EXPIRED = "open", "resolved", "expired"
SENDING, DELIVERED, ERROR = "sending", "delivered", "error"


@dataclass(frozen=True, slots=True)
class Event:
    """One thing an alert tells of: `key` counts it once (a run's command id; a missed
    occurrence's "miss:<trigger>:<ms>")."""

    key: str
    kind: str
    scheduled_ms: int
    command_id: str | None
    message: str


@dataclass(frozen=True, slots=True)
class Incident:
    id: int
    job_code: str
    biz_code: str
    kind: str
    state: str
    opened_at: int
    last_event_at: int
    first_scheduled_at: int
    last_scheduled_at: int
    count: int
    sent_count: int
    last_sent_at: int | None
    resolved_at: int | None
    resolved_sent: bool
    last_message: str


def _incident(found: Any) -> Incident:
    row = _Fields(found._mapping)  # by name: a Row's own `count` is the tuple method
    return Incident(
        id=int(row.id),
        job_code=row.job_code,
        biz_code=row.biz_code,
        kind=row.kind,
        state=row.state,
        opened_at=int(row.opened_at),
        last_event_at=int(row.last_event_at),
        first_scheduled_at=int(row.first_scheduled_at),
        last_scheduled_at=int(row.last_scheduled_at),
        count=int(row.count),
        sent_count=int(row.sent_count),
        last_sent_at=None if row.last_sent_at is None else int(row.last_sent_at),
        resolved_at=None if row.resolved_at is None else int(row.resolved_at),
        resolved_sent=bool(row.resolved_sent),
        last_message=row.last_message,
    )


class _Fields:
    def __init__(self, m: Any) -> None:
        self._m = m

    def __getattr__(self, name: str) -> Any:
        return self._m[name]


def _new_id(result: Any) -> int:
    key = result.inserted_primary_key
    assert key is not None
    return int(key[0])


class AlertStore:
    def __init__(self, engine: Engine, clock: Clock) -> None:
        self.engine = engine
        self.clock = clock
        self.t = alert_tables()

    # -- the jobs' targets -------------------------------------------------------------

    def rule(self, job_code: str) -> AlertRule:
        ja = self.t.job_alert
        with connect(self.engine) as conn:
            row = conn.execute(select(ja).where(ja.c.job_code == job_code)).first()
        return AlertRule() if row is None else _rule(row)

    def rules(self) -> dict[str, tuple[str, AlertRule]]:
        """job code -> (business, rule) of every job with a target."""
        ja = self.t.job_alert
        with connect(self.engine) as conn:
            return {r.job_code: (r.biz_code, _rule(r)) for r in conn.execute(select(ja).order_by(ja.c.job_code))}

    def set_rule(self, job_code: str, biz_code: str, rule: AlertRule) -> None:
        """Store a job's rule (checked by the caller: JobSpec.check); no target deletes it.
        A job's first rule starts its scan now: runs that failed before anyone asked for
        alerts are not told."""
        ja, cp = self.t.job_alert, self.t.checkpoint
        now = self.clock.now_ms()
        with begin(self.engine) as c:
            c.execute(delete(ja).where(ja.c.job_code == job_code))
            if rule.targets and c.execute(select(cp.c.job_code).where(cp.c.job_code == job_code)).first() is None:
                c.execute(insert(cp).values(job_code=job_code, scan_from=now, updated_at=now))
            if rule.targets:
                c.execute(
                    insert(ja).values(
                        job_code=job_code,
                        biz_code=biz_code,
                        targets=json.dumps(list(rule.targets)),
                        kinds=",".join(rule.kinds),
                        updated_at=now,
                    )
                )

    # -- the scan checkpoint -----------------------------------------------------------

    def scan_from(self, job_code: str) -> int | None:
        cp = self.t.checkpoint
        with connect(self.engine) as conn:
            v = conn.execute(select(cp.c.scan_from).where(cp.c.job_code == job_code)).scalar()
        return None if v is None else int(v)

    def set_scan_from(self, job_code: str, at_ms: int) -> None:
        cp = self.t.checkpoint
        now = self.clock.now_ms()
        with begin(self.engine) as conn:
            done = conn.execute(update(cp).where(cp.c.job_code == job_code).values(scan_from=at_ms, updated_at=now))
            if done.rowcount == 0:
                conn.execute(insert(cp).values(job_code=job_code, scan_from=at_ms, updated_at=now))

    # -- incidents ---------------------------------------------------------------------

    def count_events(self, job_code: str, biz_code: str, events: Sequence[Event], reopen_after_ms: int) -> int:
        """Count the events not counted before into their kind's open incident (opening
        one; an open incident whose newest event is older than `reopen_after_ms` is
        closed as expired first). One transaction: the events and the counts they make
        commit together. Returns how many were new (0 when another alerter counted them
        first: the conflict rolls this batch back, the next scan sees them counted)."""
        if not events:
            return 0
        ev, inc = self.t.event, self.t.incident
        now = self.clock.now_ms()
        try:
            with begin(self.engine) as conn:
                have = {
                    (r.event_key, r.kind)
                    for r in conn.execute(
                        select(ev.c.event_key, ev.c.kind).where(ev.c.event_key.in_({e.key for e in events}))
                    )
                }
                fresh: list[Event] = []
                for e in events:  # once each, and not counted before
                    if (e.key, e.kind) not in have:
                        have.add((e.key, e.kind))
                        fresh.append(e)
                for kind in sorted({e.kind for e in fresh}):
                    mine = sorted((e for e in fresh if e.kind == kind), key=lambda e: e.scheduled_ms)
                    current = self._open(conn, job_code, kind)
                    if current is not None and now - current.last_event_at > reopen_after_ms:
                        conn.execute(update(inc).where(inc.c.id == current.id).values(state=EXPIRED, resolved_at=now))
                        current = None
                    if current is None:
                        inc_id = _new_id(
                            conn.execute(
                                insert(inc).values(
                                    job_code=job_code,
                                    biz_code=biz_code,
                                    kind=kind,
                                    state=OPEN,
                                    opened_at=now,
                                    last_event_at=now,
                                    first_scheduled_at=mine[0].scheduled_ms,
                                    last_scheduled_at=mine[-1].scheduled_ms,
                                    count=len(mine),
                                    sent_count=0,
                                    resolved_sent=0,
                                    last_message=mine[-1].message[:1024],
                                )
                            )
                        )
                    else:
                        inc_id = current.id
                        conn.execute(
                            update(inc)
                            .where(inc.c.id == current.id)
                            .values(
                                count=inc.c.count + len(mine),
                                last_event_at=now,
                                last_scheduled_at=max(current.last_scheduled_at, mine[-1].scheduled_ms),
                                last_message=mine[-1].message[:1024],
                            )
                        )
                    conn.execute(
                        insert(ev),
                        [
                            {
                                "event_key": e.key,
                                "kind": e.kind,
                                "incident_id": int(inc_id),
                                "job_code": job_code,
                                "command_id": e.command_id,
                                "scheduled_at": e.scheduled_ms,
                                "seen_at": now,
                            }
                            for e in mine
                        ],
                    )
                return len(fresh)
        except StoreConflict:
            return 0

    def resolve(self, job_code: str, kind: str, ok_scheduled_ms: int) -> bool:
        """A run scheduled at `ok_scheduled_ms` went well: the kind's open incident whose
        events are all older is resolved."""
        inc = self.t.incident
        with begin(self.engine) as conn:
            done = conn.execute(
                update(inc)
                .where(
                    and_(
                        inc.c.job_code == job_code,
                        inc.c.kind == kind,
                        inc.c.state == OPEN,
                        inc.c.last_scheduled_at < ok_scheduled_ms,
                    )
                )
                .values(state=RESOLVED, resolved_at=self.clock.now_ms())
            )
        return bool(done.rowcount)

    def _open(self, conn: Connection, job_code: str, kind: str) -> Incident | None:
        inc = self.t.incident
        row = conn.execute(
            select(inc)
            .where(and_(inc.c.job_code == job_code, inc.c.kind == kind, inc.c.state == OPEN))
            .order_by(inc.c.id.desc())
        ).first()
        return None if row is None else _incident(row)

    def prune_events(self, scheduled_before_ms: int) -> int:
        """Forget the events of runs scheduled before `scheduled_before_ms` (older than any
        scan reads again, so no longer needed to count them once), seen before it too;
        their incidents and the messages sent stay."""
        ev = self.t.event
        with begin(self.engine) as conn:
            # and seen as long ago: a trigger still not fired (its event re-seen each scan) is
            # counted again at most once per period, a reminder, never once per tick
            old = and_(ev.c.scheduled_at < scheduled_before_ms, ev.c.seen_at < scheduled_before_ms)
            return int(conn.execute(delete(ev).where(old)).rowcount or 0)

    def to_tell(self) -> list[Incident]:
        """Incidents with something not told yet: open ones with events beyond the last
        message's count, resolved ones whose resolution was not sent."""
        inc = self.t.incident
        with connect(self.engine) as conn:
            rows = conn.execute(
                select(inc)
                .where(
                    ((inc.c.state == OPEN) & (inc.c.count > inc.c.sent_count))
                    | ((inc.c.state == RESOLVED) & (inc.c.resolved_sent == 0))
                )
                .order_by(inc.c.id)
            ).all()
        return [_incident(r) for r in rows]

    def event_ids(self, incident_id: int, limit: int = 20) -> list[str]:
        """The newest events' command ids (or keys) of an incident, newest first."""
        ev = self.t.event
        with connect(self.engine) as conn:
            rows = conn.execute(
                select(ev.c.event_key, ev.c.command_id)
                .where(ev.c.incident_id == incident_id)
                .order_by(ev.c.scheduled_at.desc(), ev.c.event_key)
                .limit(limit)
            ).all()
        return [r.command_id or r.event_key for r in rows]

    # -- messages ----------------------------------------------------------------------

    def claim(self, incident: Incident, status: str, payload: dict[str, Any], targets: Sequence[str]) -> list[int]:
        """Take the message for `incident` as told (its count as sent, or its resolution
        sent) and write one `sending` row per target, in one conditional transaction,
        before anything is sent: a restart or a second alerter finds it told. [] when the
        incident moved meanwhile (another alerter claimed it)."""
        inc = self.t.incident
        now = self.clock.now_ms()
        values: dict[str, Any] = {"sent_count": incident.count, "last_sent_at": now}
        if status == "resolved":
            values["resolved_sent"] = 1
        with begin(self.engine) as conn:
            done = conn.execute(
                update(inc)
                .where(
                    and_(
                        inc.c.id == incident.id,
                        inc.c.state == incident.state,
                        inc.c.count == incident.count,
                        inc.c.sent_count == incident.sent_count,
                        inc.c.resolved_sent == int(incident.resolved_sent),
                    )
                )
                .values(**values)
            )
            if done.rowcount != 1:
                return []
            return self._sending(
                conn,
                incident.id,
                incident.job_code,
                incident.biz_code,
                incident.kind,
                status,
                incident.count,
                payload,
                targets,
                now,
            )

    def claim_test(self, job_code: str, biz_code: str, payload: dict[str, Any], targets: Sequence[str]) -> list[int]:
        with begin(self.engine) as conn:
            return self._sending(
                conn, None, job_code, biz_code, "test", "test", 0, payload, targets, self.clock.now_ms()
            )

    def _sending(
        self,
        conn: Connection,
        incident_id: int | None,
        job_code: str,
        biz_code: str,
        kind: str,
        status: str,
        count: int,
        payload: dict[str, Any],
        targets: Sequence[str],
        now: int,
    ) -> list[int]:
        ids = []
        for target in targets:
            ids.append(
                _new_id(
                    conn.execute(
                        insert(self.t.sent).values(
                            incident_id=incident_id,
                            job_code=job_code,
                            biz_code=biz_code,
                            kind=kind,
                            status=status,
                            count=count,
                            target=target[:1000],
                            at=now,
                            outcome=SENDING,
                            attempts=0,
                            error="",
                            payload=json.dumps(payload),
                        )
                    )
                )
            )
        return ids

    def finish(self, sent_id: int, outcome: str, attempts: int, error: str = "") -> None:
        sent = self.t.sent
        with begin(self.engine) as conn:
            conn.execute(
                update(sent).where(sent.c.id == sent_id).values(outcome=outcome, attempts=attempts, error=error[:1024])
            )

    def recent(
        self, *, job_code: str | None = None, biz_code: str | None = None, limit: int = 100
    ) -> list[dict[str, Any]]:
        """The messages sent, newest first: what, when, to whom, delivered or the error."""
        sent = self.t.sent
        stmt = select(sent)
        if job_code is not None:
            stmt = stmt.where(sent.c.job_code == job_code)
        if biz_code is not None:
            stmt = stmt.where(sent.c.biz_code == biz_code)
        stmt = stmt.order_by(sent.c.at.desc(), sent.c.id.desc()).limit(max(1, limit))
        with connect(self.engine) as conn:
            rows = conn.execute(stmt).all()
        return [
            {
                "id": int(r.id),
                "incident": None if r.incident_id is None else int(r.incident_id),
                "business": r.biz_code,
                "job": r.job_code,
                "kind": r.kind,
                "status": r.status,
                "count": int(r._mapping["count"]),
                "target": r.target,
                "at": from_ms(int(r.at)).isoformat(timespec="milliseconds"),
                "outcome": r.outcome,
                "attempts": int(r.attempts),
                "error": r.error,
            }
            for r in rows
        ]


def _rule(row: Any) -> AlertRule:
    return AlertRule(targets=tuple(json.loads(row.targets)), kinds=tuple(k for k in row.kinds.split(",") if k))


def recent_alerts(
    store: AlertStore, *, job_code: str | None = None, biz_code: str | None = None, limit: int = 100
) -> list[dict[str, Any]]:
    """The read the console lists alerts with (as `switchyard alerts` does)."""
    return store.recent(job_code=job_code, biz_code=biz_code, limit=limit)


__all__ = ["AlertStore", "Event", "Incident", "recent_alerts"]
