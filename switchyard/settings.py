"""Settings from the environment, with the embedded defaults."""

from __future__ import annotations

from typing import TYPE_CHECKING

from readers.records import SourceSystem

if TYPE_CHECKING:
    from readers.timezones import LegacyZones


def legacy_zones(
    source: str, legacy_tz: str | None, db_tz: str | None = None, cron_tz: str | None = None
) -> LegacyZones:
    """The legacy source's zones from the command line: `--legacy-tz` is both, and
    `--legacy-db-tz` / `--legacy-cron-tz` each override one (one given alone sets the
    other too). The batch center's contract has one zone for its DATETIMEs and its crons:
    two different ones are refused."""
    return zones_for_source(source, parse_zones(legacy_tz, db_tz, cron_tz))


def parse_zones(legacy_tz: str | None, db_tz: str | None = None, cron_tz: str | None = None) -> LegacyZones:
    """The three zone options as one LegacyZones, for a command that learns the source
    system later (a switch reads it from the business); ValueError naming the options."""
    from readers.timezones import LegacyZones

    try:
        return LegacyZones.of(legacy_tz, db=db_tz, cron=cron_tz)
    except ValueError as exc:
        raise ValueError(f"--legacy-tz / --legacy-db-tz / --legacy-cron-tz: {exc}") from None


def zones_for_source(source: str, zones: LegacyZones) -> LegacyZones:
    """`zones`, unless the source keeps one zone and they differ (ValueError)."""
    if source == SourceSystem.BATCH_CENTER and zones.split:
        raise ValueError(
            f"the batch center stores and schedules in one zone: --legacy-db-tz {zones.db} and "
            f"--legacy-cron-tz {zones.cron} differ (use --legacy-tz)"
        )
    return zones
