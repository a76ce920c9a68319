"""The store side of kill requests (`scheduler_core.kills`): `dus_kill_request`. Beside
`SqlTriggerStore` (not in it), reaching its engine and tables."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import insert, select

from dbkit.connections import begin, connect
from scheduler_core.control import EVERYTHING, RelayScope
from scheduler_core.item_states import ItemState
from scheduler_core.kills import Kill, KillRelay
from scheduler_core.model import FiredRecord, FiredState, command_id, parse_command_id
from scheduler_core.ports import MessageBus
from scheduler_core.store.rows import fired_from_row
from scheduler_core.store.sql import SqlTriggerStore

REQUESTED_BY_MAX = 191
# `run kill --job`: how far back a run not finished yet is looked for (a longer-running
# run is still found by its command id)
RUNNING_LOOKBACK = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class RunItem:
    """One run item as its fired record (or its page record's letter) says it is now."""

    command_id: str
    biz_code: str
    job_code: str
    state: FiredState
    message: str


def _item_of(rec: FiredRecord, index: int) -> RunItem:
    state = rec.state
    offset = index - rec.item_index
    if rec.item_count > 1 and 0 <= offset < len(rec.item_states) and rec.item_states[offset] != ItemState.PENDING:
        state = ItemState(rec.item_states[offset]).fired_state
    cid = command_id(rec.trigger_id, rec.scheduled_at, index)
    return RunItem(cid, rec.biz_code, rec.job_code, state, rec.message)


class SqlKills:
    """`scheduler_core.kills.KillStore` on the SQL store."""

    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def add_kill(
        self, biz_code: str, command_id: str | None, job_code: str | None, requested_ms: int, requested_by: str
    ) -> Kill:
        kr = self.t.kill_request
        by = requested_by[:REQUESTED_BY_MAX]
        with begin(self.store.engine) as conn:
            result = conn.execute(
                insert(kr).values(
                    biz_code=biz_code,
                    command_id=command_id,
                    job_code=job_code,
                    requested_at=requested_ms,
                    requested_by=by,
                )
            )
            request_id = int(result.inserted_primary_key[0])  # type: ignore[index]
        return Kill(request_id, biz_code, command_id, job_code, requested_ms, by)

    def kills_since(self, since_ms: int) -> list[Kill]:
        kr = self.t.kill_request
        stmt = select(kr).where(kr.c.requested_at >= since_ms).order_by(kr.c.id)
        with connect(self.store.engine) as conn:
            return [_kill_of(r) for r in conn.execute(stmt)]

    # -- what `run kill` looks up ----------------------------------------------------------

    def run_item(self, cid: str) -> RunItem | None:
        """The run item of a command id (inside a page record when it has one); None: no
        such run. Raises ValueError for a string that is no command id."""
        trigger_id, scheduled_ms, index = parse_command_id(cid)
        fr = self.t.fired
        stmt = select(fr).where(
            fr.c.trigger_id == trigger_id,
            fr.c.scheduled_at == scheduled_ms,
            fr.c.item_index <= index,
            fr.c.item_index + fr.c.item_count > index,
        )
        with connect(self.store.engine) as conn:
            row = conn.execute(stmt).mappings().first()
        return None if row is None else _item_of(fired_from_row(row), index)

    def unfinished_items(self, biz_code: str, job_code: str) -> list[RunItem]:
        """The job's run items due by now and not finished (received by an executor or
        still on their way to one), looked for over the last `RUNNING_LOOKBACK`."""
        now = self.store.clock.now()
        out: list[RunItem] = []
        for rec in self.store.fired_between(biz_code, now - RUNNING_LOOKBACK, now + timedelta(milliseconds=1)):
            if rec.job_code != job_code:
                continue
            for index in range(rec.item_index, rec.item_index + rec.item_count):
                item = _item_of(rec, index)
                if not item.state.is_final:
                    out.append(item)
        return out


def kill_relay(store: SqlTriggerStore, bus: MessageBus, scope: RelayScope = EVERYTHING) -> KillRelay:
    """The relay of kill requests for the process that has the bus (see `scheduler_core.kills`)."""
    return KillRelay(SqlKills(store), bus, store.clock, scope)


def _kill_of(row: Any) -> Kill:
    return Kill(
        request_id=int(row.id),
        biz_code=row.biz_code,
        command_id=row.command_id,
        job_code=row.job_code,
        requested_ms=int(row.requested_at),
        requested_by=row.requested_by or "",
    )


__all__ = ["RUNNING_LOOKBACK", "RunItem", "SqlKills", "kill_relay"]
