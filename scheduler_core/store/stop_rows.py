"""The writes of `dus_stop` inside a caller's transaction: one window opened or closed, and
the fired records it covers marked skipped or revived in the same transaction. Shared by
`SqlStops` (operators' stops) and `SqlTriggerStore`'s rollback fences, which are windows
of the same rows (`scheduler_core.stops`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from sqlalchemy import insert, select, true, update
from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql import ColumnElement

from scheduler_core.model import FiredState
from scheduler_core.stops import RETAIN, Applied, Cause, Scope, SkipWindow, Stop, windows_from_text, windows_to_text
from scheduler_core.store.rows import FINAL_RANK, MESSAGE_MAX, PROVISIONAL_SKIP_RANK, unskipped_values
from scheduler_core.store.schema import Tables


def open_window(conn: Connection, t: Tables, scope: Scope, key: str, window: SkipWindow, now: int) -> Applied:
    """The window added to the scope's row with the next epoch, and the scope's fired
    records at or after its start not final yet marked skipped provisionally (at the rank
    of `received`: an executor's final result, skipped or what really ran before the stop
    reached it, still moves them). A window of the same cause already open: an operator's
    stop stands as it is (`changed` False); a rollback's fence moves to the new start."""
    (applied,), marked = open_windows(conn, t, scope, [key], window, now)
    return dataclasses.replace(applied, records=marked)


def open_windows(
    conn: Connection, t: Tables, scope: Scope, keys: list[str], window: SkipWindow, now: int
) -> tuple[list[Applied], int]:
    """`open_window` for many keys of one scope in the caller's transaction (a pause of
    every trigger of a job): the rows one by one, the fired records in one statement per
    500 keys. Returns each key's result and how many records were marked in all."""
    out: list[Applied] = []
    changed: list[str] = []
    for key in keys:
        row = _locked_row(conn, t.stop, scope, key, now)
        windows = _kept(windows_from_text(row.windows), now)
        standing = next((w for w in windows if w.open and w.cause is window.cause), None)
        if standing is not None and window.cause is not Cause.ROLLBACK:
            out.append(Applied(stop_of_row(row, windows), standing, changed=False))
            continue
        if standing is not None:  # a rollback raised again: see open_window
            ended = dataclasses.replace(standing, until_ms=window.from_ms)
            windows = tuple(
                ended if w is standing else w for w in windows if w is not standing or window.from_ms > standing.from_ms
            )
        out.append(Applied(_write(conn, t.stop, row, (*windows, window), now), window, changed=True))
        changed.append(key)
    marked = 0
    fr = t.fired
    for i in range(0, len(changed), 500):
        marked += max(
            0,
            conn.execute(
                update(fr)
                .where(
                    _in_scope_any(fr, scope, changed[i : i + 500]),
                    fr.c.scheduled_at >= window.from_ms,
                    fr.c.state_rank < FINAL_RANK,
                )
                .values(
                    state=FiredState.SKIPPED.value,
                    state_rank=PROVISIONAL_SKIP_RANK,
                    message=window.message[:MESSAGE_MAX],
                    result_at=now,
                )
            ).rowcount
            or 0,
        )
    return out, marked


def close_windows(
    conn: Connection, t: Tables, scope: Scope, keys: list[str], until_ms: int, causes: tuple[Cause, ...], now: int
) -> tuple[list[Applied], int]:
    """`close_window` for many keys in the caller's transaction; the keys with no such
    window are left out. Returns each closed key's result and the records revived in all."""
    out: list[Applied] = []
    revived = 0
    for key in keys:
        applied = close_window(conn, t, scope, key, until_ms, causes, now)
        if applied is not None:
            out.append(applied)
            revived += applied.records
    return out, revived


def close_window(
    conn: Connection, t: Tables, scope: Scope, key: str, until_ms: int, causes: tuple[Cause, ...], now: int
) -> Applied | None:
    """The open window of one of `causes` ends at `until_ms` (next epoch); the records it
    marked at or after `until_ms` wait for their executor's result again (a record another
    window marked keeps that mark). None: no such window stands."""
    st = t.stop
    # the UPDATE first: it holds the row's lock until the end of the transaction
    if not conn.execute(_touch(st, scope, key, now)).rowcount:
        return None
    row = conn.execute(select(st).where(st.c.scope == scope.value, st.c.scope_key == key)).one()
    windows = windows_from_text(row.windows)
    open_ = next((w for w in windows if w.open and w.cause in causes), None)
    if open_ is None:
        return None
    closed = dataclasses.replace(open_, until_ms=max(open_.from_ms, until_ms))
    stop = _write(conn, st, row, _kept(tuple(closed if w is open_ else w for w in windows), now), now)
    fr = t.fired
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


def set_edit_windows(
    conn: Connection, t: Tables, trigger_id: int, skipped: set[int], effective_ms: int, now: int
) -> Stop:
    """A schedule edit's windows of the trigger's stop: one [T, T + 1 ms) per occurrence of
    the old schedule it supersedes (`skipped`: every one still ahead, this edit's and an
    earlier edit's it keeps); an earlier edit's window of a time the schedule has again is
    gone, one already behind stays (a command of it may still be delivered late). The
    records are the edit's to mark (`SqlSupersedes.record_edit`), not this."""
    row = _locked_row(conn, t.stop, Scope.TRIGGER, str(trigger_id), now)
    windows = _kept(windows_from_text(row.windows), now)
    had = {w.from_ms: w for w in windows if w.cause is Cause.EDIT}
    edits = [w for at, w in had.items() if at in skipped or at < now]
    edits += [SkipWindow(at, at + 1, Cause.EDIT, effective_ms=effective_ms) for at in sorted(skipped) if at not in had]
    others = tuple(w for w in windows if w.cause is not Cause.EDIT)
    return _write(conn, t.stop, row, (*others, *sorted(edits, key=lambda w: w.from_ms)), now)


def locked_stop(conn: Connection, t: Tables, scope: Scope, key: str, now: int) -> Stop | None:
    """The scope's stop, its row locked for the rest of the caller's transaction (None: no
    row)."""
    st = t.stop
    if not conn.execute(_touch(st, scope, key, now)).rowcount:
        return None
    row = conn.execute(select(st).where(st.c.scope == scope.value, st.c.scope_key == key)).one()
    return stop_of_row(row, windows_from_text(row.windows))


def read_stops(
    conn: Connection,
    t: Tables,
    scope: Scope | None = None,
    key: str | None = None,
    since_ms: int | None = None,
    keys: list[str] | None = None,
) -> list[Stop]:
    st = t.stop
    stmt = select(st).order_by(st.c.scope, st.c.scope_key)
    if keys is not None:
        stmt = stmt.where(st.c.scope_key.in_(keys))
    if since_ms is not None:
        stmt = stmt.where(st.c.updated_at >= since_ms)
    if scope is not None:
        stmt = stmt.where(st.c.scope == scope.value)
    if key is not None:
        stmt = stmt.where(st.c.scope_key == key)
    return [stop_of_row(r, windows_from_text(r.windows)) for r in conn.execute(stmt).all()]


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


def _write(conn: Connection, st: Any, row: Any, windows: tuple[SkipWindow, ...], now: int) -> Stop:
    epoch = int(row.epoch) + 1
    conn.execute(
        update(st)
        .where(st.c.scope == row.scope, st.c.scope_key == row.scope_key)
        .values(windows=windows_to_text(windows), epoch=epoch, updated_at=now)
    )
    return dataclasses.replace(stop_of_row(row, windows), epoch=epoch, updated_ms=now)


def _kept(windows: tuple[SkipWindow, ...], now: int) -> tuple[SkipWindow, ...]:
    """Without the windows that ended more than RETAIN ago (or never began: empty)."""
    horizon = now - int(RETAIN.total_seconds() * 1000)
    return tuple(w for w in windows if w.until_ms is None or (w.until_ms >= horizon and w.until_ms > w.from_ms))


def _in_scope_any(fr: Any, scope: Scope, keys: list[str]) -> ColumnElement[bool]:
    if scope is Scope.TRIGGER:
        return fr.c.trigger_id.in_([int(k) for k in keys])  # type: ignore[no-any-return]
    if scope is Scope.JOB:
        return fr.c.job_code.in_(keys)  # type: ignore[no-any-return]
    if scope is Scope.BUSINESS:
        return fr.c.biz_code.in_(keys)  # type: ignore[no-any-return]
    return true()


def _in_scope(fr: Any, scope: Scope, key: str) -> ColumnElement[bool]:
    if scope is Scope.TRIGGER:
        return fr.c.trigger_id == int(key)  # type: ignore[no-any-return]
    if scope is Scope.JOB:
        return fr.c.job_code == key  # type: ignore[no-any-return]
    if scope is Scope.BUSINESS:
        return fr.c.biz_code == key  # type: ignore[no-any-return]
    return true()


def stop_of_row(row: Any, windows: tuple[SkipWindow, ...]) -> Stop:
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


__all__ = [
    "close_window",
    "close_windows",
    "locked_stop",
    "open_window",
    "open_windows",
    "read_stops",
    "set_edit_windows",
    "stop_of_row",
]
