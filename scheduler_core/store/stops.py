"""The store side of stops (`scheduler_core.stops`): `dus_stop` and the fired records a
stop covers. Beside `SqlTriggerStore` (not in it), reaching its engine and tables, as
`scheduler_core.store.supersedes` does."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import insert, select, true, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import ColumnElement

from scheduler_core.model import FiredState
from scheduler_core.stops import (
    RETAIN,
    Applied,
    Cause,
    Scope,
    Stop,
    Window,
    windows_from_text,
    windows_to_text,
)
from scheduler_core.store.rows import FINAL_RANK, MESSAGE_MAX, PROVISIONAL_SKIP_RANK
from scheduler_core.store.sql import SqlTriggerStore, unskipped_values


class SqlStops:
    """`scheduler_core.stops.StopStore` on the trigger store's database."""

    def __init__(self, store: SqlTriggerStore) -> None:
        self.store = store
        self.t = store.t

    def open_window(self, scope: Scope, key: str, window: Window) -> Applied:
        fr = self.t.fired
        now = self.store.clock.now_ms()
        with self.store.engine.begin() as conn:
            row = _locked_row(conn, self.t.stop, scope, key, now)
            windows = _kept(windows_from_text(row.windows), now)
            standing = next((w for w in windows if w.open and w.cause is window.cause), None)
            if standing is not None:  # paused twice: the first pause stands, nothing changes
                return Applied(_stop_of(row, windows), standing, changed=False)
            windows = (*windows, window)
            stop = _write(conn, self.t.stop, row, windows, now)
            # not final yet (pending, published, received): marked skipped at the rank of
            # `received`, so an executor's final result, skipped or what really ran before
            # the stop reached it, still moves the record (forward-only updates)
            marked = conn.execute(
                update(fr)
                .where(_in_scope(fr, scope, key), fr.c.scheduled_at >= window.from_ms, fr.c.state_rank < FINAL_RANK)
                .values(
                    state=FiredState.SKIPPED.value,
                    state_rank=PROVISIONAL_SKIP_RANK,
                    message=window.message[:MESSAGE_MAX],
                    result_at=now,
                )
            ).rowcount
        return Applied(stop, window, changed=True, records=max(0, marked or 0))

    def close_window(self, scope: Scope, key: str, until_ms: int, causes: tuple[Cause, ...]) -> Applied | None:
        fr = self.t.fired
        st = self.t.stop
        now = self.store.clock.now_ms()
        with self.store.engine.begin() as conn:
            # the UPDATE first: it holds the row's lock until the end of the transaction
            if not conn.execute(_touch(st, scope, key, now)).rowcount:
                return None
            row = conn.execute(select(st).where(st.c.scope == scope.value, st.c.scope_key == key)).one()
            windows = windows_from_text(row.windows)
            open_ = next((w for w in windows if w.open and w.cause in causes), None)
            if open_ is None:
                return None
            closed = dataclasses.replace(open_, until_ms=max(open_.from_ms, until_ms))
            windows = _kept(tuple(closed if w is open_ else w for w in windows), now)
            stop = _write(conn, st, row, windows, now)
            # the records this window marked at or after its end run again: they wait for
            # their executor's result (a record another stop marked keeps that stop's mark)
            revived = conn.execute(
                update(fr)
                .where(
                    _in_scope(fr, scope, key),
                    fr.c.scheduled_at >= closed.until_ms,
                    fr.c.state == FiredState.SKIPPED.value,
                    fr.c.state_rank == PROVISIONAL_SKIP_RANK,
                    fr.c.message == open_.message[:MESSAGE_MAX],
                )
                .values(**unskipped_values(fr))
            ).rowcount
        return Applied(stop, closed, changed=True, records=max(0, revived or 0))

    def stops(self) -> list[Stop]:
        st = self.t.stop
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(st).order_by(st.c.scope, st.c.scope_key)).all()
        return [_stop_of(r, windows_from_text(r.windows)) for r in rows]

    def stop_of(self, scope: Scope, key: str) -> Stop | None:
        st = self.t.stop
        with self.store.engine.connect() as conn:
            row = conn.execute(select(st).where(st.c.scope == scope.value, st.c.scope_key == key)).first()
        return None if row is None else _stop_of(row, windows_from_text(row.windows))

    def mark_relayed(self, stop: Stop, by: str) -> None:
        st = self.t.stop
        with self.store.engine.begin() as conn:
            conn.execute(
                update(st)
                .where(
                    st.c.scope == stop.scope.value,
                    st.c.scope_key == stop.key,
                    (st.c.relayed_epoch.is_(None)) | (st.c.relayed_epoch < stop.epoch),
                )
                .values(relayed_epoch=stop.epoch, relayed_by=by[:128], relayed_at=self.store.clock.now_ms())
            )


def _touch(st: Any, scope: Scope, key: str, now: int) -> Any:
    return update(st).where(st.c.scope == scope.value, st.c.scope_key == key).values(updated_at=now)


def _locked_row(conn: Connection, st: Any, scope: Scope, key: str, now: int) -> Any:
    """The scope's row, locked for this transaction (inserted empty at epoch 0 if absent)."""
    if not conn.execute(_touch(st, scope, key, now)).rowcount:
        try:
            with conn.begin_nested():  # a concurrent first stop of the scope may insert it first
                conn.execute(insert(st).values(scope=scope.value, scope_key=key, windows="[]", epoch=0, updated_at=now))
        except IntegrityError:
            conn.execute(_touch(st, scope, key, now))
    return conn.execute(select(st).where(st.c.scope == scope.value, st.c.scope_key == key)).one()


def _write(conn: Connection, st: Any, row: Any, windows: tuple[Window, ...], now: int) -> Stop:
    epoch = int(row.epoch) + 1
    conn.execute(
        update(st)
        .where(st.c.scope == row.scope, st.c.scope_key == row.scope_key)
        .values(windows=windows_to_text(windows), epoch=epoch, updated_at=now)
    )
    return dataclasses.replace(_stop_of(row, windows), epoch=epoch, updated_ms=now)


def _kept(windows: tuple[Window, ...], now: int) -> tuple[Window, ...]:
    """Without the windows that ended more than RETAIN ago."""
    horizon = now - int(RETAIN.total_seconds() * 1000)
    return tuple(w for w in windows if w.until_ms is None or w.until_ms >= horizon)


def _in_scope(fr: Any, scope: Scope, key: str) -> ColumnElement[bool]:
    if scope is Scope.TRIGGER:
        return fr.c.trigger_id == int(key)  # type: ignore[no-any-return]
    if scope is Scope.JOB:
        return fr.c.job_code == key  # type: ignore[no-any-return]
    if scope is Scope.BUSINESS:
        return fr.c.biz_code == key  # type: ignore[no-any-return]
    return true()


def _stop_of(row: Any, windows: tuple[Window, ...]) -> Stop:
    return Stop(
        scope=Scope(row.scope),
        key=row.scope_key,
        windows=windows,
        epoch=int(row.epoch),
        updated_ms=int(row.updated_at),
        relayed_epoch=int(row.relayed_epoch or 0),
        relayed_by=row.relayed_by or "",
        relayed_ms=None if row.relayed_at is None else int(row.relayed_at),
    )


__all__ = ["SqlStops"]
