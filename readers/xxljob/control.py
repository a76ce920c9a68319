"""The documented xxl-job switch for cutover and rollback: `xxl_job_info.trigger_status`.

Readers never write to legacy tables. The exceptions are the documented flags, and
these are all of them: here, a job's `trigger_status` (with `trigger_next_time` when a
job is switched back on); in `readers/batchcenter/flag.py`, the batch center's
`migrated` flag, task pause / re-enable and `bc_biz.enabled`. Every statement uses bound
parameters and touches only the named columns of the named rows.

Hazards the caller must respect (notes §2.3, §6.6):

- Stopping is not instant: a job already pre-read into the admin's time ring still
  fires once, up to ~5 s (plus ring lag) after the stop. Hand over only at a nominal
  time after stop + 5 s, or let the comparator match that tail.
- Up to 2.4.2 a running scan can overwrite a stop (its UPDATE is unconditional). Stop,
  wait at least two scan periods, then check with `read_trigger_state` and repeat.
- Disabling keeps `trigger_next_time` (xxl-job's own stop zeroes it): it is the
  handover point the new path starts from.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection, Engine, bindparam, column, inspect, select, table, update

from dbkit.connections import begin, connect
from readers.legacy_ddl.values import parse_int

_CHUNK = 500
_INFO = table(
    "xxl_job_info",
    column("id"),
    column("trigger_status"),
    column("trigger_next_time"),
    column("trigger_last_time"),
    column("schedule_type"),
)


@dataclass(frozen=True, slots=True)
class XxlTriggerState:
    job_id: int
    trigger_status: int
    trigger_next_time_ms: int
    trigger_last_time_ms: int


def _chunks(ids: Sequence[int]) -> Iterator[Sequence[int]]:
    for i in range(0, len(ids), _CHUNK):
        yield ids[i : i + _CHUNK]


def _next_times(job_ids: Collection[int], next_time_ms: int | Mapping[int, int] | None) -> dict[int, int]:
    if next_time_ms is None:
        raise ValueError("enabling a job needs next_time_ms: xxl-job fires a running job at trigger_next_time")
    if isinstance(next_time_ms, Mapping):
        missing = sorted(set(job_ids) - next_time_ms.keys())
        if missing:
            raise ValueError(f"no next_time_ms for job(s) {missing[:10]}")
        times = {j: int(next_time_ms[j]) for j in job_ids}
    else:
        times = dict.fromkeys(job_ids, int(next_time_ms))
    bad = [j for j, ms in times.items() if ms <= 0]
    if bad:
        raise ValueError(f"next_time_ms must be a positive epoch ms, got one for job(s) {bad[:10]}")
    return times


_LOCK = table("xxl_job_lock", column("lock_name"))


def take_schedule_lock(conn: Connection) -> bool:
    """Take the admin's own `schedule_lock` row (FOR UPDATE) in the caller's transaction,
    as every scan of the admin does for its whole read-ring-update: a stop made under it
    lands between two scans, never inside one. (Inside one, the scan's guarded update of
    the next time, `... AND trigger_status = 1`, changes nothing while its ring still
    holds the fire at that time: the next time read afterwards is an occurrence legacy
    still fires.) False where the table does not exist (no lock to take)."""
    if not inspect(conn).has_table("xxl_job_lock"):
        return False
    conn.execute(select(_LOCK.c.lock_name).where(_LOCK.c.lock_name == "schedule_lock").with_for_update())
    return True


def set_trigger_status(
    bind: Engine | Connection,
    job_ids: Collection[int],
    status: int,
    next_time_ms: int | Mapping[int, int] | None = None,
) -> tuple[int, ...]:
    """Switch legacy jobs off (status 0) or on (status 1); returns the ids changed.

    Off: `trigger_status = 0` where it is not 0 already; nothing else changes. On:
    `trigger_status = 1, trigger_next_time = <ms>` (one value for all, or per job id),
    skipping jobs already running and, where the lineage has schedule types, NONE jobs
    (xxl-job refuses to start those)."""
    if status not in (0, 1):
        raise ValueError(f"trigger_status is 0 (stopped) or 1 (running), got {status}")
    ids = sorted({int(j) for j in job_ids})
    if not ids:
        return ()
    if isinstance(bind, Engine):
        with begin(bind) as conn:
            return _set(conn, ids, status, next_time_ms)
    return _set(bind, ids, status, next_time_ms)


def _set(
    conn: Connection, ids: list[int], status: int, next_time_ms: int | Mapping[int, int] | None
) -> tuple[int, ...]:
    if status == 0:
        return _disable(conn, ids)
    has_types = any(c["name"] == "schedule_type" for c in inspect(conn).get_columns("xxl_job_info"))
    return _enable(conn, _next_times(ids, next_time_ms), has_types)


def _disable(conn: Connection, ids: list[int]) -> tuple[int, ...]:
    changed: list[int] = []
    for chunk in _chunks(ids):
        pending = [s.job_id for s in _states(conn, chunk) if s.trigger_status != 0]
        if pending:
            stmt = (
                update(_INFO)
                .where(_INFO.c.id.in_(bindparam("ids", expanding=True)))
                .where(_INFO.c.trigger_status != 0)
                .values(trigger_status=0)
            )
            conn.execute(stmt, {"ids": pending})
            changed += pending
    return tuple(changed)


def _enable(conn: Connection, times: dict[int, int], has_types: bool) -> tuple[int, ...]:
    stmt = (
        update(_INFO)
        .where(_INFO.c.id == bindparam("job_id"))
        .where(_INFO.c.trigger_status != 1)
        .values(trigger_status=1, trigger_next_time=bindparam("next_ms"))
    )
    if has_types:
        stmt = stmt.where(_INFO.c.schedule_type != "NONE")
    changed: list[int] = []
    for job_id, ms in times.items():
        if conn.execute(stmt, {"job_id": job_id, "next_ms": ms}).rowcount == 1:
            changed.append(job_id)
    return tuple(changed)


def _states(conn: Connection, ids: Sequence[int]) -> list[XxlTriggerState]:
    stmt = select(_INFO.c.id, _INFO.c.trigger_status, _INFO.c.trigger_next_time, _INFO.c.trigger_last_time).where(
        _INFO.c.id.in_(bindparam("ids", expanding=True))
    )
    return [
        XxlTriggerState(
            int(r.id), parse_int(r.trigger_status) or 0, parse_int(r.trigger_next_time) or 0,
            parse_int(r.trigger_last_time) or 0,
        )
        for r in conn.execute(stmt, {"ids": list(ids)})
    ]  # fmt: skip


def read_trigger_state(bind: Engine | Connection, job_ids: Collection[int]) -> dict[int, XxlTriggerState]:
    """The switch as it stands (to re-check a stop on <= 2.4.2 after two scan periods)."""
    ids = sorted({int(j) for j in job_ids})
    out: dict[int, XxlTriggerState] = {}
    if isinstance(bind, Engine):
        with connect(bind) as conn:
            for chunk in _chunks(ids):
                out.update((s.job_id, s) for s in _states(conn, chunk))
    else:
        for chunk in _chunks(ids):
            out.update((s.job_id, s) for s in _states(bind, chunk))
    return out
