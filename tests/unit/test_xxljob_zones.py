"""The xxl-job source's two zones: DATETIME columns in the admin's JDBC zone, crons in the
admin JVM's zone (issue 16, "Time zones").

The expected fire times here are computed with the calendar module, not with the cron
code under test: `0 15 10 ? * 6L` is 10:15 on the last Friday of each month.
"""

from __future__ import annotations

import calendar
import json
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine

from migrator.mapping import Mapped, MappingOptions, map_definition
from readers.legacy_ddl import create_legacy_schema, xxljob_metadata
from readers.timezones import LegacyZones
from readers.xxljob import XxlJobReader
from scheduler_core.occurrences import next_after
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.schema import init_schema
from switchyard.settings import legacy_zones
from switchyard.wiring import legacy_reader, migrator_store
from tests.compare_cli import compare_args

UTC = timezone.utc
SHANGHAI = ZoneInfo("Asia/Shanghai")
CRON_6L = "0 15 10 ? * 6L"
NOW = datetime(2026, 12, 4, 0, 0, tzinfo=UTC)


def last_fridays_at_1015(zone: ZoneInfo, after: datetime, count: int) -> list[datetime]:
    """10:15 wall time in `zone` on the last Friday of each month, strictly after `after`."""
    out: list[datetime] = []
    year, month = after.astimezone(zone).year, after.astimezone(zone).month
    while len(out) < count:
        days = calendar.monthrange(year, month)[1]
        last = max(d for d in range(days - 6, days + 1) if calendar.weekday(year, month, d) == calendar.FRIDAY)
        at = datetime(year, month, last, 10, 15, tzinfo=zone)
        if at > after:
            out.append(at)
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return out


def _legacy(path: Path) -> tuple[Engine, str]:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    create_legacy_schema(engine, "xxl-job", "3.4")
    return engine, url


def _insert(engine: Engine, table: str, *rows: dict[str, Any]) -> None:
    with engine.begin() as conn:
        conn.execute(xxljob_metadata("3.4").tables[table].insert(), list(rows))


def _seed(engine: Engine, db_zone: ZoneInfo, *, next_fire: datetime, glue: bool = False) -> None:
    """One group (its registry beat 10 s ago), one 6L job and one log row, every DATETIME
    written as wall time of `db_zone`, as the admin's JDBC connection writes it."""

    def wall(at: datetime) -> datetime:
        return at.astimezone(db_zone).replace(tzinfo=None)

    _insert(
        engine,
        "xxl_job_group",
        {"id": 1, "app_name": "sop", "title": "SOP", "address_type": 0, "address_list": None, "update_time": wall(NOW)},
    )
    _insert(
        engine,
        "xxl_job_registry",
        {
            "registry_group": "EXECUTOR",
            "registry_key": "sop",
            "registry_value": "http://127.0.0.1:9999/",
            "update_time": wall(NOW - timedelta(seconds=10)),
        },
    )
    _insert(
        engine,
        "xxl_job_info",
        {
            "id": 7,
            "job_group": 1,
            "job_desc": "month end",
            "schedule_type": "CRON",
            "schedule_conf": CRON_6L,
            "misfire_strategy": "DO_NOTHING",
            "executor_route_strategy": "FIRST",
            "executor_handler": "" if glue else "monthEnd",
            "executor_param": "",
            "executor_block_strategy": "SERIAL_EXECUTION",
            "executor_timeout": 0,
            "executor_fail_retry_count": 0,
            "glue_type": "GLUE_SHELL" if glue else "BEAN",
            "glue_source": "echo v1" if glue else "",
            "glue_updatetime": wall(datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),
            "add_time": wall(NOW),
            "update_time": wall(NOW),
            "trigger_status": 1,
            "trigger_last_time": 0,
            "trigger_next_time": int(next_fire.timestamp() * 1000),
        },
    )
    _insert(
        engine,
        "xxl_job_log",
        {
            "job_group": 1,
            "job_id": 7,
            "executor_address": "http://127.0.0.1:9999/",
            "executor_fail_retry_count": 0,
            "trigger_time": wall(datetime(2026, 11, 27, 10, 15, tzinfo=UTC)),
            "trigger_code": 200,
            "trigger_msg": "",
            "handle_time": wall(datetime(2026, 11, 27, 10, 15, 2, tzinfo=UTC)),
            "handle_code": 200,
        },
    )


@pytest.mark.parametrize(("db_zone", "cron_zone"), [("Asia/Shanghai", "UTC"), ("UTC", "Asia/Shanghai")])
def test_datetimes_read_in_the_db_zone_and_crons_run_in_the_cron_zone(
    tmp_path: Path, db_zone: str, cron_zone: str
) -> None:
    engine, _ = _legacy(tmp_path / "xxl.db")
    admin_next = last_fridays_at_1015(ZoneInfo(cron_zone), NOW, 1)[0]  # the admin's "next trigger time"
    _seed(engine, ZoneInfo(db_zone), next_fire=admin_next)
    reader = XxlJobReader(engine, db_tz=db_zone, cron_tz=cron_zone)
    (defn,) = reader.definitions()
    assert defn.ok, defn.problems
    assert defn.time_zone == cron_zone  # the trigger's zone on the new side
    assert defn.next_fire_at == admin_next
    # the registry's update_time (db zone): 10 s old, alive at NOW
    (biz,) = reader.businesses(as_of=NOW)
    assert biz.executor_addresses == ("http://127.0.0.1:9999/",)
    # xxl_job_log.trigger_time (db zone), as dual-run's comparison reads it
    (ex,) = reader.executions("sop", NOW - timedelta(days=10), NOW)
    assert ex.triggered_at == datetime(2026, 11, 27, 10, 15, tzinfo=UTC)
    assert ex.finished_at == datetime(2026, 11, 27, 10, 15, 2, tzinfo=UTC)
    # the trigger: the first fire and every later one are the admin's, in the cron zone
    mapped = map_definition(defn, biz, NOW)
    assert isinstance(mapped, Mapped) and mapped.trigger is not None, mapped
    assert mapped.trigger.time_zone == cron_zone
    expected = last_fridays_at_1015(ZoneInfo(cron_zone), NOW, 4)
    fires = [mapped.trigger.next_fire_at]
    while len(fires) < 4:  # as the scheduler steps a trigger on after each fire
        nxt = next_after(mapped.trigger, fires[-1])
        assert nxt is not None
        fires.append(nxt)
    assert fires == expected


def test_one_zone_for_both_puts_the_6L_job_8_hours_off_the_admin(tmp_path: Path) -> None:
    """The reported case: JDBC in Shanghai, JVM in UTC. With one zone (Shanghai) for both,
    the new side would fire 8 h before the admin; the split zones give the admin's time."""
    engine, _ = _legacy(tmp_path / "xxl.db")
    admin_next = last_fridays_at_1015(ZoneInfo("UTC"), NOW, 1)[0]
    _seed(engine, SHANGHAI, next_fire=admin_next)
    (one,) = XxlJobReader(engine, admin_tz="Asia/Shanghai").definitions()
    (split,) = XxlJobReader(engine, db_tz="Asia/Shanghai", cron_tz="UTC").definitions()
    wrong, right = (map_definition(d, None, NOW) for d in (one, split))
    assert isinstance(wrong, Mapped) and isinstance(right, Mapped)
    assert wrong.trigger is not None and right.trigger is not None
    assert right.trigger.next_fire_at == admin_next
    assert admin_next - wrong.trigger.next_fire_at == timedelta(hours=8)


def test_legacy_tz_is_both_zones_and_one_given_alone_sets_the_other() -> None:
    assert LegacyZones.of("Europe/Berlin") == LegacyZones("Europe/Berlin", "Europe/Berlin")
    assert LegacyZones.of(db="UTC") == LegacyZones("UTC", "UTC")
    assert LegacyZones.of(cron="UTC") == LegacyZones("UTC", "UTC")
    assert LegacyZones.of("Asia/Shanghai", cron="UTC") == LegacyZones("Asia/Shanghai", "UTC")
    assert LegacyZones.of() == LegacyZones("Asia/Shanghai", "Asia/Shanghai")
    with pytest.raises(ValueError, match="Mars/Olympus"):
        LegacyZones.of(cron="Mars/Olympus")
    reader = legacy_reader("xxl-job", make_engine("sqlite://"), LegacyZones("Asia/Shanghai", "UTC"))
    assert isinstance(reader, XxlJobReader) and reader.zones == LegacyZones("Asia/Shanghai", "UTC")


def test_the_batch_center_keeps_one_zone_for_datetimes_and_crons() -> None:
    assert legacy_zones("batch-center", "Asia/Shanghai") == LegacyZones("Asia/Shanghai", "Asia/Shanghai")
    with pytest.raises(ValueError, match="batch center stores and schedules in one zone"):
        legacy_zones("batch-center", None, "Asia/Shanghai", "UTC")
    with pytest.raises(ValueError, match="one zone"):
        legacy_reader("batch-center", make_engine("sqlite://"), LegacyZones("Asia/Shanghai", "UTC"))


def test_glue_updatetime_is_the_instant_in_the_db_zone(tmp_path: Path) -> None:
    engine, _ = _legacy(tmp_path / "xxl.db")
    _seed(engine, SHANGHAI, next_fire=last_fridays_at_1015(ZoneInfo("UTC"), NOW, 1)[0], glue=True)
    (defn,) = XxlJobReader(engine, db_tz="Asia/Shanghai", cron_tz="UTC").definitions()
    assert defn.glue_updated_at == datetime(2026, 12, 1, 0, 0, tzinfo=UTC)
    mapped = map_definition(defn, None, NOW, MappingOptions(bridge_glue=True))
    assert isinstance(mapped, Mapped), mapped
    params = json.loads(mapped.job.params)
    assert params["glue_updatetime"] == int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
    assert params["glue_source"] == "echo v1"


# -- migrate plan ---------------------------------------------------------------------------


def _plan(legacy_url: str, target_url: str, *zone_args: str, as_json: bool) -> Any:
    args = [
        "migrate",
        "plan",
        "--source",
        "xxl-job",
        "--legacy-url",
        legacy_url,
        "--url",
        target_url,
        *zone_args,
    ] + (["--json"] if as_json else [])
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1]) if as_json else result.output


def _plan_env(tmp_path: Path) -> tuple[str, str, list[datetime]]:
    """A legacy DB written in Shanghai with crons in UTC, the admin's next trigger time
    the next real last-Friday 10:15 UTC (the plan runs on the system clock)."""
    engine, legacy_url = _legacy(tmp_path / "xxl.db")
    now = datetime.now(UTC)
    expected = last_fridays_at_1015(ZoneInfo("UTC"), now + timedelta(minutes=5), 3)
    _seed(engine, SHANGHAI, next_fire=expected[0])
    engine.dispose()
    target_url = f"sqlite:///{tmp_path / 't.db'}"
    target = make_engine(target_url)
    init_schema(target, 4)
    target.dispose()
    return legacy_url, target_url, expected


def test_plan_json_gives_each_cron_jobs_next_three_fires_in_utc_and_the_cron_zone(tmp_path: Path) -> None:
    legacy_url, target_url, expected = _plan_env(tmp_path)
    out = _plan(legacy_url, target_url, "--legacy-db-tz", "Asia/Shanghai", "--legacy-cron-tz", "UTC", as_json=True)
    assert out["zones"] == {"db": "Asia/Shanghai", "cron": "UTC"}
    (p,) = out["next_fires"]
    assert (p["source_key"], p["business"], p["cron"], p["zone"]) == ("7", "sop", CRON_6L, "UTC")
    assert [datetime.fromisoformat(t) for t in p["next_fires_utc"]] == expected
    assert [datetime.fromisoformat(t) for t in p["next_fires_local"]] == expected
    assert p["legacy_next_utc"] == expected[0].isoformat() and p["legacy_next_matches"] is True
    # the old single zone: 8 h off, and the plan says the admin's next time is not a fire
    out = _plan(legacy_url, target_url, "--legacy-tz", "Asia/Shanghai", as_json=True)
    (p,) = out["next_fires"]
    shanghai = last_fridays_at_1015(SHANGHAI, datetime.now(UTC) + timedelta(minutes=5), 3)
    assert [datetime.fromisoformat(t) for t in p["next_fires_utc"]] == shanghai
    assert p["legacy_next_matches"] is False


def test_plan_table_shows_the_fires_and_warns_of_a_wrong_cron_zone(tmp_path: Path) -> None:
    legacy_url, target_url, expected = _plan_env(tmp_path)
    text = _plan(legacy_url, target_url, "--legacy-db-tz", "Asia/Shanghai", "--legacy-cron-tz", "UTC", as_json=False)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("7 (sop)"))
    for at in expected:
        assert at.strftime("%Y-%m-%d %H:%M:%SZ") in line
        assert at.strftime("%Y-%m-%d %H:%M:%S+0000") in line
    assert "crons run in UTC" in text and "warning" not in text
    text = _plan(legacy_url, target_url, "--legacy-tz", "Asia/Shanghai", as_json=False)
    assert "warning: the legacy next trigger time" in text and "--legacy-cron-tz" in text
    shanghai = last_fridays_at_1015(SHANGHAI, datetime.now(UTC) + timedelta(minutes=5), 3)
    assert shanghai[0].strftime("%Y-%m-%d %H:%M:%S+0800") in text


def test_split_zones_are_refused_for_the_batch_center_on_the_command_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "migrate",
            "plan",
            "--source",
            "batch-center",
            "--legacy-url",
            f"sqlite:///{tmp_path / 'bc.db'}",
            "--url",
            f"sqlite:///{tmp_path / 't.db'}",
            "--legacy-db-tz",
            "Asia/Shanghai",
            "--legacy-cron-tz",
            "UTC",
        ],
    )
    assert result.exit_code == 2 and "one zone" in result.output, result.output


# -- GLUE: an edit after migration reaches the trigger's params -----------------------------


def _glue_env(tmp_path: Path) -> tuple[Engine, Any, Any]:
    from migrator.apply import Migrator
    from migrator.target import TargetWriter
    from scheduler_core.clock import ManualClock
    from scheduler_core.store.sql import SqlTriggerStore

    engine, _ = _legacy(tmp_path / "xxl.db")
    _seed(engine, SHANGHAI, next_fire=last_fridays_at_1015(ZoneInfo("UTC"), NOW, 1)[0], glue=True)
    target = make_engine(f"sqlite:///{tmp_path / 't.db'}")
    init_schema(target, 4)
    clock = ManualClock(NOW)
    store = SqlTriggerStore(target, clock)
    reader = XxlJobReader(engine, db_tz="Asia/Shanghai", cron_tz="UTC")
    return (
        engine,
        store,
        Migrator(reader, TargetWriter(store, migrator_store(store)), clock, MappingOptions(bridge_glue=True)),
    )


def _glue_params(store: Any) -> dict[str, Any]:
    from scheduler_core.model import JobCode

    job = store.get_job(JobCode("xxl:sop:7"))
    assert job is not None
    return dict(json.loads(job.params))


def _edit_glue(engine: Engine, source: str, at: datetime) -> None:
    from sqlalchemy import text

    with engine.begin() as conn:  # what the admin's GLUE IDE does: new source, new glue_updatetime (db zone)
        conn.execute(
            text("UPDATE xxl_job_info SET glue_source = :s, glue_updatetime = :t WHERE id = 7"),
            {"s": source, "t": at.astimezone(SHANGHAI).replace(tzinfo=None).isoformat(sep=" ")},
        )


def test_a_glue_edit_after_migration_changes_the_params_on_a_re_run(tmp_path: Path) -> None:
    engine, store, migrator = _glue_env(tmp_path)
    first = migrator.run()
    assert first.counts["create"] == 1, first.counts
    v1 = _glue_params(store)
    assert v1["glue_updatetime"] == int(datetime(2026, 12, 1, tzinfo=UTC).timestamp() * 1000)
    assert migrator.run().counts["unchanged"] == 1
    edited = datetime(2026, 12, 3, 9, 30, 5, tzinfo=UTC)
    _edit_glue(engine, "echo v2", edited)
    again = migrator.run()
    assert again.counts["update"] == 1, again.counts  # the ledger sees the edit as a change
    v2 = _glue_params(store)
    assert (v2["glue_source"], v2["glue_updatetime"]) == ("echo v2", int(edited.timestamp() * 1000))
    assert migrator.run().counts["unchanged"] == 1


def test_a_glue_edit_reaches_the_params_through_the_change_stream(tmp_path: Path) -> None:
    from sqlalchemy import text

    from migrator.stream import StreamMigrator
    from readers.records import ChangeBatch, ChangeOp, RowChange, StreamPosition

    engine, store, migrator = _glue_env(tmp_path)
    sm = StreamMigrator(migrator.reader, migrator.writer, migrator, "glue")
    sm.snapshot(migrator.reader, StreamPosition("poll", 0))
    edited = datetime(2026, 12, 3, 9, 30, 5, tzinfo=UTC)
    _edit_glue(engine, "echo v2", edited)
    with engine.connect() as conn:  # the row image the stream hands on (every column)
        image = dict(conn.execute(text("SELECT * FROM xxl_job_info WHERE id = 7")).mappings().one())
    sm.apply(
        ChangeBatch(
            changes=(RowChange(op=ChangeOp.UPDATE, schema="main", table="xxl_job_info", before=None, after=image),),
            position=StreamPosition("poll", 1),
        )
    )
    assert sm.stats.applied == 1
    v2 = _glue_params(store)
    assert (v2["glue_source"], v2["glue_updatetime"]) == ("echo v2", int(edited.timestamp() * 1000))


def test_dualrun_reads_the_legacy_side_with_both_zones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Dual-run reads xxl_job_log.trigger_time (db zone) and computes legacy's expected
    fires from its crons (cron zone): its reader gets both."""
    import importlib

    from tests.unit.test_dualrun_support import identical

    cli_dualrun = importlib.import_module("switchyard.cli.dualrun")
    s, _ = identical(tmp_path)
    s.flush()
    got: list[Any] = []

    def reader(source: Any, url: str, tz: Any) -> Any:
        got.append(tz)
        return s.reader()

    monkeypatch.setattr(cli_dualrun, "open_reader", reader)
    base = compare_args(s, tmp_path)
    CliRunner().invoke(cli, [*base, "--legacy-db-tz", "Asia/Shanghai", "--legacy-cron-tz", "UTC"])
    CliRunner().invoke(cli, [*base, "--legacy-db-tz", "UTC"])
    CliRunner().invoke(cli, base)
    assert got == [
        LegacyZones("Asia/Shanghai", "UTC"),
        LegacyZones("UTC", "UTC"),
        LegacyZones("Asia/Shanghai", "Asia/Shanghai"),
    ]


def test_the_cutover_hands_over_at_the_admins_next_time_and_later_fires_follow_the_cron_zone(tmp_path: Path) -> None:
    from migrator.apply import Migrator
    from migrator.cutover import BusinessSwitch
    from migrator.legacy_control import XxlJobControl
    from migrator.ports import GateDecision
    from migrator.target import TargetWriter
    from scheduler_core.clock import ManualClock
    from scheduler_core.model import TriggerState
    from scheduler_core.store.sql import SqlTriggerStore
    from tests.migration_env import FixedGate

    engine, _ = _legacy(tmp_path / "xxl.db")
    expected = last_fridays_at_1015(ZoneInfo("UTC"), NOW, 4)
    _seed(engine, SHANGHAI, next_fire=expected[0])  # JDBC in Shanghai, the admin JVM in UTC
    target = make_engine(f"sqlite:///{tmp_path / 't.db'}")
    init_schema(target, 4)
    clock = ManualClock(NOW)
    store = SqlTriggerStore(target, clock)
    reader = XxlJobReader(engine, db_tz="Asia/Shanghai", cron_tz="UTC")
    assert Migrator(reader, TargetWriter(store, migrator_store(store)), clock).run().counts["create"] == 1
    sw = BusinessSwitch(
        store,
        migrator_store(store),
        XxlJobControl(engine, clock),
        clock,
        FixedGate(GateDecision(ready=True, comparison_id=1, computed_at=clock.now())),
    )
    sw.start_dual_run("sop", shadow=True, actor="ops")
    report = sw.cutover("sop", actor="ops", reason="zones")
    assert report.handover.get("7") == expected[0].isoformat()
    (trigger,) = [t for t in store.triggers_of(biz_code="sop") if t.state is TriggerState.WAITING]
    assert trigger.time_zone == "UTC" and trigger.next_fire_at == expected[0]
    fires = [trigger.next_fire_at]
    while len(fires) < 4:
        nxt = next_after(trigger, fires[-1])
        assert nxt is not None
        fires.append(nxt)
    assert fires == expected
