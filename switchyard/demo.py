"""The main job on the embedded default: the whole migration story with no servers.

SQLite for the two legacy databases and the Switchyard store, the in-process bus, a
local election, and a compressed (driven) clock:

1. two legacy schedulers (an xxl-job 3.4 admin and the batch center) run their seeded
   jobs for an hour and write their logs;
2. the businesses are migrated: plan, then run (a few bad rows are quarantined);
3. every business enters dual-run (one in shadow mode), both paths fire for two hours;
   one business's new handler starts failing half-way (an injected regression);
4. each business is compared (verdict, reasons, noise baseline) and reported (HTML,
   Markdown, JSON, and an overview page);
5. a ready business is cut over, the regressed one is rolled back, and the story runs
   on past the switch for longer than the scheduler's lookahead (what the new side had
   published before a rollback runs out inside it); meanwhile an operator pauses a job
   of a business still in dual-run and resumes it (`PauseEffect`: nothing of it runs in
   the pause, each later occurrence runs once);
6. the boundary is checked occurrence by occurrence: after each switch's handover every
   occurrence is fired by exactly one side (the side switched to), and the check counts
   the occurrences it covered, so an empty check cannot pass for a clean one.
"""

from __future__ import annotations

import shutil
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Protocol

from dbkit.connections import begin
from dbkit.engine import make_engine
from dualrun.boundary_store import BoundaryTally, put_boundary_tally
from dualrun.collect import CompareRequest, compare_business
from dualrun.model import Window
from dualrun.settings import CompareSettings
from dualrun.verdict_store import put_comparison
from legacy_sim.batchcenter import BatchCenterSimulator
from legacy_sim.seed import seed_batchcenter, seed_xxljob
from legacy_sim.xxljob import XxlJobSimulator
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch, Link, SwitchReport, first_at_or_after, links_of
from migrator.legacy_control import BatchCenterControl, XxlJobControl
from migrator.store import MigratorStore
from migrator.target import TargetWriter
from readers.batchcenter.reader import BatchCenterReader
from readers.legacy_ddl.loader import create_legacy_schema
from readers.ports import LegacyReader
from readers.records import SourceSystem
from readers.xxljob.reader import XxlJobReader
from reports.load import load_overview, load_report
from reports.write import write_report
from scheduler_core import operations
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import ManualClock, SteppingClock
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.fence import FenceService
from scheduler_core.model import Epoch, FiredState, TriggerId, TriggerState, parse_command_id
from scheduler_core.occurrences import next_after
from scheduler_core.ports import MessageBus, TriggerStore
from scheduler_core.scheduler import SchedulerCore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import StopService, is_stop_skip
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import to_ms
from switchyard.schema import init_schema
from switchyard.wiring import DualRunGate, dualrun_store, migrator_store

START = datetime(2026, 12, 1, 0, 0, tzinfo=timezone.utc)
STEP = timedelta(seconds=10)
LEGACY_ONLY = timedelta(hours=1)
DUAL_RUN = timedelta(hours=2)
# past the switch: a rollback without a fence hands over at the first occurrence the new
# side has not published, up to one lookahead ahead; the story runs 15 minutes past that,
# so the boundary of either direction has occurrences to check
AFTER_SWITCH = SchedulerSettings().lookahead + timedelta(minutes=15)
# the operator's pause (PauseEffect): into the time after the switches, how long, and how
# long the resumed job runs before the story goes on
PAUSE_AFTER = timedelta(minutes=3)
PAUSE_FOR = timedelta(minutes=10)
PAUSE_TAIL = timedelta(minutes=5)
VERDICT_WINDOW = timedelta(hours=1)  # the last hour of dual-run (less its last minute)
REGRESSION_AT = timedelta(minutes=45)  # into dual-run


@dataclass
class BusinessLine:
    biz_code: str
    source: str
    state: str = ""
    verdict: str = ""
    reasons: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    # fires of each side over the verdict's window, as the verdict counted them (shadow
    # records included; nothing published ahead and not yet due)
    legacy_fires: int = 0
    new_fires: int = 0
    switched: str = ""  # "cutover" / "rollback": the switch whose boundary was checked
    boundary_checked: int = 0  # occurrences from the handover to the horizon, over every job
    boundary_missing: int = 0
    boundary_doubled: int = 0
    report: str = ""


@dataclass
class RollbackEffect:
    """How fast the rollback took effect on the new side (the regressed handler stays
    broken through it): invocations after the rollback are only of occurrences before the
    fence, none at or after it."""

    fence_at: str | None = None
    fenced: int = 0  # published commands recorded as skipped by the fence
    invoked_after: int = 0
    invoked_at_or_after_fence: int = 0
    last_invocation_s: float = 0.0  # seconds after the rollback returned


@dataclass
class PauseEffect:
    """An operator's pause of one job of a business still in dual-run, then its resume
    (`scheduler_core.stops`): nothing of it runs at or after S, whatever was published up
    to the lookahead ahead; from R on it runs again, each occurrence once."""

    biz_code: str = ""
    job_code: str = ""
    paused_from: str | None = None  # S
    resumed_from: str | None = None  # R
    published_ahead: int = 0  # commands already on the bus at the pause, recorded skipped
    skipped: int = 0  # occurrences in [S, R) recorded skipped by the stop, never invoked
    invoked_in_pause: int = 0  # handler invocations for an occurrence in [S, R): must be 0
    ran_after_resume: int = 0  # occurrences from R on that ran
    doubled_after_resume: int = 0  # items from R on that ran more than once: must be 0


@dataclass
class DemoResult:
    workdir: str
    overview: str
    businesses: list[BusinessLine] = field(default_factory=list)
    rollback: RollbackEffect = field(default_factory=RollbackEffect)
    pause: PauseEffect = field(default_factory=PauseEffect)
    window: Window | None = None  # the verdicts' window: the table's fire counts are over it
    quarantined: int = 0
    migrated: int = 0
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "workdir": self.workdir,
            "overview": self.overview,
            "quarantined": self.quarantined,
            "migrated": self.migrated,
            "seconds": round(self.seconds, 1),
            "window": None if self.window is None else self.window.as_dict(),
            "rollback": dict(self.rollback.__dict__),
            "pause": dict(self.pause.__dict__),
            "businesses": [
                b.__dict__ | {"reasons": list(b.reasons), "warnings": list(b.warnings)} for b in self.businesses
            ],
        }


@dataclass(frozen=True)
class Handover:
    """One switch of a business: per legacy job, the first occurrence owned by the side
    switched to (`to_new`: the new side after a cutover, legacy after a rollback)."""

    to_new: bool
    first: dict[str, datetime]
    at: datetime | None = None  # when the switch was made


class _Legacy:
    """One legacy system: its database, reader, simulator and switch."""

    def __init__(self, source: str, url: str, clock: ManualClock) -> None:
        self.source = source
        self.engine = make_engine(url)
        if source == SourceSystem.XXL_JOB:
            create_legacy_schema(self.engine, source, "3.4")
            self.seed = seed_xxljob(
                self.engine,
                "3.4",
                groups=2,
                jobs_per_group=6,
                bad_rows=2,
                malformed_crons=1,
                executors_per_group=2,
                rng_seed=11,
                base_time=START,
            )
            _quicken_xxljob(self.engine, set(self.seed.bad_keys) | set(self.seed.malformed_cron_keys))
            self.reader: LegacyReader = XxlJobReader(self.engine)
            self.sim: Any = XxlJobSimulator(self.engine, lineage="3.4", clock=clock)
            self.control: Any = XxlJobControl(self.engine, clock)
        else:
            create_legacy_schema(self.engine, source, None)
            self.seed = seed_batchcenter(
                self.engine,
                businesses=2,
                tasks_per_business=6,
                bad_rows=2,
                malformed_crons=1,
                rng_seed=11,
                base_time=START,
            )
            _quicken_batchcenter(self.engine, set(self.seed.bad_keys) | set(self.seed.malformed_cron_keys))
            self.reader = BatchCenterReader(self.engine)
            self.sim = BatchCenterSimulator(self.engine, clock=clock)
            # while the control waits for a RUNNING task to finish, the simulated center goes
            # on running (real time would let it), so the wait ends instead of spinning out
            # its patience on a frozen center
            self.control = BatchCenterControl(self.engine, SteppingClock(clock, self.sim.step))


# The seed's schedules are realistic (hourly, daily); the demo's clock covers a few hours,
# so its running recurring jobs are given minute-scale schedules of the same kinds.
QUICK_CRONS = ("0 * * * * ?", "0 0/2 * * * ?", "30 0/3 * * * ?")


def _quicken_xxljob(engine: Any, bad: set[str]) -> None:
    from sqlalchemy import text

    first = int((START + timedelta(minutes=1)).timestamp() * 1000)
    with begin(engine) as conn:
        ids = [
            i
            for (i,) in conn.execute(
                text(
                    "SELECT id FROM xxl_job_info WHERE trigger_status = 1 AND glue_type = 'BEAN' "
                    "AND schedule_type IN ('CRON', 'FIX_RATE') ORDER BY id"
                )
            )
            if str(i) not in bad
        ]  # bad rows stay as they are: they are quarantined, not run
        for n, job_id in enumerate(ids):
            if n % 4 == 3:
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET schedule_type = 'FIX_RATE', schedule_conf = '90', "
                        "trigger_next_time = :t WHERE id = :id"
                    ),
                    {"t": first, "id": job_id},
                )
            else:
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = :c, "
                        "trigger_next_time = :t WHERE id = :id"
                    ),
                    {"c": QUICK_CRONS[n % 3], "t": first, "id": job_id},
                )


def _quicken_batchcenter(engine: Any, bad: set[str]) -> None:
    from sqlalchemy import text

    wall = (START + timedelta(hours=8, minutes=1)).strftime("%Y-%m-%d %H:%M:%S")  # Asia/Shanghai wall time
    with begin(engine) as conn:
        ids = [
            i
            for (i,) in conn.execute(
                text("SELECT id FROM bc_task WHERE status IN (0, 1) AND task_type IN (2, 3) ORDER BY id")
            )
            if str(i) not in bad
        ]
        for n, task_id in enumerate(ids):
            if n % 4 == 3:
                conn.execute(
                    text(
                        "UPDATE bc_task SET task_type = 3, interval_sec = 120, cron_expr = NULL, "
                        "status = 0, fire_time = :f WHERE id = :id"
                    ),
                    {"f": wall, "id": task_id},
                )
            else:
                conn.execute(
                    text("UPDATE bc_task SET task_type = 2, cron_expr = :c, status = 0, fire_time = :f WHERE id = :id"),
                    {"c": QUICK_CRONS[n % 3], "f": wall, "id": task_id},
                )


# written into the scratch directory the demo creates: only such a directory is wiped again
DEMO_MARK = ".switchyard-demo"


class WorkdirNotOurs(ValueError):
    """The scratch directory holds files the demo did not put there."""


def prepare_workdir(workdir: Path) -> None:
    """An empty scratch directory: a second run wipes the first run's directory (it carries
    the demo's mark), an empty or missing one is used as is, and anything else is refused
    (a `--workdir` typo must never delete someone's files)."""
    if workdir.exists():
        if not workdir.is_dir():
            raise WorkdirNotOurs(f"{workdir} is not a directory")
        if (workdir / DEMO_MARK).is_file() or _made_before_the_mark(workdir):
            shutil.rmtree(workdir)  # a second run starts clean
        elif any(workdir.iterdir()):
            raise WorkdirNotOurs(
                f"{workdir} is not empty and was not made by the demo (no {DEMO_MARK} in it): "
                "name a new or empty directory"
            )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / DEMO_MARK).write_text("a scratch directory of `switchyard demo`: wiped at its next run\n")


def _made_before_the_mark(workdir: Path) -> bool:
    """A scratch directory of a demo older than its mark: its three databases and reports."""
    made = ("switchyard.db", "legacy-xxljob.db", "legacy-batchcenter.db")
    return all((workdir / name).is_file() for name in made) and (workdir / "reports").is_dir()


def run_demo(workdir: Path, say: Callable[[str], None] = print) -> DemoResult:
    started = time.perf_counter()
    prepare_workdir(workdir)
    (workdir / "reports").mkdir(parents=True)
    clock = ManualClock(START)
    legacies = [
        _Legacy("xxl-job", f"sqlite:///{workdir / 'legacy-xxljob.db'}", clock),
        _Legacy("batch-center", f"sqlite:///{workdir / 'legacy-batchcenter.db'}", clock),
    ]
    sims = [lg.sim for lg in legacies]
    target = make_engine(f"sqlite:///{workdir / 'switchyard.db'}")
    init_schema(target, partitions=4)
    store = SqlTriggerStore(target, clock)
    own, dual = migrator_store(store), dualrun_store(store)
    say(
        f"legacy databases seeded: xxl-job {legacies[0].seed.good + legacies[0].seed.bad} jobs, "
        f"batch center {legacies[1].seed.good + legacies[1].seed.bad} tasks (a few of them bad)"
    )

    # 1. the legacy schedulers run alone
    _advance(clock, LEGACY_ONLY, sims, None)
    say(f"legacy schedulers ran for {LEGACY_ONLY}: {sum(len(lg.sim.fired) for lg in legacies)} fires logged")

    # 2. migrate: plan, then run
    result = DemoResult(workdir=str(workdir), overview="")
    writer = TargetWriter(store, own)
    for lg in legacies:
        m = Migrator(lg.reader, writer, clock)
        plan = m.plan()
        say(f"plan {lg.source}: {plan.counts['create']} to create, {plan.counts['quarantine']} quarantined")
        run = m.run()
        result.migrated += run.counts["create"]
        result.quarantined += run.counts["quarantine"]
        again = Migrator(lg.reader, writer, clock).run()
        assert again.rows_written == 0, "an unchanged re-run writes nothing"
    registry = BusinessRegistry(own)
    businesses = registry.all()
    say(
        f"migrated {result.migrated} definitions of {len(businesses)} businesses; "
        f"{result.quarantined} quarantined with their field and reason"
    )

    # 3. dual-run: every business, the first batch-center one in shadow
    bus = InProcessBus(clock)
    shadow_biz = next(b.biz_code for b in businesses if b.source_system == "batch-center")
    regressed = next(b.biz_code for b in businesses if b.source_system == "xxl-job")
    cut = next(b.biz_code for b in businesses if b.source_system == "xxl-job" and b.biz_code != regressed)
    # the rollback fence travels on the in-process bus's control channel, which every
    # executor follows (on Pulsar: a control topic each executor process reads)
    switches = {
        lg.source: BusinessSwitch(
            store,
            own,
            lg.control,
            clock,
            DualRunGate(dual),
            max_verdict_age=timedelta(days=1),
            fences=FenceService(store, bus),
        )
        for lg in legacies
    }
    for b in businesses:
        switches[b.source_system].start_dual_run(
            b.biz_code, shadow=b.biz_code == shadow_biz, actor="demo", reason="dual-run in the demo"
        )
    dual_start = clock.now()
    regression = {"on": False}
    invoked: list[tuple[str, datetime, datetime]] = []  # (business, scheduled at, invoked at) of every new-side call
    calls: Counter[tuple[int, datetime, int]] = Counter()  # invocations per (trigger, scheduled at, item)
    # retries at once: the demo's time is the manual clock, and a backoff sleeps on the
    # wall clock (the regressed handler's retries slept 18 s of a 38 s demo for nothing)
    executors = [Executor(bus, b.biz_code, clock=clock, retry_backoff=timedelta(0)) for b in businesses]
    for ex in executors:
        ex.handler()(_handler(ex.biz_code, regressed, regression, invoked, clock, calls))
    new_side = _inline_side(store, bus, clock, executors)
    _advance(clock, REGRESSION_AT, sims, new_side)
    regression["on"] = True
    say(f"dual-run: both paths fired for {REGRESSION_AT}; injecting a regression into {regressed}'s new handler")
    _advance(clock, DUAL_RUN - REGRESSION_AT, sims, new_side)

    # 4. compare every business over the last hour, against its own earlier hour (A/A); the
    # default evidence minimums (30 min, 10 expected fires per job) hold on this window
    window = Window(start=clock.now() - VERDICT_WINDOW, end=clock.now() - timedelta(minutes=1))
    result.window = window
    for b in businesses:
        reader = next(lg.reader for lg in legacies if lg.source == b.source_system)
        comparison = compare_business(
            store,
            dual,
            reader,
            CompareRequest(biz_code=b.biz_code, window=window),
            settings=CompareSettings(window=VERDICT_WINDOW),
            now=clock.now(),
        )
        put_comparison(dual, comparison)
        line = BusinessLine(
            b.biz_code,
            b.source_system,
            verdict=comparison.verdict.value,
            reasons=tuple(comparison.reasons),
            warnings=tuple(comparison.warnings),
            legacy_fires=comparison.legacy.fires,
            new_fires=comparison.new.fires,
        )
        result.businesses.append(line)
    say("compared: " + ", ".join(f"{ln.biz_code} {ln.verdict}" for ln in result.businesses))

    # 5. cut over a ready business, roll the regressed one back
    lines = {ln.biz_code: ln for ln in result.businesses}
    if lines[cut].verdict == "ready":
        rep = switches["xxl-job"].cutover(cut, actor="demo", reason="verdict ready")
    else:
        rep = switches["xxl-job"].cutover(
            cut, actor="demo", force=True, reason="demo: cut over despite " + "; ".join(lines[cut].reasons)
        )
    handovers = {
        cut: Handover(
            to_new=True, first={k: datetime.fromisoformat(v) for k, v in rep.handover.items()}, at=clock.now()
        )
    }
    say(f"cut over {cut} (handover of {len(rep.handover)} jobs{', forced' if rep.forced else ''})")
    back = switches["xxl-job"].rollback(regressed, actor="demo", reason="injected regression: failures on the new path")
    handovers[regressed] = _rollback_handover(back, switches["xxl-job"].links(regressed), clock.now())
    first = min(handovers[regressed].first.values(), default=None)
    say(
        f"rolled {regressed} back to legacy: legacy alone fires its {len(handovers[regressed].first)} jobs from "
        f"{'-' if first is None else first.isoformat()} on"
        + (
            f" (the rollback fence at {back.fence_at})"
            if back.fence_at
            else " (no rollback fence: the new side runs what it had already published until then)"
        )
    )
    # the regression stays on: the fence, not the handler, is what stops the new side
    rolled_back_at = clock.now()
    # meanwhile an operator pauses a job of a business still in dual-run, and resumes it
    paused_biz = next(b.biz_code for b in businesses if b.biz_code not in (shadow_biz, regressed, cut))
    _advance(clock, PAUSE_AFTER, sims, new_side)
    result.pause = _pause_and_resume(store, bus, clock, sims, new_side, paused_biz, dual_start, calls)
    say(
        f"paused {result.pause.job_code} of {paused_biz} (in dual-run) from {result.pause.paused_from}: "
        f"{result.pause.published_ahead} command(s) already published recorded skipped, {result.pause.skipped} "
        "occurrence(s) of the pause skipped, "
        f"{result.pause.invoked_in_pause} invocation(s) in the pause; resumed from {result.pause.resumed_from}: "
        f"{result.pause.ran_after_resume} occurrence(s) ran since, {result.pause.doubled_after_resume} twice"
    )
    _advance(clock, AFTER_SWITCH - PAUSE_AFTER - PAUSE_FOR - PAUSE_TAIL, sims, new_side)
    after = [(at, when) for biz, at, when in invoked if biz == regressed and when >= rolled_back_at]
    fence_at = datetime.fromisoformat(back.fence_at) if back.fence_at else None
    result.rollback = RollbackEffect(
        fence_at=back.fence_at,
        fenced=back.fenced,
        invoked_after=len(after),
        invoked_at_or_after_fence=sum(1 for at, _w in after if fence_at is not None and at >= fence_at),
        last_invocation_s=max(((w - rolled_back_at).total_seconds() for _a, w in after), default=0.0),
    )
    say(
        f"after the rollback the new side invoked {regressed}'s handler {len(after)} time(s), the last "
        f"{result.rollback.last_invocation_s:.0f} s after it (occurrences before the fence); "
        f"{result.rollback.invoked_at_or_after_fence} at or after the fence; {back.fenced} published command(s) "
        "recorded as skipped by it"
    )

    # 6. the boundary, occurrence by occurrence, and the reports
    for b in registry.all():
        line = lines[b.biz_code]
        line.state = b.state.value
        lg = next(x for x in legacies if x.source == b.source_system)
        if b.biz_code in handovers:
            legacy_fires, new_fires = _fires_after(store, own, lg, b.biz_code, dual_start)
            switch = handovers[b.biz_code]
            line.switched = "cutover" if switch.to_new else "rollback"
            horizon = clock.now() - timedelta(minutes=1)
            line.boundary_checked, line.boundary_missing, line.boundary_doubled = _boundary(
                switch,
                legacy_fires,
                new_fires,
                horizon=horizon,
                triggers={ln.source_key: ln.trigger for ln in switches[b.source_system].links(b.biz_code)},
            )
            # kept in the store: the reports, the overview and the console show it too
            put_boundary_tally(
                dual,
                BoundaryTally(
                    biz_code=b.biz_code,
                    switch=line.switched,
                    switched_at=switch.at or clock.now(),
                    checked_at=clock.now(),
                    horizon=horizon,
                    checked=line.boundary_checked,
                    missing=line.boundary_missing,
                    doubled=line.boundary_doubled,
                ),
            )
        out = workdir / "reports" / f"{b.biz_code}.html"
        model = load_report(dual, b.biz_code, now=clock.now())
        write_report(model.content(), "html", out)
        write_report(model.content(), "md", out.with_suffix(".md"))
        write_report(model.content(), "json", out.with_suffix(".json"))
        line.report = str(out)
    overview = workdir / "reports" / "index.html"
    write_report(load_overview(dual, now=clock.now(), reports_dir=overview.parent).content(), "html", overview)
    result.overview = str(overview)
    for ex in executors:
        ex.close()
    new_side[0].shutdown()
    target.dispose()
    for lg in legacies:
        lg.engine.dispose()
    result.seconds = time.perf_counter() - started
    return result


def _handler(
    biz_code: str,
    regressed: str,
    regression: dict[str, bool],
    invoked: list[tuple[str, datetime, datetime]],
    clock: ManualClock,
    calls: Counter[tuple[int, datetime, int]],
) -> Callable[[ExecutionContext], HandlerResult]:
    def handle(ctx: ExecutionContext) -> HandlerResult:
        invoked.append((biz_code, ctx.scheduled_at, clock.now()))
        calls[(ctx.trigger_id, ctx.scheduled_at, ctx.item_index)] += 1
        # the business's work would run here (through its legacy bridge in production)
        if biz_code == regressed and regression["on"] and ctx.item_index % 3 == 0:
            return HandlerResult(ok=False, message="NullPointerException in the new handler (injected)")
        return HandlerResult(ok=True)

    return handle


NewSide = tuple[SchedulerCore, list[Executor], ResultConsumer]


class _Simulator(Protocol):
    def step(self, until: datetime) -> Sequence[Any]: ...


def _inline_side(
    store: TriggerStore, bus: MessageBus, clock: ManualClock, executors: list[Executor], **settings: Any
) -> NewSide:
    """The new side stepped on the caller's thread: epoch 1's core with no waits (plus
    `settings`), its executors and the result consumer, for `_advance`."""
    store.claim_epoch(Epoch(1))
    core = SchedulerCore(
        store,
        bus,
        clock,
        Epoch(1),
        SchedulerSettings(idle_wait=timedelta(0), busy_wait=timedelta(0), jitter=timedelta(0), **settings),
        inline=True,
    )
    return core, executors, ResultConsumer(bus, store, core.metrics)


def _advance(clock: ManualClock, span: timedelta, sims: Sequence[_Simulator], new_side: NewSide | None) -> None:
    """Step the clock by STEP up to `span`: each legacy simulator fires what is due, then
    the new side (when given) ticks, executes and records the results, all on this thread."""
    end = clock.now() + span
    while clock.now() < end:
        clock.advance(STEP)
        for sim in sims:
            sim.step(clock.now())
        if new_side is not None:
            core, executors, consumer = new_side
            core.tick_all()
            for ex in executors:
                while ex.poll_once(batch=500, timeout=timedelta(0)):
                    pass
            while consumer.poll(timeout=timedelta(0)):
                pass


def _pause_and_resume(
    store: SqlTriggerStore,
    bus: MessageBus,
    clock: ManualClock,
    sims: Sequence[_Simulator],
    new_side: NewSide,
    biz_code: str,
    since: datetime,
    calls: Counter[tuple[int, datetime, int]],
) -> PauseEffect:
    """Pause the business's busiest job (stored, broadcast on the bus), run PAUSE_FOR,
    resume it and run PAUSE_TAIL; what the records say of both."""
    busiest = Counter(r.trigger_id for r in store.fired_between(biz_code, since, clock.now())).most_common(1)
    tid = TriggerId(busiest[0][0])
    trig = store.get_trigger(tid)
    assert trig is not None
    stops = StopService(SqlStops(store), bus)
    s = clock.now() + timedelta(seconds=1)  # as `switchyard trigger pause` chooses S
    paused = operations.pause(store, stops, [tid], s, actor="demo", reason="downstream maintenance")
    _advance(clock, PAUSE_FOR, sims, new_side)
    r = clock.now() + timedelta(seconds=2)
    operations.resume(store, stops, SqlSupersedes(store), [tid], r)
    _advance(clock, PAUSE_TAIL, sims, new_side)
    recs = [x for x in store.fired_between(biz_code, s, clock.now()) if x.trigger_id == tid]
    in_pause = [x for x in recs if x.scheduled_at < r]
    mine = {(at, item): n for (t, at, item), n in calls.items() if t == tid and at >= s}
    after = {(at, item): n for (at, item), n in mine.items() if at >= r}
    return PauseEffect(
        biz_code=biz_code,
        job_code=trig.job_code,
        paused_from=s.isoformat(),
        resumed_from=r.isoformat(),
        published_ahead=paused.records,
        skipped=sum(1 for x in in_pause if is_stop_skip(x.state, x.message)),
        invoked_in_pause=sum(n for (at, _i), n in mine.items() if at < r),
        ran_after_resume=len({at for at, _i in after}),
        doubled_after_resume=sum(1 for n in after.values() if n > 1),
    )


def _rollback_handover(report: SwitchReport, links: list[Link], at: datetime | None = None) -> Handover:
    """Per job, the first occurrence legacy owns after a rollback. A job legacy was started
    for has it in the report; a job legacy kept firing through the dual-run has none there,
    and legacy owns what the new side does not invoke: from the rollback's fence when one
    is raised, else from the first occurrence the new side had not published (the trigger
    was taken off the scheduler with next_fire_at there)."""
    first = {k: datetime.fromisoformat(v) for k, v in report.handover.items()}
    fence = datetime.fromisoformat(report.fence_at) if report.fence_at else None
    for ln in links:
        trig = ln.trigger
        if ln.source_key in first or trig.state is not TriggerState.CREATED:
            continue  # handed over in the report, or never live on the new side
        at = trig.next_fire_at if fence is None else first_at_or_after(trig, fence)
        if at is not None:
            first[ln.source_key] = min(at, trig.next_fire_at)
    return Handover(to_new=False, first=first, at=at)


def _fires_after(
    store: SqlTriggerStore, own: MigratorStore, lg: _Legacy, biz: str, since: datetime
) -> tuple[set[tuple[str, int]], set[tuple[str, int]]]:
    """(source key, scheduled ms) fired by each side since `since` (one per occurrence;
    the new side's skipped and shadow records are not fires)."""
    links = {ln.job_code: ln.source_key for ln in links_of(store, own, biz)}
    keys = set(links.values())
    legacy = {
        (str(f[0]), _ms(f[1])) for f in lg.sim.fired if str(f[0]) in keys and _ms(f[1]) >= since.timestamp() * 1000
    }
    new: set[tuple[str, int]] = set()
    records = [
        r for r in store.fired_between(biz, since, store.clock.now() + timedelta(hours=1)) if r.job_code in links
    ]
    # a pending record is a fire once its trigger recorded the occurrence (FiredState)
    published = store.outcome_recorded([r for r in records if r.state is FiredState.PENDING])
    for r in records:
        unpublished = r.state is FiredState.PENDING and r.command_id not in published
        if r.state is not FiredState.SKIPPED and not unpublished and not _shadow_only(r):
            new.add((links[r.job_code], int(parse_command_id(r.command_id)[1])))
    return legacy, new


def _ms(value: int | datetime) -> int:
    return to_ms(value) if isinstance(value, datetime) else int(value)


def _shadow_only(record: Any) -> bool:
    return record.state is FiredState.RECEIVED and "shadow" in (record.message or "")


def _boundary(
    switch: Handover,
    legacy: set[tuple[str, int]],
    new: set[tuple[str, int]],
    *,
    horizon: datetime,
    triggers: dict[str, Any],
) -> tuple[int, int, int]:
    """Across the switch, every occurrence of the schedule from the handover time on is
    fired by the side that owns it now, and not by the other. Returns (checked, missing,
    doubled): `checked` counts the occurrences looked at, so that 0 missing / 0 doubled
    over nothing is told from a clean boundary."""
    from dataclasses import replace

    checked = missing = doubled = 0
    horizon_ms = int(horizon.timestamp() * 1000)
    to_new = switch.to_new
    for key, first in switch.first.items():
        trig = triggers.get(key)
        if trig is None:
            continue
        anchored = replace(trig, next_fire_at=first)  # fixed rate: the grid through the handover time
        expected: list[int] = []
        cursor: datetime | None = first
        while cursor is not None and cursor.timestamp() * 1000 <= horizon_ms and len(expected) < 10_000:
            expected.append(int(cursor.timestamp() * 1000))
            cursor = next_after(anchored, cursor)
        owner, other = (new, legacy) if to_new else (legacy, new)
        owned = {ms for k, ms in owner if k == key}
        stray = {ms for k, ms in other if k == key}
        checked += len(expected)
        missing += sum(1 for ms in expected if ms not in owned)
        doubled += sum(1 for ms in expected if ms in owned and ms in stray)
    return checked, missing, doubled
