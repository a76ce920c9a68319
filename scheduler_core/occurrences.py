"""Next occurrence of a trigger: pure functions over the model and the cron evaluator."""

from __future__ import annotations

from datetime import datetime, timezone
from functools import lru_cache

from scheduler_core.cron import CronExpression, Dialect
from scheduler_core.model import Trigger, TriggerKind
from scheduler_core.times import to_ms


@lru_cache(maxsize=4096)
def _cron(expr: str, tz: str, dialect: Dialect) -> CronExpression:
    return CronExpression(expr, tz, dialect=dialect)


def next_after(trigger: Trigger, after: datetime) -> datetime | None:
    """The first occurrence strictly after `after`, or None when the trigger is done."""
    if trigger.kind is TriggerKind.ONCE or trigger.kind is TriggerKind.NONE:
        return None
    if trigger.kind is TriggerKind.CRON:
        assert trigger.cron is not None
        nxt = _cron(trigger.cron, trigger.time_zone, trigger.cron_dialect).next_after(after)
        if nxt is not None:
            # in UTC like every other instant of the model: a wall time of the fall-back
            # hour (fold=1) never compares equal to the same instant in another zone (PEP 495)
            nxt = nxt.astimezone(timezone.utc)
    else:
        assert trigger.interval is not None
        # anchored at the current occurrence: steps of the interval, never drifting with
        # the time the fire actually ran
        base = trigger.next_fire_at
        if after < base:
            nxt = base
        else:
            steps = (after - base) // trigger.interval + 1
            nxt = base + steps * trigger.interval
    if nxt is None:
        return None
    if trigger.end_at is not None and nxt > trigger.end_at:
        return None
    return nxt


def count_between(trigger: Trigger, start: datetime, end: datetime, cap: int = 100_000) -> int:
    """Occurrences in (start, end), capped: how many a misfire skipped."""
    n = 0
    cursor = start
    while n < cap:
        nxt = next_after(trigger, cursor)
        if nxt is None or nxt >= end:
            return n
        n += 1
        cursor = nxt
    return n


def times_until(trigger: Trigger, first: datetime | None, end: datetime, cap: int) -> list[int]:
    """`first` (an occurrence of `trigger`) and the occurrences after it, before `end`, in
    epoch ms, at most `cap`: the runs a resume, a rollback or an edit publishes itself."""
    out: list[int] = []
    at = first
    while at is not None and at < end and len(out) < cap:
        out.append(to_ms(at))
        at = next_after(trigger, at)
    return out
