"""A faithful simulator of one xxl-job admin's scheduling, on a driven clock.

It runs against a real xxl-job database (`readers.legacy_ddl.create_legacy_schema`, any
lineage; SQLite or MariaDB) and does what the admin's threads do there (notes
shared/notes/xxl-job.md §2), minus the HTTP calls, whose results come from `outcome`:

- **scan** (`JobScheduleHelper` scheduleThread, §2.2): one transaction per scan, taking
  the `schedule_lock` row FOR UPDATE, pre-reading `trigger_status = 1 AND
  trigger_next_time <= now + pre_read_ms ORDER BY id LIMIT pre_read_count`, then per row
  (a) misfire (`now > next + pre_read_ms`): FIRE_ONCE_NOW triggers now (type MISFIRE),
  DO_NOTHING does not; next = nextAfter(now);
  (b) late by at most pre_read_ms (`next < now`; 3.4+: `next <= now`): trigger now
  (CRON), next = nextAfter(now), and if that is within the window too, push it to the
  ring and chain once more;
  (c) within the window: push to the ring second `next // 1000`, next = nextAfter(next).
  Every refresh sets `trigger_last_time` to the old next; a schedule without a next
  time (NONE, unknown type, a cron that never fires again, a bad expression) stops the
  job (status 0, last 0, next 0; 2.4.2+ behaviour). Then one UPDATE per row, guarded by
  `AND trigger_status = 1` (2.5.0+) or unconditional (`stop_races_scan`, <= 2.4.2).
  Cadence: scans start on whole seconds; after a scan that read rows the next is 1 s
  later, after an empty one `pre_read_ms` later.
- **ring** (ringThread): every whole second pops its slot and the one before (3.4+: two
  before, de-duplicated) and triggers those jobs. The ring is in memory: a job stopped
  after it was pre-read still fires once (§2.3), and `outage()` loses the ring.
- **trigger** (`XxlJobTrigger`, §2.5, §2.11): reloads the job by id (no status check),
  reads the group's `address_list` (as the admin's registry thread last wrote it: the
  simulator rewrites it only in `refresh_registry()`, from what `register()` wrote),
  inserts an `xxl_job_log` row (trigger_time = the admin's wall time when it triggers,
  in `db_tz`, whole seconds), routes, "runs",
  and updates the row: trigger_code 200 (or 500: no address / TRIGGER_FAIL), the
  address, handler, effective param, `executor_sharding_param` "i/n" for
  SHARDING_BROADCAST only (one row per address, rank order), retries remaining, and an
  i18n `trigger_msg` the readers parse. A NULL `glue_updatetime` or an unknown route
  strategy throws in the real trigger after the insert: the row stays trigger_code 0.
- **route** (`ExecutorRouteStrategyEnum`): FIRST, LAST, ROUND (a per-job counter; the
  real one starts at a random 0..99, here at 0), RANDOM / CONSISTENT_HASH (stable per
  job here), LFU / LRU (as ROUND), FAILOVER (the first address whose beat answers),
  BUSYOVER (the first whose idle beat answers: the job's thread there is neither running
  nor queued), SHARDING_BROADCAST (one row per address). Addresses in
  `executors.down` answer nothing: FIRST & co. then fail the trigger (500).
- **executor** (`legacy_sim.xxl_executor`): one job thread per (address, job id). A run
  for a busy thread is queued (SERIAL_EXECUTION), refused (DISCARD_LATER: trigger_code
  500) or kills the running one (COVER_EARLY); a run whose handler (BEAN) or GLUE
  update time differs from the thread's kills the thread and its queue whatever the
  block strategy ("change job source or glue type, and terminate the old job thread.
  [job running, killed]"). `executor_timeout` bounds the run on its thread, not its
  wait in the queue.
- **callback** (§2.11): when the run ends on its thread, `handle_time`, `handle_code`
  200 / 500 / 502 (a run past `executor_timeout` seconds becomes 502 at the timeout);
  a killed run calls back 500 at once. A success triggers the job's `child_jobid` jobs
  (type PARENT; items that are not all digits, and the job itself, are skipped).
- **zones**: DATETIMEs (trigger_time, handle_time, update_time) are written in `db_tz`
  (the JDBC connection's serverTimezone), crons are evaluated in `cron_tz` (the JVM's
  default zone); `admin_tz` sets both (the default: equal).
- **stop / start** (`XxlJobServiceImpl`): `stop(id)` writes status 0, last 0, next 0;
  `start(id)` the first time after now + 5 s (out of the pre-read window).
- **fail monitor** (every 10 s, §2.8): claims failed rows (`alarm_status` 0 -> -1), re-
  triggers those with retries left (type RETRY, same param and sharding param, one retry
  fewer), appends the retry banner to the old row, sets `alarm_status` 2 (1: job gone).
- **lost monitor** (every 60 s): rows running for 10 min whose address is not in
  `xxl_job_registry` (and whose simulated executor is not still running) become 500.

Everything is deterministic: events at the same instant go callbacks, ring, scan, fail
monitor, lost monitor. Empty scans and idle monitor passes are skipped arithmetically
when the tables cannot have changed (only the simulator writes during a `step`), so a
month of virtual time costs a handful of queries per fire; `skip_idle=False` runs every
one of them instead (a test proves both give the same rows). With a real `SystemClock`
the simulator runs in real time (it sleeps until each event).
"""

from __future__ import annotations

import calendar
import logging
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine, RowMapping, and_, bindparam, func, not_, or_, select, update

from dbkit.connections import begin, connect
from legacy_sim._timeline import EventQueue, catch_up, first_tick_at_or_after, from_ms, to_ms
from legacy_sim.outcomes import Outcome, Result, coerce, succeed
from legacy_sim.xxl_executor import Finish, Run, XxlExecutors, handler_identity
from readers.legacy_ddl.tables import XxlJobLineage, xxljob_metadata
from readers.legacy_ddl.values import parse_int, raw_text
from readers.timezones import LegacyTimeZone
from scheduler_core.cron import CronExpression, CronSyntaxError, Dialect
from scheduler_core.ports import Clock

logger = logging.getLogger(__name__)

PRE_READ_MS = 5000
FAIL_MONITOR_MS = 10_000
LOST_MONITOR_MS = 60_000
LOST_AFTER_MS = 10 * 60_000
# log ids whose nominal time is kept for a retry (a failed run's, found by the fail monitor
# within seconds, or a lost one's after LOST_AFTER_MS): far more than that many minutes of
# logs, and bounded, so an admin that runs for hours keeps its memory flat
NOMINAL_KEPT = 100_000
DEAD_TIMEOUT_MS = 90_000  # Const.DEAD_TIMEOUT: three missed 30 s registration beats
STARTUP_SLEEP_MS = 5000  # scheduleThread: sleep(5000 - now % 1000) before the first scan
BROADCAST = "SHARDING_BROADCAST"
ROUTES = frozenset({
    "FIRST", "LAST", "ROUND", "RANDOM", "CONSISTENT_HASH", "LEAST_FREQUENTLY_USED",
    "LEAST_RECENTLY_USED", "FAILOVER", "BUSYOVER", BROADCAST,
})  # fmt: skip

# event ranks at one instant
_CALLBACK, _RING, _SCAN, _FAIL, _LOST = range(5)

_TITLES = {"CRON": "Cron触发", "MISFIRE": "调度过期补偿", "RETRY": "失败重试触发", "PARENT": "父任务触发"}
RETRY_BANNER = '<br><br><span style="color:#F39C12;" > >>>>>>>>>>>失败重试触发<<<<<<<<<<< </span><br>'
LOST_MSG = "任务结果丢失，标记失败"
_HANDLE = {Result.SUCCESS: 200, Result.FAIL: 500, Result.TIMEOUT: 502}
_HANDLE_MSG = {200: None, 500: "java.lang.RuntimeException: simulated handler failure", 502: "job execute timeout "}


@dataclass(frozen=True, slots=True)
class XxlJobView:
    """A job as the trigger loaded it (what `outcome` is given)."""

    id: int
    job_group: int
    name: str | None
    schedule_type: str
    schedule_conf: str | None
    misfire_strategy: str
    executor_route_strategy: str | None
    executor_handler: str | None
    executor_param: Any
    executor_block_strategy: str | None
    executor_timeout: int
    executor_fail_retry_count: int
    glue_type: str | None
    has_glue_updatetime: bool
    child_jobid: str | None
    trigger_status: int
    trigger_last_time: int
    trigger_next_time: int
    glue_updatetime_ms: int = 0  # the DATETIME read in the database zone (0: NULL)


class XxlFired(NamedTuple):
    """One scheduled fire of one shard: the truth for tests (retries and child-job
    triggers are in `attempts` only). `scheduled_ms` is the nominal time (epoch ms); for
    a MISFIRE fire, the missed `trigger_next_time` it compensates."""

    job_id: int
    scheduled_ms: int
    shard: int


@dataclass(frozen=True, slots=True)
class XxlAttempt:
    """One `xxl_job_log` row the simulator wrote."""

    log_id: int
    job_id: int
    trigger_type: str  # CRON (also FIX_RATE), MISFIRE, RETRY, PARENT
    scheduled_ms: int | None  # the nominal fire this attempt belongs to (None: PARENT)
    shard: int
    shard_total: int
    trigger_ms: int
    trigger_code: int  # 0: the trigger threw after the insert
    retries_left: int
    address: str | None
    result: Result | None  # the outcome's answer; None: no executor was reached

    @property
    def fired(self) -> XxlFired | None:
        if self.trigger_type in ("CRON", "MISFIRE") and self.scheduled_ms is not None:
            return XxlFired(self.job_id, self.scheduled_ms, self.shard)
        return None


@dataclass(frozen=True, slots=True)
class _Push:
    job_id: int
    nominal_ms: int


class XxlJobSimulator:
    """One xxl-job admin (scan thread, ring thread, trigger pool, callbacks, fail and lost
    monitors) against `engine`, driven by `step(until)`.

    `lineage` is the schema ('2.2', '2.4', '3.4', 'master') and picks the behaviour that
    comes with it: 2.2 has only `job_cron` and no misfire strategy (DO_NOTHING); 3.4 and
    master take `next <= now` as late, round FIX_RATE next times up to whole seconds and
    check three ring slots. `skip_month_end_L` models the lineage-B cron of 3.1-3.3
    (schema 2.4): a day-of-month with `L` skips months shorter than 31 days.
    `stop_races_scan` models <= 2.4.2: the scan's UPDATE is unconditional, and a stop
    written between steps to a job that the next scan pre-reads is overwritten back to
    running (each job's stop is lost at most once; a repeated stop sticks).
    """

    def __init__(
        self,
        engine: Engine,
        *,
        lineage: XxlJobLineage | str,
        clock: Clock,
        admin_tz: str = "Asia/Shanghai",
        db_tz: str | None = None,
        cron_tz: str | None = None,
        pre_read_ms: int = PRE_READ_MS,
        pre_read_count: int | None = None,
        skip_month_end_L: bool = False,  # noqa: N803 (the cron letter)
        stop_races_scan: bool = False,
        outcome: Outcome | None = None,
        admin_address: str = "10.255.0.1",
        down_until: datetime | None = None,
        skip_idle: bool = True,
        history: bool = True,
    ) -> None:
        """`history`: keep what it fired in memory (`fired`, `attempts`), as the tests read
        it; False for a long run (the chaos soak), which reads the `xxl_job_log` as a real
        admin's is read, and whose memory stays flat as the real admin's."""
        self.engine = engine
        self.lineage = XxlJobLineage(lineage)
        self.history = history
        if pre_read_ms <= 0 or pre_read_ms % 1000:
            raise ValueError("pre_read_ms must be a positive whole number of seconds")
        if skip_month_end_L and self.lineage is not XxlJobLineage.V2_4:
            raise ValueError("skip_month_end_L is the 3.1-3.3 cron: those releases use the '2.4' schema")
        self.clock = clock
        # the admin writes its DATETIMEs in the JDBC connection's zone (db_tz) and
        # evaluates crons in the JVM's default zone (cron_tz); `admin_tz` sets both
        self.zone = LegacyTimeZone(db_tz or admin_tz)
        self.cron_zone = LegacyTimeZone(cron_tz or admin_tz)
        self.pre_read_ms = pre_read_ms
        modern = self.lineage in (XxlJobLineage.V3_4, XxlJobLineage.MASTER)
        self.pre_read_count = pre_read_count or (5000 if modern else 6000)
        self.skip_month_end_L = skip_month_end_L
        self.stop_races_scan = stop_races_scan
        self.outcome: Outcome = outcome or succeed()
        self.admin_address = admin_address
        self.skip_idle = skip_idle  # False: run every empty scan and monitor pass (slow; same result)
        self._late_edge = modern  # 3.4.0+: `next <= now` is late, not pre-read
        self._ring_slots = 3 if modern else 2
        self._fix_rate_rounds = modern
        # the Quartz line of its CronExpression copy: 2.1-3.0 (schemas 2.2, 2.4) Quartz 2.3;
        # 3.1-3.3 (schema 2.4, skip_month_end_L) 2.5.0; 3.4 on 2.5.2 (docs/cron.md)
        self.cron_dialect: Dialect = "2.5" if modern or skip_month_end_L else "2.3"

        md = xxljob_metadata(self.lineage)
        self._info = md.tables["xxl_job_info"]
        self._log = md.tables["xxl_job_log"]
        self._group = md.tables["xxl_job_group"]
        self._registry = md.tables["xxl_job_registry"]
        self._lock = md.tables["xxl_job_lock"]
        self._name_col = "name" if self.lineage is XxlJobLineage.MASTER else "job_desc"
        self._prepare()

        self.fired: list[XxlFired] = []
        self.attempts: list[XxlAttempt] = []
        self.errors: list[tuple[int, int, str]] = []  # (ms, job id, what the admin logged)
        self.scans = 0  # scans actually run (skipped idle ones not counted)

        start = clock.now_ms()
        self._pos = start - 1  # every event at or before _pos has happened
        self._events = EventQueue()  # callbacks
        self._ring: dict[int, list[_Push]] = {}
        self._last_tick = start // 1000 - 1  # last ring second processed
        self._scan_anchor = -(-start // 1000) * 1000 - self.pre_read_ms  # as if an empty scan ran
        self._scan_busy = False
        self._next_scan: int | None = self._scan_anchor + self.pre_read_ms
        self._monitor_anchor = start
        self._fail_next: int | None = None
        self._last_fail_pass = start - 1
        self._lost_next: int | None = None
        self._lost_watch: list[int] = []  # times rows of NO_CALLBACK attempts become lost
        self._pending: set[int] = set()  # log ids with a callback still to come
        self._nominal: dict[int, int | None] = {}  # log id -> nominal ms
        self._round: dict[int, int] = {}
        self._crons: dict[str, CronExpression | CronSyntaxError] = {}
        self._believed_running: set[int] = set()
        self._race_spent: set[int] = set()
        self.executors = XxlExecutors()  # the executors' job threads (block strategies, GLUE kills)
        if down_until is not None:
            self.outage(down_until)

    def _prepare(self) -> None:
        """The statements the trigger path runs per attempt, built once."""
        info, log, group = self._info, self._log, self._group
        self._q_job = select(info).where(info.c.id == bindparam("p_id"))
        self._q_group = select(group).where(group.c.id == bindparam("p_id"))
        self._q_children = select(info.c.child_jobid).where(info.c.id == bindparam("p_id"))
        self._q_insert = log.insert()
        self._q_dispatch = (
            update(log)
            .where(log.c.id == bindparam("p_id"))
            .values({c: bindparam(f"p_{c}", type_=log.c[c].type) for c in (
                "executor_address", "executor_handler", "executor_param", "executor_sharding_param",
                "executor_fail_retry_count", "trigger_code", "trigger_msg",
            )})
        )  # fmt: skip
        self._q_handle = (
            update(log)
            .where(log.c.id == bindparam("p_id"), log.c.handle_code == 0)  # a repeated callback is ignored
            .values({c: bindparam(f"p_{c}", type_=log.c[c].type) for c in ("handle_time", "handle_code", "handle_msg")})
        )

    # -- driving ------------------------------------------------------------------------

    @property
    def now_ms(self) -> int:
        """Where the simulated admin is in virtual time."""
        return self._pos

    def step(self, until: datetime) -> list[XxlFired]:
        """Run every thread of the admin up to and including `until` (aware); returns the
        scheduled fires of this step. Changes made by others between steps (a cutover
        stopping jobs, a rollback starting them with a `trigger_next_time`) are seen by
        the next scan, exactly as the admin would see them."""
        until_ms = to_ms(until)
        first = len(self.fired)
        if until_ms <= self._pos:
            return []
        self._resync()
        while (nxt := self._next_event()) is not None and nxt[0] <= until_ms:
            at, rank = nxt
            catch_up(self.clock, at)
            self._pos = at
            if rank == _CALLBACK:
                _, payload = self._events.pop()
                self._callback(at, *payload)
            elif rank == _RING:
                self._tick(at)
            elif rank == _SCAN:
                self._scan(at)
            elif rank == _FAIL:
                self._fail_monitor(at)
            else:
                self._lost_monitor(at)
        catch_up(self.clock, until_ms)
        self._pos = until_ms
        return self.fired[first:]

    def outage(self, until: datetime, *, lose_ring: bool = True) -> None:
        """The admin is down from now to `until` (a crash and restart): nothing is scanned
        or triggered meanwhile; the in-memory ring is lost (already pre-read fires never
        happen, their next times were committed); executors' callbacks are delivered at
        the restart; the first scan follows the start-up sleep (5 s, to a whole second)."""
        until_ms = to_ms(until)
        if until_ms <= self._pos:
            return
        if lose_ring:
            self._ring.clear()
        self._events.retime_before(until_ms)
        catch_up(self.clock, until_ms)
        self._pos = until_ms - 1
        self._last_tick = until_ms // 1000 - 1
        self._scan_busy = False
        self._next_scan = until_ms + STARTUP_SLEEP_MS - until_ms % 1000
        self._scan_anchor = self._next_scan - self.pre_read_ms
        self._monitor_anchor = until_ms
        self._last_fail_pass = until_ms - 1
        self._fail_next = until_ms
        self._lost_next = until_ms

    # -- the admin's job operations ----------------------------------------------------

    def stop(self, job_id: int) -> bool:
        """`XxlJobServiceImpl.stop` at the simulator's now: `trigger_status 0`,
        `trigger_last_time 0`, `trigger_next_time 0`, `update_time` (database zone). A fire
        already in the ring still happens (the ring is memory). False: no such job."""
        info = self._info
        with begin(self.engine) as conn:
            return bool(conn.execute(
                update(info).where(info.c.id == job_id)
                .values(trigger_status=0, trigger_last_time=0, trigger_next_time=0, update_time=self._wall(self._api_now()))
            ).rowcount)  # fmt: skip

    def start(self, job_id: int) -> int:
        """`XxlJobServiceImpl.start` at the simulator's now: the next time is the first
        one after now + 5 s ("5s后生效，避开预读周期": out of the scan's pre-read window),
        `trigger_last_time 0`, `trigger_status 1`. Returns that next time (epoch ms);
        raises ValueError as the admin refuses (no such job, schedule NONE, no next time)."""
        info = self._info
        with begin(self.engine) as conn:
            job = self._view(self._job_row(conn, job_id))
            if job.schedule_type not in ("CRON", "FIX_RATE"):
                raise ValueError(f"xxl_job_info id {job_id}: schedule_type {job.schedule_type} cannot be started")
            nxt = self._admin_next(job_id, job)
            conn.execute(
                update(info).where(info.c.id == job_id)
                .values(trigger_status=1, trigger_last_time=0, trigger_next_time=nxt, update_time=self._wall(self._api_now()))
            )  # fmt: skip
        return nxt

    _SCHEDULE_COLUMNS = frozenset({"schedule_type", "schedule_conf", "job_cron"})

    def update(self, job_id: int, **columns: Any) -> int:
        """`XxlJobServiceImpl.update` (the admin's edit form) at the simulator's now: the
        given `xxl_job_info` columns and `update_time` (database zone). When a running
        job's schedule changes, its next time becomes the new schedule's first after now +
        5 s, at once (seen on a real 3.4.2 admin); otherwise the next time is kept (a
        stopped job's too). A fire already in the ring still happens. Returns the next
        time (epoch ms); raises ValueError as the admin refuses (no such job, a schedule
        with no next time)."""
        info = self._info
        unknown = sorted(set(columns) - set(info.c.keys()))
        if unknown or {"trigger_status", "trigger_next_time", "trigger_last_time"} & set(columns):
            raise ValueError(f"update edits the job's definition, not {unknown or 'its trigger state'}")
        with begin(self.engine) as conn:
            row = self._job_row(conn, job_id)
            old, new = self._view(row), self._view({**row, **columns})
            nxt = old.trigger_next_time
            moved = (old.schedule_type, old.schedule_conf) != (new.schedule_type, new.schedule_conf)
            if old.trigger_status == 1 and moved:
                nxt = self._admin_next(job_id, new)
            conn.execute(
                update(info)
                .where(info.c.id == job_id)
                .values(**columns, trigger_next_time=nxt, update_time=self._wall(self._api_now()))
            )
        return nxt

    def _job_row(self, conn: Connection, job_id: int) -> RowMapping:
        row = conn.execute(self._q_job, {"p_id": job_id}).mappings().first()
        if row is None:
            raise ValueError(f"xxl_job_info id {job_id}: no such job")
        return row

    def _admin_next(self, job_id: int, job: XxlJobView) -> int:
        """The next time the admin gives a job it starts or reschedules: the schedule's
        first after now + the pre-read; ValueError as the admin refuses."""
        try:
            nxt = self.next_valid_time(job, self._api_now() + PRE_READ_MS)
        except (CronSyntaxError, ValueError) as exc:
            raise ValueError(f"xxl_job_info id {job_id}: schedule_conf is invalid: {exc}") from exc
        if nxt is None:
            raise ValueError(f"xxl_job_info id {job_id}: schedule_conf has no next time")
        return nxt

    def save_glue(self, job_id: int, source: str, remark: str = "") -> None:
        """`JobCodeController.save` (the GLUE editor): the job's `glue_source`,
        `glue_remark`, and `glue_updatetime` = now (database zone): the version the next
        trigger sends, which makes the executor rebuild (and kill) the job's GLUE thread."""
        info = self._info
        now = self._wall(self._api_now())
        with begin(self.engine) as conn:
            if not conn.execute(
                update(info)
                .where(info.c.id == job_id)
                .values(glue_source=source, glue_remark=remark, glue_updatetime=now, update_time=now)
            ).rowcount:
                raise ValueError(f"xxl_job_info id {job_id}: no such job")

    def register(self, app_name: str, address: str) -> None:
        """An executor's registration beat (`registrySaveOrUpdate`, every 30 s from a live
        executor): its `xxl_job_registry` row with `update_time` = now, database zone."""
        reg = self._registry
        now = self._wall(self._api_now())
        key = and_(reg.c.registry_group == "EXECUTOR", reg.c.registry_key == app_name, reg.c.registry_value == address)
        with begin(self.engine) as conn:
            if not conn.execute(update(reg).where(key).values(update_time=now)).rowcount:
                conn.execute(
                    reg.insert().values(
                        registry_group="EXECUTOR", registry_key=app_name, registry_value=address, update_time=now
                    )
                )

    def refresh_registry(self) -> dict[str, str | None]:
        """One pass of the registry monitor (every 30 s in the admin): rows older than 90 s
        (DEAD_TIMEOUT, against now in the database zone) are removed, and each
        auto-registered group's `address_list` becomes its live addresses, sorted, or
        NULL. Returns app name -> the address list written."""
        reg, group = self._registry, self._group
        cutoff = self._wall(self._api_now() - DEAD_TIMEOUT_MS)
        out: dict[str, str | None] = {}
        with begin(self.engine) as conn:
            conn.execute(reg.delete().where(reg.c.update_time < cutoff))
            live: dict[str, set[str]] = {}
            for key, value in conn.execute(
                select(reg.c.registry_key, reg.c.registry_value)
                .where(reg.c.registry_group == "EXECUTOR", reg.c.update_time > cutoff)
            ):  # fmt: skip
                live.setdefault(str(key), set()).add(str(value))
            for gid, app in conn.execute(select(group.c.id, group.c.app_name).where(group.c.address_type == 0)).all():
                addresses = ",".join(sorted(live.get(str(app), ()))) or None
                values: dict[str, Any] = {"address_list": addresses}
                if "update_time" in group.c:
                    values["update_time"] = self._wall(self._api_now())
                conn.execute(update(group).where(group.c.id == gid).values(**values))
                out[str(app)] = addresses
        return out

    def _api_now(self) -> int:
        """Now for an operation (a stop, a start, a registration): the clock, or where the
        simulated admin is if that is later."""
        return max(self._pos, self.clock.now_ms())

    def _wall(self, ms: int) -> datetime:
        """A DATETIME as the admin writes it: `new Date()` in the JDBC connection's zone."""
        return self.zone.to_wall(from_ms(ms - ms % 1000))

    # -- the event loop -----------------------------------------------------------------

    def _resync(self) -> None:
        """At each step start: others may have written since the last step, so the idle
        scan cadence resumes from its phase and both monitors take one real look."""
        if not self._scan_busy:
            # the idle cadence: _scan_anchor + k * pre_read_ms, k >= 1
            self._next_scan = first_tick_at_or_after(
                self._scan_anchor + self.pre_read_ms, self.pre_read_ms, self._pos + 1
            )
        self._mark_fail(self._pos + 1)
        tick = first_tick_at_or_after(self._monitor_anchor, LOST_MONITOR_MS, self._pos + 1)
        self._lost_next = tick if self._lost_next is None else min(self._lost_next, tick)

    def _next_event(self) -> tuple[int, int] | None:
        options: list[tuple[int, int]] = []
        if (head := self._events.peek()) is not None:
            options.append(head)
        if self._ring:
            second = max(self._last_tick + 1, min(self._ring))
            options.append((second * 1000, _RING))
        if self._next_scan is not None:
            options.append((self._next_scan, _SCAN))
        if self._fail_next is not None:
            options.append((self._fail_next, _FAIL))
        if self._lost_next is not None:
            options.append((self._lost_next, _LOST))
        return min(options) if options else None

    def _mark_fail(self, at: int) -> None:
        """A failed row exists from `at`: the next fail-monitor pass will see it."""
        tick = first_tick_at_or_after(self._monitor_anchor, FAIL_MONITOR_MS, max(at, self._last_fail_pass + 1))
        self._fail_next = tick if self._fail_next is None else min(self._fail_next, tick)

    # -- ring ---------------------------------------------------------------------------

    def _tick(self, at: int) -> None:
        second = at // 1000
        self._last_tick = second
        due: list[_Push] = []
        for s in [second - i for i in range(self._ring_slots)] + sorted(k for k in self._ring if k <= second):
            slot = self._ring.pop(s, None)
            if slot is None:
                continue
            if self._ring_slots == 3:  # 3.3.0+: distinct per slot
                slot = _distinct(slot)
            due.extend(slot)
        for push in due:
            self._trigger(push.job_id, "CRON", at, push.nominal_ms)

    def _push(self, job_id: int, nominal_ms: int) -> None:
        self._ring.setdefault(nominal_ms // 1000, []).append(_Push(job_id, nominal_ms))

    # -- scan ---------------------------------------------------------------------------

    def _scan(self, t: int) -> None:
        self.scans += 1
        window = t + self.pre_read_ms
        direct: list[tuple[int, str, int]] = []
        min_next: int | None = None
        with begin(self.engine) as conn:
            conn.execute(
                select(self._lock.c.lock_name).where(self._lock.c.lock_name == "schedule_lock").with_for_update()
            )
            info = self._info
            rows = [
                dict(r)
                for r in conn.execute(
                    select(info)
                    .where(info.c.trigger_status == 1, info.c.trigger_next_time <= window)
                    .order_by(info.c.id)
                    .limit(self.pre_read_count)
                ).mappings()
            ]
            if self.stop_races_scan:
                rows = sorted(rows + self._raced_rows(conn, window, {r["id"] for r in rows}), key=lambda r: r["id"])
            writes = [self._schedule_row(row, t, direct) for row in rows]
            if writes:
                stmt = update(info).where(info.c.id == bindparam("b_id"))
                if not self.stop_races_scan:
                    stmt = stmt.where(info.c.trigger_status == 1)  # 2.5.0+
                stmt = stmt.values(
                    trigger_last_time=bindparam("b_last"),
                    trigger_next_time=bindparam("b_next"),
                    trigger_status=bindparam("b_status"),
                )
                conn.execute(stmt, writes)
                if self.stop_races_scan:
                    for w in writes:
                        (self._believed_running.add if w["b_status"] == 1 else self._believed_running.discard)(
                            w["b_id"]
                        )
            else:
                value = conn.execute(
                    select(func.min(info.c.trigger_next_time)).where(info.c.trigger_status == 1)
                ).scalar()
                min_next = None if value is None else int(value)
        for job_id, kind, nominal in direct:
            self._trigger(job_id, kind, t, nominal)
        self._scan_anchor = t
        self._scan_busy = bool(rows)
        if rows:
            self._next_scan = t + 1000 - t % 1000
            return
        # empty: the next scans come every pre_read_ms; skip those that would find nothing
        first = t + self.pre_read_ms - t % 1000
        self._scan_anchor = first - self.pre_read_ms
        if not self.skip_idle:
            self._next_scan = first
        elif min_next is None:
            self._next_scan = None
        else:
            self._next_scan = first_tick_at_or_after(first, self.pre_read_ms, min_next - self.pre_read_ms)

    def _raced_rows(self, conn: Connection, window: int, read: set[int]) -> list[dict[str, Any]]:
        """<= 2.4.2: stops written since the last scan to jobs it left running. A stopped
        job this scan pre-reads was (as far as the race goes) read before the stop landed:
        its unconditional UPDATE writes status 1 back."""
        suspects = sorted(self._believed_running - read - self._race_spent)
        out: list[dict[str, Any]] = []
        info = self._info
        for i in range(0, len(suspects), 500):
            found = {
                int(r["id"]): dict(r)
                for r in conn.execute(select(info).where(info.c.id.in_(suspects[i : i + 500]))).mappings()
            }
            for job_id in suspects[i : i + 500]:
                row = found.get(job_id)
                if row is None or parse_int(row["trigger_status"]) == 1:
                    if row is None:
                        self._believed_running.discard(job_id)
                    continue
                if (parse_int(row["trigger_next_time"]) or 0) <= window:
                    self._race_spent.add(job_id)
                    row["trigger_status"] = 1
                    out.append(row)
                    logger.info("xxl-job sim: stop of job %d lost to a concurrent scan", job_id)
                else:
                    self._believed_running.discard(job_id)
        return out

    def _schedule_row(self, row: Mapping[str, Any], t: int, direct: list[tuple[int, str, int]]) -> dict[str, int]:
        job = self._view(row)
        state = {"status": 1, "last": job.trigger_last_time, "next": job.trigger_next_time}
        nxt = job.trigger_next_time
        if t > nxt + self.pre_read_ms:
            logger.debug("xxl-job sim: schedule misfire, jobId = %d", job.id)
            if self.lineage is not XxlJobLineage.V2_2 and job.misfire_strategy == "FIRE_ONCE_NOW":
                direct.append((job.id, "MISFIRE", nxt))
            self._refresh(job, state, t, t)
        elif t > nxt or (self._late_edge and t == nxt):
            direct.append((job.id, "CRON", nxt))
            self._refresh(job, state, t, t)
            if state["status"] == 1 and t + self.pre_read_ms > state["next"]:
                self._push(job.id, state["next"])
                self._refresh(job, state, state["next"], t)
        else:
            self._push(job.id, nxt)
            self._refresh(job, state, nxt, t)
        return {"b_id": job.id, "b_last": state["last"], "b_next": state["next"], "b_status": state["status"]}

    def _refresh(self, job: XxlJobView, state: dict[str, int], from_ms_: int, t: int) -> None:
        try:
            nxt = self.next_valid_time(job, from_ms_)
        except (CronSyntaxError, ValueError) as exc:  # 2.4.2+: the job is stopped
            self.errors.append((t, job.id, f"refreshNextValidTime error, job stopped: {exc}"))
            nxt = None
        else:
            if nxt is None:
                self.errors.append((t, job.id, "refreshNextValidTime fail: no next time, job stopped"))
        if nxt is None:
            state.update(status=0, last=0, next=0)
        else:
            state.update(last=state["next"], next=nxt)

    def next_valid_time(self, job: XxlJobView, from_ms_: int) -> int | None:
        """`generateNextValidTime`: CRON strictly after `from` (whole seconds, admin zone),
        FIX_RATE `from + N s` (3.4+: rounded up to a whole second), else None."""
        if job.schedule_type == "CRON":
            expr = self._cron(job.schedule_conf or "")
            at = expr.next_after(from_ms(from_ms_))
            if self.skip_month_end_L and "L" in (job.schedule_conf or "").split()[3].upper():
                while at is not None and calendar.monthrange(at.year, at.month)[1] < 31:
                    at = expr.next_after(at)
            return None if at is None else to_ms(at)
        if job.schedule_type == "FIX_RATE":
            seconds = parse_int(job.schedule_conf)  # Integer.valueOf: no trimming
            if seconds is None:
                raise ValueError(f"FIX_RATE conf is not an integer: {job.schedule_conf!r}")
            nxt = from_ms_ + seconds * 1000
            return -(-nxt // 1000) * 1000 if self._fix_rate_rounds else nxt
        return None

    def _cron(self, conf: str) -> CronExpression:
        cached = self._crons.get(conf)
        if cached is None:
            try:
                cached = CronExpression(conf, self.cron_zone.zone, dialect=self.cron_dialect)
            except CronSyntaxError as exc:
                cached = exc
            self._crons[conf] = cached
        if isinstance(cached, CronSyntaxError):
            raise cached
        return cached

    # -- trigger ------------------------------------------------------------------------

    def _view(self, row: Mapping[Any, Any]) -> XxlJobView:  # a dict or a RowMapping
        legacy = self.lineage is XxlJobLineage.V2_2

        def text_(key: str) -> str | None:
            return raw_text(row.get(key))[0]

        return XxlJobView(
            id=int(row["id"]),
            job_group=parse_int(row["job_group"]) or 0,
            name=text_(self._name_col),
            schedule_type="CRON" if legacy else (text_("schedule_type") or "NONE"),
            schedule_conf=text_("job_cron" if legacy else "schedule_conf"),
            misfire_strategy="DO_NOTHING" if legacy else (text_("misfire_strategy") or "DO_NOTHING"),
            executor_route_strategy=text_("executor_route_strategy"),
            executor_handler=text_("executor_handler"),
            executor_param=row.get("executor_param"),
            executor_block_strategy=text_("executor_block_strategy"),
            executor_timeout=parse_int(row.get("executor_timeout")) or 0,
            executor_fail_retry_count=parse_int(row.get("executor_fail_retry_count")) or 0,
            glue_type=text_("glue_type"),
            has_glue_updatetime=row.get("glue_updatetime") is not None,
            child_jobid=text_("child_jobid"),
            trigger_status=parse_int(row.get("trigger_status")) or 0,
            trigger_last_time=parse_int(row.get("trigger_last_time")) or 0,
            trigger_next_time=parse_int(row.get("trigger_next_time")) or 0,
            glue_updatetime_ms=self._wall_ms(row.get("glue_updatetime")),
        )

    def _wall_ms(self, value: Any) -> int:
        if value is None:
            return 0
        try:
            return to_ms(self.zone.to_utc(value))
        except ValueError:
            return 0

    def _trigger(
        self,
        job_id: int,
        kind: str,
        t: int,
        nominal: int | None,
        *,
        retry_count: int | None = None,
        sharding: str | None = None,
        param: Any = None,
    ) -> None:
        """`XxlJobTrigger.trigger`: one log row per shard, written in one transaction."""
        with begin(self.engine) as conn:
            row = conn.execute(self._q_job, {"p_id": job_id}).mappings().first()
            if row is None:
                return  # deleted: nothing fires
            job = self._view(row)
            if param is not None:
                job = replace(job, executor_param=param)
            group = conn.execute(self._q_group, {"p_id": job.job_group}).mappings().first()
            if group is None:
                self.errors.append((t, job_id, "trigger error: executor group not found"))
                return
            addresses = [a.strip() for a in (raw_text(group["address_list"])[0] or "").split(",") if a.strip()]
            manual = parse_int(group.get("address_type")) == 1
            retries = job.executor_fail_retry_count if retry_count is None else retry_count
            pair = _sharding_pair(sharding)
            if job.executor_route_strategy == BROADCAST and addresses and pair is None:
                shards: Iterable[tuple[int, int]] = [(i, len(addresses)) for i in range(len(addresses))]
            else:
                shards = [pair or (0, 1)]
            for index, total in shards:
                self._process(conn, job, kind, t, nominal, retries, addresses, manual, index, total)

    def _process(
        self, conn: Connection, job: XxlJobView, kind: str, t: int, nominal: int | None, retries: int,
        addresses: list[str], manual: bool, index: int, total: int,
    ) -> None:  # fmt: skip
        route = job.executor_route_strategy
        broadcast = route == BROADCAST
        sharding = f"{index}/{total}" if broadcast else None
        wall = self.zone.to_wall(from_ms(t))
        inserted = conn.execute(
            self._q_insert,
            {"job_group": job.job_group, "job_id": job.id, "trigger_time": wall, "trigger_code": 0, "handle_code": 0},
        )
        log_id = int(inserted.inserted_primary_key[0])  # type: ignore[index]  # an INSERT has a key
        self._nominal[log_id] = nominal
        if len(self._nominal) > NOMINAL_KEPT:  # the oldest first (insertion order)
            del self._nominal[next(iter(self._nominal))]
        scheduled = from_ms(nominal if nominal is not None else t)

        def record(code: int, address: str | None, result: Result | None) -> None:
            if not self.history:
                return
            attempt = XxlAttempt(log_id, job.id, kind, nominal, index, total, t, code, retries, address, result)
            self.attempts.append(attempt)
            if attempt.fired is not None:
                self.fired.append(attempt.fired)

        # the real trigger throws here (after the insert): the row stays trigger_code 0
        if not job.has_glue_updatetime or (addresses and route not in ROUTES):
            self.errors.append((t, job.id, "trigger error: NullPointerException (glue_updatetime or route strategy)"))
            record(0, None, None)
            return
        address, route_msg = self._route(job, addresses, index) if addresses else (None, "调度失败：执行器地址为空")
        result: Result | None = None
        if address is None:
            code, msg = 500, route_msg
        else:
            result, duration = coerce(self.outcome(job, scheduled, index))
            code, msg = self._run(job, log_id, t, address, result, duration)
            msg = route_msg + msg
        conn.execute(self._q_dispatch, {
            "p_id": log_id, "p_executor_address": address, "p_executor_handler": job.executor_handler,
            "p_executor_param": job.executor_param, "p_executor_sharding_param": sharding,
            "p_executor_fail_retry_count": retries, "p_trigger_code": code,
            "p_trigger_msg": self._trigger_msg(job, kind, addresses, manual, sharding, retries, address, code, msg),
        })  # fmt: skip
        if code != 200:
            self._mark_fail(t)
        record(code, address, result)

    def _route(self, job: XxlJobView, addresses: list[str], index: int) -> tuple[str | None, str]:
        """The address the admin's router picks (None: the router failed) and the text
        the router adds to `trigger_msg` (FAILOVER / BUSYOVER: their beat results)."""
        route = job.executor_route_strategy
        if route == BROADCAST:
            return (addresses[index] if index < len(addresses) else addresses[0]), ""
        if route == "LAST":
            return addresses[-1], ""
        if route in ("ROUND", "LEAST_RECENTLY_USED", "LEAST_FREQUENTLY_USED"):
            # ROUND: a per-job counter (the real one starts at a random 0..99: 0 here)
            n = self._round.get(job.id, 0)
            self._round[job.id] = n + 1
            return addresses[n % len(addresses)], ""
        if route in ("RANDOM", "CONSISTENT_HASH"):  # admin-memory state in reality: stable here
            return addresses[zlib.crc32(str(job.id).encode()) % len(addresses)], ""
        if route in ("FAILOVER", "BUSYOVER"):
            # the first address whose beat (FAILOVER) or idle beat (BUSYOVER: the job's
            # thread there is neither running nor queued) succeeds, in registry order
            title = "心跳检测" if route == "FAILOVER" else "空闲检测"
            lines: list[str] = []
            for address in addresses:
                ok = self.executors.beat(address) if route == "FAILOVER" else self.executors.idle_beat(address, job.id)
                lines.append(f"{title}：<br>address：{address}<br>code：{200 if ok else 500}<br>msg：null")
                if ok:
                    return address, "<br><br>".join(lines) + "<br><br>"
            return None, "<br><br>".join(lines)
        return addresses[0], ""  # FIRST

    def _run(
        self, job: XxlJobView, log_id: int, t: int, address: str, result: Result, duration: int
    ) -> tuple[int, str]:
        """The run request to the executor at `address`: (trigger_code, its msg)."""
        if result is Result.TRIGGER_FAIL or not self.executors.beat(address):
            return 500, "xxl-job remoting error(simulated executor refused the run)"
        if result is Result.NO_CALLBACK:  # the executor died with the run: no thread survives it
            due = t - t % 1000 + LOST_AFTER_MS  # trigger_time is whole seconds
            self._lost_watch.append(due)
            tick = first_tick_at_or_after(self._monitor_anchor, LOST_MONITOR_MS, due)
            self._lost_next = tick if self._lost_next is None else min(self._lost_next, tick)
            return 200, "null"
        run = Run(log_id, job.id, _HANDLE[result], duration, job.executor_timeout * 1000)
        identity = handler_identity(job.glue_type, job.executor_handler, job.glue_updatetime_ms)
        answer = self.executors.run(address, run, identity, job.executor_block_strategy, t)
        for killed in answer.finished:  # delivered after this trigger's transaction
            self._events.push(killed.at, _CALLBACK, (killed, address, False))
        if not answer.ok:
            return 500, answer.msg
        self._pending.add(log_id)
        if answer.started:
            self._schedule_end(address, job.id, log_id)
        return 200, "null"

    def _schedule_end(self, address: str, job_id: int, log_id: int) -> None:
        end = self.executors.end_of(address, job_id, log_id)
        if end is not None:
            self._events.push(end.at, _CALLBACK, (end, address, True))

    def _trigger_msg(
        self, job: XxlJobView, kind: str, addresses: list[str], manual: bool, sharding: str | None,
        retries: int, address: str | None, code: int, msg: str,
    ) -> str:  # fmt: skip
        route = job.executor_route_strategy or ""
        lines = [
            f"任务触发类型：{_TITLES.get(kind, kind)}",
            f"调度机器：{self.admin_address}",
            f"执行器-注册方式：{'手动录入' if manual else '自动注册'}",
            f"执行器-地址列表：[{', '.join(addresses)}]",
            f"路由策略：{route}" + (f"({sharding})" if sharding else ""),
            f"阻塞处理策略：{job.executor_block_strategy or 'SERIAL_EXECUTION'}",
            f"任务超时时间：{job.executor_timeout}",
            f"失败重试次数：{retries}",
        ]
        out = "<br>".join(lines) + '<br><br><span style="color:#00c0ef;" > >>>>>>>>>>>触发调度<<<<<<<<<<< </span><br>'
        if address is None:
            return out + msg
        return out + f"触发调度：<br>address：{address}<br>code：{code}<br>msg：{msg}"

    # -- callbacks and monitors ---------------------------------------------------------

    def _callback(self, at: int, finish: Finish, address: str, ended: bool) -> None:
        """An executor's callback. `ended`: the run reached its end on its thread (then
        the thread takes its next queued run, at the run's own end time even when the
        admin was down and hears of it later); else the run was killed."""
        log_id, job_id, code = finish.log_id, finish.job_id, finish.code
        if ended:
            running, nxt = self.executors.complete(address, job_id, log_id, finish.at)
            if not running:
                return  # killed meanwhile: its callback went out when it was killed
            if nxt is not None:
                self._schedule_end(address, nxt.job_id, nxt.log_id)
        self._pending.discard(log_id)
        with begin(self.engine) as conn:
            changed = conn.execute(self._q_handle, {
                "p_id": log_id, "p_handle_time": self.zone.to_wall(from_ms(at)), "p_handle_code": code,
                "p_handle_msg": finish.msg if finish.msg is not None else _HANDLE_MSG.get(code),
            }).rowcount  # fmt: skip
            children = ""
            if changed and code == 200:
                children = conn.execute(self._q_children, {"p_id": job_id}).scalar() or ""
        if not changed:
            return
        if code != 200:
            self._mark_fail(at)
            return
        for child in (raw_text(children)[0] or "").split(","):
            # XxlJobCompleter: an item that is not all digits (StringTool.isNumeric, no
            # trimming: " 3" is skipped), not positive, or the job itself is skipped
            child_id = int(child) if child.isdigit() else 0
            if child_id > 0 and child_id != job_id:
                self._trigger(child_id, "PARENT", at, None)

    def _fail_monitor(self, at: int) -> None:
        self._last_fail_pass = at
        self._fail_next = None if self.skip_idle else at + FAIL_MONITOR_MS
        log = self._log
        running = and_(log.c.trigger_code.in_([0, 200]), log.c.handle_code == 0)
        with connect(self.engine) as conn:
            ids = [
                int(i)
                for i in conn.execute(
                    select(log.c.id).where(not_(or_(running, log.c.handle_code == 200)), log.c.alarm_status == 0)
                    .order_by(log.c.id).limit(1000)
                ).scalars()
            ]  # fmt: skip
        for log_id in ids:
            with begin(self.engine) as conn:
                claimed = conn.execute(
                    update(log).where(log.c.id == log_id, log.c.alarm_status == 0).values(alarm_status=-1)
                ).rowcount
                if claimed != 1:
                    continue
                row = conn.execute(select(log).where(log.c.id == log_id)).mappings().one()
                job_exists = (
                    conn.execute(select(self._info.c.id).where(self._info.c.id == row["job_id"])).first() is not None
                )
            remaining = parse_int(row["executor_fail_retry_count"]) or 0
            if remaining > 0:
                self._trigger(
                    int(row["job_id"]), "RETRY", at, self._nominal.get(log_id),
                    retry_count=remaining - 1, sharding=raw_text(row["executor_sharding_param"])[0],
                    param=row["executor_param"],
                )  # fmt: skip
                with begin(self.engine) as conn:
                    conn.execute(
                        update(log).where(log.c.id == log_id)
                        .values(trigger_msg=(raw_text(row["trigger_msg"])[0] or "") + RETRY_BANNER)
                    )  # fmt: skip
            with begin(self.engine) as conn:
                conn.execute(
                    update(log)
                    .where(log.c.id == log_id, log.c.alarm_status == -1)
                    .values(alarm_status=2 if job_exists else 1)
                )

    def _lost_monitor(self, at: int) -> None:
        self._lost_next = None
        self._lost_watch = [w for w in self._lost_watch if w > at]
        if not self.skip_idle:
            self._lost_next = at + LOST_MONITOR_MS
        elif self._lost_watch:
            self._lost_next = first_tick_at_or_after(self._monitor_anchor, LOST_MONITOR_MS, min(self._lost_watch))
        log = self._log
        cutoff = self.zone.to_wall(from_ms(at - LOST_AFTER_MS))
        with begin(self.engine) as conn:
            rows = conn.execute(
                select(log.c.id, log.c.executor_address)
                .where(log.c.trigger_code == 200, log.c.handle_code == 0, log.c.trigger_time <= cutoff)
            ).all()  # fmt: skip
            if not rows:
                return
            registered = {raw_text(v)[0] for v in conn.execute(select(self._registry.c.registry_value)).scalars()}
            marked = 0
            for log_id, address in rows:
                if int(log_id) in self._pending or raw_text(address)[0] in registered:
                    continue
                marked += conn.execute(
                    update(log).where(log.c.id == log_id, log.c.handle_code == 0)
                    .values(handle_time=self.zone.to_wall(from_ms(at)), handle_code=500, handle_msg=LOST_MSG)
                ).rowcount  # fmt: skip
        if marked:
            self._mark_fail(at + 1)  # this instant's fail-monitor pass (it runs first) has gone


def _sharding_pair(value: str | None) -> tuple[int, int] | None:
    if not value:
        return None
    parts = value.split("/")
    if len(parts) == 2 and all(p.isdigit() for p in parts):
        return int(parts[0]), int(parts[1])
    return None


def _distinct(pushes: list[_Push]) -> list[_Push]:
    seen: set[int] = set()
    out: list[_Push] = []
    for push in pushes:
        if push.job_id not in seen:
            seen.add(push.job_id)
            out.append(push)
    return out
