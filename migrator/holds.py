"""The legacy jobs Switchyard switched off itself (`dus_legacy_hold`).

A cutover stops the business's running legacy jobs (xxl-job `trigger_status = 0`, a
batch-center task paused). Read back from the legacy tables, that stop looks exactly
like an operator's stop in the legacy admin, and a re-migration or the change stream
that mirrored it would pause the new side too: the business would fire nowhere. So a
hold is written (and committed) BEFORE the legacy write it explains, and removed only
after the job is live on legacy again (a rollback started it, or an abandoned cutover
restored it). A legacy job that is stopped and held is Switchyard's own stop; stopped
and not held is an operator's.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from sqlalchemy import delete, insert, select
from sqlalchemy.engine import Connection

from migrator.store import MigratorStore

CUTOVER = "cutover"
_PAGE = 500


class LegacyHolds:
    def __init__(self, own: MigratorStore) -> None:
        self.own = own
        self.t = self.own.t.legacy_hold

    def add(self, source: str, biz: str, keys: Collection[str], reason: str = CUTOVER) -> None:
        """Hold these keys (committed when this returns). Already held keys stay as they are."""
        if not keys:
            return
        now = self.own.clock.now_ms()
        with self.own.engine.begin() as conn:
            have = self._held(conn, source, list(keys))
            rows = [
                {"source_system": source, "source_key": k, "biz_code": biz, "reason": reason, "held_at": now}
                for k in sorted(set(keys) - have)
            ]
            if rows:
                conn.execute(insert(self.t), rows)

    def remove(self, source: str, keys: Collection[str]) -> None:
        ks = sorted(set(keys))
        if not ks:
            return
        with self.own.engine.begin() as conn:
            for i in range(0, len(ks), _PAGE):
                conn.execute(
                    delete(self.t).where(self.t.c.source_system == source, self.t.c.source_key.in_(ks[i : i + _PAGE]))
                )

    def held(self, source: str, keys: Sequence[str], conn: Connection | None = None) -> set[str]:
        """The keys among these that are held."""
        if not keys:
            return set()
        if conn is not None:
            return self._held(conn, source, keys)
        with self.own.engine.connect() as c:
            return self._held(c, source, keys)

    def of_business(self, biz: str) -> set[str]:
        with self.own.engine.connect() as conn:
            return set(conn.execute(select(self.t.c.source_key).where(self.t.c.biz_code == biz)).scalars())

    def of_businesses(self, bizs: Collection[str] | None = None) -> dict[str, set[str]]:
        """Per business (of these; None: every one) its held keys, in one read."""
        stmt = select(self.t.c.biz_code, self.t.c.source_key)
        if bizs is not None:
            stmt = stmt.where(self.t.c.biz_code.in_(sorted(set(bizs))))
        out: dict[str, set[str]] = {}
        with self.own.engine.connect() as conn:
            for biz, key in conn.execute(stmt).all():
                out.setdefault(str(biz), set()).add(str(key))
        return out

    def _held(self, conn: Connection, source: str, keys: Sequence[str]) -> set[str]:
        out: set[str] = set()
        ks = list(keys)
        for i in range(0, len(ks), _PAGE):
            out.update(
                conn.execute(
                    select(self.t.c.source_key).where(
                        self.t.c.source_system == source, self.t.c.source_key.in_(ks[i : i + _PAGE])
                    )
                ).scalars()
            )
        return out
