"""A per-business cutover and rollback under steady load, on the real servers.

One xxl-job 3.4 business on a real MariaDB legacy database, run in real time by the
xxl-job admin simulator (`legacy_sim.xxljob`: scan with its 5 s pre-read, time ring,
trigger, callbacks); the business migrated into a real MariaDB trigger store; a real
`switchyard scheduler run` subprocess (etcd election, Pulsar bus); an executor on the real
Pulsar command topic recording every handler invocation.

Five jobs fire every second (three FIX_RATE 1 s, one cron `* * * * * ?`) or every two
(one cron `0/2 * * * * ?`). While they fire: a dual-run, a cutover to the new scheduler,
then a rollback to legacy. Every occurrence of every job from the first fire to the end
of the window must be fired by the side that owns it, exactly once: legacy before the
cutover's handover time H, the new scheduler from H up to the rollback's handover time
F, legacy again from F on. In a shadow dual-run the new side only records (the executor
does not invoke), so that holds across the whole window; in a live dual-run both sides
fire the occurrences from the new side's first one D up to H, each exactly once (that
double is the dual-run itself, by design). No gap and no double at either boundary; an
occurrence of the new side carries one command id, and the one executor invokes each
command id once (delivery is at-least-once, but the executor answers a repeat from
memory: a second invocation in one process is a bug).

Bounded: about 45 s of real time per variant on an idle machine; every wait has a
generous limit. The stress variant (`--long`) runs the same scenario again and again
with two CPU-hog processes beside it: over 50 switches, cutovers and rollbacks (some
straight from the dual-run), after shadow and live dual-runs, each checked on its own.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from legacy_sim.xxljob import XxlJobSimulator
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch, SwitchReport
from migrator.legacy_control import XxlJobControl
from migrator.model import BusinessState
from migrator.target import TargetWriter
from readers.legacy_ddl.loader import create_legacy_schema
from readers.xxljob.reader import XxlJobReader
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.fence import FenceService, is_fence_skip
from scheduler_core.model import FiredRecord, FiredState, Trigger, TriggerKind, parse_command_id
from scheduler_core.occurrences import next_after
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms, to_ms
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, cpu_hogs, start_scheduler
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

# (schedule_type, schedule_conf) of the business's five jobs
SCHEDULES = [
    ("FIX_RATE", "1"),
    ("FIX_RATE", "1"),
    ("FIX_RATE", "1"),
    ("CRON", "* * * * * ?"),
    ("CRON", "0/2 * * * * ?"),
]
# The new side's lookahead. The rollback hands the legacy side F = now + the xxl-job start
# margin (6 s; its commands from F on are skipped by the fence), or the first occurrence
# the new side has not admitted when that comes first; the xxl-job admin, idle while the
# business was off, scans only every 5 s (its pre-read) and fires a job it finds late
# once, then FIX_RATE goes on from *now* (skipping the grid in between: legacy
# behaviour). A lookahead above the margin keeps F at the margin, ahead of the admin's scan.
LOOKAHEAD_S = 8.0
LEGACY_ONLY_S = 3.0
DUAL_RUN_S = 4.0
NEW_ONLY_S = 5.0
AFTER_F_S = 4.0
NEAR_S = 3.0  # an occurrence this close to a switch's handover counts as "near" it
# The stress variant (--long): cycles of dual-run, cutover, rollback, alternating shadow and
# live dual-runs; every third pair of cycles ends in a rollback straight from the dual-run.
STRESS_CYCLES = 30  # 20 full cycles (2 switches each) + 10 aborted ones (1 each): 50 switches
STRESS_HOGS = 2
STRESS_BUDGET_S = 20 * 60  # the hogs end themselves after this, whatever happens to the test


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LegacyAdmin:
    """The xxl-job admin simulator on a thread, in real time."""

    def __init__(self, engine, clock: SystemClock) -> None:  # type: ignore[no-untyped-def]
        self.sim = XxlJobSimulator(engine, lineage="3.4", clock=clock)
        self.clock = clock
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="xxl-admin", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.sim.step(self.clock.now() + timedelta(milliseconds=100))
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def finish(self, through_ms: int | None = None, timeout_s: float = 30) -> None:
        """Stop the admin; with `through_ms`, only once it has run every event up to then
        (a step that a loaded machine slowed down must not end the fires short of the
        window the test checks)."""
        if through_ms is not None and self.thread.is_alive():
            _wait(lambda: self.sim.now_ms >= through_ms or not self.thread.is_alive(), timeout_s, 0.05)
        self.stop.set()
        if self.thread.ident is not None:  # started
            self.thread.join(timeout=30)


@dataclass
class Invocations:
    """What the executor ran: (trigger id, T ms) -> command id -> invocations."""

    by_occurrence: dict[tuple[int, int], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    lag_s: dict[str, float] = field(default_factory=dict)  # command id -> first start minus T
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, ctx: ExecutionContext, now: datetime) -> None:
        trigger_id, ms, _item = parse_command_id(ctx.command_id)
        with self.lock:
            self.by_occurrence[(int(trigger_id), ms)][ctx.command_id] += 1
            self.lag_s.setdefault(ctx.command_id, (now - ctx.scheduled_at).total_seconds())

    def snapshot(self) -> dict[tuple[int, int], Counter[str]]:
        with self.lock:
            return {k: Counter(v) for k, v in self.by_occurrence.items()}


def _seed_business(legacy, first_ms: int) -> None:  # type: ignore[no-untyped-def]
    """One xxl-job group (the business) with the five jobs of SCHEDULES, all running, due
    from `first_ms` on; plain routing, no retries, no child jobs, no timeout."""
    create_legacy_schema(legacy, "xxl-job", "3.4")
    seed_xxljob(
        legacy,
        "3.4",
        groups=1,
        jobs_per_group=len(SCHEDULES),
        bad_rows=0,
        malformed_crons=0,
        executors_per_group=1,
        rng_seed=5,
    )
    with legacy.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM xxl_job_info ORDER BY id"))]
        assert len(ids) == len(SCHEDULES), ids
        for job_id, (kind, conf) in zip(ids, SCHEDULES, strict=True):
            conn.execute(
                text(
                    "UPDATE xxl_job_info SET schedule_type = :k, schedule_conf = :c, misfire_strategy = 'DO_NOTHING', "
                    "executor_route_strategy = 'FIRST', glue_type = 'BEAN', executor_handler = 'tick', "
                    "glue_updatetime = COALESCE(glue_updatetime, NOW()), child_jobid = '', "
                    "executor_timeout = 0, executor_fail_retry_count = 0, trigger_status = 1, "
                    "trigger_last_time = 0, trigger_next_time = :n WHERE id = :id"
                ),
                {"k": kind, "c": conf, "n": first_ms, "id": job_id},
            )
        conn.execute(text("UPDATE xxl_job_group SET address_type = 0, address_list = '10.9.0.1:9999'"))


def _grid(trigger: Trigger, start: datetime, end: datetime) -> list[int]:
    """Every occurrence of the schedule in [start, end], in epoch ms."""
    anchored = replace(trigger, next_fire_at=start) if trigger.kind is TriggerKind.FIXED_RATE else trigger
    out: list[int] = []
    cursor = next_after(anchored, start - timedelta(milliseconds=1))
    if trigger.kind is TriggerKind.FIXED_RATE:
        cursor = start
    while cursor is not None and cursor <= end and len(out) < 10_000:
        out.append(to_ms(cursor))
        cursor = next_after(anchored, cursor)
    return out


def _wait(cond, timeout_s: float, step_s: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return bool(cond())


# -- the scenario ------------------------------------------------------------------------

Occurrence = tuple[str, int]  # (legacy job id, T in epoch ms)


@dataclass
class Switch:
    """One switch of the business: a cutover (legacy -> new, handover H) or a rollback
    (back to legacy, handover F)."""

    n: int
    direction: str  # "cutover" | "rollback"
    mode: str  # the dual-run it follows: "shadow" | "live"
    from_state: str  # the business's state before it
    started_ms: int
    done_ms: int
    report: SwitchReport
    handover: dict[str, datetime]  # legacy job id -> H (cutover) or F (rollback)

    @property
    def took_s(self) -> float:
        return (self.done_ms - self.started_ms) / 1000


@dataclass
class Cycle:
    """A dual-run, then a cutover and a rollback, or (aborted) a rollback straight away."""

    shadow: bool
    dual_from: datetime
    dual_to: datetime
    cut: Switch | None
    back: Switch

    @property
    def mode(self) -> str:
        return "shadow" if self.shadow else "live"


class Business:
    """The business on the real servers: its legacy database and the admin simulator, its
    migrated triggers, the scheduler subprocess and an executor; `cycle` switches it."""

    def __init__(self, tmp_path: Path, legacy_url: str, target_url: str) -> None:
        self.tmp_path = tmp_path
        self.clock = clock = SystemClock()
        self.started = time.monotonic()
        self.prefix = f"cu{uuid.uuid4().hex[:6]}"
        self.legacy = make_engine(legacy_url)
        self.target = make_engine(target_url)
        self.target_url = target_url
        init_schema(self.target, 4)
        self.store = store = SqlTriggerStore(self.target, clock)
        # G0: the first occurrence, on an even second, far enough ahead for the migration
        # and the scheduler's start (it only matters that the legacy side fires it)
        self.g0_ms = (clock.now_ms() // 2000 + 4) * 2000
        _seed_business(self.legacy, self.g0_ms)
        run = Migrator(XxlJobReader(self.legacy), TargetWriter(store, migrator_store(store)), clock).run()
        assert run.counts["create"] == len(SCHEDULES) and run.counts["quarantine"] == 0, run.counts
        self.biz = BusinessRegistry(migrator_store(store)).all()[0].biz_code
        self.bus = PulsarBus(
            server_url("pulsar"), admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"), topic_prefix=self.prefix
        )
        # as `switchyard rollback --bus` does: the rollback's fence on the bus's control
        # channel, which the executor follows (the handover F is now + the start margin)
        self.switch = BusinessSwitch(
            store,
            migrator_store(store),
            XxlJobControl(self.legacy, clock),
            clock,
            None,
            fences=FenceService(store, self.bus),
        )
        links = {ln.trigger.id: ln for ln in self.switch.links(self.biz)}
        assert len(links) == len(SCHEDULES)
        self.key_of: dict[int, str] = {int(tid): ln.source_key for tid, ln in links.items()}  # type: ignore[arg-type]
        self.tid_of = {v: k for k, v in self.key_of.items()}
        self.admin = LegacyAdmin(self.legacy, clock)
        self.ex = Executor(self.bus, self.biz, clock=clock, concurrency=8)
        self.ran = Invocations()

        @self.ex.handler()
        def tick(ctx: ExecutionContext) -> None:
            self.ran.record(ctx, clock.now())

        self.stop_ex = threading.Event()
        self.ex_thread = threading.Thread(target=self.ex.run, args=(self.stop_ex,), name="executor", daemon=True)
        self.proc: SchedulerProc | None = None
        self.switches: list[Switch] = []
        self.legacy_from_ms = 0
        self.window_start = from_ms(0)

    def start(self) -> None:
        """Legacy, the executor and the scheduler running; the legacy side fires alone from
        `legacy_from_ms` (the caller waits as long as it wants before the first dual-run)."""
        clock = self.clock
        self.admin.start()  # the legacy side runs from the start, as it does in production
        admin_started_ms = clock.now_ms()
        self.ex_thread.start()
        self.proc = start_scheduler(
            "cut",
            self.tmp_path,
            url=self.target_url,
            bus=server_url("pulsar"),
            etcd=server_url("etcd"),
            key=f"/sy-cutover/{uuid.uuid4().hex[:6]}",
            prefix=self.prefix,
            extra=[
                "--lookahead",
                str(LOOKAHEAD_S),
                "--acquire-deadline",
                "15",
                "--reclaim-interval",
                "1",
                "--metrics-port",
                str(_free_port()),
            ],
        )
        assert _wait(lambda: self.store.current_epoch() > 0, 60), "no leader: " + self.proc.log_text()[-3000:]
        self.legacy_from_ms = max(self.g0_ms, admin_started_ms + 2000)
        # From G0, unless a slow machine started the admin after it: a FIX_RATE job the
        # admin finds late fires once and goes on from its scan (legacy behaviour, not
        # the switch's), so the window then starts 2 s after the admin did.
        self.window_start = from_ms(-(-self.legacy_from_ms // 2000) * 2000)

    def close(self) -> None:
        self.admin.finish()
        if self.proc is not None:
            self.proc.stop()
        self.stop_ex.set()
        if self.ex_thread.is_alive():
            self.ex_thread.join(timeout=30)
        self.ex.close()
        self.bus.close()
        self.legacy.dispose()
        self.target.dispose()

    def wait_until_ms(self, ms: int, what: str) -> None:
        assert _wait(lambda: self.clock.now_ms() >= ms, max(60.0, (ms - self.clock.now_ms()) / 1000 + 60)), what

    def _run_switch(self, direction: str, mode: str, move: Callable[[], SwitchReport]) -> Switch:
        from_state = BusinessRegistry(migrator_store(self.store)).get(self.biz).state.value  # type: ignore[union-attr]
        started_ms = self.clock.now_ms()
        report = move()
        done_ms = self.clock.now_ms()
        handover = {k: datetime.fromisoformat(v) for k, v in report.handover.items()}
        if direction == "rollback":
            # a job legacy kept firing (a dual-run's) is not handed back: its F is where the
            # new side stopped, the first occurrence it did not publish
            for tid, key in self.key_of.items():
                if key not in handover:
                    t = self.store.get_trigger(tid)  # type: ignore[arg-type]
                    assert t is not None
                    handover[key] = t.next_fire_at
        assert set(handover) == set(self.key_of.values()), (direction, report.handover)
        assert direction != "rollback" or report.ok, f"rollback did not hand every job back: {report.not_handed_back}"
        sw = Switch(len(self.switches) + 1, direction, mode, from_state, started_ms, done_ms, report, handover)
        self.switches.append(sw)
        return sw

    def cycle(
        self, shadow: bool, *, dual_run_s: float = DUAL_RUN_S, new_only_s: float = NEW_ONLY_S, abort: bool = False
    ) -> Cycle:
        """A dual-run (shadow or live) for `dual_run_s`; then a cutover, `new_only_s` of the
        new side alone and a rollback; or (abort) a rollback straight from the dual-run."""
        mode = "shadow" if shadow else "live"
        dual_from = self.clock.now()
        self.switch.start_dual_run(self.biz, shadow=shadow, actor="test", reason="load test")
        dual_to = self.clock.now()
        time.sleep(dual_run_s)
        cut = None
        if not abort:
            # forced: no comparison here; the gate is tested elsewhere
            cut = self._run_switch(
                "cutover",
                mode,
                lambda: self.switch.cutover(self.biz, actor="test", force=True, reason="cutover under load"),
            )
            time.sleep(new_only_s)
        back = self._run_switch(
            "rollback", mode, lambda: self.switch.rollback(self.biz, actor="test", reason="rollback under load")
        )
        return Cycle(shadow, dual_from, dual_to, cut, back)

    def settle(self, cycle: Cycle, after_s: float = AFTER_F_S) -> None:
        """Legacy alone again: until `after_s` past the last F of the cycle."""
        last_f_ms = max(to_ms(v) for v in cycle.back.handover.values())
        self.wait_until_ms(last_f_ms + int(after_s * 1000), "the clock did not reach F")

    def verdict(self, cycles: list[Cycle]) -> Verdict:
        """The window from the legacy side's first checked fire to now, occurrence by
        occurrence (see the module docstring). Stops the legacy admin."""
        clock, store = self.clock, self.store
        end = clock.now()
        self.admin.finish(through_ms=to_ms(end))
        assert self.admin.error is None, f"the legacy admin simulator failed: {self.admin.error!r}"
        horizon = end - timedelta(milliseconds=1500)
        window_start = self.window_start
        triggers = {tid: store.get_trigger(tid) for tid in self.key_of}  # type: ignore[arg-type]
        # a record a rollback fence skipped is the legacy side's occurrence (published ahead
        # before the rollback, never run): not a fire of the new side
        records = [r for r in store.fired_between(self.biz, window_start, end) if not is_fence_skip(r.state, r.message)]

        # D: the new side's first occurrence per job and cycle (its first fired record after
        # the previous cycle's F), which must be the first one due from the dual-run start on
        d: list[dict[str, datetime]] = []
        for i, c in enumerate(cycles):
            d.append({})
            for tid, trig in triggers.items():
                key = self.key_of[tid]
                assert trig is not None
                after = cycles[i - 1].back.handover[key] if i else window_start
                mine = [
                    r.scheduled_at
                    for r in records
                    if r.trigger_id == tid and after <= r.scheduled_at < c.back.handover[key]
                ]
                assert mine, f"cycle {i + 1}: the new side never fired trigger {tid}"
                earliest = _grid(trig, window_start, c.dual_from + timedelta(seconds=60))
                lo = next(ms for ms in earliest if ms >= to_ms(c.dual_from))
                hi = next(ms for ms in earliest if ms >= to_ms(c.dual_to))
                assert lo <= to_ms(min(mine)) <= hi, (
                    f"cycle {i + 1}, trigger {tid}: first new fire {min(mine)} is not the first occurrence due "
                    f"from the dual-run start ({from_ms(lo)} .. {from_ms(hi)})"
                )
                d[i][key] = min(mine)

        # the occurrences each side owns: legacy, but the new side from H to F, and both
        # from D to H after a live dual-run (to F after a live dual-run rolled back at once)
        expected: dict[Occurrence, str] = {}
        for tid, trig in triggers.items():
            assert trig is not None
            key = self.key_of[tid]
            for ms in _grid(trig, window_start, horizon):
                owner = "legacy"
                for i, c in enumerate(cycles):
                    f_ms = to_ms(c.back.handover[key])
                    h_ms = to_ms(c.cut.handover[key]) if c.cut is not None else f_ms
                    if h_ms <= ms < f_ms:
                        owner = "new"
                    elif not c.shadow and to_ms(d[i][key]) <= ms < h_ms:
                        owner = "both"
                expected[(key, ms)] = owner
        new_owned = {k for k, side in expected.items() if side in ("new", "both")}

        def new_side_done() -> bool:
            got = self.ran.snapshot()
            return all((self.tid_of[k], ms) in got for k, ms in new_owned)

        _wait(new_side_done, 30)  # commands due before F still arriving (bounded)
        invoked = self.ran.snapshot()
        legacy_fires = Counter(
            (str(x.job_id), int(x.scheduled_ms))
            for x in self.admin.sim.fired
            if window_start <= from_ms(int(x.scheduled_ms)) <= horizon
        )
        new_fires: dict[Occurrence, Counter[str]] = {}
        for (tid, ms), cids in invoked.items():
            if tid in self.key_of and window_start <= from_ms(ms) <= horizon:
                new_fires[(self.key_of[tid], ms)] = cids
        return Verdict(self, cycles, d, window_start, horizon, expected, legacy_fires, new_fires)


@dataclass
class Verdict:
    """Missing, doubled, strays and split command ids over the window, and per switch."""

    business: Business
    cycles: list[Cycle]
    d: list[dict[str, datetime]]
    window_start: datetime
    horizon: datetime
    expected: dict[Occurrence, str]
    legacy_fires: Counter[Occurrence]
    new_fires: dict[Occurrence, Counter[str]]
    missing: list[tuple[Occurrence, str, int, bool]] = field(default_factory=list)
    doubled: list[tuple[Occurrence, str, int, dict[str, int]]] = field(default_factory=list)
    split_ids: list[tuple[Occurrence, dict[str, int]]] = field(default_factory=list)
    strays: list[Occurrence] = field(default_factory=list)
    invoked_twice: list[tuple[Occurrence, dict[str, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # missing: a side that owns the occurrence did not fire it; doubled: fired by a side
        # that does not own it, or twice by the legacy side
        for occ, owner in sorted(self.expected.items()):
            want_legacy, want_new = owner in ("legacy", "both"), owner in ("new", "both")
            n_legacy = self.legacy_fires.get(occ, 0)
            on_new = occ in self.new_fires
            if (want_legacy and n_legacy == 0) or (want_new and not on_new):
                self.missing.append((occ, owner, n_legacy, on_new))
            if n_legacy > 1 or (n_legacy and not want_legacy) or (on_new and not want_new):
                self.doubled.append((occ, owner, n_legacy, dict(self.new_fires.get(occ, {}))))
            if on_new and len(self.new_fires[occ]) > 1:
                self.split_ids.append((occ, dict(self.new_fires[occ])))
        # one executor process: each command id is invoked once, whatever the broker redelivers
        self.invoked_twice = sorted(
            (occ, dict(cids)) for occ, cids in self.new_fires.items() if any(n > 1 for n in cids.values())
        )
        self.strays = sorted({*self.legacy_fires, *self.new_fires} - set(self.expected))

    @property
    def switches(self) -> list[Switch]:
        return [s for c in self.cycles for s in (c.cut, c.back) if s is not None]

    def switch_of(self, occ: Occurrence) -> Switch:
        """The switch an occurrence belongs to: the one whose handover of its job is nearest."""
        key, ms = occ
        return min(self.switches, key=lambda s: abs(ms - to_ms(s.handover[key])))

    def per_switch(self) -> dict[int, tuple[int, int, int]]:
        """switch number -> (owned occurrences within NEAR_S of its handover, missing, doubled)."""
        out = {s.n: [0, 0, 0] for s in self.switches}
        for occ in self.expected:
            s = self.switch_of(occ)
            if abs(occ[1] - to_ms(s.handover[occ[0]])) <= NEAR_S * 1000:
                out[s.n][0] += 1
        for m in self.missing:
            out[self.switch_of(m[0]).n][1] += 1
        for dbl in self.doubled:
            out[self.switch_of(dbl[0]).n][2] += 1
        return {n: (a, b, c) for n, (a, b, c) in out.items()}

    def table(self) -> str:
        rows = [
            f"{'#':>3} {'direction':<9} {'mode':<6} {'from':<9} {'took s':>6} {'handover - end ms':>19} "
            f"{'near':>4} {'missing':>7} {'doubled':>7}"
        ]
        per = self.per_switch()
        for s in self.switches:
            lead = [to_ms(v) - s.done_ms for v in s.handover.values()]
            near, missing, doubled = per[s.n]
            rows.append(
                f"{s.n:>3} {s.direction:<9} {s.mode:<6} {s.from_state:<9} {s.took_s:>6.1f} "
                f"{f'{min(lead)} .. {max(lead)}':>19} {near:>4} {missing:>7} {doubled:>7}"
            )
        by_kind = Counter((s.direction, s.mode) for s in self.switches)
        rows.append(
            f"{len(self.switches)} switches: "
            + ", ".join(f"{n} {direction} ({mode})" for (direction, mode), n in sorted(by_kind.items()))
            + f"; missing {len(self.missing)}, doubled {len(self.doubled)}"
        )
        return "\n".join(rows)

    def summary(self) -> str:
        b = self.business
        both = sum(1 for o in self.expected.values() if o == "both")
        new_owned = [o for o, side in self.expected.items() if side in ("new", "both")]
        twice = sum(n - 1 for cids in self.new_fires.values() for n in cids.values())
        lags = sorted(b.ran.lag_s[next(iter(self.new_fires[o]))] for o in new_owned if o in self.new_fires)
        modes = sorted({c.mode for c in self.cycles})
        cuts = [c.cut for c in self.cycles if c.cut is not None]
        h_lead = [to_ms(v) - s.done_ms for s in cuts for v in s.handover.values()]
        f_lead = [to_ms(v) - c.back.started_ms for c in self.cycles for v in c.back.handover.values()]
        took: dict[str, float] = {}
        for s in self.switches:
            took[s.direction] = max(took.get(s.direction, 0.0), s.took_s)
        return (
            f"window {self.window_start:%H:%M:%S}..{self.horizon:%H:%M:%S} "
            f"({(self.horizon - self.window_start).total_seconds():.0f} s), {len(self.cycles)} cycle(s), "
            f"{'/'.join(modes)} dual-run; {len(self.expected)} occurrences: legacy only "
            f"{len(self.expected) - len(new_owned)}, new only {len(new_owned) - both}, both (live dual-run) {both}; "
            f"legacy fired {sum(self.legacy_fires.values())}, new invoked {len(self.new_fires)} (invoked "
            f"twice {twice}); missing {len(self.missing)}, doubled {len(self.doubled)}, "
            f"strays {len(self.strays)}, split command ids {len(self.split_ids)}; "
            f"new-side start lag p50 {lags[len(lags) // 2] if lags else float('nan'):.3f}s "
            f"max {lags[-1] if lags else float('nan'):.3f}s; "
            + (
                f"H - cutover end {min(h_lead)} .. {max(h_lead)} ms, rewound {sum(s.report.rewound for s in cuts)}; "
                if cuts
                else ""
            )
            + f"F - rollback start {min(f_lead)} .. {max(f_lead)} ms; longest switch "
            f"{', '.join(f'{k} {v:.1f}s' for k, v in took.items())}; total {time.monotonic() - b.started:.1f}s"
        )

    def explain(self, occ: Occurrence) -> str:
        """When each side fired an occurrence, against the switch it belongs to (times in ms
        from the switch's start): what tells a legacy ring fire from a late scan, or a
        shadow copy from a real fire."""
        b, (key, ms) = self.business, occ
        s = self.switch_of(occ)
        legacy = [
            f"{a.trigger_type}@{a.trigger_ms - s.started_ms:+d}"
            for a in b.admin.sim.attempts
            if str(a.job_id) == key and a.scheduled_ms == ms
        ]
        recs = [
            f"{r.state.value}@{to_ms(r.fired_at) - s.started_ms:+d}" if r.fired_at else r.state.value
            for r in b.store.fired_between(b.biz, from_ms(ms), from_ms(ms + 1))
            if r.trigger_id == b.tid_of[key]
        ]
        return (
            f"{occ} T{ms - s.started_ms:+d}: owner {self.expected.get(occ)}, switch #{s.n} {s.direction} "
            f"({s.mode}, {s.started_ms - to_ms(s.handover[key]):+d} from its handover, took {s.took_s:.1f}s); "
            f"legacy fired {legacy or 'never'}; new-side records {recs or 'none'}, invoked "
            f"{dict(self.new_fires.get(occ, {})) or 'never'}"
        )

    def detail(self) -> str:
        proc = self.business.proc
        handovers = "\n".join(
            f"#{s.n} {s.direction} ({s.mode}): "
            + ", ".join(f"{k} {v:%H:%M:%S.%f}"[:-3] for k, v in sorted(s.handover.items()))
            for s in self.switches
        )
        odd = [m[0] for m in self.missing[:6]] + [dbl[0] for dbl in self.doubled[:6]]
        explained = "\n".join(self.explain(o) for o in odd)
        return (
            f"\n{self.summary()}\n{self.table()}\nmissing {self.missing[:8]}\ndoubled {self.doubled[:8]}\n"
            f"strays {self.strays[:8]}\nsplit command ids {self.split_ids[:8]}\n"
            f"invoked twice {self.invoked_twice[:8]}\n{explained}\nhandovers\n"
            f"{handovers}\n--- scheduler log (tail)\n{proc.log_text()[-3000:] if proc else ''}"
        )

    def check(self) -> None:
        """Every phase saw fires on its side; nothing missing, doubled, off the schedule or
        under two command ids; every fired record of the new side's occurrences succeeded."""
        b, detail = self.business, self.detail()
        for i, c in enumerate(self.cycles):
            nxt = self.cycles[i + 1].dual_from if i + 1 < len(self.cycles) else self.horizon
            for key in b.key_of.values():
                f_ms = to_ms(c.back.handover[key])
                if c.cut is not None:
                    h_ms = to_ms(c.cut.handover[key])
                    assert sum(1 for (k, ms), o in self.expected.items() if k == key and h_ms <= ms < f_ms) >= 3, (
                        f"cycle {i + 1}, job {key}: fewer than 3 occurrences on the new side alone" + detail
                    )
                if not c.shadow:
                    assert any(
                        k == key and o == "both" and to_ms(self.d[i][key]) <= ms < f_ms
                        for (k, ms), o in self.expected.items()
                    ), f"cycle {i + 1}, job {key}: no occurrence fired by both sides" + detail
                assert any(k == key and f_ms <= ms <= to_ms(nxt) for k, ms in self.legacy_fires), (
                    f"cycle {i + 1}, job {key}: the legacy side fired nothing after the rollback" + detail
                )
        assert not self.missing, f"{len(self.missing)} occurrence(s) not fired by the side that owns them" + detail
        assert not self.doubled, (
            f"{len(self.doubled)} occurrence(s) fired twice or by a side that does not own them" + detail
        )
        assert not self.strays, f"{len(self.strays)} fire(s) off the schedule" + detail
        assert not self.split_ids, "an occurrence delivered under two command ids" + detail
        assert not self.invoked_twice, (
            f"{len(self.invoked_twice)} command id(s) invoked more than once by the one executor: "
            f"{self.invoked_twice[:5]}" + detail
        )
        # the store's view of the new side: one fired record per occurrence, each succeeded
        cids = {next(iter(self.new_fires[o])) for o, side in self.expected.items() if side in ("new", "both")}
        end = self.horizon + timedelta(seconds=5)

        def records_final() -> bool:
            recs: dict[str, FiredRecord] = {
                r.command_id: r for r in b.store.fired_between(b.biz, self.window_start, end)
            }
            return all(c in recs and recs[c].state is FiredState.SUCCEEDED for c in cids)

        assert _wait(records_final, 30), "fired records of the new side's occurrences not all succeeded" + detail
        state = BusinessRegistry(migrator_store(b.store)).get(b.biz)
        assert state is not None and state.state is BusinessState.LEGACY


@contextmanager
def running_business(tmp_path: Path) -> Iterator[Business]:
    """A started Business on fresh databases; everything it started is stopped after."""
    server_url("etcd")
    server_url("pulsar")
    with mariadb_database("cutl") as legacy_url, mariadb_database("cutt") as target_url:
        b = Business(tmp_path, legacy_url, target_url)
        try:
            b.start()
            yield b
        finally:
            b.close()


# -- the tests ---------------------------------------------------------------------------


@pytest.mark.parametrize("shadow", [True, False], ids=["shadow-dual-run", "live-dual-run"])
def test_cutover_then_rollback_under_steady_fires_fires_every_occurrence_once(tmp_path: Path, shadow: bool) -> None:
    with running_business(tmp_path) as b:
        # 1. legacy alone
        b.wait_until_ms(b.legacy_from_ms + int(LEGACY_ONLY_S * 1000), "the clock did not move")
        assert b.admin.sim.fired, f"the legacy admin fired nothing ({b.admin.error!r})"
        # 2. dual-run, 3. cutover, 4. rollback while the new side fires, then legacy again
        cycle = b.cycle(shadow)
        b.settle(cycle)
        verdict = b.verdict([cycle])
        print(f"{verdict.summary()}\n{verdict.table()}")
        verdict.check()


def test_a_cutover_again_after_a_rollback_fires_every_occurrence_once(tmp_path: Path) -> None:
    """The stress variant's heart in the default run: a business cut over and rolled back,
    then dual-run again (the rollback's fence lifted), cut over again and rolled back again.
    Every occurrence around the four handovers is fired exactly once by the side that owns
    it (both sides during the live dual-run), each new-side command invoked once."""
    with running_business(tmp_path) as b:
        b.wait_until_ms(b.legacy_from_ms + int(LEGACY_ONLY_S * 1000), "the clock did not move")
        first = b.cycle(shadow=True)
        b.settle(first)
        again = b.cycle(shadow=False)  # a live dual-run after the rollback, then the cutover again
        b.settle(again)
        verdict = b.verdict([first, again])
        print(f"{verdict.summary()}\n{verdict.table()}")
        assert [(s.direction, s.from_state) for s in verdict.switches] == [
            ("cutover", "dual_run"),
            ("rollback", "cutover"),
            ("cutover", "dual_run"),
            ("rollback", "cutover"),
        ]
        # each handover has owned occurrences on both of its sides within NEAR_S: the
        # check below is about real occurrences around it, not an empty stretch
        assert all(near >= 10 for near, _m, _d in verdict.per_switch().values()), verdict.table()
        verdict.check()


@pytest.mark.slow
def test_fifty_switches_beside_cpu_hogs_fire_every_occurrence_once(tmp_path: Path) -> None:
    """The same scenario, switched again and again while two processes keep the CPUs busy:
    30 cycles alternating shadow and live dual-runs, every third pair rolled back straight
    from the dual-run, the others cut over and rolled back: 50 switches. Each switch is
    checked on its own (the occurrences nearest its handover): 0 missing, 0 doubled.
    Bounded: about 15 minutes; the hogs end themselves after STRESS_BUDGET_S."""
    started = time.monotonic()
    with cpu_hogs(STRESS_HOGS, STRESS_BUDGET_S) as hogs, running_business(tmp_path) as b:
        b.wait_until_ms(b.legacy_from_ms + int(LEGACY_ONLY_S * 1000), "the clock did not move")
        cycles: list[Cycle] = []
        for i in range(STRESS_CYCLES):
            assert all(h.poll() is None for h in hogs), "a CPU hog ended early"
            assert time.monotonic() - started < STRESS_BUDGET_S - 120, f"over budget after {i} cycles"
            cycles.append(b.cycle(shadow=i % 2 == 0, abort=i % 6 in (4, 5)))
            b.settle(cycles[-1])
        verdict = b.verdict(cycles)
        print(
            f"\n{verdict.table()}\n{verdict.summary()}\nstress: {STRESS_HOGS} CPU hogs (pids "
            f"{[h.pid for h in hogs]}), {os.cpu_count()} CPUs, {time.monotonic() - started:.0f} s"
        )
        switches = verdict.switches
        assert len(switches) >= 50
        assert {(s.direction, s.mode) for s in switches} == {
            (d, m) for d in ("cutover", "rollback") for m in ("shadow", "live")
        }
        verdict.check()
