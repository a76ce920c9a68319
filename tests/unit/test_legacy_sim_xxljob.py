"""The xxl-job simulator's models of the real admin and executor (issue 16): the zone
split, the admin's stop/start, the executor's per-job thread (block strategies, the
GLUE / handler kill, the timeout on the thread), route strategies and child jobs."""

from __future__ import annotations

from collections.abc import Set as AbstractSet
from datetime import datetime, timezone
from typing import Any

import pytest
from sqlalchemy import text

from legacy_sim import Result, always
from legacy_sim.xxl_executor import CHANGE_BEAN, CHANGE_GLUE, KILLED_QUEUED, KILLED_RUNNING
from readers.xxljob.logs import TriggerType, trigger_type
from scheduler_core.clock import ManualClock
from tests.unit.test_legacy_sim import A1, A2, A3, T0, Xxl, at, ms

UTC = timezone.utc


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(T0)  # 14:00:00 Asia/Shanghai


def _set(db: Xxl, job_id: int, **values: Any) -> None:
    cols = ", ".join(f"{k} = :{k}" for k in values)
    with db.engine.begin() as conn:
        conn.execute(text(f"UPDATE xxl_job_info SET {cols} WHERE id = :id"), {**values, "id": job_id})


def _rows(db: Xxl, job_id: int) -> list[tuple[Any, ...]]:
    return [(r["trigger_time"], r["trigger_code"], r["handle_code"], r["handle_time"]) for r in db.logs(job_id)]


# -- time zones ----------------------------------------------------------------------------


def test_crons_follow_the_jvm_zone_while_datetimes_are_written_in_the_jdbc_zone(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    # 06:01 UTC = 14:01 Shanghai: the cron is evaluated in UTC (the JVM), the log row's
    # DATETIMEs are Shanghai walls (the JDBC connection's serverTimezone)
    db.job(1, cron="0 1 6 * * ?", next_at=datetime(2026, 12, 2, 6, 1, tzinfo=UTC))
    sim = db.sim(clock, db_tz="Asia/Shanghai", cron_tz="UTC", outcome=always(Result.SUCCESS, 2000))
    sim.step(datetime(2026, 12, 3, 7, 0, tzinfo=UTC))
    assert [f.scheduled_ms for f in sim.fired] == [
        ms(datetime(2026, 12, 2, 6, 1, tzinfo=UTC)),
        ms(datetime(2026, 12, 3, 6, 1, tzinfo=UTC)),
    ]
    assert [(r["trigger_time"], r["handle_time"]) for r in db.logs(1)] == [
        ("2026-12-02 14:01:00", "2026-12-02 14:01:02"),
        ("2026-12-03 14:01:00", "2026-12-03 14:01:02"),
    ]
    # the next time the admin shows is the cron's next in the JVM zone
    assert db.info(1)["trigger_next_time"] == ms(datetime(2026, 12, 4, 6, 1, tzinfo=UTC))


def test_admin_tz_alone_sets_both_zones(clock: ManualClock) -> None:
    db = Xxl("3.4")
    sim = db.sim(clock, admin_tz="Europe/Paris")
    assert (sim.zone.name, sim.cron_zone.name) == ("Europe/Paris", "Europe/Paris")
    sim = db.sim(clock, admin_tz="Europe/Paris", cron_tz="UTC")
    assert (sim.zone.name, sim.cron_zone.name) == ("Europe/Paris", "UTC")


# -- the admin's stop and start -----------------------------------------------------------


def test_stop_zeroes_the_next_time_and_start_skips_the_pre_read_window(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock)
    sim.step(at(14, 0, 57))  # the 14:01 fire is in the ring
    assert sim.stop(1)
    info = db.info(1)
    assert (info["trigger_status"], info["trigger_last_time"], info["trigger_next_time"]) == (0, 0, 0)
    assert info["update_time"] == "2026-12-02 14:00:57"  # the JDBC zone's wall time
    sim.step(at(14, 3))
    assert [f.scheduled_ms for f in sim.fired] == [ms(at(14, 1))]  # the ring is memory: fires once, then nothing
    # started at 14:03:57: the first time after 14:04:02 is 14:05, not 14:04
    sim.step(at(14, 3, 57))
    assert sim.start(1) == ms(at(14, 5))
    info = db.info(1)
    assert (info["trigger_status"], info["trigger_last_time"], info["trigger_next_time"]) == (1, 0, ms(at(14, 5)))
    sim.step(at(14, 6, 30))
    assert [f.scheduled_ms for f in sim.fired] == [ms(at(14, 1)), ms(at(14, 5)), ms(at(14, 6))]


def test_start_refuses_what_the_admin_refuses(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, status=0)  # NONE
    sim = db.sim(clock)
    with pytest.raises(ValueError, match="schedule_type NONE"):
        sim.start(1)
    with pytest.raises(ValueError, match="no such job"):
        sim.start(99)
    assert not sim.stop(99)


# -- the scan's 5 s pre-read and the ring ---------------------------------------------------


def test_the_scan_pre_reads_5_s_fires_the_slightly_late_now_and_the_missed_by_their_misfire_rule(
    clock: ManualClock,
) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="3 * * * * ?", next_at=at(14, 0, 3))  # due in 3 s: into the ring, fires at its second
    db.job(2, cron="58 * * * * ?", next_at=at(13, 59, 58))  # 2 s late: fired by the scan now
    db.job(3, cron="50 * * * * ?", next_at=at(13, 59, 50), misfire="FIRE_ONCE_NOW")  # 10 s late: misfire
    db.job(4, cron="50 * * * * ?", next_at=at(13, 59, 50), misfire="DO_NOTHING")
    db.job(5, cron="9 * * * * ?", next_at=at(14, 0, 9))  # 9 s ahead: not read by the first scan
    sim = db.sim(clock)
    sim.step(at(14, 0, 4))
    got = [(a.job_id, a.trigger_type, a.scheduled_ms, a.trigger_ms) for a in sim.attempts]
    assert got == [
        (2, "CRON", ms(at(13, 59, 58)), ms(at(14, 0))),
        (3, "MISFIRE", ms(at(13, 59, 50)), ms(at(14, 0))),
        (1, "CRON", ms(at(14, 0, 3)), ms(at(14, 0, 3))),
    ]
    # refreshNextValidTime: the late and missed ones move on from now, the pre-read one from its time
    nexts = {j: db.info(j)["trigger_next_time"] for j in (1, 2, 3, 4, 5)}
    assert nexts == {
        1: ms(at(14, 1, 3)),
        2: ms(at(14, 0, 58)),
        3: ms(at(14, 0, 50)),
        4: ms(at(14, 0, 50)),
        5: ms(at(14, 0, 9)),
    }


# -- the executor's job thread -------------------------------------------------------------


def _every_10s(db: Xxl, block: str, **kw: Any) -> None:
    db.group()
    db.job(1, cron="*/10 * * * * ?", next_at=at(14, 0, 10), **kw)
    _set(db, 1, executor_block_strategy=block)


def test_serial_execution_queues_and_the_timeout_counts_run_time_only(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "SERIAL_EXECUTION", timeout=30)  # 25 s runs every 10 s
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 25_000))
    sim.step(at(14, 1, 30))
    rows = _rows(db, 1)[:3]
    # each run starts when the one before ends; 15 s and 30 s in the queue are no timeout
    assert rows == [
        ("2026-12-02 14:00:10", 200, 200, "2026-12-02 14:00:35"),
        ("2026-12-02 14:00:20", 200, 200, "2026-12-02 14:01:00"),
        ("2026-12-02 14:00:30", 200, 200, "2026-12-02 14:01:25"),
    ]


def test_a_run_longer_than_its_timeout_on_the_thread_is_a_timeout(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "SERIAL_EXECUTION", timeout=20)
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 25_000))
    sim.step(at(14, 0, 45))
    rows = _rows(db, 1)
    assert rows[0] == ("2026-12-02 14:00:10", 200, 502, "2026-12-02 14:00:30")
    assert rows[1] == ("2026-12-02 14:00:20", 200, 0, None)  # started 14:00:30, times out at 14:00:50


def test_discard_later_refuses_runs_while_the_thread_is_busy(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "DISCARD_LATER")
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 25_000))
    sim.step(at(14, 0, 40))
    logs = db.logs(1)
    assert [(r["trigger_code"], r["handle_code"]) for r in logs] == [(200, 200), (500, 0), (500, 0), (200, 0)]
    assert "block strategy effect：Discard Later" in logs[1]["trigger_msg"]


def test_cover_early_kills_the_running_run(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "COVER_EARLY")
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 25_000))
    sim.step(at(14, 0, 21))
    logs = db.logs(1)
    assert [(r["trigger_code"], r["handle_code"], r["handle_time"]) for r in logs] == [
        (200, 500, "2026-12-02 14:00:20"),
        (200, 0, None),
    ]
    assert logs[0]["handle_msg"] == "block strategy effect：Cover Early" + KILLED_RUNNING
    sim.step(at(14, 0, 50))
    assert db.logs(1)[1]["handle_code"] == 500  # killed in turn by the 14:00:30 run


def test_a_glue_edit_kills_the_running_thread_and_its_queue(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "SERIAL_EXECUTION")
    _set(db, 1, glue_type="GLUE_SHELL", glue_source="echo v1")
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 25_000))
    sim.step(at(14, 0, 25))  # 14:00:10 running, 14:00:20 queued
    _set(db, 1, glue_source="echo v2", glue_updatetime=datetime(2026, 12, 2, 14, 0, 25))  # saved in the GLUE IDE
    sim.step(at(14, 0, 31))
    logs = db.logs(1)
    assert [(r["handle_code"], r["handle_msg"]) for r in logs] == [
        (500, CHANGE_GLUE + KILLED_RUNNING),
        (500, CHANGE_GLUE + KILLED_QUEUED),
        (0, None),
    ]
    assert logs[0]["handle_time"] == "2026-12-02 14:00:30"
    sim.step(at(14, 0, 56))
    assert db.logs(1)[2]["handle_code"] == 200  # the new source runs on its own thread


def test_a_bean_handler_change_kills_the_running_thread(clock: ManualClock) -> None:
    db = Xxl("3.4")
    _every_10s(db, "SERIAL_EXECUTION")
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 15_000))
    sim.step(at(14, 0, 15))
    _set(db, 1, executor_handler="otherHandler")
    sim.step(at(14, 0, 21))
    assert [(r["handle_code"], r["handle_msg"]) for r in db.logs(1)] == [(500, CHANGE_BEAN + KILLED_RUNNING), (0, None)]


def test_each_executor_has_its_own_thread_per_job(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(1, addresses=(A1, A2))
    db.job(1, cron="*/10 * * * * ?", next_at=at(14, 0, 10), route="ROUND")
    _set(db, 1, executor_block_strategy="DISCARD_LATER")
    sim = db.sim(clock, outcome=always(Result.SUCCESS, 15_000))
    sim.step(at(14, 0, 21))
    # A1 then A2: the second run is not blocked by the first, which runs elsewhere
    assert [(r["executor_address"], r["trigger_code"]) for r in db.logs(1)] == [(A1, 200), (A2, 200)]


# -- routes --------------------------------------------------------------------------------


def _routed(
    clock: ManualClock, route: str, down: AbstractSet[str] = frozenset(), duration: int = 200, n: int = 4
) -> list[Any]:
    db = Xxl("3.4")
    db.group(1, addresses=(A1, A2, A3))
    db.job(1, cron="*/10 * * * * ?", next_at=at(14, 0, 10), route=route)
    sim = db.sim(clock, outcome=always(Result.SUCCESS, duration))
    sim.executors.down |= down
    sim.step(at(14, 0, 10 * n + 1))
    return [(r["executor_address"], r["trigger_code"]) for r in db.logs(1)]


def test_first_and_round(clock: ManualClock) -> None:
    assert _routed(clock, "FIRST") == [(A1, 200)] * 4
    assert _routed(ManualClock(T0), "ROUND") == [(A1, 200), (A2, 200), (A3, 200), (A1, 200)]


def test_an_address_that_is_down_fails_the_trigger_unless_the_route_fails_over(clock: ManualClock) -> None:
    assert _routed(clock, "FIRST", down={A1}, n=1) == [(A1, 500)]
    assert _routed(ManualClock(T0), "FAILOVER", down={A1}, n=1) == [(A2, 200)]
    assert _routed(ManualClock(T0), "FAILOVER", down={A1, A2, A3}, n=1) == [(None, 500)]


def test_failover_writes_the_beats_into_the_trigger_msg(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(1, addresses=(A1, A2))
    db.job(1, cron="*/10 * * * * ?", next_at=at(14, 0, 10), route="FAILOVER")
    sim = db.sim(clock)
    sim.executors.down.add(A1)
    sim.step(at(14, 0, 11))
    (row,) = db.logs(1)
    assert f"心跳检测：<br>address：{A1}<br>code：500" in row["trigger_msg"]
    assert f"心跳检测：<br>address：{A2}<br>code：200" in row["trigger_msg"]


def test_busyover_skips_executors_whose_thread_for_the_job_is_busy(clock: ManualClock) -> None:
    # 25 s runs every 10 s: A1 busy at :20, A1 and A2 busy at :30, A3 busy too at :40 ...
    assert _routed(clock, "BUSYOVER", duration=25_000, n=4) == [(A1, 200), (A2, 200), (A3, 200), (A1, 200)]
    assert _routed(ManualClock(T0), "BUSYOVER", duration=45_000, n=4) == [(A1, 200), (A2, 200), (A3, 200), (None, 500)]


def test_sharding_broadcast_runs_one_thread_per_executor(clock: ManualClock) -> None:
    got = _routed(clock, "SHARDING_BROADCAST", n=1)
    assert got == [(A1, 200), (A2, 200), (A3, 200)]


# -- child jobs ----------------------------------------------------------------------------


def test_child_jobs_follow_a_successful_parent_only_skipping_itself_and_bad_ids(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1), child="2,1,x, 4,3")  # " 4": not numeric to the admin
    db.job(2, status=0)
    db.job(3, status=0)
    db.job(4, status=0)
    failing_second = iter([(Result.SUCCESS, 1000), (Result.SUCCESS, 1000), (Result.SUCCESS, 1000), (Result.FAIL, 1000)])
    sim = db.sim(clock, outcome=lambda job, when, shard: next(failing_second, (Result.SUCCESS, 1000)))
    sim.step(at(14, 2, 30))
    kinds = [(a.job_id, a.trigger_type) for a in sim.attempts]
    # 14:01 parent ok -> 2 and 3 (itself, "x" and " 4" skipped); 14:02 parent fails -> no child
    assert kinds == [(1, "CRON"), (2, "PARENT"), (3, "PARENT"), (1, "CRON")]
    assert [trigger_type(r["trigger_msg"]) for r in db.logs(2)] == [TriggerType.PARENT]
    assert db.logs(1)[1]["handle_code"] == 500


# -- the registry --------------------------------------------------------------------------


def test_registrations_are_written_in_the_jdbc_zone_and_the_monitor_drops_dead_executors(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group(1, addresses=())
    sim = db.sim(clock, db_tz="Asia/Shanghai", cron_tz="UTC")
    sim.register("app-1", A2)
    sim.register("app-1", A1)
    sim.step(at(14, 1))
    sim.register("app-1", A2)  # A1 beats no more
    with db.engine.connect() as conn:
        rows: dict[Any, Any] = dict(
            conn.execute(text("SELECT registry_value, update_time FROM xxl_job_registry")).all()
        )
    assert rows == {A1: "2026-12-02 14:00:00", A2: "2026-12-02 14:01:00"}  # Shanghai walls, not UTC
    assert sim.refresh_registry() == {"app-1": f"{A1},{A2}"}  # 60 s: both alive, sorted
    sim.step(at(14, 1, 31))
    assert sim.refresh_registry() == {"app-1": A2}  # A1 silent for 91 s: dead and removed
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT address_list FROM xxl_job_group WHERE id = 1")).scalar() == A2
        assert conn.execute(text("SELECT COUNT(*) FROM xxl_job_registry")).scalar() == 1
    sim.step(at(14, 3))
    assert sim.refresh_registry() == {"app-1": None}


# -- the admin's edit form and GLUE editor (seen on a real 3.4.2 admin) --------------------


def test_an_edit_of_a_running_jobs_schedule_moves_its_next_time_at_once(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    db.job(2, cron="0 * * * * ?", next_at=at(14, 1), status=0)
    sim = db.sim(clock)
    sim.step(at(14, 0, 57))  # the 14:01 fire is in the ring
    # edited at 14:00:57 to every 10 s: the first time after 14:01:02 is 14:01:10
    assert sim.update(1, schedule_conf="0/10 * * * * ?") == ms(at(14, 1, 10))
    info = db.info(1)
    assert (info["schedule_conf"], info["trigger_status"], info["trigger_next_time"]) == (
        "0/10 * * * * ?",
        1,
        ms(at(14, 1, 10)),
    )
    assert info["update_time"] == "2026-12-02 14:00:57"
    sim.step(at(14, 1, 25))
    # the ring is memory: the old 14:01 still fires, then the new schedule
    assert [f.scheduled_ms for f in sim.fired] == [ms(at(14, 1)), ms(at(14, 1, 10)), ms(at(14, 1, 20))]
    # an edit that keeps the schedule keeps the next time; a stopped job's is kept, not started
    assert sim.update(1, executor_param="edited") == ms(at(14, 1, 30))
    assert sim.update(2, schedule_conf="0/10 * * * * ?") == ms(at(14, 1))
    assert db.info(2)["trigger_status"] == 0
    with pytest.raises(ValueError, match="no next time"):
        sim.update(1, schedule_conf="0 0 0 1 1 ? 2020")
    with pytest.raises(ValueError, match="trigger state"):
        sim.update(1, trigger_status=0)


def test_saving_glue_source_sets_its_version_to_now_in_the_database_zone(clock: ManualClock) -> None:
    db = Xxl("3.4")
    db.group()
    db.job(1, cron="0 * * * * ?", next_at=at(14, 1))
    sim = db.sim(clock, db_tz="Asia/Shanghai", cron_tz="UTC")
    sim.step(at(14, 0, 30))
    sim.save_glue(1, "#!/bin/sh\necho v2\n", "v2")
    info = db.info(1)
    assert (info["glue_source"], info["glue_remark"]) == ("#!/bin/sh\necho v2\n", "v2")
    assert info["glue_updatetime"] == info["update_time"] == "2026-12-02 14:00:30"  # T0 is 14:00 Shanghai
    with pytest.raises(ValueError, match="no such job"):
        sim.save_glue(99, "x")
