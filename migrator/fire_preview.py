"""A cron job's next fire times as the new side will compute them, for `migrate plan`.

An operator compares them with the legacy admin's own "next trigger time" before any
switch: a cron evaluated in the wrong zone (xxl-job's crons run in the admin JVM's zone,
its DATETIMEs are in the JDBC connection's zone, and the two differ in real deployments)
shows here as fire times hours away from the admin's. The legacy side's stored next time
(`trigger_next_time`, epoch ms, zone-free) is checked too: when it is not an occurrence of
the cron in the zone the new side uses, the preview says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from readers.records import LegacyDefinition, ScheduleKind
from scheduler_core.cron import CronExpression, CronSyntaxError

PREVIEW_COUNT = 3


@dataclass(frozen=True, slots=True, kw_only=True)
class FirePreview:
    source_key: str
    biz_code: str
    cron: str
    zone: str  # the zone the cron runs in on the new side (the trigger's time_zone)
    fires: tuple[datetime, ...]  # aware, in `zone`
    legacy_next: datetime | None  # the legacy side's stored next time (aware UTC), if any
    # None: nothing to check (no legacy next time, or it is in the past); False: the legacy
    # next time is not an occurrence of the cron in `zone`
    legacy_next_matches: bool | None

    def as_dict(self) -> dict[str, object]:
        return {
            "source_key": self.source_key,
            "business": self.biz_code,
            "cron": self.cron,
            "zone": self.zone,
            "next_fires_utc": [f.astimezone(timezone.utc).isoformat() for f in self.fires],
            "next_fires_local": [f.isoformat() for f in self.fires],
            "legacy_next_utc": self.legacy_next.astimezone(timezone.utc).isoformat() if self.legacy_next else None,
            "legacy_next_matches": self.legacy_next_matches,
        }


def preview(defn: LegacyDefinition, now: datetime, count: int = PREVIEW_COUNT) -> FirePreview | None:
    """The next `count` fires strictly after `now` of a cron definition without problems;
    None for any other (not a cron, or a row the plan quarantines)."""
    if defn.schedule is not ScheduleKind.CRON or not defn.cron or defn.problems:
        return None
    try:
        expr = CronExpression(defn.cron, defn.time_zone, dialect=defn.cron_dialect)  # type: ignore[arg-type]
    except (CronSyntaxError, ValueError):
        return None
    fires: list[datetime] = []
    at = now.astimezone(expr.tz)
    while len(fires) < count:
        nxt = expr.next_after(at)
        if nxt is None:
            break
        fires.append(nxt)
        at = nxt
    legacy = defn.next_fire_at
    matches: bool | None = None
    if legacy is not None and legacy > now:
        # an occurrence is the first fire after the instant just before it
        first = expr.next_after((legacy - timedelta(seconds=1)).astimezone(expr.tz))
        matches = first is not None and first == legacy
    return FirePreview(
        source_key=defn.source_key,
        biz_code=defn.biz_code,
        cron=defn.cron,
        zone=str(expr.tz),
        fires=tuple(fires),
        legacy_next=legacy,
        legacy_next_matches=matches,
    )
