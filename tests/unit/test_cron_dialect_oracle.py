"""Differential, through the migration: each xxl-job row is migrated under its admin's
Quartz dialect (by version: readers.xxljob.cron_lineage), stored, read back, and the
scheduler's next occurrences of the stored trigger are compared with the oracle of the
Quartz jar that admin's CronExpression copy behaves as (docs/cron.md).

For every case: the oracle rejects (or cannot compute) the expression <=> the row is
quarantined with field `cron`; the oracle accepts and gives no fire <=> the row migrates
as a trigger that never fires (completed); otherwise the row migrates (never quarantined:
the admin runs it) and its first fire and the scheduler's next ones are the oracle's.
The oracle JVMs and the generators are tests/unit/test_cron_quartz_oracle.py's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings

from migrator.mapping import Mapped, Rejection, map_definition
from readers.legacy_ddl.tables import XxlJobLineage
from readers.records import LegacyDefinition
from readers.xxljob.cron_lineage import cron_lineage
from scheduler_core.clock import ManualClock
from scheduler_core.model import Job, TriggerState
from scheduler_core.occurrences import next_after
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.legacy_rows import xxl_bean_row
from tests.unit.test_cron_quartz_oracle import (  # noqa: F401
    EXAMPLES,
    FIRES,
    NAMED_CASES,
    Oracle,
    cases,
    oracles,
)

# an admin's version -> the Quartz jar its CronExpression copy behaves as (docs/cron.md:
# 2.1.0-3.0.0 "borrowed from quartz v2.3.1" = 2.3.2's behaviour; 3.4.x from 2.5.2)
ADMINS = {"2.4.2": "2.3.2", "3.0.0": "2.3.2", "3.4.2": "2.5.2"}
NAMED_ZONES = ("Asia/Shanghai", "America/New_York")
# shapes where the two lines disagree on validity or fire times (docs/cron.md)
DIALECT_SHAPES = (
    "0 0 12 * * ? 2027 extra",
    "0 0 0 L,15 * ?",
    "0 0 0 1,15W * ?",
    "L * * * * ?",
    "0 0 10 1W * ?",
    "* * * 2W * ?",
    "0 0 0 30W 2 ?",
    "0 0 0 LW,1 * ?",
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SqlTriggerStore]:
    path: Path = tmp_path_factory.mktemp("dialect") / "store.db"
    engine = make_engine(f"sqlite:///{path}")
    init_schema(engine, 1)
    try:
        yield SqlTriggerStore(engine, ManualClock(datetime(2026, 1, 1, tzinfo=UTC)))
    finally:
        engine.dispose()


class Check:
    def __init__(self, store: SqlTriggerStore, version: str) -> None:
        self.store, self.version = store, version
        self.dialect = cron_lineage(XxlJobLineage.V2_4, version=version).dialect
        self.kinds: Counter[str] = Counter()
        self.job: Job | None = None

    def row(self, expression: str, zone: str) -> LegacyDefinition:
        return xxl_bean_row(
            expression,
            source_key="1",
            biz_code="cron-diff",
            name="diff",
            handler="h",
            time_zone=zone,
            cron_dialect=self.dialect,
        )

    def __call__(self, oracle: Oracle, expression: str, zone: str, start_ms: int) -> None:
        expected = oracle.ask(expression, zone, start_ms, FIRES)
        start = datetime.fromtimestamp(start_ms / 1000, UTC)
        mapped = map_definition(self.row(expression, zone), None, start, active=True)
        where = f"{expression!r} in {zone} after {start.isoformat()} on xxl-job {self.version}"
        if expected == ("invalid",):
            self.kinds["quarantined"] += 1
            assert isinstance(mapped, Rejection) and mapped.field == "cron", f"{where}: Quartz rejects, we {mapped}"
            return
        assert isinstance(mapped, Mapped) and mapped.trigger is not None, f"{where}: the admin runs it, we {mapped}"
        assert mapped.trigger.cron_dialect == self.dialect
        if self.job is None:
            self.job = self.store.put_job(mapped.job)
        (stored,) = self.store.add_triggers([mapped.trigger])
        assert stored.cron_dialect == self.dialect
        back = self.store.get_trigger(stored.id)  # type: ignore[arg-type]
        assert back is not None and back.cron_dialect == self.dialect
        want = [datetime.fromtimestamp(int(ms) / 1000, UTC) for ms in expected[1:]]
        if back.state is TriggerState.COMPLETED:
            got: list[datetime] = []
        else:
            got = [back.next_fire_at]
            while len(got) < FIRES and (nxt := next_after(back, got[-1])) is not None:
                got.append(nxt)
        # Quartz's MAX_YEAR (the JVM's year + 100, docs/cron.md "Horizon"), a year of the zone
        got = [g for g in got if g.astimezone(ZoneInfo(zone)).year <= oracle.max_year]
        self.kinds["never fires" if not want else "fires"] += 1
        assert got == want, f"{where}: ours {got}, Quartz {want}"


@pytest.mark.parametrize("version", ADMINS)
@pytest.mark.parametrize("expression", NAMED_CASES + DIALECT_SHAPES)
def test_named_rows_migrate_as_their_admin_runs_them(
    oracles: dict[str, Oracle],  # noqa: F811
    store: SqlTriggerStore,
    version: str,
    expression: str,
) -> None:
    check = Check(store, version)
    for zone in NAMED_ZONES:
        for start in (datetime(2026, 3, 7, 12, tzinfo=UTC), datetime(2027, 5, 1, 4, 0, 1, tzinfo=UTC)):
            check(oracles[ADMINS[version]], expression, zone, int(start.timestamp() * 1000))


def test_a_row_only_one_line_accepts_is_migrated_under_that_line_only(
    oracles: dict[str, Oracle],  # noqa: F811
    store: SqlTriggerStore,
) -> None:
    """The check can fail: the same rows under the other line's admin disagree with it."""
    start_ms = int(datetime(2026, 3, 7, 12, tzinfo=UTC).timestamp() * 1000)
    assert oracles["2.3.2"].ask("0 0 12 * * ? 2027 extra", "UTC", start_ms, 1)[0] == "ok"
    assert oracles["2.5.2"].ask("0 0 12 * * ? 2027 extra", "UTC", start_ms, 1) == ("invalid",)
    with pytest.raises(AssertionError, match="Quartz rejects"):
        Check(store, "2.4.2")(oracles["2.5.2"], "0 0 12 * * ? 2027 extra", "UTC", start_ms)
    with pytest.raises(AssertionError, match="the admin runs it"):
        Check(store, "3.4.2")(oracles["2.3.2"], "0 0 12 * * ? 2027 extra", "UTC", start_ms)


@pytest.mark.parametrize("version", ADMINS)
def test_generated_rows_migrate_as_their_admin_runs_them(
    oracles: dict[str, Oracle],  # noqa: F811
    store: SqlTriggerStore,
    version: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    check, oracle = Check(store, version), oracles[ADMINS[version]]
    examples = max(EXAMPLES // 2, 50)

    @settings(max_examples=examples, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(cases())
    def agree(case: tuple[str, str, int]) -> None:
        check(oracle, *case)

    agree()
    total = sum(check.kinds.values())
    with capsys.disabled():
        print(
            f"\n[cron differential, migrated rows] xxl-job {version} (Quartz {check.dialect}, jar {ADMINS[version]}): "
            f"{total} rows agree ({', '.join(f'{k} {n}' for k, n in sorted(check.kinds.items()))})"
        )
    assert total >= min(examples, 100)
    assert check.kinds["fires"] >= total // 5 and check.kinds["quarantined"] >= total // 20, check.kinds
