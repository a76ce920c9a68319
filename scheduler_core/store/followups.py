"""The store's side of on-success follow-ups (scheduler_core.followups): which triggers
follow which, and the claim per (parent command, child trigger) that makes a follow-up
fire once however often the parent's result is delivered."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from sqlalchemy import delete, insert, select, tuple_

from dbkit.connections import begin, connect
from scheduler_core.model import CommandId, FiredRecord, TriggerId

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

    from scheduler_core.store.schema import Tables


class FollowupRows:
    """Mixed into SqlTriggerStore."""

    engine: Engine
    t: Tables

    if TYPE_CHECKING:

        def _insert_fired(self, conn: Connection, records: Sequence[FiredRecord]) -> int: ...  # SqlTriggerStore's

    def set_followups(self, links: Mapping[TriggerId, Sequence[TriggerId]], now_ms: int) -> None:
        """Each parent's follow-ups become exactly `links[parent]` (empty: none), in order."""
        fu = self.t.followup
        parents = sorted({int(p) for p in links})
        rows = [
            {"trigger_id": int(parent), "child_trigger_id": int(c), "position": i, "updated_at": now_ms}
            for parent, children in links.items()
            for i, c in enumerate(dict.fromkeys(children))
        ]
        with begin(self.engine) as conn:
            for i in range(0, len(parents), 500):
                conn.execute(delete(fu).where(fu.c.trigger_id.in_(parents[i : i + 500])))
            if rows:
                conn.execute(insert(fu), rows)

    def followups_of(self, parents: Sequence[TriggerId] | None = None) -> dict[TriggerId, list[TriggerId]]:
        """Parent trigger -> its follow-ups in order; `parents` None: all of them (one
        query: the table holds only the chains, a few rows per business)."""
        fu = self.t.followup
        out: dict[TriggerId, list[TriggerId]] = {}
        base = select(fu.c.trigger_id, fu.c.child_trigger_id).order_by(fu.c.trigger_id, fu.c.position)
        ids = sorted({int(p) for p in parents}) if parents is not None else []
        stmts = (
            [base]
            if parents is None
            else [base.where(fu.c.trigger_id.in_(ids[i : i + 500])) for i in range(0, len(ids), 500)]
        )
        with connect(self.engine) as conn:
            for stmt in stmts:
                for parent, child in conn.execute(stmt).all():
                    out.setdefault(TriggerId(int(parent)), []).append(TriggerId(int(child)))
        return out

    def followup_claims(
        self, pairs: Sequence[tuple[CommandId, TriggerId]]
    ) -> dict[tuple[CommandId, TriggerId], CommandId]:
        """The child command ids already claimed for (parent command id, child trigger)."""
        ff = self.t.followup_fired
        out: dict[tuple[CommandId, TriggerId], CommandId] = {}
        keys = [(str(p), int(c)) for p, c in dict.fromkeys(pairs)]
        with connect(self.engine) as conn:
            for i in range(0, len(keys), 200):
                rows = conn.execute(
                    select(ff.c.parent_command_id, ff.c.child_trigger_id, ff.c.child_command_id)
                    .where(tuple_(ff.c.parent_command_id, ff.c.child_trigger_id).in_(keys[i : i + 200]))
                ).all()  # fmt: skip
                for parent, child, cid in rows:
                    out[(CommandId(parent), TriggerId(int(child)))] = CommandId(cid)
        return out

    def claim_followup(
        self, parent: CommandId, child: TriggerId, records: Sequence[FiredRecord], now_ms: int
    ) -> CommandId:
        """Claim (parent, child) for the child run whose fired records are `records` and
        insert them, in one transaction; returns the child's command id that won (ours,
        or the one a concurrent consumer of a duplicate result claimed first)."""
        if not records:
            raise ValueError("a follow-up run needs at least one fired record")
        ff = self.t.followup_fired
        ours = records[0].command_id
        stmt = (
            insert(ff).values(parent_command_id=str(parent), child_trigger_id=int(child), child_command_id=str(ours),
                              at=now_ms)
            .prefix_with("OR IGNORE", dialect="sqlite").prefix_with("IGNORE", dialect="mysql")
            .prefix_with("IGNORE", dialect="mariadb")
        )  # fmt: skip
        with begin(self.engine) as conn:
            if conn.execute(stmt).rowcount == 1:
                self._insert_fired(conn, records)
                return ours
            won = conn.execute(
                select(ff.c.child_command_id).where(ff.c.parent_command_id == str(parent), ff.c.child_trigger_id == int(child))
            ).scalar_one()  # fmt: skip
        return CommandId(won)
