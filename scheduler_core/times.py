"""The one conversion between aware datetimes (the model) and epoch milliseconds (storage, wire).

Storage and the wire carry UTC epoch milliseconds so that no naive local time is ever
persisted; the model carries aware datetimes so that arithmetic stays honest.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

UTC = timezone.utc
_MS = timedelta(milliseconds=1)


def require_aware(value: datetime, name: str) -> datetime:
    if value.tzinfo is None or value.tzinfo.utcoffset(value) is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {value.isoformat()}")
    return value


def to_ms(value: datetime) -> int:
    require_aware(value, "datetime")
    # timestamp() on an aware datetime is exact to the microsecond; round, don't truncate,
    # so that from_ms(to_ms(x)) is stable for values already on a millisecond.
    return round(value.timestamp() * 1000)


def from_ms(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def duration_ms(value: timedelta) -> int:
    """Whole milliseconds of a duration (floored on the timedelta itself: exact, no float)."""
    return value // _MS


def opt_to_ms(value: datetime | None) -> int | None:
    return None if value is None else to_ms(value)


def opt_from_ms(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)
