"""The store's side of `scheduler_core.ports.CatalogReads`: what the store holds, in
brief (the triggers of businesses, the businesses that have jobs or run records), for
the views and checks above the core. Mixed into SqlTriggerStore."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

from sqlalchemy import select

from dbkit.connections import connect
from scheduler_core.model import TriggerId, TriggerKind, TriggerState
from scheduler_core.ports import TriggerBrief

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from scheduler_core.store.schema import Tables

# the stored values' members, looked up (the enum's call costs more than the row's read)
_KIND = {k.value: k for k in TriggerKind}
_STATE = {s.value: s for s in TriggerState}


class CatalogRows:
    """Mixed into SqlTriggerStore."""

    engine: Engine
    t: Tables

    def trigger_briefs(self, biz_codes: Collection[str] | None = None) -> list[TriggerBrief]:
        """The triggers of these businesses (None: all), in id order, each with whether its
        job exists: narrow columns in one query, where the full rows of thousands of
        triggers (and a second read of the jobs) took most of a page's time."""
        tr, j = self.t.trigger, self.t.job
        stmt = (
            select(tr.c.id, tr.c.job_code, tr.c.biz_code, tr.c.kind, tr.c.state, j.c.id.is_not(None))
            .select_from(tr.outerjoin(j, j.c.job_code == tr.c.job_code))
            .order_by(tr.c.id)
        )
        if biz_codes is not None:
            stmt = stmt.where(tr.c.biz_code.in_(sorted(set(biz_codes))))
        with connect(self.engine) as conn:
            return [
                TriggerBrief(TriggerId(i), code, biz, _KIND[kind], _STATE[state], bool(has_job))
                for i, code, biz, kind, state, has_job in conn.execute(stmt).all()
            ]

    def job_biz_codes(self) -> set[str]:
        """Every business (biz_code) that has a job in the store."""
        j = self.t.job
        with connect(self.engine) as conn:
            return {str(d) for (d,) in conn.execute(select(j.c.biz_code).distinct())}

    def has_fired_records(self, biz_code: str) -> bool:
        """Whether any fired record belongs to the business (one row on idx_fired_biz_time)."""
        fr = self.t.fired
        with connect(self.engine) as conn:
            return conn.execute(select(fr.c.biz_code).where(fr.c.biz_code == biz_code).limit(1)).first() is not None
