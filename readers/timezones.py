"""The one place legacy wall-clock times become aware UTC (and back, for queries).

Both legacy systems store DATETIME columns as naive wall-clock times of one zone (the
xxl-job admin JVM's, the batch-center server's: Asia/Shanghai unless configured), and
xxl-job also keeps epoch milliseconds (`trigger_next_time`). Nothing else in `readers`
turns a naive value into an instant.

The rule for local times that do not name exactly one instant (zones with DST; Asia/
Shanghai had DST 1986-1991) is zoneinfo's `fold=0`:

- a time in a *gap* (clocks jumped forward, e.g. Shanghai 1986-05-04 02:00 -> 03:00) is
  read with the offset in force before the jump, so 02:30 becomes 1986-05-03T18:30Z
  (= 03:30 summer time): shifted forward by the gap, the same instant a lenient
  java.util.Calendar gives;
- a time in an *overlap* (clocks went back, e.g. Shanghai 1986-09-14 02:00 -> 01:00) is
  the earlier of its two instants: 01:30 becomes 1986-09-13T16:30Z (summer time).

A legacy value outside [1970-01-01T00:00Z, 2101-01-01T00:00Z), or one that is not a
date at all (MySQL's '0000-00-00 00:00:00'), raises `LegacyTimeError`; readers catch it
and record a `Problem` on the row, so one bad value never stops a read.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DEFAULT_ZONE = "Asia/Shanghai"
EARLIEST = datetime(1970, 1, 1, tzinfo=timezone.utc)
LATEST = datetime(2101, 1, 1, tzinfo=timezone.utc)  # exclusive: "after 2100" is out of range
_EPOCH = EARLIEST


class LegacyTimeError(ValueError):
    """A legacy time value that cannot be taken as an instant; the message is the reason."""


class WallTimeKind(enum.StrEnum):
    NORMAL = "normal"
    GAP = "gap"  # skipped by a forward jump: does not exist
    OVERLAP = "overlap"  # repeated by a backward jump: ambiguous


def parse_wall(value: datetime | str | bytes) -> datetime:
    """A naive wall-clock datetime from what a driver hands back: a datetime (PyMySQL), or
    the stored text (SQLite, and PyMySQL for values it cannot parse, like zero dates)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            raise LegacyTimeError(f"expected a naive wall-clock time, got {value.isoformat()}")
        return value
    text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
    try:
        return datetime.fromisoformat(text.strip())
    except ValueError:
        raise LegacyTimeError(f"not a date-time: {text[:40]!r}") from None


def require_aware(at: datetime, name: str) -> datetime:
    # the readers' own copy of scheduler_core.times.require_aware (same message): readers
    # import nothing of ours (../shared/DESIGN.md's dependency rule), so they cannot share it
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError(f"{name} must be an aware datetime, got naive {at.isoformat()}")
    return at


def _check_range(at: datetime, shown: str) -> datetime:
    if not EARLIEST <= at < LATEST:
        raise LegacyTimeError(f"out of range: {shown} is before 1970 or after 2100")
    return at


def from_epoch_ms(ms: int) -> datetime:
    """Aware UTC from epoch milliseconds (xxl-job `trigger_next_time`)."""
    try:
        at = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        raise LegacyTimeError(f"out of range: epoch ms {ms}") from None
    return _check_range(at, f"epoch ms {ms}")


def to_epoch_ms(at: datetime) -> int:
    delta = require_aware(at, "at").astimezone(timezone.utc) - _EPOCH
    return delta // timedelta(milliseconds=1)


@dataclass(frozen=True, slots=True)
class LegacyTimeZone:
    """The zone a legacy system's naive DATETIMEs are read in."""

    name: str = DEFAULT_ZONE
    zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "zone", ZoneInfo(self.name))
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ValueError(f"unknown time zone {self.name!r}") from exc

    def to_utc(self, wall: datetime | str | bytes) -> datetime:
        """Aware UTC for a stored wall-clock value (fold=0 rule; range-checked)."""
        naive = parse_wall(wall)
        try:
            at = naive.replace(tzinfo=self.zone, fold=0).astimezone(timezone.utc)
        except OverflowError:  # year 1 / 9999: no UTC instant; the same Problem as any out-of-range time
            raise LegacyTimeError(f"out of range: {naive.isoformat(sep=' ')}") from None
        return _check_range(at, naive.isoformat(sep=" "))

    def to_wall(self, at: datetime) -> datetime:
        """The naive wall-clock time the legacy system would store for an instant."""
        return require_aware(at, "at").astimezone(self.zone).replace(tzinfo=None)

    def kind(self, wall: datetime) -> WallTimeKind:
        """Whether a naive wall time is normal, in a gap, or in an overlap of this zone."""
        early = wall.replace(tzinfo=self.zone, fold=0)
        late = wall.replace(tzinfo=self.zone, fold=1)
        if early.utcoffset() == late.utcoffset():
            return WallTimeKind.NORMAL
        # a time that round-trips through UTC unchanged exists; in a gap it does not
        back = early.astimezone(timezone.utc).astimezone(self.zone).replace(tzinfo=None)
        return WallTimeKind.OVERLAP if back == wall else WallTimeKind.GAP


@dataclass(frozen=True, slots=True)
class LegacyZones:
    """The two zones of an xxl-job source, which real deployments set apart: `db`, the
    zone its DATETIME columns are written in (the admin's JDBC `serverTimezone`,
    Asia/Shanghai in xxl-job's default URL), and `cron`, the zone its crons are evaluated
    in (the admin JVM's default zone). The batch center's contract has one zone for both.
    Epoch-millisecond columns (`trigger_next_time`) need neither."""

    db: str = DEFAULT_ZONE
    cron: str = DEFAULT_ZONE

    def __post_init__(self) -> None:
        LegacyTimeZone(self.db)  # an unknown name fails here, naming it
        LegacyTimeZone(self.cron)

    @classmethod
    def of(cls, both: str | None = None, *, db: str | None = None, cron: str | None = None) -> LegacyZones:
        """`both` for whichever of the two is not given; one given alone sets the other
        too (the default is that they are equal); Asia/Shanghai when none is."""
        db_zone = db or both or cron or DEFAULT_ZONE
        cron_zone = cron or both or db or DEFAULT_ZONE
        return cls(db=db_zone, cron=cron_zone)

    @property
    def split(self) -> bool:
        return self.db != self.cron
