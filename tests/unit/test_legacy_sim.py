"""legacy_sim: the xxl-job and batch-center simulators fire what the real schedulers
fire, when they fire it, and write the logs they write (SQLite, driven clock)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from itertools import takewhile
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text, update
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import StaticPool

from legacy_sim import (
    BatchCenterSimulator,
    Result,
    XxlJobSimulator,
    always,
    fail_times,
    succeed,
)
from legacy_sim.xxljob import LOST_MSG, RETRY_BANNER
from readers.batchcenter.flag import pause_tasks, resume_tasks, set_business_enabled, set_migrated
from readers.legacy_ddl import batch_center_metadata, create_legacy_schema, xxljob_metadata
from readers.xxljob.control import set_trigger_status
from readers.xxljob.logs import TriggerType, trigger_type
from scheduler_core.clock import ManualClock
from scheduler_core.cron import CronExpression

UTC = timezone.utc
T0 = datetime(2026, 12, 2, 6, 0, 0, tzinfo=UTC)  # 14:00:00 in Asia/Shanghai
A1, A2, A3 = "http://10.0.0.1:9999/", "http://10.0.0.2:9999/", "http://10.0.0.3:9999/"


def at(hh: int, mm: int, ss: int = 0, ms: int = 0) -> datetime:
    """An instant on 2026-12-02 given as Asia/Shanghai wall time."""
    return datetime(2026, 12, 2, hh - 8, mm, ss, ms * 1000, tzinfo=UTC)


def ms(when: datetime) -> int:
    return int(when.timestamp() * 1000)


def sh(hh: int, mm: int, ss: int = 0) -> datetime:
    """A naive Asia/Shanghai wall time on 2026-12-02 (what the legacy DATETIMEs hold)."""
    return datetime(2026, 12, 2, hh, mm, ss)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)


def _engine() -> Engine:
    return create_engine("sqlite://", poolclass=StaticPool)


# -- xxl-job fixtures ----------------------------------------------------------------------


class Xxl:
    """An xxl-job database of one lineage, with helpers to add groups and jobs."""

    def __init__(self, lineage: str = "3.4") -> None:
        self.lineage = lineage
        self.engine = _engine()
        create_legacy_schema(self.engine, "xxl-job", lineage)
        self.md = xxljob_metadata(lineage)

    def group(self, gid: int = 1, addresses: tuple[str, ...] = (A1,), address_type: int = 0) -> None:
        title = "name" if self.lineage == "master" else "title"
        with self.engine.begin() as conn:
            conn.execute(self.md.tables["xxl_job_group"].insert().values(
                id=gid, app_name=f"app-{gid}", **{title: f"app {gid}"}, address_type=address_type,
                address_list=",".join(addresses),
            ))  # fmt: skip

    def job(
        self, job_id: int, *, cron: str | None = None, rate: int | None = None, next_at: datetime | int | None = None,
        status: int = 1, route: str | None = "FIRST", retries: int = 0, misfire: str = "DO_NOTHING",
        timeout: int = 0, child: str = "", glue: bool = True, group: int = 1, kind: str | None = None,
    ) -> None:  # fmt: skip
        next_ms = next_at if isinstance(next_at, int) else (ms(next_at) if next_at is not None else 0)
        row: dict[str, Any] = {
            "id": job_id, "job_group": group, "author": "t", "executor_route_strategy": route,
            "executor_handler": f"handler{job_id}", "executor_param": f"p{job_id}",
            "executor_block_strategy": "SERIAL_EXECUTION", "executor_timeout": timeout,
            "executor_fail_retry_count": retries, "glue_type": "BEAN",
            "glue_updatetime": sh(9, 0) if glue else None, "child_jobid": child,
            "trigger_status": status, "trigger_last_time": 0, "trigger_next_time": next_ms,
            ("name" if self.lineage == "master" else "job_desc"): f"job {job_id}",
        }  # fmt: skip
        if self.lineage == "2.2":
            row["job_cron"] = cron
        else:
            stype = kind or ("CRON" if cron is not None else "FIX_RATE" if rate is not None else "NONE")
            row.update(schedule_type=stype, schedule_conf=cron if cron is not None else (str(rate) if rate else None),
                       misfire_strategy=misfire)  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(self.md.tables["xxl_job_info"].insert().values(**row))

    def info(self, job_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            row = conn.execute(text("SELECT * FROM xxl_job_info WHERE id = :i"), {"i": job_id}).mappings().one()
        return dict(row)

    def logs(self, job_id: int | None = None) -> list[dict[str, Any]]:
        """Rows as stored: on SQLite the DATETIMEs are the text MySQL would print."""
        sql = "SELECT * FROM xxl_job_log" + (" WHERE job_id = :j" if job_id is not None else "") + " ORDER BY id"
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(text(sql), {"j": job_id}).mappings()]

    def sim(self, clock: ManualClock, **kw: Any) -> XxlJobSimulator:
        return XxlJobSimulator(self.engine, lineage=self.lineage, clock=clock, **kw)


def minutes(*hm: tuple[int, int]) -> list[int]:
    return [ms(at(h, m)) for h, m in hm]


# -- xxl-job: schedules and log rows -------------------------------------------------------


def test_xxl_cron_fires_every_occurrence_and_writes_the_log_row_as_the_admin_does(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(addresses=(A1, A2))
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 2500))

    fired = sim.step(at(14, 5, 30))

    assert fired == [(1, m, 0) for m in minutes((14, 1), (14, 2), (14, 3), (14, 4), (14, 5))]
    rows = db.logs(1)
    assert [r["trigger_time"] for r in rows] == [f"2026-12-02 14:0{m}:00" for m in range(1, 6)]  # admin wall time
    assert [r["handle_time"] for r in rows] == [f"2026-12-02 14:0{m}:02" for m in range(1, 6)]  # whole seconds
    first = rows[0]
    assert (first["trigger_code"], first["handle_code"], first["alarm_status"]) == (200, 200, 0)
    assert first["executor_address"] == A1 and first["executor_sharding_param"] is None
    assert (first["executor_handler"], first["executor_param"], first["executor_fail_retry_count"]) == (
        "handler1",
        "p1",
        0,
    )
    assert trigger_type(first["trigger_msg"]) is TriggerType.CRON  # the readers parse what we write
    info = db.info(1)
    assert (info["trigger_last_time"], info["trigger_next_time"]) == (ms(at(14, 5)), ms(at(14, 6)))
    assert clock.now() == at(14, 5, 30)


def test_xxl_skips_idle_scans_without_changing_what_fires(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 0 * * * ?", next_at=at(15, 0))  # hourly
    sim = db.sim(clock)
    sim.step(T0 + timedelta(days=2))
    assert len(sim.fired) == 48
    assert sim.scans < 48 * 4


def test_xxl_fix_rate_chains_from_the_nominal_time(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, rate=30, next_at=at(14, 0, 30))
    sim = db.sim(clock)
    sim.step(at(14, 2, 10))
    assert [f.scheduled_ms for f in sim.fired] == [ms(at(14, 0, 30)) + k * 30_000 for k in range(4)]
    assert [r["trigger_time"] for r in db.logs()][:2] == ["2026-12-02 14:00:30", "2026-12-02 14:01:00"]


@pytest.mark.parametrize(("lineage", "second_fire"), [("2.4", at(14, 2, 0, 500)), ("3.4", at(14, 2, 1))])
def test_xxl_fix_rate_with_milliseconds_fires_at_the_start_of_its_second(
    clock: ManualClock, lineage: str, second_fire: datetime
) -> None:
    """The ring slot is floor(next / 1000): a next time with a millisecond part fires up
    to 999 ms *before* it, and trigger_time shows that second. 2.x keeps the millisecond
    phase; 3.4+ rounds the computed next time up to a whole second."""
    db = Xxl(lineage)
    db.group()
    db.job(1, rate=60, next_at=at(14, 1, 0, 500))  # e.g. set by a rollback
    sim = db.sim(clock)
    sim.step(at(14, 2, 30))
    assert [a.scheduled_ms for a in sim.attempts] == [ms(at(14, 1, 0, 500)), ms(second_fire)]
    assert sim.attempts[0].trigger_ms == ms(at(14, 1))  # 500 ms early
    assert db.logs()[0]["trigger_time"] == "2026-12-02 14:01:00"


def test_xxl_pre_reads_five_seconds_ahead_and_a_pre_read_fire_survives_a_stop(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock)

    sim.step(at(14, 0, 57))  # the scan at 14:00:55 pre-read 14:01:00 into the ring
    info = db.info(1)
    assert (info["trigger_last_time"], info["trigger_next_time"]) == (ms(at(14, 1)), ms(at(14, 2)))
    assert db.logs() == []  # not triggered yet: trigger_time is when it actually triggers

    assert set_trigger_status(db.engine, [1], 0) == (1,)  # the cutover stops the job
    sim.step(at(14, 5))
    assert sim.fired == [(1, ms(at(14, 1)), 0)]  # the tail: already in the ring, fires once
    assert db.logs()[0]["trigger_time"] == "2026-12-02 14:01:00"
    assert db.info(1)["trigger_status"] == 0


def test_xxl_disabling_between_steps_stops_and_re_enabling_resumes_exactly_there(clock: ManualClock) -> None:
    db = Xxl("2.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock)
    sim.step(at(14, 1, 30))
    set_trigger_status(db.engine, [1], 0)
    sim.step(at(14, 6))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1))
    assert db.info(1)["trigger_next_time"] == ms(at(14, 2))  # untouched while stopped

    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(at(14, 8)))  # rollback
    sim.step(at(14, 10, 30))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 8), (14, 9), (14, 10))


def test_xxl_a_job_enabled_slightly_in_the_past_fires_late_and_moves_on_from_now(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 0, 58), status=0)
    sim = db.sim(clock)
    sim.step(at(14, 0, 59))
    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(at(14, 0, 58)))
    sim.step(at(14, 2, 30))
    late, ontime = sim.attempts
    assert (late.trigger_type, late.scheduled_ms, late.trigger_ms) == ("CRON", ms(at(14, 0, 58)), ms(at(14, 1)))
    # 0-5 s late still fires as a normal CRON fire; next = nextAfter(now = 14:01:00), so
    # the 14:01:00 occurrence is absorbed by the late fire
    assert ontime.scheduled_ms == ms(at(14, 2))


@pytest.mark.parametrize("strategy", ["DO_NOTHING", "FIRE_ONCE_NOW"])
def test_xxl_misfire_after_an_outage(clock: ManualClock, strategy: str) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1), misfire=strategy)
    sim = db.sim(clock)
    sim.step(at(14, 1, 30))
    sim.outage(at(14, 10))  # restart at 14:10:00; the first scan follows the 5 s start-up sleep
    sim.step(at(14, 12, 30))

    kinds = [(a.trigger_type, a.scheduled_ms, a.trigger_ms) for a in sim.attempts]
    misfire = [("MISFIRE", ms(at(14, 2)), ms(at(14, 10, 5)))] if strategy == "FIRE_ONCE_NOW" else []
    assert kinds == [
        ("CRON", ms(at(14, 1)), ms(at(14, 1))),
        *misfire,  # one fire, however many were missed
        ("CRON", ms(at(14, 11)), ms(at(14, 11))),  # next = nextAfter(now): no catch-up
        ("CRON", ms(at(14, 12)), ms(at(14, 12))),
    ]
    if misfire:
        row = db.logs()[1]
        assert row["trigger_time"] == "2026-12-02 14:10:05"
        assert trigger_type(row["trigger_msg"]) is TriggerType.MISFIRE


def test_xxl_misfire_of_a_next_time_set_far_in_the_past(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(13, 50), misfire="FIRE_ONCE_NOW")
    db.job(2, cron="0 * * * * ?", next_at=at(13, 50))
    sim = db.sim(clock)
    sim.step(at(14, 0, 30))
    assert [(a.job_id, a.trigger_type, a.scheduled_ms) for a in sim.attempts] == [(1, "MISFIRE", ms(at(13, 50)))]
    assert db.info(1)["trigger_last_time"] == ms(at(13, 50))  # the missed nominal, even when nothing fired
    assert db.info(2)["trigger_last_time"] == ms(at(13, 50))
    assert db.info(2)["trigger_next_time"] == ms(at(14, 1))


def test_xxl_a_crash_loses_the_pre_read_ring(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock)
    sim.step(at(14, 1, 57))  # 14:02 is in the ring, next committed as 14:03
    sim.outage(at(14, 2, 30))
    sim.step(at(14, 3, 30))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 3))


def test_xxl_sharding_broadcast_writes_one_row_per_executor(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(1, addresses=(A1, A2, A3))
    db.group(2, addresses=())
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), route="SHARDING_BROADCAST")
    db.job(2, cron="0 1 14 * * ?", next_at=at(14, 1), route="SHARDING_BROADCAST", group=2)
    sim = db.sim(clock)
    sim.step(at(14, 2))
    assert sim.fired == [(1, ms(at(14, 1)), 0), (1, ms(at(14, 1)), 1), (1, ms(at(14, 1)), 2), (2, ms(at(14, 1)), 0)]
    rows = db.logs(1)
    assert [(r["executor_sharding_param"], r["executor_address"]) for r in rows] == [
        ("0/3", A1),
        ("1/3", A2),
        ("2/3", A3),
    ]
    assert {r["trigger_time"] for r in rows} == {"2026-12-02 14:01:00"}
    (empty,) = db.logs(2)  # no executor: a single failed attempt "0/1"
    assert (empty["executor_sharding_param"], empty["trigger_code"], empty["executor_address"]) == ("0/1", 500, None)


def test_xxl_failed_runs_are_retried_by_the_fail_monitor(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), retries=2)
    sim = db.sim(clock, outcome=always(Result.FAIL, 1000))
    sim.step(at(14, 1, 40))
    rows = db.logs(1)
    assert [r["executor_fail_retry_count"] for r in rows] == [2, 1, 0]  # retries *remaining*
    assert [r["trigger_time"] for r in rows] == ["2026-12-02 14:01:00", "2026-12-02 14:01:10", "2026-12-02 14:01:20"]
    assert [r["handle_code"] for r in rows] == [500, 500, 500]
    assert [trigger_type(r["trigger_msg"]) for r in rows] == [TriggerType.CRON, TriggerType.RETRY, TriggerType.RETRY]
    assert [r["trigger_msg"].endswith(RETRY_BANNER) for r in rows] == [True, True, False]
    assert [r["alarm_status"] for r in rows] == [2, 2, 2]
    assert sim.fired == [(1, ms(at(14, 1)), 0)]  # one logical fire
    assert [a.scheduled_ms for a in sim.attempts] == [ms(at(14, 1))] * 3


def test_xxl_a_retry_that_succeeds_ends_the_chain(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), retries=3)
    sim = db.sim(clock, outcome=fail_times(1))
    sim.step(at(14, 3))
    assert [(r["handle_code"], r["executor_fail_retry_count"]) for r in db.logs(1)] == [(500, 3), (200, 2)]


def test_xxl_broadcast_retry_re_runs_only_the_failed_shard(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(addresses=(A1, A2, A3))
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), route="SHARDING_BROADCAST", retries=1)
    calls: list[int] = []

    def outcome(job: Any, scheduled: datetime, shard: int) -> tuple[Result, int]:
        calls.append(shard)
        return (Result.FAIL if calls.count(1) == 1 and shard == 1 else Result.SUCCESS), 100

    sim = db.sim(clock, outcome=outcome)
    sim.step(at(14, 2))
    rows = db.logs(1)
    assert [(r["executor_sharding_param"], r["executor_address"], r["handle_code"]) for r in rows] == [
        ("0/3", A1, 200), ("1/3", A2, 500), ("2/3", A3, 200), ("1/3", A2, 200),
    ]  # fmt: skip


def test_xxl_trigger_failures_timeouts_and_lost_results(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(1, addresses=(A1,))
    db.group(2, addresses=(A2,))
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), timeout=2)
    db.job(2, cron="0 1 14 * * ?", next_at=at(14, 1))
    db.job(3, cron="0 1 14 * * ?", next_at=at(14, 1), group=2)  # A2 is in the registry: alive
    db.job(4, cron="0 1 14 * * ?", next_at=at(14, 1))
    with db.engine.begin() as conn:
        conn.execute(db.md.tables["xxl_job_registry"].insert().values(
            registry_group="EXECUTOR", registry_key="app-2", registry_value=A2, update_time=sh(14, 0)))  # fmt: skip
    answers = {
        1: (Result.SUCCESS, 5000),
        2: (Result.NO_CALLBACK, 0),
        3: (Result.NO_CALLBACK, 0),
        4: (Result.TRIGGER_FAIL, 0),
    }
    sim = db.sim(clock, outcome=lambda job, scheduled, shard: answers[job.id])
    sim.step(at(14, 10))
    timeout, lost, alive, refused = (db.logs(j)[0] for j in (1, 2, 3, 4))
    assert (timeout["handle_code"], timeout["handle_time"], timeout["handle_msg"]) == (
        502,
        "2026-12-02 14:01:02",
        "job execute timeout ",
    )
    assert (lost["trigger_code"], lost["handle_code"]) == (200, 0)  # still "running" for 10 minutes
    assert (refused["trigger_code"], refused["handle_code"]) == (500, 0)
    sim.step(at(14, 12))
    lost, alive = db.logs(2)[0], db.logs(3)[0]
    assert (lost["handle_code"], lost["handle_msg"], lost["handle_time"]) == (500, LOST_MSG, "2026-12-02 14:11:00")
    assert alive["handle_code"] == 0


def test_xxl_child_jobs_fire_after_a_successful_parent(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), child="2")
    db.job(2, status=0)  # NONE: only runs as a child
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 3000))
    sim.step(at(14, 2))
    (child,) = db.logs(2)
    assert trigger_type(child["trigger_msg"]) is TriggerType.PARENT
    assert child["trigger_time"] == "2026-12-02 14:01:03"
    assert sim.fired == [(1, ms(at(14, 1)), 0)]  # children are not scheduled fires


def test_xxl_a_row_the_real_trigger_would_throw_on_stays_at_trigger_code_0(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 1 14 * * ?", next_at=at(14, 1), glue=False)  # glue_updatetime NULL
    db.job(2, cron="0 1 14 * * ?", next_at=at(14, 1), route=None)
    sim = db.sim(clock)
    sim.step(at(14, 2))
    assert [(r["job_id"], r["trigger_code"], r["handle_code"]) for r in db.logs()] == [(1, 0, 0), (2, 0, 0)]


def test_xxl_a_schedule_without_a_next_time_stops_the_job(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 61 * * * ?", next_at=at(14, 1))  # saved by SQL, never validated
    sim = db.sim(clock)
    sim.step(at(14, 2))
    assert [f.scheduled_ms for f in sim.fired] == [ms(at(14, 1))]  # pushed to the ring before the refresh failed
    info = db.info(1)
    assert (info["trigger_status"], info["trigger_last_time"], info["trigger_next_time"]) == (0, 0, 0)
    assert sim.errors and sim.errors[0][1] == 1


def test_xxl_lineage_2_2_reads_job_cron_and_never_compensates(clock: ManualClock) -> None:
    db = Xxl("2.2")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(13, 0))
    sim = db.sim(clock)
    sim.step(at(14, 2, 30))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 2))


def test_xxl_master_lineage_runs(clock: ManualClock) -> None:
    db = Xxl("master")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    assert [f.scheduled_ms for f in db.sim(clock).step(at(14, 2, 1))] == minutes((14, 1), (14, 2))


@pytest.mark.parametrize("buggy", [False, True])
def test_xxl_lineage_b_cron_skips_month_end_L_in_short_months(clock: ManualClock, buggy: bool) -> None:
    db = Xxl("2.4")
    db.group()
    expr = "0 0 0 L * ?"
    first = CronExpression(expr, "Asia/Shanghai").next_after(T0)
    assert first is not None
    db.job(1, cron=expr, next_at=first)
    sim = db.sim(clock, skip_month_end_L=buggy)
    sim.step(datetime(2027, 8, 1, tzinfo=UTC))
    days = [datetime.fromtimestamp(f.scheduled_ms / 1000, CronExpression(expr, "Asia/Shanghai").tz).date().isoformat()
            for f in sim.fired]  # fmt: skip
    every = [
        "2026-12-31",
        "2027-01-31",
        "2027-02-28",
        "2027-03-31",
        "2027-04-30",
        "2027-05-31",
        "2027-06-30",
        "2027-07-31",
    ]
    assert days == ([d for d in every if d.endswith("-31")] if buggy else every)
    assert sim.scans < 100  # eight months of virtual time, a few scans per fire


def test_xxl_skip_month_end_L_is_a_lineage_2_4_option(clock: ManualClock) -> None:
    with pytest.raises(ValueError, match=r"2\.4"):
        Xxl("3.4").sim(clock, skip_month_end_L=True)


@pytest.mark.parametrize("races", [False, True])
def test_xxl_a_stop_can_be_lost_to_a_scan_on_2_4_2_and_earlier(clock: ManualClock, races: bool) -> None:
    db = Xxl("2.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock, stop_races_scan=races)
    sim.step(at(14, 1, 55))  # the next scan (14:01:56) pre-reads 14:02
    set_trigger_status(db.engine, [1], 0)
    sim.step(at(14, 3, 30))
    if not races:
        assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1))
        assert db.info(1)["trigger_status"] == 0
        return
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 2), (14, 3))
    assert db.info(1)["trigger_status"] == 1  # the scan wrote its stale status back
    set_trigger_status(db.engine, [1], 0)  # the cutover re-checks and stops again
    sim.step(at(14, 8))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 2), (14, 3))
    assert db.info(1)["trigger_status"] == 0


def test_xxl_restarting_into_the_pre_read_tail_fires_twice(clock: ManualClock) -> None:
    """The hazard a rollback must avoid: the stopped job's pre-read fire is still in the
    ring, and a restart at that same next time schedules it again."""
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock)
    sim.step(at(14, 0, 57))  # 14:01 is in the ring
    set_trigger_status(db.engine, [1], 0)
    sim.step(at(14, 0, 58))
    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(at(14, 1)))  # too early a rollback
    sim.step(at(14, 1, 30))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1), (14, 1))


def test_xxl_restarting_less_than_a_scan_period_ahead_fires_late_and_absorbs_the_next(clock: ManualClock) -> None:
    """Idle, the admin scans every 5 s: a next time set closer than that is found late
    (0-5 s late still fires) and the next one is computed from now (why xxl-job's own
    start() uses next(now + 5 s))."""
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="*/3 * * * * ?", next_at=at(14, 0, 3), status=0)
    sim = db.sim(clock)
    sim.step(at(14, 1, 5, 500))  # idle scans at 14:01:05, 14:01:10, ...
    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(at(14, 1, 6)))
    sim.step(at(14, 1, 13))
    assert [(a.scheduled_ms, a.trigger_ms) for a in sim.attempts] == [
        (ms(at(14, 1, 6)), ms(at(14, 1, 10))),  # found late by the 14:01:10 scan
        (ms(at(14, 1, 12)), ms(at(14, 1, 12))),  # 14:01:09 was absorbed
    ]


def test_xxl_a_stop_outside_the_pre_read_window_does_not_race(clock: ManualClock) -> None:
    db = Xxl("2.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock, stop_races_scan=True)
    sim.step(at(14, 1, 30))
    set_trigger_status(db.engine, [1], 0)
    sim.step(at(14, 5))
    assert [f.scheduled_ms for f in sim.fired] == minutes((14, 1))


def test_xxl_is_deterministic(clock: ManualClock) -> None:
    def run() -> tuple[list[Any], list[dict[str, Any]]]:
        db = Xxl("3.4")
        db.group(addresses=(A1, A2))
        db.job(1, cron="*/7 * * * * ?", next_at=at(14, 0, 7), route="ROUND", retries=1)
        db.job(2, rate=13, next_at=at(14, 0, 3), route="SHARDING_BROADCAST")
        sim = db.sim(
            ManualClock(T0),
            outcome=lambda j, s, i: (Result.FAIL if (j.id + i + s.second) % 3 == 0 else Result.SUCCESS, 900),
        )
        sim.step(at(14, 1))
        sim.step(at(14, 3))
        return list(sim.attempts), [{k: v for k, v in r.items()} for r in db.logs()]

    assert run() == run()


def _xxl_scenario(skip_idle: bool) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]:
    """A busy hour: every schedule type, broadcast, retries, lost results, timeouts,
    children, an outage, and a stop / restart between steps."""
    db = Xxl("2.4")
    db.group(1, addresses=(A1, A2))
    db.group(2, addresses=(A3,))
    db.job(1, cron="*/20 * * * * ?", next_at=at(14, 0, 20), route="ROUND", retries=2, child="5")
    db.job(2, rate=47, next_at=at(14, 0, 3, 250), route="SHARDING_BROADCAST", retries=1, misfire="FIRE_ONCE_NOW")
    db.job(3, cron="0 */3 * * * ?", next_at=at(14, 3), group=2, timeout=2, misfire="FIRE_ONCE_NOW")
    db.job(4, cron="30 0/7 * * * ?", next_at=at(14, 0, 30), retries=1)
    db.job(5, status=0)

    def outcome(job: Any, scheduled: datetime, shard: int) -> tuple[Result, int]:
        n = (job.id * 7 + shard * 3 + scheduled.minute + scheduled.second) % 11
        table = {0: Result.FAIL, 1: Result.NO_CALLBACK, 2: Result.TRIGGER_FAIL, 3: Result.FAIL}
        return table.get(n, Result.SUCCESS), 500 + 331 * n

    clk = ManualClock(T0)
    sim = db.sim(clk, outcome=outcome, skip_idle=skip_idle, stop_races_scan=True)
    sim.step(at(14, 9, 57))
    set_trigger_status(db.engine, [1, 4], 0)
    sim.step(at(14, 20, 2))
    sim.outage(at(14, 26, 40))
    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(at(14, 31)))
    sim.step(at(14, 45))
    return list(sim.attempts), db.logs(), [db.info(j) for j in range(1, 6)]


def test_xxl_skipping_idle_scans_and_monitor_passes_changes_nothing() -> None:
    fast, slow = _xxl_scenario(True), _xxl_scenario(False)
    assert len(fast[0]) > 120
    assert {a.trigger_type for a in fast[0]} == {"CRON", "MISFIRE", "RETRY", "PARENT"}
    assert fast == slow


# -- batch center fixtures -----------------------------------------------------------------


class Bc:
    def __init__(self, biz_codes: tuple[str, ...] = ("reminder", "coupon")) -> None:
        self.engine = _engine()
        create_legacy_schema(self.engine, "batch-center")
        self.md = batch_center_metadata()
        with self.engine.begin() as conn:
            for code in biz_codes:
                conn.execute(self.md.tables["bc_biz"].insert().values(
                    biz_code=code, biz_name=code, callback_base_url=f"http://{code}/", enabled=1))  # fmt: skip

    def task(
        self, task_id: int, *, task_type: int = 2, cron: str | None = None, interval: int | None = None,
        fire: datetime, biz: str = "reminder", shards: int = 1, shard_params: str | None = None, priority: int = 5,
        retries: int = 0, misfire: int = 1, status: int = 0, migrated: int = 0, end: datetime | None = None,
        timeout_ms: int = 30_000,
    ) -> None:  # fmt: skip
        with self.engine.begin() as conn:
            conn.execute(self.md.tables["bc_task"].insert().values(
                id=task_id, biz_code=biz, task_key=f"k{task_id}", task_type=task_type,
                cron_expr=cron if task_type == 2 else None, interval_sec=interval, fire_time=fire, end_time=end,
                callback_url=f"/cb/{task_id}", callback_timeout_ms=timeout_ms, shard_total=shards,
                shard_params=shard_params, priority=priority, max_retry=retries, misfire_policy=misfire,
                status=status, migrated=migrated, version=0,
            ))  # fmt: skip

    def row(self, task_id: int) -> dict[str, Any]:
        with self.engine.connect() as conn:
            return dict(conn.execute(text("SELECT * FROM bc_task WHERE id = :i"), {"i": task_id}).mappings().one())

    def logs(self, task_id: int | None = None) -> list[dict[str, Any]]:
        sql = "SELECT * FROM bc_task_exec_log" + (" WHERE task_id = :t" if task_id is not None else "") + " ORDER BY id"
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(text(sql), {"t": task_id}).mappings()]

    def sim(self, clock: ManualClock, **kw: Any) -> BatchCenterSimulator:
        return BatchCenterSimulator(self.engine, clock=clock, **kw)


def fires(sim: BatchCenterSimulator) -> list[tuple[int, datetime, int]]:
    return [tuple(f) for f in sim.fired]  # type: ignore[misc]


# -- batch center ------------------------------------------------------------------------


def test_bc_cron_task_fires_logs_and_stays_waiting_with_fire_time_moved_on(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 250))
    fired = sim.step(at(14, 3, 30))
    assert fired == [(1, at(14, m), 0) for m in (1, 2, 3)]
    rows = db.logs(1)
    assert [r["scheduled_time"] for r in rows] == [f"2026-12-02 14:0{m}:00.000000" for m in (1, 2, 3)]
    assert [r["start_time"] for r in rows] == [f"2026-12-02 14:0{m}:00.000000" for m in (1, 2, 3)]
    assert [r["end_time"] for r in rows] == [f"2026-12-02 14:0{m}:00.250000" for m in (1, 2, 3)]
    assert {(r["status"], r["http_status"], r["attempt"], r["shard_index"], r["biz_code"]) for r in rows} == {
        (1, 200, 0, 0, "reminder")
    }
    task = db.row(1)
    assert (task["status"], task["fire_time"], task["version"]) == (
        0,
        "2026-12-02 14:04:00",
        6,
    )  # claim + finish per run
    assert sim.polls < 20


def test_bc_task_is_running_while_its_callback_runs(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 10_000))
    sim.step(at(14, 1, 5))
    assert db.row(1)["status"] == 1
    (log,) = db.logs(1)
    assert (log["status"], log["end_time"]) == (0, None)
    sim.step(at(14, 1, 11))
    assert (db.row(1)["status"], db.logs(1)[0]["status"]) == (2, 1)  # DELAY -> SUCCESS
    assert db.row(1)["fire_time"] == "2026-12-02 14:01:00"


def test_bc_a_completion_the_database_refused_is_written_at_a_later_step(
    clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database goes away as a run ends (a restart): the worker writes the end and the
    task's completion at a later step, once; dropped, the task stayed RUNNING for good and
    the switch could never pause it (the chaos soak, seed 23: 50 minutes)."""
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 250))
    real = BatchCenterSimulator._complete
    calls = {"n": 0}

    def refused_once(self: BatchCenterSimulator, run: Any, at_ms: int) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("UPDATE bc_task", {}, Exception("Lost connection to MySQL server during query"))
        real(self, run, at_ms)

    monkeypatch.setattr(BatchCenterSimulator, "_complete", refused_once)
    with pytest.raises(OperationalError):
        sim.step(at(14, 1, 30))
    assert db.row(1)["status"] == 1  # RUNNING: its completion is still to be written
    sim.step(at(14, 2, 30))
    task = db.row(1)
    assert task["status"] == 0 and task["fire_time"] == "2026-12-02 14:03:00", task
    assert [r["status"] for r in db.logs(1)] == [1, 1]  # both runs ended SUCCESS, each logged once


def test_bc_fixed_rate_is_anchored_at_fire_time(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=3, interval=300, fire=sh(14, 0, 30))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 90_000))  # long callbacks do not drift it
    sim.step(at(14, 12))
    assert [f.scheduled_time for f in sim.fired] == [at(14, 0, 30), at(14, 5, 30), at(14, 10, 30)]
    assert db.row(1)["fire_time"] == "2026-12-02 14:15:30"


def test_bc_delay_task_failing_with_retries_ends_failed(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1), retries=2)
    sim = db.sim(clock, outcome=always(Result.FAIL, 1000))
    sim.step(at(14, 2))
    rows = db.logs(1)
    assert [(r["attempt"], r["status"], r["http_status"]) for r in rows] == [(0, 2, 500), (1, 2, 500), (2, 2, 500)]
    assert [r["start_time"] for r in rows] == [
        "2026-12-02 14:01:00.000000", "2026-12-02 14:01:06.000000", "2026-12-02 14:01:12.000000",
    ]  # fmt: skip
    assert {r["scheduled_time"] for r in rows} == {"2026-12-02 14:01:00.000000"}
    assert db.row(1)["status"] == 3
    assert len(sim.fired) == 1


def test_bc_retry_then_success(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 1 14 * * ?", fire=sh(14, 1), retries=3)
    sim = db.sim(clock, outcome=fail_times(1))
    sim.step(at(14, 2))
    assert [(r["attempt"], r["status"]) for r in db.logs(1)] == [(0, 2), (1, 1)]
    assert db.row(1)["fire_time"] == "2026-12-03 14:01:00"


def test_bc_timeouts_and_undispatched_attempts(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1), timeout_ms=1000)
    db.task(2, task_type=1, fire=sh(14, 1))
    answers = {1: (Result.SUCCESS, 5000), 2: (Result.TRIGGER_FAIL, 0)}
    sim = db.sim(clock, outcome=lambda task, scheduled, shard: answers[task.id])
    sim.step(at(14, 2))
    slow, never = db.logs(1)[0], db.logs(2)[0]
    assert (slow["status"], slow["http_status"], slow["end_time"]) == (3, None, "2026-12-02 14:01:01.000000")
    assert (never["start_time"], never["status"], never["end_time"]) == (None, 0, None)
    assert (db.row(1)["status"], db.row(2)["status"]) == (3, 3)


@pytest.mark.parametrize("policy", [1, 2])
def test_bc_misfire_after_downtime(clock: ManualClock, policy: int) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1), misfire=policy)
    sim = db.sim(clock, down_until=at(14, 10))
    sim.step(at(14, 11, 30))
    if policy == 1:  # FIRE_ONCE_NOW: once, for the missed time, then on from now
        assert fires(sim) == [(1, at(14, 1), 0), (1, at(14, 11), 0)]
        assert [a.misfire for a in sim.attempts] == [True, False]
        assert db.logs(1)[0]["start_time"] == "2026-12-02 14:10:00.000000"
    else:  # SKIP: nothing for the missed times
        assert fires(sim) == [(1, at(14, 11), 0)]
        assert sim.skipped == [(1, at(14, 1))]


def test_bc_late_within_the_threshold_is_not_a_misfire(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1), misfire=2)
    sim = db.sim(clock, down_until=at(14, 1, 30))
    sim.step(at(14, 2, 10))
    assert fires(sim) == [(1, at(14, 1), 0), (1, at(14, 2), 0)]  # next after the fire time, not after now


def test_bc_skip_misfire_keeps_fixed_rate_phase_and_cancels_a_missed_delay(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=3, interval=300, fire=sh(14, 0, 30), misfire=2)
    db.task(2, task_type=1, fire=sh(14, 1), misfire=2)
    db.task(3, task_type=1, fire=sh(14, 1), misfire=1)
    sim = db.sim(clock, down_until=at(14, 12))
    sim.step(at(14, 12, 1))
    assert db.row(1)["fire_time"] == "2026-12-02 14:15:30"
    assert db.row(2)["status"] == 4  # CANCELLED: never ran
    assert (db.row(3)["status"], fires(sim)) == (2, [(3, at(14, 1), 0)])


def test_bc_shards_and_shard_params(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1), shards=3)
    db.task(2, task_type=1, fire=sh(14, 1), shards=5, shard_params='[{"page": 0}, {"page": 1}]')
    sim = db.sim(clock)
    sim.step(at(14, 2))
    assert [r["shard_index"] for r in db.logs(1)] == [0, 1, 2]
    assert [r["shard_index"] for r in db.logs(2)] == [0, 1]
    assert fires(sim) == [(1, at(14, 1), s) for s in range(3)] + [(2, at(14, 1), s) for s in range(2)]


def test_bc_a_failed_shard_fails_the_delay_task(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1), shards=3)
    sim = db.sim(clock, outcome=lambda t, s, shard: (Result.FAIL if shard == 2 else Result.SUCCESS, 100))
    sim.step(at(14, 2))
    assert db.row(1)["status"] == 3


def test_bc_due_order_is_fire_time_then_priority(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 1), priority=9)
    db.task(2, task_type=1, fire=sh(14, 1), priority=1)
    db.task(3, task_type=1, fire=sh(14, 0, 59), priority=9)
    sim = db.sim(clock, down_until=at(14, 1, 5))  # all due in the same poll
    sim.step(at(14, 2))
    assert [f.task_id for f in sim.fired] == [3, 2, 1]


def test_bc_end_time_finishes_a_recurring_task(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1), end=sh(14, 3))
    sim = db.sim(clock)
    sim.step(at(14, 6))
    assert [f.scheduled_time for f in sim.fired] == [at(14, 1), at(14, 2), at(14, 3)]
    assert (db.row(1)["status"], db.row(1)["fire_time"]) == (2, "2026-12-02 14:03:00")


def test_bc_skips_migrated_rows_only_after_their_business_is_cut_over(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1), migrated=1)
    db.task(2, cron="0 * * * * ?", fire=sh(14, 1))
    db.task(3, cron="0 * * * * ?", fire=sh(14, 1), biz="coupon", migrated=1)
    sim = db.sim(clock)
    sim.step(at(14, 1, 30))
    assert sorted(f.task_id for f in sim.fired) == [1, 2, 3]  # migrated, but not cut over yet
    sim.cut_over_businesses.add("reminder")
    sim.step(at(14, 2, 30))
    assert sorted(f.task_id for f in sim.fired[3:]) == [2, 3]
    set_migrated(db.engine, [2], True)  # the migrator flags the rest
    sim.step(at(14, 3, 30))
    assert [f.task_id for f in sim.fired[5:]] == [3]
    assert db.row(1)["fire_time"] == "2026-12-02 14:02:00"  # left where it was


def test_bc_disabled_business_and_paused_tasks_are_skipped_and_resume_exactly(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1))
    db.task(2, cron="0 * * * * ?", fire=sh(14, 1), biz="coupon")
    sim = db.sim(clock)
    sim.step(at(14, 1, 30))
    pause_tasks(db.engine, [1])
    set_business_enabled(db.engine, ["coupon"], False)
    sim.step(at(14, 5, 30))
    assert [f.scheduled_time for f in sim.fired] == [at(14, 1), at(14, 1)]
    resume_tasks(db.engine, {1: at(14, 7)})  # rollback: due again at 14:07
    sim.step(at(14, 8, 30))
    assert [(f.task_id, f.scheduled_time) for f in sim.fired[2:]] == [(1, at(14, 7)), (1, at(14, 8))]


def test_bc_completion_survives_a_concurrent_flag_write(clock: ManualClock) -> None:
    db = Bc()
    db.task(1, cron="0 * * * * ?", fire=sh(14, 1))
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 20_000))
    sim.step(at(14, 1, 10))
    assert db.row(1)["status"] == 1
    with db.engine.begin() as conn:  # what set_migrated does, on a RUNNING row: version + 1
        conn.execute(update(db.md.tables["bc_task"]).values(migrated=1, version=db.md.tables["bc_task"].c.version + 1))
    sim.step(at(14, 1, 30))
    row = db.row(1)
    assert (row["status"], row["fire_time"], row["migrated"], row["version"]) == (0, "2026-12-02 14:02:00", 1, 3)


def test_bc_is_deterministic_and_drives_the_clock() -> None:
    def run() -> tuple[list[Any], list[dict[str, Any]], datetime]:
        db = Bc()
        db.task(1, cron="*/20 * * * * ?", fire=sh(14, 0, 20), shards=2, retries=1)
        db.task(2, task_type=3, interval=45, fire=sh(14, 0, 5), priority=1)
        clk = ManualClock(T0)
        sim = db.sim(
            clk, outcome=lambda t, s, i: (Result.FAIL if (t.id + i + s.second) % 3 == 0 else Result.SUCCESS, 700)
        )
        sim.step(at(14, 1))
        sim.step(at(14, 4))
        return list(sim.attempts), db.logs(), clk.now()

    first = run()
    assert first == run()
    assert first[2] == at(14, 4)


def _bc_scenario(skip_idle: bool) -> tuple[list[Any], list[dict[str, Any]], list[dict[str, Any]]]:
    db = Bc()
    db.task(1, cron="*/20 * * * * ?", fire=sh(14, 0, 20), shards=2, retries=2)
    db.task(2, task_type=3, interval=47, fire=sh(14, 0, 3), priority=1, misfire=2)
    db.task(3, task_type=1, fire=sh(14, 7, 11), retries=1, timeout_ms=3000)
    db.task(4, cron="0 */3 * * * ?", fire=sh(14, 3), biz="coupon", migrated=1)
    db.task(5, task_type=3, interval=61, fire=sh(14, 1), shard_params="[1, 2, 3]", end=sh(14, 50))

    def outcome(task: Any, scheduled: datetime, shard: int) -> tuple[Result, int]:
        n = (task.id * 5 + shard * 3 + scheduled.minute + scheduled.second) % 9
        table = {0: Result.FAIL, 1: Result.NO_CALLBACK, 2: Result.TRIGGER_FAIL, 3: Result.TIMEOUT}
        return table.get(n, Result.SUCCESS), 700 + 1013 * n

    clk = ManualClock(T0)
    sim = db.sim(clk, outcome=outcome, skip_idle=skip_idle)
    sim.step(at(14, 10, 0))
    sim.cut_over_businesses.add("coupon")
    pause_tasks(db.engine, [2])
    sim.step(at(14, 20))
    sim.outage(at(14, 24))
    resume_tasks(db.engine, {2: at(14, 30, 3)})
    sim.step(at(14, 40))
    return list(sim.attempts), db.logs(), [db.row(t) | {"update_time": None, "create_time": None} for t in range(1, 6)]


def test_bc_skipping_idle_polls_changes_nothing() -> None:
    fast, slow = _bc_scenario(True), _bc_scenario(False)
    assert len(fast[0]) > 100
    assert {a.result for a in fast[0]} == set(Result)
    assert fast == slow


def test_outcome_helpers() -> None:
    class J:
        id = 7

    once = fail_times(1, only={7})
    assert once(J(), T0, 0) == (Result.FAIL, 200)
    assert once(J(), T0, 0) == (Result.SUCCESS, 200)
    assert once(J(), T0, 1) == (Result.FAIL, 200)  # per shard
    assert succeed(5)(J(), T0, 0) == (Result.SUCCESS, 5)
    bad: Callable[..., Any] = lambda j, s, i: "nope"  # noqa: E731
    db = Bc()
    db.task(1, task_type=1, fire=sh(14, 0))
    with pytest.raises(ValueError, match="outcome"):
        db.sim(ManualClock(T0), outcome=bad).step(at(14, 1))


# -- the readers read what the simulators write ------------------------------------------


@pytest.mark.parametrize("lineage", ["2.2", "2.4", "3.4", "master"])
def test_xxl_sim_on_seeded_data_is_read_back_by_the_reader(lineage: str) -> None:
    from legacy_sim.seed import BASE_TIME, seed_xxljob
    from readers.xxljob.reader import XxlJobReader

    engine = _engine()
    create_legacy_schema(engine, "xxl-job", lineage)
    # includes deliberately bad rows; a FIX_RATE "0" one fires on every scan, as in xxl-job
    summary = seed_xxljob(engine, lineage, groups=2, jobs_per_group=12)
    sim = XxlJobSimulator(engine, lineage=lineage, clock=ManualClock(BASE_TIME), outcome=fail_times(1))
    sim.step(BASE_TIME + timedelta(minutes=8))
    assert sim.fired
    reader = XxlJobReader(engine)
    read = [e for app in summary.biz_codes for e in reader.executions(app, BASE_TIME, BASE_TIME + timedelta(hours=1))]
    assert sorted(e.log_id for e in read) == sorted(a.log_id for a in sim.attempts if a.job_id <= 24)
    by_id = {a.log_id: a for a in sim.attempts}
    for e in read:
        assert e.triggered_at == datetime.fromtimestamp(by_id[e.log_id].trigger_ms // 1000, UTC)
        assert (e.shard_index, e.shard_total) == (by_id[e.log_id].shard, by_id[e.log_id].shard_total)


def test_bc_sim_on_seeded_data_is_read_back_by_the_reader() -> None:
    from legacy_sim.seed import BASE_TIME, seed_batchcenter
    from readers.batchcenter.reader import BatchCenterReader

    engine = _engine()
    create_legacy_schema(engine, "batch-center")
    summary = seed_batchcenter(engine, businesses=3, tasks_per_business=12)
    sim = BatchCenterSimulator(engine, clock=ManualClock(BASE_TIME), outcome=fail_times(1))
    sim.step(BASE_TIME + timedelta(hours=16))
    assert len({f.task_id for f in sim.fired}) >= 5
    reader = BatchCenterReader(engine)
    window = (BASE_TIME - timedelta(days=1), BASE_TIME + timedelta(days=1))
    read = [e for biz in summary.biz_codes for e in reader.executions(biz, *window)]
    by_id = {a.log_id: a for a in sim.attempts}
    assert sorted(e.log_id for e in read) == sorted(by_id)
    for e in read:
        a = by_id[e.log_id]
        assert (e.scheduled_at, e.shard_index, e.attempt) == (a.scheduled_time, a.shard, a.attempt)


# -- the cutover / rollback boundary, as a property -----------------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    every=st.integers(3, 40),
    stop_s=st.integers(20, 150),
    stop_ms=st.integers(0, 999),
    gap_s=st.integers(1, 90),
    lineage=st.sampled_from(["2.4", "3.4"]),
)
def test_xxl_stop_and_restart_fire_each_occurrence_once_outside_the_pre_read_tail(
    every: int, stop_s: int, stop_ms: int, gap_s: int, lineage: str
) -> None:
    db = Xxl(lineage)
    db.group()
    expr = CronExpression(f"*/{every} * * * * ?", "Asia/Shanghai")
    first = expr.next_after(T0)
    assert first is not None
    db.job(1, cron=expr.expression, next_at=first)
    sim = db.sim(ManualClock(T0))
    stop = T0 + timedelta(seconds=stop_s, milliseconds=stop_ms)
    sim.step(stop)
    set_trigger_status(db.engine, [1], 0)
    restart = stop + timedelta(seconds=gap_s)
    resume = expr.next_after(restart + timedelta(seconds=5))  # xxl-job's own start(): next(now + 5 s)
    assert resume is not None
    sim.step(restart)
    set_trigger_status(db.engine, [1], 1, next_time_ms=ms(resume))
    end = restart + timedelta(seconds=60)
    sim.step(end)

    fired = [f.scheduled_ms for f in sim.fired]
    assert len(fired) == len(set(fired))  # nothing doubled
    assert all(a.trigger_ms == a.scheduled_ms for a in sim.attempts)  # nothing late
    occurrences = [ms(o) for o in takewhile(lambda o: o <= end, expr.iter_after(T0))]
    for o in occurrences:
        if o <= ms(stop) or o >= ms(resume):
            assert o in fired  # nothing missed outside the stopped span
        elif o > ms(stop) + PRE_READ:
            assert o not in fired  # the tail is at most the pre-read window
    assert all(o in occurrences for o in fired)  # only real occurrences


PRE_READ = 5000


@settings(max_examples=15, deadline=None)
@given(every=st.integers(3, 40), pause_s=st.integers(20, 150), gap_s=st.integers(1, 90))
def test_bc_pause_and_resume_fire_each_occurrence_once(every: int, pause_s: int, gap_s: int) -> None:
    db = Bc()
    expr = CronExpression(f"*/{every} * * * * ?", "Asia/Shanghai")
    first = expr.next_after(T0)
    assert first is not None
    db.task(1, cron=expr.expression, fire=first.replace(tzinfo=None))
    sim = db.sim(ManualClock(T0), outcome=always(Result.SUCCESS, 100))
    pause = T0 + timedelta(seconds=pause_s, milliseconds=500)  # between runs: 100 ms callbacks
    sim.step(pause)
    assert pause_tasks(db.engine, [1]).changed == (1,)
    restart = pause + timedelta(seconds=gap_s)
    resume = expr.next_after(restart)
    assert resume is not None
    sim.step(restart)
    resume_tasks(db.engine, {1: resume})
    end = restart + timedelta(seconds=60)
    sim.step(end)
    expected = [o for o in takewhile(lambda o: o <= end, expr.iter_after(T0)) if o <= pause or resume <= o]
    assert [f.scheduled_time for f in sim.fired] == expected


@pytest.mark.parametrize("which", ["xxl-job", "batch-center"])
def test_without_history_a_simulator_keeps_nothing_in_memory_and_logs_the_same(which: str) -> None:
    """A long run (the chaos soak: an hour of fires, read from the database as a real
    admin's log is) keeps no lists of what fired: kept, they grew the soak's driver by a
    fifth over the hour, the memory bound its processes are held to. The logs written are
    those written with the history kept."""
    logged = []
    for history in (True, False):
        clock = ManualClock(T0)
        if which == "xxl-job":
            xdb = Xxl("3.4")
            xdb.group(addresses=(A1,))
            xdb.job(1, cron="0 * * * * ?", next_at=at(14, 1))
            sim: XxlJobSimulator | BatchCenterSimulator = xdb.sim(clock, history=history)
            logs: Callable[[int], list[dict[str, Any]]] = xdb.logs
        else:
            bdb = Bc()
            bdb.task(1, cron="0 * * * * ?", fire=sh(14, 1))
            sim = bdb.sim(clock, history=history)
            logs = bdb.logs
        fired = sim.step(at(14, 5, 30))
        assert (len(fired), len(sim.fired), len(sim.attempts)) == ((5, 5, 5) if history else (0, 0, 0))
        logged.append([{k: v for k, v in r.items() if k != "id"} for r in logs(1)])
    assert len(logged[0]) == 5 and logged[0] == logged[1]
