"""The legacy switches behind `LegacyControl`, over the documented flags in `readers`.

xxl-job: `trigger_status = 0`; the admin pre-reads up to 5 s ahead, and on <= 2.4.2 a
running scan can overwrite a stop, so settling waits past the pre-read window, re-reads
the switch, and stops again if a scan undid it. The settled `trigger_next_time` is the
first occurrence the legacy side will not fire: the handover time. A stop that does not
settle within the re-checks is undone (the jobs it switched off run on at their own next
time) and refused, so a cutover never ends half-way with the legacy jobs off.

Batch center: tasks are paused (status 5, optimistic version) all in one transaction; a
RUNNING task is its own until its callback returns, so settling waits for such runs to
end and pauses them all at once (never some first); its settled `fire_time` is the
handover time (for a finished one-shot there is none).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

from sqlalchemy import column, select, table
from sqlalchemy.engine import Engine

from dbkit.connections import begin, connect
from migrator.ports import LegacyControl, Settled
from readers.batchcenter import flag
from readers.batchcenter.mapping import TaskStatus
from readers.legacy_ddl.tables import WallTime
from readers.timezones import LegacyTimeZone
from readers.xxljob import control
from scheduler_core.ports import Clock
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)
PRE_READ = timedelta(seconds=5)


class XxlJobControl(LegacyControl):
    start_margin = PRE_READ + timedelta(seconds=1)

    def __init__(
        self, engine: Engine, clock: Clock, *, settle: timedelta = PRE_READ + timedelta(seconds=1), rechecks: int = 3
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.settle = settle
        self.rechecks = rechecks

    def close(self) -> None:
        # the pool's idle connections closed; the engine stays usable (a new pool)
        self.engine.dispose()

    def stop(self, keys: Sequence[str]) -> Settled:
        ids = [int(k) for k in keys]
        notes: list[str] = []
        switched_off = self._stop(ids)  # the jobs that were running
        for attempt in range(self.rechecks + 1):
            self.clock.sleep(self.settle.total_seconds())  # past the pre-read window
            states = control.read_trigger_state(self.engine, ids)
            undone = [j for j, s in states.items() if s.trigger_status != 0]
            if not undone:
                break
            # a scan on <= 2.4.2 wrote its own trigger_status back over our stop
            notes.append(f"stop of job(s) {undone[:10]} overwritten by a scan; stopping again (attempt {attempt + 1})")
            log.warning(notes[-1])
            self._stop(undone)
        else:
            # Not settled: do not leave the business half-switched (the legacy jobs off while
            # the cutover is abandoned and, after a shadow dual-run, nothing firing them for
            # real). Every job this stop switched off runs on at its own next time: the scans
            # have already fired everything before it, so nothing is missed or doubled.
            restored = self._restore(switched_off)
            raise RuntimeError(
                f"xxl-job jobs {undone[:10]} keep being switched back on by the admin's scan; the stop did not "
                f"settle after {self.rechecks + 1} re-stops, so the {len(restored)} job(s) it had switched off are "
                "left running on legacy at their own next time (a 2.4.2-or-older admin: upgrade it, or stop "
                "its scheduling while cutting over)"
            )
        return Settled(self.next_due(keys), tuple(notes))

    def _stop(self, ids: Sequence[int]) -> tuple[int, ...]:
        # under the admin's schedule lock: between two scans, never inside one
        with begin(self.engine) as conn:
            control.take_schedule_lock(conn)
            return control.set_trigger_status(conn, ids, 0)

    def _restore(self, ids: Sequence[int]) -> list[int]:
        states = control.read_trigger_state(self.engine, list(ids))
        nexts = {j: s.trigger_next_time_ms for j, s in states.items() if s.trigger_next_time_ms > 0}
        if not nexts:
            return []
        return list(control.set_trigger_status(self.engine, list(nexts), 1, next_time_ms=nexts))

    def next_due(self, keys: Sequence[str]) -> Mapping[str, datetime | None]:
        states = control.read_trigger_state(self.engine, [int(k) for k in keys])
        return {
            str(j): (from_ms(s.trigger_next_time_ms) if s.trigger_next_time_ms > 0 else None) for j, s in states.items()
        }

    def live(self, keys: Sequence[str]) -> set[str]:
        states = control.read_trigger_state(self.engine, [int(k) for k in keys])
        return {str(j) for j, s in states.items() if s.trigger_status == 1}

    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        if not next_due:
            return []
        changed = control.set_trigger_status(
            self.engine, [int(k) for k in next_due], 1, next_time_ms={int(k): to_ms(v) for k, v in next_due.items()}
        )
        return [str(j) for j in changed]


_LIVE = (0, 1)  # WAITING, RUNNING: the batch center still fires the task
_TASK = table("bc_task", column("id"), column("status"), column("fire_time", WallTime()), column("task_type"))


class BatchCenterControl(LegacyControl):
    # the center polls for due tasks; a task resumed a little ahead is taken on time
    start_margin = timedelta(seconds=2)

    def __init__(
        self,
        engine: Engine,
        clock: Clock,
        *,
        tz: str = "Asia/Shanghai",
        retry_every: timedelta = timedelta(milliseconds=100),
        patience: timedelta = timedelta(minutes=5),
    ) -> None:
        self.engine = engine
        self.clock = clock
        self.tz = tz
        self.zone = LegacyTimeZone(tz)
        self.retry_every = retry_every
        self.patience = patience

    def close(self) -> None:
        # the pool's idle connections closed; the engine stays usable (a new pool)
        self.engine.dispose()

    def stop(self, keys: Sequence[str]) -> Settled:
        """Pause every live task of `keys` at one instant, or none: while one is RUNNING
        (the center owns it until its callback returns) nothing is paused; the stop waits
        until those runs have ended and tries all of them again. Pausing the idle ones
        first left them firing nowhere until the last run ended, up to the patience, and
        in a shadow cutover the new side invokes nothing meanwhile. A stop still refused
        after `patience` raises with nothing paused (the cutover is refused, as xxl-job's
        is when its stop does not settle)."""
        ids = [int(k) for k in keys]
        notes: list[str] = []
        waited = 0.0
        before = self._statuses(ids)
        pausing = False  # an error inside pause_together may follow its commit
        try:
            while True:
                pausing = True
                out = flag.pause_together(self.engine, ids)
                pausing = False
                busy = [*out.refused, *out.conflicts]
                if not busy:
                    break
                if not notes:
                    notes.append(f"{len(busy)} task(s) running; the pause waited for their runs to end")
                # the next try comes as soon as the runs it waits on have ended: with many
                # busy tasks, a fixed wait would rarely find them all idle at once
                while busy and waited < self.patience.total_seconds():
                    self.clock.sleep(self.retry_every.total_seconds())
                    waited += self.retry_every.total_seconds()
                    now = self._statuses(busy)
                    busy = [t for t in busy if now.get(t) == TaskStatus.RUNNING]
                if busy:
                    raise RuntimeError(
                        f"batch-center tasks {busy[:10]} still running after {self.patience}; nothing was paused "
                        "(the stop is undone: every task runs on legacy as before)"
                    )
        except Exception as exc:
            # one transaction pauses them all, so an error means none, unless the database
            # went away between committing and answering: what it did paused is undone.
            # Only then: a task paused while the stop waited is an operator's, and stays so
            ours = [
                t
                for t, s in (self._safe_statuses(ids) if pausing else {}).items()
                if s == TaskStatus.PAUSED and before.get(t) == TaskStatus.WAITING
            ]
            if ours:
                exc.add_note(self._undo(ours))
            raise
        return Settled(self.next_due(keys), tuple(notes))

    def _undo(self, paused: Sequence[int]) -> str:
        """The tasks this stop paused, started again at their own fire time; says how it went."""
        if not paused:
            return "nothing was paused"
        try:
            due = {int(k): at for k, at in self.next_due([str(t) for t in paused]).items() if at is not None}
            out = flag.resume_tasks(self.engine, due, tz=self.tz)
        except Exception as exc:
            log.error("the %d task(s) a failed stop paused could not be started again: %s", len(paused), exc)
            return (
                f"the {len(paused)} task(s) it had paused ({sorted(paused)[:10]}) could NOT be started again "
                f"({exc}): run the cutover again, or roll back"
            )
        back = len(out.changed) + len(out.unchanged)
        return f"the {back} task(s) it had paused are running on legacy again (the stop is undone)"

    def next_due(self, keys: Sequence[str]) -> Mapping[str, datetime | None]:
        ids = [int(k) for k in keys]
        out: dict[str, datetime | None] = {}
        with connect(self.engine) as conn:
            for i in range(0, len(ids), 500):
                rows = conn.execute(
                    select(_TASK.c.id, _TASK.c.status, _TASK.c.fire_time).where(_TASK.c.id.in_(ids[i : i + 500]))
                )
                for tid, status, fire_time in rows:
                    finished = int(status) in (2, 3, 4)  # SUCCESS, FAILED, CANCELLED
                    out[str(tid)] = None if finished or fire_time is None else self.zone.to_utc(fire_time)
        return out

    def live(self, keys: Sequence[str]) -> set[str]:
        ids = [int(k) for k in keys]
        out: set[str] = set()
        with connect(self.engine) as conn:
            for i in range(0, len(ids), 500):
                out.update(
                    str(tid)
                    for tid, status in conn.execute(
                        select(_TASK.c.id, _TASK.c.status).where(_TASK.c.id.in_(ids[i : i + 500]))
                    )
                    if int(status) in _LIVE
                )
        return out

    def _statuses(self, ids: Sequence[int]) -> dict[int, int]:
        out: dict[int, int] = {}
        with connect(self.engine) as conn:
            for i in range(0, len(ids), 500):
                q = select(_TASK.c.id, _TASK.c.status).where(_TASK.c.id.in_(ids[i : i + 500]))
                out.update((int(t), int(s)) for t, s in conn.execute(q))
        return out

    def _safe_statuses(self, ids: Sequence[int]) -> dict[int, int]:
        try:
            return self._statuses(ids)
        except Exception as exc:
            log.error("after a failed stop the tasks' status could not be read back: %s", exc)
            return {}

    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        if not next_due:
            return []
        out = flag.resume_tasks(self.engine, {int(k): v for k, v in next_due.items()}, tz=self.tz)
        return [str(t) for t in (*out.changed, *out.unchanged)]
