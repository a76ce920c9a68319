"""Per-business cutover state, persisted with an audit log of every transition.

    legacy -> dual_run -> cutover;  dual_run|cutover -> legacy (rollback)

Each transition is a conditional update on the business row's version, written in the
same transaction as its audit row (when, who, why, the verdict that allowed it).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import insert, select, update

from dbkit.connections import begin, connect
from migrator.model import BusinessState as B
from migrator.store import MigratorStore
from scheduler_core.model import Lane
from scheduler_core.times import from_ms

ALLOWED: dict[tuple[B, B], str] = {
    (B.LEGACY, B.DUAL_RUN): "dual-run start",
    (B.DUAL_RUN, B.CUTOVER): "cutover",
    (B.DUAL_RUN, B.LEGACY): "rollback",
    (B.CUTOVER, B.LEGACY): "rollback",
}


# the source system of a business created in the new center (issue 28), never migrated
NATIVE = "native"


class TransitionRefused(Exception):
    """A business transition the state machine or the gate does not allow."""


@dataclass(frozen=True, slots=True)
class BusinessRecord:
    biz_code: str
    source_system: str
    state: B
    shadow: bool
    version: int
    updated_at: datetime
    default_lane: Lane = Lane.DEFAULT  # the lane of its jobs that name none (issue 29)


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditEntry:
    biz_code: str
    from_state: str
    to_state: str
    at: datetime
    actor: str
    reason: str
    comparison_id: int | None
    forced: bool
    detail: dict[str, Any]


class BusinessRegistry:
    def __init__(self, own: MigratorStore) -> None:
        self.own = own
        self.t = self.own.t

    def get(self, biz_code: str) -> BusinessRecord | None:
        b = self.t.business
        with connect(self.own.engine) as conn:
            row = conn.execute(select(b).where(b.c.biz_code == biz_code)).mappings().first()
        return None if row is None else _record(row)

    def all(self) -> list[BusinessRecord]:
        b = self.t.business
        with connect(self.own.engine) as conn:
            return [_record(r) for r in conn.execute(select(b).order_by(b.c.biz_code)).mappings()]

    def ensure(self, biz_code: str, source_system: str) -> BusinessRecord:
        return self._ensure(biz_code, source_system, B.LEGACY)

    def register_native(self, biz_code: str, *, actor: str, reason: str = "") -> BusinessRecord:
        """A business created in the new center (issue 28), never migrated: registered cut
        over, since the new side is the only one that fires it, so `status`, `status
        --check` and the console list it beside the migrated ones. Audited; a business the
        registry has already is returned as it is."""
        return self._ensure(
            biz_code,
            NATIVE,
            B.CUTOVER,
            audit={
                "actor": actor[:128],
                "reason": (reason or "created in the new center")[:1024],
                "detail": json.dumps({"action": "business created (native)"}),
            },
        )

    def set_default_lane(self, biz_code: str, lane: Lane, *, actor: str, reason: str = "") -> BusinessRecord:
        """The lane the business's jobs get from now on when they name none (jobs added or
        migrated after it; a job keeps the lane it has). Audited, with the lane before."""
        got = self.get(biz_code)
        if got is None:
            raise LookupError(f"no such business: {biz_code}")
        b, a = self.t.business, self.t.audit
        now = self.own.clock.now_ms()
        with begin(self.own.engine) as conn:
            conn.execute(update(b).where(b.c.biz_code == biz_code).values(default_lane=lane.value, updated_at=now))
            conn.execute(
                insert(a).values(
                    biz_code=biz_code,
                    from_state=got.state.value,
                    to_state=got.state.value,
                    at=now,
                    comparison_id=None,
                    forced=0,
                    actor=actor[:128],
                    reason=(reason or "default lane")[:1024],
                    detail=json.dumps(
                        {"action": "default lane", "before": got.default_lane.value, "after": lane.value}
                    ),
                )
            )
        out = self.get(biz_code)
        assert out is not None
        return out

    def _ensure(
        self, biz_code: str, source_system: str, state: B, audit: dict[str, str] | None = None
    ) -> BusinessRecord:
        """The business's record, inserted in `state` when the registry has none (checked
        again in the inserting transaction: two writers insert it once); `audit`: the audit
        row of its creation."""
        if self.get(biz_code) is None:
            b, a = self.t.business, self.t.audit
            now = self.own.clock.now_ms()
            with begin(self.own.engine) as conn:
                if conn.execute(select(b.c.biz_code).where(b.c.biz_code == biz_code)).first() is None:
                    conn.execute(
                        insert(b).values(
                            biz_code=biz_code,
                            source_system=source_system,
                            state=state.value,
                            shadow=0,
                            version=0,
                            updated_at=now,
                        )
                    )
                    if audit is not None:
                        conn.execute(
                            insert(a).values(
                                biz_code=biz_code,
                                from_state=state.value,
                                to_state=state.value,
                                at=now,
                                comparison_id=None,
                                forced=0,
                                **audit,
                            )
                        )
        got = self.get(biz_code)
        assert got is not None
        return got

    def transition(
        self,
        current: BusinessRecord,
        to: B,
        *,
        actor: str,
        reason: str,
        shadow: bool | None = None,
        comparison_id: int | None = None,
        forced: bool = False,
        detail: dict[str, Any] | None = None,
    ) -> BusinessRecord:
        if (current.state, to) not in ALLOWED:
            raise TransitionRefused(
                f"{current.biz_code}: {current.state.value} -> {to.value} is not a transition "
                f"(allowed: legacy -> dual_run -> cutover, rollback to legacy)"
            )
        b, a = self.t.business, self.t.audit
        now = self.own.clock.now_ms()
        with begin(self.own.engine) as conn:
            res = conn.execute(
                update(b)
                .where(b.c.biz_code == current.biz_code, b.c.version == current.version)
                .values(
                    state=to.value,
                    version=current.version + 1,
                    updated_at=now,
                    shadow=int(current.shadow if shadow is None else shadow),
                )
            )
            if (res.rowcount or 0) != 1:
                raise TransitionRefused(
                    f"{current.biz_code} changed while this transition ran; look at `switchyard status` and retry"
                )
            conn.execute(
                insert(a).values(
                    biz_code=current.biz_code,
                    from_state=current.state.value,
                    to_state=to.value,
                    at=now,
                    actor=actor[:128],
                    reason=reason[:1024],
                    comparison_id=comparison_id,
                    forced=int(forced),
                    detail=json.dumps(detail or {}, default=str, ensure_ascii=False),
                )
            )
        got = self.get(current.biz_code)
        assert got is not None
        return got

    def note(self, biz_code: str, *, actor: str, reason: str, detail: dict[str, Any]) -> None:
        """An audited operator action that is not a transition (e.g. a trigger paused in a
        business cut over): an audit row with the business's state on both sides."""
        current = self.get(biz_code)
        if current is None:
            return
        a = self.t.audit
        with begin(self.own.engine) as conn:
            conn.execute(
                insert(a).values(
                    biz_code=biz_code,
                    from_state=current.state.value,
                    to_state=current.state.value,
                    at=self.own.clock.now_ms(),
                    actor=actor[:128],
                    reason=reason[:1024],
                    comparison_id=None,
                    forced=0,
                    detail=json.dumps(detail, default=str, ensure_ascii=False),
                )
            )

    def audit(self, biz_code: str | None = None) -> list[AuditEntry]:
        a = self.t.audit
        stmt = select(a).order_by(a.c.at, a.c.id)
        if biz_code is not None:
            stmt = stmt.where(a.c.biz_code == biz_code)
        with connect(self.own.engine) as conn:
            return [
                AuditEntry(
                    biz_code=r["biz_code"],
                    from_state=r["from_state"],
                    to_state=r["to_state"],
                    at=from_ms(r["at"]),
                    actor=r["actor"],
                    reason=r["reason"],
                    comparison_id=r["comparison_id"],
                    forced=bool(r["forced"]),
                    detail=json.loads(r["detail"] or "{}"),
                )
                for r in conn.execute(stmt).mappings()
            ]


def _record(row: Any) -> BusinessRecord:
    return BusinessRecord(
        row["biz_code"],
        row["source_system"],
        B(row["state"]),
        bool(row["shadow"]),
        int(row["version"]),
        from_ms(row["updated_at"]),
        Lane.of(row["default_lane"]),
    )
