"""The migrator's records as dual-run and the reports read them: the business states, the
ledger's job codes and quarantined rows, the cutover audit's state changes, and the cutover
gate's freshness bound.

The tables are the migrator's (migrator.tables); dual-run may not import the migrator, so
it names what it reads as a port (dualrun.ports.MigrationRecords) and the composition root
hands it this class (switchyard.wiring.dualrun_store). Rows are plain tuples: the two
packages share no types. Read-only."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from dbkit.connections import connect
from migrator.business import BusinessRecord, BusinessRegistry
from migrator.model import BusinessState, LedgerStatus
from migrator.ports import VERDICT_MAX_AGE
from migrator.store import MigratorStore


def _row(rec: BusinessRecord) -> tuple[str, str, str, bool]:
    return rec.biz_code, rec.source_system, rec.state.value, rec.shadow


class MigratorRecords:
    def __init__(self, own: MigratorStore) -> None:
        self.own = own
        self._registry = BusinessRegistry(own)

    def business(self, biz_code: str) -> tuple[str, str, str, bool] | None:
        rec = self._registry.get(biz_code)
        return None if rec is None else _row(rec)

    def businesses(self) -> list[tuple[str, str, str, bool]]:
        return [_row(rec) for rec in self._registry.all()]

    def job_codes(self, source: str, biz_code: str) -> dict[str, str]:
        lg = self.own.t.ledger
        stmt = select(lg.c.source_key, lg.c.target_job_code).where(
            lg.c.source_system == source, lg.c.business == biz_code, lg.c.target_job_code.is_not(None)
        )
        with connect(self.own.engine) as conn:
            return {k: c for k, c in conn.execute(stmt).all()}

    def quarantined(self, source: str, biz_code: str) -> list[tuple[str, str | None, str | None]]:
        lg = self.own.t.ledger
        stmt = (
            select(lg.c.source_key, lg.c.field, lg.c.reason)
            .where(
                lg.c.source_system == source,
                lg.c.business == biz_code,
                lg.c.status == LedgerStatus.QUARANTINED.value,
            )
            .order_by(lg.c.source_key)
        )
        with connect(self.own.engine) as conn:
            return [(k, f, r) for k, f, r in conn.execute(stmt).all()]

    def switches(self, biz_code: str) -> list[tuple[int, str, str]]:
        a = self.own.t.audit
        stmt = (
            select(a.c.at, a.c.from_state, a.c.to_state)
            .where(a.c.biz_code == biz_code, a.c.from_state != a.c.to_state)
            .order_by(a.c.at, a.c.id)
        )
        with connect(self.own.engine) as conn:
            return [(int(at), f, t) for at, f, t in conn.execute(stmt).all()]

    def last_cutover(self, biz_code: str) -> tuple[int, str, str, bool, int | None, str | None] | None:
        a = self.own.t.audit
        cut = BusinessState.CUTOVER.value
        stmt = (
            select(a.c.at, a.c.actor, a.c.reason, a.c.forced, a.c.comparison_id, a.c.detail)
            .where(a.c.biz_code == biz_code, a.c.to_state == cut, a.c.from_state != cut)
            .order_by(a.c.at.desc(), a.c.id.desc())
            .limit(1)
        )
        with connect(self.own.engine) as conn:
            row = conn.execute(stmt).first()
        if row is None:
            return None
        cid = None if row.comparison_id is None else int(row.comparison_id)
        return int(row.at), row.actor or "", row.reason or "", bool(row.forced), cid, row.detail

    def verdict_max_age(self) -> timedelta:
        return VERDICT_MAX_AGE
