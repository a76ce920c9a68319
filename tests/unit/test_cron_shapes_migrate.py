"""A job the real admin runs is never quarantined for its cron: the shapes Quartz accepts
(and that this project used to reject) migrate, with the fire times Quartz gives them; an
expression Quartz accepts but that never fires migrates as a trigger that never fires."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest

from migrator.mapping import Mapped, Rejection, map_definition
from readers.records import LegacyDefinition
from scheduler_core.cron import CronExpression
from scheduler_core.model import TriggerKind, TriggerState
from scheduler_core.occurrences import next_after
from tests.legacy_rows import xxl_bean_row

NOW = datetime(2026, 12, 2, 6, 0, tzinfo=UTC)
ZONE = "Asia/Shanghai"

# accepted by Quartz 2.3.2 and 2.5.2 (and so by every xxl-job admin), each with a next fire
FIRING = (
    "*/0 * * * * ?",
    "5/0 * * * * ?",
    "0-59/60 * * * * ?",
    "0 0 0 1-5W * ?",
    "0 0 12 ? * MON/2",
    "0 0 0 ? * MON-FRI/2",
    "0 0 0 ? * MONDAY",
    "0 0 0 ? * MON#5",
    "0 0 0 ? 2 MON#5",
    "0 0 12 ? * MON,WED#2",
)
# accepted, and never fire: day-of-week 8 never comes, 1969 is past, 2300 is past Quartz's horizon
NEVER = ("0 0 12 ? * 8#1", "0 0 12 * * ? 1969", "0 0 12 * * ? 2300")


def _row(cron: str, enabled: bool = True) -> LegacyDefinition:
    return xxl_bean_row(cron, time_zone=ZONE, enabled=enabled)


@pytest.mark.parametrize("cron", FIRING)
def test_quartz_shapes_migrate_with_quartz_fire_times(cron: str) -> None:
    mapped = map_definition(_row(cron), None, NOW, active=True)
    assert isinstance(mapped, Mapped), mapped
    trigger = mapped.trigger
    assert trigger is not None and trigger.kind is TriggerKind.CRON and trigger.cron == cron
    expected = CronExpression(cron, ZONE).next_after(NOW.astimezone(ZoneInfo(ZONE)))
    assert expected is not None
    assert trigger.next_fire_at == expected.astimezone(UTC)
    assert trigger.state is TriggerState.WAITING
    # and the scheduler can go on from there
    assert next_after(trigger, trigger.next_fire_at) is not None


@pytest.mark.parametrize("cron", NEVER)
@pytest.mark.parametrize("enabled", [True, False])
def test_never_firing_crons_migrate_as_triggers_that_never_fire(cron: str, enabled: bool) -> None:
    mapped = map_definition(_row(cron, enabled), None, NOW, active=True)
    assert isinstance(mapped, Mapped), mapped  # not quarantined
    trigger = mapped.trigger
    assert trigger is not None and trigger.cron == cron
    assert trigger.state is TriggerState.COMPLETED  # nothing left to fire, as on the legacy admin
    assert next_after(trigger, NOW) is None


def test_what_quartz_rejects_is_still_quarantined_with_quartz_reason() -> None:
    rejected = map_definition(_row("0 0 12 ? * 8"), None, NOW)
    assert isinstance(rejected, Rejection)
    assert rejected.field == "cron"
    assert "Day-of-Week values must be between 1 and 7" in rejected.reason
    assert "'0 0 12 ? * 8'" in rejected.reason
