"""The store's side of `scheduler_core.ports.BusinessSwitchRows`: what a business switch
(dual-run start, cutover, rollback) writes and asks of the new side beyond moving
triggers. Mixed into SqlTriggerStore."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy import select, update

from dbkit.connections import begin, connect
from scheduler_core.model import Trigger

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from scheduler_core.store.schema import Tables


class SwitchRows:
    """Mixed into SqlTriggerStore."""

    engine: Engine
    t: Tables

    def set_shadow(self, biz_code: str, shadow: bool) -> None:
        """Every job of the business records only (shadow) or runs its handlers."""
        j = self.t.job
        with begin(self.engine) as conn:
            conn.execute(update(j).where(j.c.biz_code == biz_code).values(shadow=int(shadow)))

    def published_after(self, biz_code: str, at_ms: int) -> bool:
        """Whether the business has a fired record scheduled after `at_ms`."""
        fr = self.t.fired
        with connect(self.engine) as conn:
            found = conn.execute(
                select(fr.c.command_id).where(fr.c.biz_code == biz_code, fr.c.scheduled_at > at_ms).limit(1)
            ).first()
        return found is not None

    def add_pending(self, trigger: Trigger, times_ms: Sequence[int]) -> None:
        """Runs of `trigger` at `times_ms` for whoever holds the bus to publish
        (`SqlSupersedes.add_pending`: the relay of a schedule edit's pending runs)."""
        # imported here: the supersedes module is built on the store this is mixed into
        from scheduler_core.store.supersedes import SqlSupersedes

        SqlSupersedes(self).add_pending(trigger, times_ms)  # type: ignore[arg-type]
