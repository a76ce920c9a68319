"""A live trigger's schedule edit, as the migrator applies it (`scheduler_core.supersede`).

The legacy admin applies an edited schedule from about now + 5 s; the migrated trigger has
already published its old schedule one lookahead ahead. `plan_edit` tells, for one edit
the target writer makes, the effective instant E = now + margin and the new schedule's
occurrences from E up to the trigger's new next_fire_at (which the scheduler fires from
on as usual); `SqlSupersedes.record_edit` then supersedes, in the edit's transaction, the
old commands at or after E the new schedule lacks, and leaves the new ones to publish.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from scheduler_core.model import DEFAULT_CRON_DIALECT, Trigger, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after, times_until
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)
# a schedule far denser than any cron (every second for the whole lookahead is 1800):
# past this many occurrences between E and next_fire_at the list stops (a guard, logged)
MAX_OCCURRENCES = 20_000


@dataclass(frozen=True, slots=True)
class ScheduleEdit:
    trigger_id: int
    biz_code: str
    effective_ms: int
    new_times: tuple[int, ...]


def plan_edit(
    new: Trigger,
    trigger_id: int,
    state: str,
    schedule: tuple[Any, ...],
    next_fire_ms: int | None,
    now_ms: int,
    margin: timedelta,
) -> ScheduleEdit | None:
    """The edit of a waiting trigger whose schedule (kind, cron, interval, zone) changed
    and that has published ahead (`schedule` = the row's next_fire_at, kind, cron_expr,
    interval_ms, time_zone[, cron dialect] before the edit; `next_fire_ms` = after it);
    None otherwise."""
    old_next, kind, cron, interval_ms, tz, *rest = schedule
    if state != TriggerState.WAITING.value or old_next is None or next_fire_ms is None:
        return None
    if new.kind in (TriggerKind.ONCE, TriggerKind.NONE) or kind == TriggerKind.NONE.value:
        return None
    interval = int(new.interval.total_seconds() * 1000) if new.interval else None
    # a cron's dialect is part of its schedule (NULL: stored before there was one, the default)
    dialect = rest[0] if rest else None
    old_dialect = (dialect or DEFAULT_CRON_DIALECT) if kind == TriggerKind.CRON.value else None
    new_dialect = new.cron_dialect if new.kind is TriggerKind.CRON else None
    if (kind, cron, interval_ms, tz, old_dialect) == (new.kind.value, new.cron, interval, new.time_zone, new_dialect):
        return None  # the same schedule (a replayed event, or another field edited)
    effective = now_ms + int(margin.total_seconds() * 1000)
    if effective >= int(old_next):
        # nothing published at or after E: the scheduler fires the new schedule as usual.
        # Behind (old_next already due, never published: the scheduler down, stalled or
        # failing over), the old schedule's due occurrences are the edit's runs: moved to
        # the new schedule's next time, they would be run by nobody
        if int(old_next) >= now_ms:
            return None
        old = dataclasses.replace(
            new,
            kind=TriggerKind(kind),
            cron=cron,
            interval=timedelta(milliseconds=int(interval_ms)) if interval_ms else None,
            time_zone=tz,
            cron_dialect=old_dialect or DEFAULT_CRON_DIALECT,
            next_fire_at=from_ms(int(old_next)),
        )
        due = times_until(old, from_ms(int(old_next)), from_ms(min(now_ms, next_fire_ms)), MAX_OCCURRENCES)
        return ScheduleEdit(trigger_id, new.biz_code, int(old_next), tuple(due)) if due else None
    times: list[int] = []
    at = next_after(new, from_ms(effective) - timedelta(milliseconds=1))
    while at is not None and to_ms(at) < next_fire_ms:
        if len(times) >= MAX_OCCURRENCES:
            log.warning(
                "trigger %s: more than %d occurrences of its new schedule before its next fire; "
                "the rest are not published",
                trigger_id,
                MAX_OCCURRENCES,
            )
            break
        times.append(to_ms(at))
        at = next_after(new, at)
    return ScheduleEdit(trigger_id, new.biz_code, effective, tuple(times))


__all__ = ["MAX_OCCURRENCES", "ScheduleEdit", "plan_edit"]
