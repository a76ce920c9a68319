"""Legacy definitions as the readers decode them, for mapping and migration tests."""

from __future__ import annotations

from typing import Any

from readers.records import LegacyDefinition, ScheduleKind, SourceSystem


def xxl_bean_row(
    cron: str | None,
    *,
    source_key: str = "7",
    business: str = "billing",
    name: str = "nightly",
    handler: str = "nightlyHandler",
    schedule: ScheduleKind = ScheduleKind.CRON,
    **fields: Any,
) -> LegacyDefinition:
    """An xxl-job BEAN job (a handler in the executor's code); `fields`: the other
    LegacyDefinition fields a test sets (time_zone, cron_dialect, enabled...)."""
    return LegacyDefinition(
        source=SourceSystem.XXL_JOB,
        source_key=source_key,
        business=business,
        name=name,
        schedule=schedule,
        cron=cron,
        handler=handler,
        raw={"glue_type": "BEAN"},
        **fields,
    )
