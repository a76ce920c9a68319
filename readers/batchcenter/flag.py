"""The batch center's documented flags: the only writes to its tables anywhere.

Readers never write to legacy tables except through the flags the batch center's
contract documents, and these functions are all of them (with xxl-job's
`readers/xxljob/control.py`):

- `set_migrated`: `bc_task.migrated` (0 not migrated, 1 migrated: after the business's
  cutover the batch center skips rows with migrated = 1);
- `pause_tasks` / `pause_together` / `resume_tasks`: `bc_task.status` 5 PAUSED (task by
  task, or a set at one instant), and back to 0 WAITING with the `fire_time` it is next
  due at;
- `set_business_enabled`: `bc_biz.enabled` (0: the batch center skips the business).

Every `bc_task` write is an optimistic update, as the contract asks of every update:
`SET ..., version = version + 1 WHERE id = :id AND version = :seen`, with bound
parameters only. A row that moved under us is retried from a fresh read (or, when the
caller passed the versions it expects, reported as a conflict). Note that bumping
`version` also makes a concurrent batch-center update of the same row lose its own
optimistic check: that is the contract working, not a fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, Engine, bindparam, column, select, table, update

from dbkit.connections import begin
from readers.batchcenter.mapping import TaskStatus
from readers.legacy_ddl.tables import WallTime
from readers.timezones import DEFAULT_ZONE, LegacyTimeZone, parse_wall

logger = logging.getLogger(__name__)

_CHUNK = 500
_TASK = table(
    "bc_task",
    column("id"),
    column("migrated"),
    column("status"),
    column("fire_time", WallTime()),
    column("version"),
)
_BIZ = table("bc_biz", column("biz_code"), column("enabled"))

# Targets: ids (read the current version, retry a lost race) or {id: expected version}.
Targets = Collection[int] | Mapping[int, int]


@dataclass(frozen=True, slots=True)
class FlagOutcome:
    """What one flag call did, per task id."""

    changed: tuple[int, ...] = ()  # written, version bumped
    unchanged: tuple[int, ...] = ()  # already as asked: nothing written
    conflicts: tuple[int, ...] = ()  # the version moved (or differs from the one expected)
    refused: tuple[int, ...] = ()  # not in a state this flag applies to (e.g. RUNNING)
    missing: tuple[int, ...] = ()  # no such task


@dataclass(frozen=True, slots=True)
class _Seen:
    task_id: int
    version: int
    status: int
    migrated: int
    fire_time: datetime | None


# (row) -> "done" (already as asked), "write" (values to set), or "refuse"
Decide = Callable[[_Seen], str]
Values = Callable[[_Seen], dict[str, Any]]


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _read(conn: Connection, ids: Sequence[int], *, lock: bool = False) -> dict[int, _Seen]:
    stmt = select(_TASK.c.id, _TASK.c.version, _TASK.c.status, _TASK.c.migrated, _TASK.c.fire_time).where(
        _TASK.c.id.in_(bindparam("ids", expanding=True))
    )
    if lock:
        stmt = stmt.with_for_update()
    out: dict[int, _Seen] = {}
    for r in conn.execute(stmt, {"ids": list(ids)}):
        fire = parse_wall(r.fire_time) if r.fire_time is not None else None
        out[int(r.id)] = _Seen(int(r.id), int(r.version), int(r.status), int(r.migrated), fire)
    return out


def _cas(conn: Connection, seen: _Seen, values: dict[str, Any]) -> bool:
    stmt = (
        update(_TASK)
        .where(_TASK.c.id == bindparam("task_id"))
        .where(_TASK.c.version == bindparam("seen_version"))
        .values(version=_TASK.c.version + 1, **{k: bindparam(f"new_{k}") for k in values})
    )
    params = {"task_id": seen.task_id, "seen_version": seen.version, **{f"new_{k}": v for k, v in values.items()}}
    return conn.execute(stmt, params).rowcount == 1


def _write(
    bind: Engine | Connection, targets: Targets, decide: Decide, values: Values, *, attempts: int = 3
) -> FlagOutcome:
    expected = dict(targets) if isinstance(targets, Mapping) else None
    ids = sorted({int(t) for t in targets})
    changed: list[int] = []
    unchanged: list[int] = []
    conflicts: list[int] = []
    refused: list[int] = []
    missing: list[int] = []
    for chunk in _chunks(ids):
        pending = list(chunk)
        for attempt in range(attempts if expected is None else 1):
            with _begin(bind) as conn:
                seen = _read(conn, pending)
                lost: list[int] = []
                for task_id in pending:
                    row = seen.get(task_id)
                    if row is None:
                        missing.append(task_id)
                    elif expected is not None and row.version != expected[task_id]:
                        conflicts.append(task_id)
                    elif (verdict := decide(row)) == "done":
                        unchanged.append(task_id)
                    elif verdict == "refuse":
                        refused.append(task_id)
                    elif _cas(conn, row, values(row)):
                        changed.append(task_id)
                    else:
                        lost.append(task_id)
            pending = lost
            if not pending:
                break
            logger.warning("bc_task version moved for %d task(s), attempt %d", len(lost), attempt + 1,
                           extra={"action": "flag_cas_lost"})  # fmt: skip
        conflicts += pending
    return FlagOutcome(
        changed=tuple(changed),
        unchanged=tuple(unchanged),
        conflicts=tuple(sorted(conflicts)),
        refused=tuple(refused),
        missing=tuple(missing),
    )


class _begin:
    """A transaction on an Engine, or the caller's own Connection used as it is."""

    def __init__(self, bind: Engine | Connection) -> None:
        self._bind = bind
        self._ctx: Any = None

    def __enter__(self) -> Connection:
        if isinstance(self._bind, Connection):
            return self._bind
        self._ctx = begin(self._bind)
        return self._ctx.__enter__()  # type: ignore[no-any-return]

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
            self._ctx = None


def set_migrated(bind: Engine | Connection, task_ids: Targets, value: bool) -> FlagOutcome:
    """The documented migration flag: `bc_task.migrated = value` (1: migrated; the batch
    center then skips the row after its business's cutover). Rows already at `value`
    are left alone (no version bump), so a re-run writes nothing."""
    flag = 1 if value else 0
    return _write(
        bind,
        task_ids,
        lambda row: "done" if row.migrated == flag else "write",
        lambda row: {"migrated": flag},
    )


def pause_tasks(bind: Engine | Connection, task_ids: Targets) -> FlagOutcome:
    """The documented switch-off: WAITING tasks -> 5 PAUSED. A RUNNING task is refused
    (reported in `refused`: the batch center owns it until its run ends; retry later),
    as are finished ones; already PAUSED ones are unchanged."""

    def decide(row: _Seen) -> str:
        if row.status == TaskStatus.PAUSED:
            return "done"
        return "write" if row.status == TaskStatus.WAITING else "refuse"

    return _write(bind, task_ids, decide, lambda row: {"status": int(TaskStatus.PAUSED)})


def pause_together(bind: Engine, task_ids: Collection[int]) -> FlagOutcome:
    """The documented switch-off of a set of tasks at one instant, or of none of them.

    One transaction reads the rows FOR UPDATE (a claim by the center of one of them waits
    the few ms this takes, then loses its version check) and pauses the WAITING ones only
    when none is RUNNING. With one RUNNING (the center owns it until its callback returns)
    nothing is written and it is listed in `refused`: pausing the others meanwhile left
    them firing nowhere until that run ended, which in a shadow cutover (the new side still
    invokes nothing) was minutes. Finished tasks fire no more: they count as `unchanged`,
    as already PAUSED ones do."""
    ids = sorted({int(t) for t in task_ids})
    with begin(bind) as conn:
        seen: dict[int, _Seen] = {}
        for chunk in _chunks(ids):
            seen.update(_read(conn, chunk, lock=True))
        running = tuple(i for i in ids if i in seen and seen[i].status == TaskStatus.RUNNING)
        missing = tuple(i for i in ids if i not in seen)
        waiting = [seen[i] for i in ids if i in seen and seen[i].status == TaskStatus.WAITING]
        unchanged = tuple(
            i for i in ids if i in seen and seen[i].status not in (TaskStatus.RUNNING, TaskStatus.WAITING)
        )
        if running:
            conn.rollback()
            return FlagOutcome(unchanged=unchanged, refused=running, missing=missing)
        lost = tuple(row.task_id for row in waiting if not _cas(conn, row, {"status": int(TaskStatus.PAUSED)}))
        if lost:  # a backend without row locks (SQLite) let a write in: all or none
            conn.rollback()
            return FlagOutcome(unchanged=unchanged, conflicts=lost, missing=missing)
    return FlagOutcome(changed=tuple(r.task_id for r in waiting), unchanged=unchanged, missing=missing)


def resume_tasks(
    bind: Engine | Connection,
    fire_times: Mapping[int, datetime],
    *,
    tz: str = DEFAULT_ZONE,
    expected_versions: Mapping[int, int] | None = None,
) -> FlagOutcome:
    """The documented re-enable (rollback): PAUSED tasks -> 0 WAITING with `fire_time`
    set to when each is next due (aware datetimes, stored as `tz` wall-clock time)."""
    zone = LegacyTimeZone(tz)
    # whole seconds: fire_time is a DATETIME without fractions
    walls = {int(k): zone.to_wall(v).replace(microsecond=0) for k, v in fire_times.items()}

    def decide(row: _Seen) -> str:
        if row.status == TaskStatus.WAITING and row.fire_time == walls[row.task_id]:
            return "done"
        return "write" if row.status == TaskStatus.PAUSED else "refuse"

    targets: Targets = {k: expected_versions[k] for k in walls} if expected_versions is not None else list(walls)
    return _write(
        bind, targets, decide, lambda row: {"status": int(TaskStatus.WAITING), "fire_time": walls[row.task_id]}
    )


def set_business_enabled(bind: Engine | Connection, biz_codes: Collection[str], enabled: bool) -> tuple[str, ...]:
    """The documented business switch: `bc_biz.enabled` (0: the batch center skips all of
    the business's tasks). `bc_biz` has no version column: a plain conditional update.
    Returns the codes changed."""
    value = 1 if enabled else 0
    stmt = (
        update(_BIZ)
        .where(_BIZ.c.biz_code == bindparam("code"))
        .where(_BIZ.c.enabled != bindparam("value"))
        .values(enabled=bindparam("new_value"))
    )
    changed: list[str] = []
    with _begin(bind) as conn:
        for code in sorted(set(biz_codes)):
            if conn.execute(stmt, {"code": code, "value": value, "new_value": value}).rowcount == 1:
                changed.append(code)
    return tuple(changed)
