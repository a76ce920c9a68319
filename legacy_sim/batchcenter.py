"""A simulator of the in-house batch center's polling loop, on a driven clock.

It runs against a real batch-center database (`readers.legacy_ddl.create_legacy_schema`;
SQLite or MariaDB) and follows its contract (shared/legacy/batch_center.md), minus the
HTTP callbacks, whose results come from `outcome`:

- **poll** every `poll_interval_ms`, one transaction: WAITING tasks with `fire_time <=
  now` (naive Asia/Shanghai wall time) of enabled businesses, in `idx_due` order
  (`fire_time`, then `priority` 1 first for ties, then id), at most `batch_size`. Skipped
  (left untouched): PAUSED or finished tasks (not WAITING), tasks of a business with
  `bc_biz.enabled = 0` or with no `bc_biz` row, unknown task types, and `migrated = 1`
  rows of businesses in `cut_over_businesses` (the contract: "skips rows with migrated
  = 1 after cutover of their business").
- **misfire**: a task more than `misfire_threshold_ms` past its `fire_time` when polled
  (the center was down or stalled; `outage()` / `down_until` model downtime) follows its
  `misfire_policy`: 1 FIRE_ONCE_NOW fires once (its log rows keep the missed
  `fire_time` as `scheduled_time`) and then moves to the first occurrence after now;
  2 SKIP fires nothing and moves `fire_time` to the first occurrence after now (a DELAY
  task that is skipped becomes CANCELLED: it never ran). Unknown policies act as 1.
- **claim**: `status = RUNNING, version + 1 WHERE id AND version = seen AND status =
  WAITING`; a lost race skips the task this poll.
- **callbacks**: every shard (`shard_params` elements, else `shard_total`) is called at
  once; each attempt is a `bc_task_exec_log` row inserted RUNNING with `start_time`, and
  updated with `end_time` and SUCCESS / FAIL / TIMEOUT (+ `http_status`, `error_msg`) when
  the callback returns (a duration past `callback_timeout_ms`, or no answer at all,
  is a TIMEOUT at the timeout). A failed or timed-out attempt with retries left is
  retried `retry_delay_ms` after it ended (`attempt` 1, 2, ...). A TRIGGER_FAIL outcome is
  an attempt never dispatched (`start_time` NULL, status 0, not retried).
- **completion**, when the last shard's chain ends, with an optimistic update (re-read
  and re-applied when someone else bumped `version` meanwhile, e.g. a migrated flag):
  DELAY -> SUCCESS (every shard ended in SUCCESS) or FAILED; CRON / FIXED_RATE -> back to
  WAITING with `fire_time` at the next occurrence (CRON: Quartz in `tz` after the fire
  time; FIXED_RATE: fire time + interval, anchored), or SUCCESS when there is no next
  occurrence at or before `end_time`. A task found not RUNNING any more is left alone.

Deterministic: events at one instant go callback ends / retry starts, then the poll.
Polls that cannot find anything (nothing eligible is due before the next event) are
skipped arithmetically (`skip_idle=False` runs them all; same rows); each `step`
re-polls on the normal cadence first, since other code may have written between steps.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, func, or_, select, update

from dbkit.connections import begin
from legacy_sim._timeline import EventQueue, catch_up, first_tick_at_or_after, from_ms, to_ms
from legacy_sim.outcomes import Outcome, Result, coerce, succeed
from readers.legacy_ddl.tables import batch_center_metadata
from readers.legacy_ddl.values import parse_int, raw_text
from readers.timezones import LegacyTimeError, LegacyTimeZone
from scheduler_core.cron import CronExpression, CronSyntaxError
from scheduler_core.ports import Clock

logger = logging.getLogger(__name__)

DELAY, CRON, FIXED_RATE = 1, 2, 3
WAITING, RUNNING, SUCCESS, FAILED, CANCELLED, PAUSED = range(6)
LOG_RUNNING, LOG_SUCCESS, LOG_FAIL, LOG_TIMEOUT = range(4)
FIRE_ONCE_NOW, SKIP = 1, 2
_WORK, _POLL = 0, 1  # event ranks at one instant
_LOG_STATUS = {Result.SUCCESS: LOG_SUCCESS, Result.FAIL: LOG_FAIL, Result.TIMEOUT: LOG_TIMEOUT}


@dataclass(frozen=True, slots=True)
class BcTaskView:
    """A task as the poll read it (what `outcome` is given)."""

    id: int
    biz_code: str
    task_key: str
    task_type: int
    cron_expr: str | None
    interval_sec: int | None
    fire_time: datetime  # aware UTC
    end_time: datetime | None
    callback_url: str | None
    http_method: str | None
    callback_timeout_ms: int
    payload: Any
    shard_total: int
    shard_params: list[Any] | None
    priority: int
    max_retry: int
    misfire_policy: int
    migrated: int
    version: int

    @property
    def shards(self) -> int:
        count = len(self.shard_params) if self.shard_params is not None else self.shard_total
        return max(1, count)


class BcFired(NamedTuple):
    """One fire of one shard (first attempts only): the truth for tests.
    `scheduled_time` is aware UTC: the `fire_time` the run belongs to."""

    task_id: int
    scheduled_time: datetime
    shard: int


@dataclass(frozen=True, slots=True)
class BcAttempt:
    """One `bc_task_exec_log` row the simulator wrote."""

    log_id: int
    task_id: int
    biz_code: str
    shard: int
    attempt: int
    scheduled_time: datetime
    start_ms: int | None  # None: never dispatched
    misfire: bool  # a FIRE_ONCE_NOW run for a missed fire_time
    result: Result


@dataclass(slots=True)
class _Run:
    task: BcTaskView
    scheduled_ms: int
    polled_ms: int
    misfire: bool
    open_chains: int
    failed: int = 0
    logs: list[int] = field(default_factory=list)
    ended: set[tuple[int, int]] = field(default_factory=set)  # (shard, attempt) chains counted ended


class BatchCenterSimulator:
    """One batch-center instance against `engine`, driven by `step(until)`."""

    def __init__(
        self,
        engine: Engine,
        *,
        clock: Clock,
        tz: str = "Asia/Shanghai",
        outcome: Outcome | None = None,
        poll_interval_ms: int = 1000,
        batch_size: int = 100,
        misfire_threshold_ms: int = 60_000,
        retry_delay_ms: int = 5000,
        worker_host: str = "bc-sim-1",
        cut_over_businesses: Collection[str] = (),
        down_until: datetime | None = None,
        skip_idle: bool = True,
        history: bool = True,
    ) -> None:
        """`history`: keep what it fired in memory (`fired`, `attempts`, `skipped`), as the
        tests read it; False for a long run (the chaos soak), which reads the database's
        log as a real batch center's is read, and whose memory stays flat as the real one's."""
        if poll_interval_ms <= 0 or batch_size <= 0:
            raise ValueError("poll_interval_ms and batch_size must be positive")
        self.engine = engine
        self.clock = clock
        self.zone = LegacyTimeZone(tz)
        self.outcome: Outcome = outcome or succeed()
        self.poll_interval_ms = poll_interval_ms
        self.batch_size = batch_size
        self.misfire_threshold_ms = misfire_threshold_ms
        self.retry_delay_ms = retry_delay_ms
        self.worker_host = worker_host
        self.skip_idle = skip_idle  # False: run every poll, even those that cannot find anything
        # businesses whose cutover is done: their migrated = 1 rows are skipped
        self.cut_over_businesses: set[str] = set(cut_over_businesses)

        md = batch_center_metadata()
        self._task = md.tables["bc_task"]
        self._biz = md.tables["bc_biz"]
        self._log = md.tables["bc_task_exec_log"]

        self.history = history
        self.fired: list[BcFired] = []
        self.attempts: list[BcAttempt] = []
        self.skipped: list[tuple[int, datetime]] = []  # (task id, missed fire_time): SKIP misfires
        self.conflicts = 0  # optimistic updates that lost to someone else's version bump
        self.errors: list[tuple[int, int, str]] = []  # (ms, task id, message)
        self.polls = 0

        start = clock.now_ms()
        self._pos = start - 1
        self._events = EventQueue()
        self._poll_anchor = start
        self._next_poll: int | None = start
        self._last_poll = start - 1
        self._suspended = False
        self._crons: dict[str, CronExpression | CronSyntaxError] = {}
        if down_until is not None:
            self.outage(down_until)

    # -- driving ------------------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        return self._pos

    def step(self, until: datetime) -> list[BcFired]:
        """Run the center up to and including `until` (aware); returns this step's fires.
        Flags others set between steps (paused tasks, `migrated`, `bc_biz.enabled`,
        `cut_over_businesses`, resumed tasks with a new `fire_time`) apply from the next
        poll on."""
        until_ms = to_ms(until)
        first = len(self.fired)
        if until_ms <= self._pos:
            return []
        if not self._suspended:
            self._repoll(self._pos + 1)
        while (nxt := self._next_event()) is not None and nxt[0] <= until_ms:
            at, rank = nxt
            catch_up(self.clock, at)
            self._pos = at
            if rank == _POLL:
                self._poll(at)
            else:
                _, payload = self._events.pop()
                kind, *args = payload
                try:
                    if kind == "end":
                        self._end(at, *args)
                    else:
                        self._start_retry(at, *args)
                except Exception:
                    # the database went away (a restart): the worker keeps what it has to
                    # write and writes it at the next poll, as a center's worker would; a
                    # dropped event left its task RUNNING for good (seen in the chaos soak)
                    self._events.push(at + self.poll_interval_ms, _WORK, payload)
                    raise
        catch_up(self.clock, until_ms)
        self._pos = until_ms
        return self.fired[first:]

    def outage(self, until: datetime) -> None:
        """The center polls nothing from now until `until`; callbacks already running
        finish (their workers drain) and their tasks complete. The first poll is at
        `until`: tasks that became due meanwhile follow their misfire policy."""
        until_ms = to_ms(until)
        if until_ms <= self._pos:
            return
        self._suspended = True
        try:
            self.step(until)
        finally:
            self._suspended = False
        self._pos = until_ms - 1
        self._poll_anchor = until_ms
        self._last_poll = until_ms - 1
        self._next_poll = until_ms

    def _next_event(self) -> tuple[int, int] | None:
        options: list[tuple[int, int]] = []
        if (head := self._events.peek()) is not None:
            options.append(head)
        if self._next_poll is not None and not self._suspended:
            options.append((self._next_poll, _POLL))
        return min(options) if options else None

    def _repoll(self, at: int) -> None:
        """Poll on the normal cadence from `at` on (the tables may have changed)."""
        tick = first_tick_at_or_after(self._poll_anchor, self.poll_interval_ms, max(at, self._last_poll + 1))
        self._next_poll = tick if self._next_poll is None else min(self._next_poll, tick)

    # -- poll ---------------------------------------------------------------------------

    def _eligible(self, stmt: Any) -> Any:
        task, biz = self._task, self._biz
        stmt = stmt.where(task.c.status == WAITING, biz.c.enabled != 0, task.c.task_type.in_([DELAY, CRON, FIXED_RATE]))
        if self.cut_over_businesses:
            stmt = stmt.where(or_(task.c.migrated != 1, task.c.biz_code.not_in(sorted(self.cut_over_businesses))))
        return stmt

    def _poll(self, t: int) -> None:
        self.polls += 1
        self._last_poll = t
        task, biz = self._task, self._biz
        joined = task.join(biz, task.c.biz_code == biz.c.biz_code)
        wall_now = self.zone.to_wall(from_ms(t))
        min_due: Any = None
        conflicts = self.conflicts
        with begin(self.engine) as conn:
            rows = conn.execute(
                self._eligible(select(task).select_from(joined))
                .where(task.c.fire_time <= wall_now)
                .order_by(task.c.fire_time, task.c.priority, task.c.id)
                .limit(self.batch_size)
            ).mappings().all()  # fmt: skip
            for row in rows:
                self._take(conn, self._view(row), t)
            # a full batch, or a claim lost to another writer: keep polling on the cadence
            full = len(rows) >= self.batch_size or self.conflicts != conflicts
            if not full and self.skip_idle:
                min_due = conn.execute(
                    self._eligible(select(func.min(task.c.fire_time)).select_from(joined)).where(
                        task.c.fire_time > wall_now
                    )
                ).scalar()
        if full or not self.skip_idle:
            self._next_poll = t + self.poll_interval_ms
        elif min_due is None:
            self._next_poll = None
        else:
            try:
                due_ms = to_ms(self.zone.to_utc(min_due))
            except LegacyTimeError:  # a fire_time past 2100: never due in practice
                self._next_poll = None
                return
            self._next_poll = first_tick_at_or_after(self._poll_anchor, self.poll_interval_ms, max(due_ms, t + 1))

    def _take(self, conn: Connection, task: BcTaskView, t: int) -> None:
        fire_ms = to_ms(task.fire_time)
        if task.task_type != DELAY and task.end_time is not None and task.fire_time > task.end_time:
            self._cas(conn, task, {"status": SUCCESS})
            return
        misfire = t - fire_ms > self.misfire_threshold_ms
        if misfire and task.misfire_policy == SKIP:
            if task.task_type == DELAY:
                values: dict[str, Any] = {"status": CANCELLED}
            else:
                values = self._next_values(task, fire_ms, after_ms=t, t=t)
            if self._cas(conn, task, values) and self.history:
                self.skipped.append((task.id, task.fire_time))
            return
        if not self._cas(conn, task, {"status": RUNNING}, require_status=WAITING):
            return
        run = _Run(task, fire_ms, t, misfire, open_chains=task.shards)
        for shard in range(task.shards):
            self._start(conn, run, shard, 0, t)

    def _cas(
        self, conn: Connection, task: BcTaskView, values: Mapping[str, Any], *, require_status: int | None = None
    ) -> bool:
        stmt = update(self._task).where(self._task.c.id == task.id, self._task.c.version == task.version)
        if require_status is not None:
            stmt = stmt.where(self._task.c.status == require_status)
        won = conn.execute(stmt.values(version=self._task.c.version + 1, **values)).rowcount == 1
        if not won:
            self.conflicts += 1
        return won

    # -- callbacks ----------------------------------------------------------------------

    def _start(self, conn: Connection, run: _Run, shard: int, attempt: int, s: int) -> None:
        task = run.task
        scheduled = from_ms(run.scheduled_ms)
        result, duration = coerce(self.outcome(task, scheduled, shard))
        row: dict[str, Any] = {
            "task_id": task.id, "biz_code": task.biz_code, "shard_index": shard, "attempt": attempt,
            "scheduled_time": self.zone.to_wall(scheduled), "status": LOG_RUNNING, "worker_host": self.worker_host,
        }  # fmt: skip
        if result is Result.TRIGGER_FAIL:
            row.update(start_time=None, error_msg="worker pool exhausted: not dispatched")
            end, status = s, None
        else:
            row["start_time"] = self.zone.to_wall(from_ms(s))
            timeout = task.callback_timeout_ms
            if result is Result.NO_CALLBACK or (timeout > 0 and duration > timeout):
                end, status = s + timeout, LOG_TIMEOUT
            else:
                end, status = s + duration, _LOG_STATUS[result]
        log_id = int(conn.execute(self._log.insert().values(**row)).inserted_primary_key[0])  # type: ignore[index]
        run.logs.append(log_id)
        if self.history:
            self.attempts.append(
                BcAttempt(log_id, task.id, task.biz_code, shard, attempt, scheduled,
                          None if status is None else s, run.misfire, result)
            )  # fmt: skip
            if attempt == 0:
                self.fired.append(BcFired(task.id, scheduled, shard))
        self._events.push(end, _WORK, ("end", run, shard, attempt, log_id, status))

    def _end(self, at: int, run: _Run, shard: int, attempt: int, log_id: int, status: int | None) -> None:
        task = run.task
        if status is not None:
            http, error = {
                LOG_SUCCESS: (200, None),
                LOG_FAIL: (500, "callback returned 500: simulated handler failure"),
                LOG_TIMEOUT: (None, f"callback timed out after {task.callback_timeout_ms} ms"),
            }[status]
            with begin(self.engine) as conn:
                conn.execute(
                    update(self._log).where(self._log.c.id == log_id)
                    .values(end_time=self.zone.to_wall(from_ms(at)), status=status, http_status=http, error_msg=error)
                )  # fmt: skip
            if status != LOG_SUCCESS and attempt < task.max_retry:
                self._events.push(at + self.retry_delay_ms, _WORK, ("start", run, shard, attempt + 1))
                return
        if (shard, attempt) not in run.ended:  # once, however often a failed write is retried
            run.ended.add((shard, attempt))
            if status != LOG_SUCCESS:
                run.failed += 1
            run.open_chains -= 1
        if run.open_chains == 0:
            self._complete(run, at)

    def _start_retry(self, at: int, run: _Run, shard: int, attempt: int) -> None:
        with begin(self.engine) as conn:
            self._start(conn, run, shard, attempt, at)

    def _complete(self, run: _Run, at: int) -> None:
        task = self._task
        with begin(self.engine) as conn:
            for _ in range(3):
                row = conn.execute(select(task).where(task.c.id == run.task.id)).mappings().first()
                if row is None or parse_int(row["status"]) != RUNNING:
                    logger.info("bc sim: task %d changed under its run; completion not applied", run.task.id)
                    break
                fresh = self._view(row)
                if fresh.task_type == DELAY:
                    values: dict[str, Any] = {"status": SUCCESS if run.failed == 0 else FAILED}
                else:
                    after = run.polled_ms if run.misfire else run.scheduled_ms
                    values = self._next_values(fresh, run.scheduled_ms, after_ms=after, t=at)
                    values.setdefault("status", WAITING)
                if self._cas(conn, fresh, values):
                    break
        self._repoll(at)

    def _next_values(self, task: BcTaskView, fire_ms: int, *, after_ms: int, t: int) -> dict[str, Any]:
        """`fire_time` of the next occurrence strictly after `after_ms` (SUCCESS when
        there is none by `end_time`; FAILED when the schedule cannot be computed)."""
        try:
            nxt = self.next_occurrence(task, fire_ms, after_ms)
        except (CronSyntaxError, ValueError) as exc:
            self.errors.append((t, task.id, f"cannot compute the next fire time: {exc}"))
            return {"status": FAILED}
        if nxt is None or (task.end_time is not None and nxt > to_ms(task.end_time)):
            return {"status": SUCCESS}
        return {"status": WAITING, "fire_time": self.zone.to_wall(from_ms(nxt))}

    def next_occurrence(self, task: BcTaskView, fire_ms: int, after_ms: int) -> int | None:
        """CRON: Quartz next after `after_ms` in `tz`. FIXED_RATE: the first
        `fire_ms + k * interval` (k >= 1) after `after_ms` (anchored: no drift)."""
        if task.task_type == CRON:
            at = self._cron(task.cron_expr or "").next_after(from_ms(after_ms))
            return None if at is None else to_ms(at)
        if task.task_type == FIXED_RATE:
            if task.interval_sec is None or task.interval_sec <= 0:
                raise ValueError(f"interval_sec must be > 0, got {task.interval_sec!r}")
            step = task.interval_sec * 1000
            k = max(1, (after_ms - fire_ms) // step + 1)
            return fire_ms + k * step
        return None

    def _cron(self, expr: str) -> CronExpression:
        cached = self._crons.get(expr)
        if cached is None:
            try:
                cached = CronExpression(expr, self.zone.zone)
            except CronSyntaxError as exc:
                cached = exc
            self._crons[expr] = cached
        if isinstance(cached, CronSyntaxError):
            raise cached
        return cached

    def _view(self, row: Mapping[Any, Any]) -> BcTaskView:  # a dict or a RowMapping
        shard_params: list[Any] | None = None
        raw = raw_text(row.get("shard_params"))[0]
        if raw:
            try:
                parsed = json.loads(raw)
            except ValueError:
                parsed = None
            shard_params = parsed if isinstance(parsed, list) else None
        end = row.get("end_time")
        return BcTaskView(
            id=int(row["id"]),
            biz_code=raw_text(row["biz_code"])[0] or "",
            task_key=raw_text(row["task_key"])[0] or "",
            task_type=parse_int(row["task_type"]) or 0,
            cron_expr=raw_text(row.get("cron_expr"))[0],
            interval_sec=parse_int(row["interval_sec"]) if row.get("interval_sec") is not None else None,
            fire_time=self.zone.to_utc(row["fire_time"]),
            end_time=None if end is None else self.zone.to_utc(end),
            callback_url=raw_text(row.get("callback_url"))[0],
            http_method=raw_text(row.get("http_method"))[0],
            callback_timeout_ms=parse_int(row.get("callback_timeout_ms")) or 0,
            payload=row.get("payload"),
            shard_total=parse_int(row.get("shard_total")) or 1,
            shard_params=shard_params,
            priority=parse_int(row.get("priority")) or 5,
            max_retry=max(0, parse_int(row.get("max_retry")) or 0),
            misfire_policy=parse_int(row.get("misfire_policy")) or FIRE_ONCE_NOW,
            migrated=parse_int(row.get("migrated")) or 0,
            version=parse_int(row["version"]) or 0,
        )
