"""Each migrated cron carries its legacy's Quartz dialect, and every later fire honours it.

xxl-job 2.1.0-3.0.x ship Quartz 2.3's CronExpression, 3.1.0 on Quartz 2.5's; the batch
center's contract names no version (the current line, 2.5). A row is migrated under its
admin's dialect, so whatever that admin runs migrates, and the scheduler evaluates the
stored trigger in that dialect. Values below are the ones docs/cron.md measured on the
jars (tests/unit/test_cron.py::test_dialects_differ pins them against cron.py itself);
tests/unit/test_cron_dialect_oracle.py checks the same path against the jars.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from migrator.mapping import Mapped, Rejection, map_definition
from readers.legacy_ddl.tables import XxlJobLineage
from readers.records import LegacyDefinition
from readers.xxljob.cron_lineage import cron_lineage, parse_version
from scheduler_core.clock import ManualClock
from scheduler_core.errors import SchemaError
from scheduler_core.model import Trigger, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after
from scheduler_core.store.admin import tables_for
from scheduler_core.store.engine import make_engine
from scheduler_core.store.schema import SCHEMA_VERSION
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.schema import check_schema, init_schema
from tests.harness import make_harness, trigger_of
from tests.legacy_rows import xxl_bean_row

ZONE = "UTC"
NOW = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
EIGHT_TERMS = "0 0 12 * * ? 2027 extra"  # Quartz 2.3 ignores the 8th term; 2.5: "too many terms"
W_FROM = datetime(2027, 5, 1, 12, 0, tzinfo=UTC)  # a Saturday: 1W has passed for this month
W_CRON = "0 0 10 1W * ?"  # 2.3: Monday 2027-05-03 10:00; 2.5: 2027-06-01 10:00


def _row(cron: str, dialect: str) -> LegacyDefinition:
    return xxl_bean_row(cron, time_zone=ZONE, cron_dialect=dialect)


@pytest.mark.parametrize(
    ("version", "dialect"),
    [
        ("2.1.0", "2.3"),
        ("2.4.2", "2.3"),
        ("3.0.0", "2.3"),
        ("3.1.0", "2.5"),
        ("3.3.2", "2.5"),
        ("3.4.2", "2.5"),
    ],
)
def test_the_xxl_job_version_picks_its_copy_of_quartz(version: str, dialect: str) -> None:
    assert cron_lineage(XxlJobLineage.V2_4, version=version).dialect == dialect


def test_without_a_version_the_schema_tells_what_it_can() -> None:
    assert cron_lineage(XxlJobLineage.V2_2).dialect == "2.3"
    assert cron_lineage(XxlJobLineage.V3_4).dialect == "2.5"
    assert cron_lineage(XxlJobLineage.MASTER).dialect == "2.5"
    assert cron_lineage(XxlJobLineage.V2_4, user_token=True).dialect == "2.5"  # 3.2.0+
    taken = cron_lineage(XxlJobLineage.V2_4)
    assert taken.dialect == "2.3" and "--xxl-job-version" in taken.why


@pytest.mark.parametrize("bad", ["2.0.5", "two", "3", ""])
def test_a_version_that_names_no_supported_admin_is_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="xxl-job version"):
        parse_version(bad)


def test_a_quartz_23_admin_runs_eight_terms_and_the_row_migrates_and_fires() -> None:
    mapped = map_definition(_row(EIGHT_TERMS, "2.3"), None, NOW, active=True)
    assert isinstance(mapped, Mapped), mapped
    trigger = mapped.trigger
    assert trigger is not None and trigger.cron_dialect == "2.3" and trigger.state is TriggerState.WAITING
    assert trigger.next_fire_at == datetime(2027, 1, 1, 12, tzinfo=UTC)
    assert next_after(trigger, trigger.next_fire_at) == datetime(2027, 1, 2, 12, tzinfo=UTC)
    # the same row on a Quartz 2.5 admin: that admin rejects it, and so does the migration
    rejected = map_definition(_row(EIGHT_TERMS, "2.5"), None, NOW, active=True)
    assert isinstance(rejected, Rejection) and rejected.field == "cron"
    assert "Quartz 2.5" in rejected.reason and "too many terms" in rejected.reason


def test_a_quartz_25_admin_runs_l_in_a_list_and_the_row_migrates() -> None:
    mapped = map_definition(_row("0 0 0 L,15 * ?", "2.5"), None, NOW, active=True)
    assert isinstance(mapped, Mapped) and mapped.trigger is not None
    assert mapped.trigger.next_fire_at == datetime(2026, 12, 15, tzinfo=UTC)
    assert isinstance(map_definition(_row("0 0 0 L,15 * ?", "2.3"), None, NOW), Rejection)


def test_an_unknown_dialect_is_quarantined_naming_the_field() -> None:
    rejected = map_definition(_row("0 0 12 * * ?", "2.4"), None, NOW)
    assert isinstance(rejected, Rejection) and rejected.field == "cron" and "'2.4'" in rejected.reason


def test_the_dialect_is_part_of_the_definition_only_when_not_the_default() -> None:
    """A trigger migrated before triggers carried a dialect (all 2.5) keeps its hash, so an
    upgrade rewrites nothing for it; a 2.3 row hashes apart and is updated to carry it."""
    a = map_definition(_row("0 0 12 * * ?", "2.5"), None, NOW)
    b = map_definition(_row("0 0 12 * * ?", "2.3"), None, NOW)
    assert isinstance(a, Mapped) and isinstance(b, Mapped)
    assert a.content_hash != b.content_hash


def _stored(tmp_path: Path, trigger_dialect: str, cron: str) -> tuple[SqlTriggerStore, Trigger]:
    clock = ManualClock(W_FROM)
    h = make_harness(tmp_path, clock, partitions=1)
    job = h.job("j-w")
    probe = trigger_of(job, TriggerKind.CRON, W_FROM, cron=cron, cron_dialect=trigger_dialect, time_zone=ZONE)
    # its first fire as its cron computes it: add_triggers refuses any other (issue 28)
    first = next_after(probe, W_FROM)
    assert first is not None
    (t,) = h.store.add_triggers([replace(probe, next_fire_at=first)])
    return h.store, t


@pytest.mark.parametrize(
    ("dialect", "expected"),
    [("2.3", datetime(2027, 5, 3, 10, tzinfo=UTC)), ("2.5", datetime(2027, 6, 1, 10, tzinfo=UTC))],
)
def test_the_store_keeps_the_dialect_and_the_next_occurrence_follows_it(
    tmp_path: Path, dialect: str, expected: datetime
) -> None:
    store, t = _stored(tmp_path, dialect, W_CRON)
    back = store.get_trigger(t.id)  # type: ignore[arg-type]
    assert back is not None and back.cron_dialect == dialect
    assert next_after(back, W_FROM) == expected


@pytest.mark.parametrize(
    ("dialect", "second"),
    [("2.3", datetime(2027, 5, 3, 10, tzinfo=UTC)), ("2.5", datetime(2027, 6, 1, 10, tzinfo=UTC))],
)
def test_the_scheduler_reschedules_each_trigger_in_its_own_dialect(
    tmp_path: Path, dialect: str, second: datetime
) -> None:
    """The fire path: a trigger fired at 2027-05-01 12:00:30 is rescheduled by its dialect."""
    start = datetime(2027, 5, 1, 12, 0, 30, tzinfo=UTC)
    clock = ManualClock(start - timedelta(seconds=1))
    h = make_harness(tmp_path, clock, partitions=1)
    job = h.job("j-fire")
    # every minute on the 1st (and its W day): a fire at 12:00:30 on May 1st, then the next
    cron = "30 0 12 1W * ?"
    probe = trigger_of(job, TriggerKind.CRON, start, cron=cron, cron_dialect=dialect, time_zone=ZONE)
    first = next_after(probe, start)
    assert first is not None
    (t,) = h.store.add_triggers([replace(probe, next_fire_at=first)])
    # May 1st is no fire time of either dialect's 1W: the row a migration wrote from the
    # legacy's own next time (add_triggers refuses it, issue 28), so written as the migrator does
    with h.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE dus_job_trigger SET next_fire_at = :at WHERE id = :i"), {"at": to_ms(start), "i": t.id}
        )
    h.listen("biz-a")
    core = h.core()
    clock.set(start)
    core.tick_all()
    core.drain()
    fired = h.delivered("biz-a")
    assert [c.scheduled_at for c in fired] == [start]
    after = h.store.get_trigger(t.id)  # type: ignore[arg-type]
    assert after is not None and after.state is TriggerState.WAITING
    assert after.next_fire_at == second.replace(minute=0, second=30, hour=12)
    core.shutdown()


def _v1_store(url: str) -> None:
    """A store as schema version 1 left it: no cron_dialect column, one cron trigger."""
    engine = make_engine(url)
    try:
        init_schema(engine, 1)
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE dus_job_trigger DROP COLUMN cron_dialect"))
            conn.execute(text("UPDATE dus_meta SET value = '1' WHERE name = 'schema_version'"))
            conn.execute(
                text(
                    "INSERT INTO dus_job (job_code, biz_code, handler, params, shard_total, timeout_ms, max_retry, priority,"
                    " envelope_size, explicit_items, shadow, created_at, updated_at)"
                    " VALUES ('old', 'biz-a', 'h', '', 1, 30000, 0, 5, 1, 0, 0, 0, 0)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO dus_job_trigger (job_id, job_code, biz_code, kind, cron_expr, interval_ms, time_zone,"
                    " next_fire_at, state, priority, misfire_policy, version, created_at, updated_at)"
                    " VALUES (1, 'old', 'biz-a', 'cron', :cron, NULL, 'UTC', :at, 'waiting', 5, 'skip', 0, 0, 0)"
                ),
                {"cron": W_CRON, "at": int(W_FROM.timestamp() * 1000)},
            )
    finally:
        engine.dispose()


def upgrade_keeps_old_triggers_as_they_were(url: str) -> None:
    _v1_store(url)
    engine = make_engine(url)
    try:
        with pytest.raises(SchemaError, match=r"version 1.*db init"):
            tables_for(engine)
        before = check_schema(engine)
        assert not before.ok and "dus_job_trigger.cron_dialect" in before.missing
        report = init_schema(engine)
        # (the lanes of issue 29 fill the lane of its rows too: tests/unit/test_lanes.py)
        assert report.upgraded[0] == "dus_job_trigger.cron_dialect" and report.ok
        assert report.schema_version == SCHEMA_VERSION
        assert init_schema(engine).upgraded == []  # idempotent
        store = SqlTriggerStore(engine, ManualClock(W_FROM))
        (old,) = store.triggers_of(biz_code="biz-a")
        assert old.cron_dialect == "2.5"  # no dialect stored: the default, today's behaviour
        assert next_after(old, W_FROM) == datetime(2027, 6, 1, 10, tzinfo=UTC)
    finally:
        engine.dispose()


def test_db_init_upgrades_a_version_1_store_on_sqlite(tmp_path: Path) -> None:
    upgrade_keeps_old_triggers_as_they_were(f"sqlite:///{tmp_path / 'v1.db'}")


def test_the_shanghai_zone_is_kept_beside_the_dialect() -> None:
    row = xxl_bean_row(
        EIGHT_TERMS, source_key="8", name="n", handler="h", time_zone="Asia/Shanghai", cron_dialect="2.3"
    )
    mapped = map_definition(row, None, NOW, active=True)
    assert isinstance(mapped, Mapped) and mapped.trigger is not None
    assert mapped.trigger.next_fire_at == datetime(2027, 1, 1, 12, tzinfo=ZoneInfo("Asia/Shanghai"))


def test_an_unsure_version_takes_the_other_line_only_for_what_the_first_rejects() -> None:
    """The 2.4 schema without xxl_job_user.token is 2.3.0-3.1.x: Quartz 2.3, with 2.5 as the
    fallback (a cron only 2.5 accepts was saved by a 3.1.x admin, which runs it)."""
    unsure = cron_lineage(XxlJobLineage.V2_4)
    assert (unsure.dialect, unsure.fallback) == ("2.3", "2.5")
    assert cron_lineage(XxlJobLineage.V2_4, version="3.0.0").fallback == ""

    def row(cron: str) -> LegacyDefinition:
        return xxl_bean_row(
            cron, name="n", handler="h", time_zone=ZONE, cron_dialect="2.3", cron_dialect_fallback="2.5"
        )

    both = map_definition(row(EIGHT_TERMS), None, NOW, active=True)  # 2.3 accepts it: 2.3
    assert isinstance(both, Mapped) and both.trigger is not None and both.trigger.cron_dialect == "2.3"
    only25 = map_definition(row("0 0 0 L,15 * ?"), None, NOW, active=True)
    assert isinstance(only25, Mapped) and only25.trigger is not None and only25.trigger.cron_dialect == "2.5"
    neither = map_definition(row("0 0 12 ? * 8"), None, NOW)
    assert isinstance(neither, Rejection) and "Quartz 2.3" in neither.reason
