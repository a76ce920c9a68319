"""Legacy definitions as the readers decode them, for mapping and migration tests."""

from __future__ import annotations

from typing import Any

from readers.records import LegacyDefinition, ScheduleKind, SourceSystem

# what an xxl-job BEAN job (a handler in the executor's code) is unless a test says otherwise
_BEAN: dict[str, Any] = dict(
    source=SourceSystem.XXL_JOB,
    source_key="7",
    biz_code="billing",
    name="nightly",
    schedule=ScheduleKind.CRON,
    handler="nightlyHandler",
    raw={"glue_type": "BEAN"},
)


def xxl_bean_row(cron: str | None, **fields: Any) -> LegacyDefinition:
    """An xxl-job BEAN job with `cron`; `fields`: the LegacyDefinition fields a test sets
    (source_key, time_zone, cron_dialect, enabled...) over _BEAN."""
    return LegacyDefinition(**{**_BEAN, "cron": cron, **fields})
