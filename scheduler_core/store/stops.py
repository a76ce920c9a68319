"""The store side of stops (`scheduler_core.stops`): `dus_stop` and the fired records a
stop covers (`scheduler_core.store.stop_rows`). Beside `SqlTriggerStore` (not in it),
reaching its engine and tables, as `scheduler_core.store.supersedes` does."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select, update

from dbkit.connections import begin, connect
from scheduler_core.model import FiredRecord, FiredState, TriggerId, TriggerState
from scheduler_core.ports import Transition
from scheduler_core.stops import Applied, Cause, Scope, SkipWindow, Stop
from scheduler_core.store import stop_rows
from scheduler_core.store.rows import PROVISIONAL_SKIP_RANK, fired_from_row
from scheduler_core.store.sql import SqlTriggerStore


class SqlStops:
    """`scheduler_core.stops.StopStore` on the trigger store's database."""

    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def open_window(self, scope: Scope, key: str, window: SkipWindow) -> Applied:
        with begin(self.store.engine) as conn:
            return stop_rows.open_window(conn, self.t, scope, key, window, self.store.clock.now_ms())

    def close_window(self, scope: Scope, key: str, until_ms: int, causes: tuple[Cause, ...]) -> Applied | None:
        with begin(self.store.engine) as conn:
            return stop_rows.close_window(conn, self.t, scope, key, until_ms, causes, self.store.clock.now_ms())

    def open_windows(self, scope: Scope, keys: list[str], window: SkipWindow) -> tuple[list[Applied], int]:
        with begin(self.store.engine) as conn:
            return stop_rows.open_windows(conn, self.t, scope, keys, window, self.store.clock.now_ms())

    def close_windows(
        self, scope: Scope, keys: list[str], until_ms: int, causes: tuple[Cause, ...]
    ) -> tuple[list[Applied], int]:
        with begin(self.store.engine) as conn:
            return stop_rows.close_windows(conn, self.t, scope, keys, until_ms, causes, self.store.clock.now_ms())

    def stops(self, changed_within: timedelta | None = None) -> list[Stop]:
        since = None
        if changed_within is not None:
            since = self.store.clock.now_ms() - int(changed_within.total_seconds() * 1000)
        with connect(self.store.engine) as conn:
            return stop_rows.read_stops(conn, self.t, since_ms=since)

    def stop_of(self, scope: Scope, key: str) -> Stop | None:
        with connect(self.store.engine) as conn:
            found = stop_rows.read_stops(conn, self.t, scope, key)
        return found[0] if found else None

    def stops_of(self, scope: Scope, keys: list[str]) -> list[Stop]:
        out: list[Stop] = []
        with connect(self.store.engine) as conn:
            for i in range(0, len(keys), 500):
                out += stop_rows.read_stops(conn, self.t, scope, keys=keys[i : i + 500])
        return out

    def settle_trigger(self, trigger_id: int, to: TriggerState) -> bool:
        with begin(self.store.engine) as conn:
            # the stop row's lock first: a resume's lift waits for this, or this sees it
            stop = stop_rows.locked_stop(conn, self.t, Scope.TRIGGER, str(trigger_id), self.store.clock.now_ms())
            cause = Cause.CANCEL if to is TriggerState.CANCELLED else Cause.PAUSE
            if stop is None or stop.open_window((cause,)) is None:
                return False
            # the CAS itself checks the trigger waits (from_state)
            transition = Transition(ids=[TriggerId(trigger_id)], from_state=TriggerState.WAITING, to_state=to)
            _ids, _token, matched = self.store._cas_update(conn, transition)
            return matched > 0

    def marked_from(self, from_ms: int) -> list[FiredRecord]:
        """The fired records at or after `from_ms` a stop or an edit marked skipped and no
        executor has answered (their provisional mark): a lift revives them, so a process
        whose bus lost their messages (`serve` restarting) must publish them again."""
        fr = self.t.fired
        stmt = (
            select(fr)
            .where(
                fr.c.scheduled_at >= from_ms,
                fr.c.state == FiredState.SKIPPED.value,
                fr.c.state_rank == PROVISIONAL_SKIP_RANK,
            )
            .order_by(fr.c.scheduled_at, fr.c.trigger_id, fr.c.item_index)
        )
        with connect(self.store.engine) as conn:
            return [fired_from_row(r) for r in conn.execute(stmt).mappings()]

    def mark_relayed(self, stops: list[Stop], by: str) -> None:
        st = self.t.stop
        now = self.store.clock.now_ms()
        with begin(self.store.engine) as conn:  # one transaction for a round's stops
            for stop in stops:
                conn.execute(
                    update(st)
                    .where(
                        st.c.scope == stop.scope.value,
                        st.c.scope_key == stop.key,
                        (st.c.relayed_epoch.is_(None)) | (st.c.relayed_epoch < stop.epoch),
                    )
                    .values(relayed_epoch=stop.epoch, relayed_by=by[:128], relayed_at=now)
                )


__all__ = ["SqlStops"]
