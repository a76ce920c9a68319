"""`XxlJobControl.stop` against the xxl-job <= 2.4.2 stop/scan race (notes §6).

On <= 2.4.2 the admin's scan UPDATEs every row it pre-read unconditionally, so a stop
written while a scan holds the job writes `trigger_status = 1` back (the simulator's
`stop_races_scan`, schema lineage '2.4'). The control's contract: after `stop` returns,
every job is stopped and stays stopped, and for each job the settled
`trigger_next_time` it returns (the handover H) is the first occurrence the legacy side
will not fire: every occurrence before H was fired by legacy, none at or after H is.

The control waits on its clock; here the clock is the simulated admin's, so while the
control waits the admin runs on (scans, ring, triggers), as it would in real time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import StaticPool

from dualrun.boundary import HandoverPlan, check_boundary
from dualrun.model import Window
from legacy_sim import XxlJobSimulator
from legacy_sim.seed import seed_xxljob
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from migrator.ports import GateDecision
from migrator.target import TargetWriter
from readers.legacy_ddl import create_legacy_schema, xxljob_metadata
from readers.xxljob.control import read_trigger_state
from readers.xxljob.reader import XxlJobReader
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock, SteppingClock
from scheduler_core.cron import CronExpression
from scheduler_core.executor import Executor, HandlerResult
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.demo import _advance, _inline_side
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store, migrator_store

UTC = timezone.utc
T0 = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)  # 14:00:00 in Asia/Shanghai
RACE_LOG = "lost to a concurrent scan"


def at(hh: int, mm: int, ss: int = 0) -> datetime:
    """An instant on 2026-12-02 given as Asia/Shanghai wall time."""
    return datetime(2026, 12, 2, hh - 8, mm, ss, tzinfo=UTC)


def AdminClock(clock: ManualClock, sim: XxlJobSimulator) -> SteppingClock:  # noqa: N802 - reads as the thing it makes
    """The driven clock as the control sees it: each wait lets the simulated admin run."""
    return SteppingClock(clock, sim.step)


def _occurrences(cron: str, since: datetime, until: datetime) -> list[int]:
    """The cron's occurrences in [since, until), epoch ms."""
    expr = CronExpression(cron, "Asia/Shanghai")
    out, cur = [], expr.next_after(since - timedelta(milliseconds=1))
    while cur is not None and cur < until:
        out.append(to_ms(cur))
        cur = expr.next_after(cur)
    return out


def _xxl_24(jobs: dict[int, str], first: datetime) -> Engine:
    """An xxl-job 2.4-schema database: one group, running CRON jobs id -> cron, each due
    at its first occurrence from `first`."""
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "xxl-job", "2.4")
    md = xxljob_metadata("2.4")
    with engine.begin() as conn:
        conn.execute(
            md.tables["xxl_job_group"]
            .insert()
            .values(id=1, app_name="app-1", title="app 1", address_type=0, address_list="http://10.0.0.1:9999/")
        )
        for job_id, cron in jobs.items():
            conn.execute(
                md.tables["xxl_job_info"]
                .insert()
                .values(
                    id=job_id,
                    job_group=1,
                    job_desc=f"job {job_id}",
                    author="t",
                    executor_route_strategy="FIRST",
                    executor_handler=f"handler{job_id}",
                    executor_param="",
                    executor_block_strategy="SERIAL_EXECUTION",
                    executor_timeout=0,
                    executor_fail_retry_count=0,
                    glue_type="BEAN",
                    glue_updatetime=datetime(2026, 12, 2, 9, 0),
                    child_jobid="",
                    trigger_status=1,
                    trigger_last_time=0,
                    trigger_next_time=_occurrences(cron, first, first + timedelta(days=1))[0],
                    schedule_type="CRON",
                    schedule_conf=cron,
                    misfire_strategy="DO_NOTHING",
                )
            )
    return engine


def _status(engine: Engine, job_id: int) -> int:
    return read_trigger_state(engine, [job_id])[job_id].trigger_status


def _log_rows_since(engine: Engine, wall: str) -> int:
    with engine.connect() as conn:
        found = conn.execute(text("SELECT COUNT(*) FROM xxl_job_log WHERE trigger_time >= :t"), {"t": wall})
        return int(found.scalar_one())


@pytest.fixture
def race_log(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.INFO, logger="legacy_sim.xxljob")
    yield caplog


@pytest.mark.parametrize("races", [True, False], ids=["2.4.2-race", "2.5-no-race"])
def test_a_stop_lost_to_a_scan_is_stopped_again_and_nothing_fires_from_the_handover(
    races: bool, race_log: pytest.LogCaptureFixture
) -> None:
    engine = _xxl_24({1: "0 * * * * ?"}, first=at(14, 1))
    clock = ManualClock(T0)
    sim = XxlJobSimulator(engine, lineage="2.4", clock=clock, stop_races_scan=races)
    sim.step(at(14, 1, 55))  # the next scan (14:01:56) pre-reads 14:02
    admin = AdminClock(clock, sim)
    control = XxlJobControl(engine, admin)

    settled = control.stop(["1"])

    raced = RACE_LOG in race_log.text
    assert raced is races
    if races:
        # the scan wrote status 1 back and pre-read 14:02; the control saw it and stopped again
        assert settled.notes == ("stop of job(s) [1] overwritten by a scan; stopping again (attempt 1)",)
        assert len(admin.slept) == 2  # settle, re-check, settle again after the second stop
        handover = at(14, 3)
    else:
        assert settled.notes == ()
        assert len(admin.slept) == 1
        handover = at(14, 2)
    assert settled.next_due == {"1": handover}
    assert _status(engine, 1) == 0
    # the legacy side settles at the handover: everything before it fired, nothing from it on
    sim.step(at(14, 10))
    fired = sorted(f.scheduled_ms for f in sim.fired)
    assert fired == [to_ms(at(14, m)) for m in range(1, handover.minute)]
    assert _status(engine, 1) == 0, "the re-stop sticks"
    assert _log_rows_since(engine, f"2026-12-02 14:{handover.minute:02d}:00") == 0


@pytest.mark.parametrize("stop_at_s", range(30, 60, 3))
def test_the_settled_next_time_is_the_first_occurrence_legacy_will_not_fire(
    stop_at_s: int, race_log: pytest.LogCaptureFixture
) -> None:
    """Every phase of the stop against the scan cadence and the pre-read window, for jobs
    due at different seconds: the contract holds whether or not the stop was lost."""
    crons = {1: "0 * * * * ?", 2: "20 * * * * ?", 3: "*/15 * * * * ?", 4: "58 * * * * ?"}
    engine = _xxl_24(crons, first=at(14, 1))
    clock = ManualClock(T0)
    sim = XxlJobSimulator(engine, lineage="2.4", clock=clock, stop_races_scan=True)
    sim.step(at(14, 1) + timedelta(seconds=stop_at_s))
    control = XxlJobControl(engine, AdminClock(clock, sim))
    settled = control.stop([str(j) for j in crons])
    lost = {int(r.getMessage().split()[5]) for r in race_log.records if RACE_LOG in r.getMessage()}
    restopped = {int(j) for n in settled.notes for j in re.search(r"\[([\d, ]+)\]", n).group(1).split(",")}  # type: ignore[union-attr]
    assert restopped == lost, (settled.notes, lost)
    sim.step(at(14, 15))
    for job_id, cron in crons.items():
        assert _status(engine, job_id) == 0
        handover = settled.next_due[str(job_id)]
        assert handover is not None
        mine = sorted(f.scheduled_ms for f in sim.fired if f.job_id == job_id)
        # every occurrence before the handover fired on legacy, none at or after it
        assert mine == _occurrences(cron, at(14, 1), handover), f"job {job_id}, handover {handover}"


def _scan_keeps_winning(clock: ManualClock, engine: Engine) -> SteppingClock:
    """An admin whose scans switch the jobs back on after every stop (worse than the
    simulator, which loses each stop at most once): the control must give up."""

    def scan(_now: datetime) -> None:
        with engine.begin() as conn:
            conn.execute(text("UPDATE xxl_job_info SET trigger_status = 1 WHERE id = 1"))

    return SteppingClock(clock, scan)


def test_a_stop_that_never_settles_refuses_and_leaves_the_legacy_job_running() -> None:
    engine = _xxl_24({1: "0 * * * * ?", 2: "0 * * * * ?"}, first=at(14, 1))
    with engine.begin() as conn:  # job 2 was off before the cutover: it must stay off
        conn.execute(text("UPDATE xxl_job_info SET trigger_status = 0 WHERE id = 2"))
    clock = ManualClock(T0)
    control = XxlJobControl(engine, _scan_keeps_winning(clock, engine), rechecks=2)
    refused = r"keep being switched back on.*after 3 re-stops.*1 job\(s\) it had switched off are left running"
    with pytest.raises(RuntimeError, match=refused):
        control.stop(["1", "2"])
    # not stopped half-way: the job the cutover switched off runs on legacy at its own next time
    state = read_trigger_state(engine, [1, 2])
    assert (state[1].trigger_status, state[1].trigger_next_time_ms) == (1, to_ms(at(14, 1)))
    assert state[2].trigger_status == 0


# -- the whole cutover of a 2.4 business, with the new side running -------------------------


START = datetime(2026, 12, 1, 0, 0, tzinfo=UTC)


class _Ready:
    def decision(self, biz_code: str) -> GateDecision:
        return GateDecision(ready=True, comparison_id=1, computed_at=None)


@pytest.mark.parametrize("shadow", [False, True], ids=["live", "shadow"])
def test_cutover_of_a_2_4_2_business_restops_and_the_report_matching_shows_a_clean_boundary(
    tmp_path: Path, shadow: bool, race_log: pytest.LogCaptureFixture
) -> None:
    clock = ManualClock(START)
    legacy = make_engine(f"sqlite:///{tmp_path / 'xxl.db'}")
    create_legacy_schema(legacy, "xxl-job", "2.4")
    seed_xxljob(
        legacy,
        "2.4",
        groups=1,
        jobs_per_group=8,
        bad_rows=0,
        malformed_crons=0,
        executors_per_group=1,
        rng_seed=3,
        base_time=START,
    )
    first = to_ms(START + timedelta(minutes=1))
    with legacy.begin() as conn:  # minute-scale schedules, all running, due on whole minutes
        conn.execute(
            text(
                "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = '0 * * * * ?', "
                "trigger_status = 1, trigger_next_time = :t, glue_type = 'BEAN', misfire_strategy = "
                "'DO_NOTHING'"
            ),
            {"t": first},
        )
    sim = XxlJobSimulator(legacy, lineage="2.4", clock=clock, stop_races_scan=True)
    target = make_engine(f"sqlite:///{tmp_path / 't.db'}")
    init_schema(target, 4)
    store = SqlTriggerStore(target, clock)
    reader = XxlJobReader(legacy)
    _advance(clock, timedelta(minutes=3), [sim], None)
    Migrator(reader, TargetWriter(store, migrator_store(store)), clock).run()
    biz = BusinessRegistry(migrator_store(store)).all()[0].biz_code
    control = XxlJobControl(legacy, AdminClock(clock, sim))
    sw = BusinessSwitch(store, migrator_store(store), control, clock, _Ready(), max_verdict_age=timedelta(days=9999))
    sw.start_dual_run(biz, shadow=shadow, actor="test")
    bus = InProcessBus(clock)
    ex = Executor(bus, biz, clock=clock)
    ex.handler()(lambda ctx: HandlerResult(ok=True))
    side = _inline_side(store, bus, clock, [ex])
    dual_start = clock.now()
    _advance(clock, timedelta(minutes=5), [sim], side)
    # step the admin to xx:55, between its idle scans at xx:51 and xx:56 (the one that
    # pre-reads the next minute), then cut over: the stop races that scan
    clock.advance(timedelta(seconds=55))
    sim.step(clock.now())
    cut_at = clock.now()
    rep = sw.cutover(biz, actor="test", reason="race")

    assert RACE_LOG in race_log.text, "the stop did not race a scan: move the cutover instant"
    assert any("overwritten by a scan; stopping again" in n for n in rep.notes), rep.notes
    # the raced scan pre-read the next minute (it still fires, on legacy): the handover is
    # the minute after it
    assert rep.handover and set(rep.handover.values()) == {(cut_at + timedelta(seconds=65)).isoformat()}
    with legacy.connect() as conn:
        assert {s for (s,) in conn.execute(text("SELECT trigger_status FROM xxl_job_info"))} == {0}
    _advance(clock, timedelta(minutes=10), [sim], side)
    handover = datetime.fromisoformat(next(iter(rep.handover.values())))
    assert all(f.scheduled_ms < to_ms(handover) for f in sim.fired), "a legacy fire at or after the handover"
    check = check_boundary(
        store,
        dualrun_store(store),
        reader,
        biz,
        [HandoverPlan(rep.handover, to_new=True, at=cut_at)],
        window=Window(start=dual_start, end=clock.now() - timedelta(minutes=1)),
        now=clock.now(),
    )
    assert check.owned > 0
    assert check.clean, "\n".join(map(str, check.issues[:20]))
    ex.close()
    side[0].shutdown()
    target.dispose()
    legacy.dispose()
