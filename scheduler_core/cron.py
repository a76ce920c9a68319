"""Quartz cron expressions: parse, validate and compute the next fire time.

The legacy schedulers we replace (xxl-job, and the batch center) evaluate schedules with
``org.quartz.CronExpression``; xxl-job carries a copy of it. A business that moves over
must see the same fire times, so this module follows Quartz's rules, not Unix cron's:

* 6 or 7 fields: seconds minutes hours day-of-month month day-of-week [year].
* Day-of-week is 1=SUN .. 7=SAT (Unix cron uses 0=SUN; APScheduler uses 0=MON).
* Exactly one of day-of-month / day-of-week is ``?``.
* ``L``, ``L-n``, ``LW``, ``nW`` in day-of-month; ``L``, ``nL``, ``n#k`` in day-of-week.
* Ranges may wrap around the field's end (``22-2``, ``FRI-MON``, ``NOV-FEB``).

What is valid, and what each part means, is Quartz's own parser, ported statement by
statement (``scheduler_core.cron_quartz_parser``): where Quartz silently ignores part of an
expression (``MON-FRI/2`` drops the step, ``1-5W`` drops the W, ``MONDAY`` reads as
``MON``, ``*/0`` is ``*``) so do we, since a job the legacy admin runs must migrate as it
runs. Quartz 2.3 and 2.5 differ in places (xxl-job ships copies of both): the ``dialect``
argument picks one; docs/cron.md lists the differences. tests/unit/test_cron_quartz_oracle.py
compares this module with both Quartz jars.

Time zones follow Quartz's ``java.util.GregorianCalendar`` arithmetic: the search walks
wall-clock time in the expression's zone; a wall time inside a spring-forward gap does
not exist and is skipped; a wall time repeated by a fall-back resolves to its second
(standard-time) occurrence, as ``GregorianCalendar`` resolves ambiguous fields. See
``CronExpression.next_after``.

The module is pure (no I/O, no clock): its only inputs are its arguments. It imports
only the standard library and its parser.
"""

from __future__ import annotations

import calendar
from bisect import bisect_left
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from scheduler_core import cron_quartz_parser as qp
from scheduler_core.cron_quartz_parser import DIALECTS, Dialect

__all__ = ["DIALECTS", "MAX_YEAR", "MIN_YEAR", "CronExpression", "CronSyntaxError", "Dialect", "validate"]

# Quartz's "*" in the year field runs from 1970 to its MAX_YEAR, which is "the JVM's current
# year + 100", and nothing after MAX_YEAR ever fires. That would make results depend on the
# clock; this module is pure, so the bound is an argument (``last_year``) whose default is
# the documented end of Quartz's year field. The differential test passes the oracle JVM's
# own bound. The two only differ for a fire more than ~100 years away.
MIN_YEAR: Final = 1970
MAX_YEAR: Final = 2199

_ONE_SECOND: Final = timedelta(seconds=1)

# Day-of-week modes.
_DOW_NONE: Final = 0  # day-of-week is "?": days come from day-of-month
_DOW_SET: Final = 1  # plain set of weekdays
_DOW_LAST: Final = 2  # "nL": last weekday n of the month
_DOW_NTH: Final = 3  # "n#k": k-th weekday n of the month
_DOW_NEVER: Final = 4  # "8#1" and the like: Quartz parses them; they never fire

_DOM, _DOW = "day-of-month", "day-of-week"


class CronSyntaxError(ValueError):
    """An expression Quartz rejects, or accepts but cannot evaluate.

    ``str(err)`` is ``"<field>: <reason>"``; ``reason`` is Quartz's own message (so operators
    can search for it) followed by the offending expression; ``field`` is one of seconds,
    minutes, hours, day-of-month, month, day-of-week, year, or ``expression`` for
    whole-expression problems such as the field count.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _unix_cron_hint(expression: str, dialect: Dialect, last_year: int) -> str:
    """For a 5-field (Unix) cron, the hint Quartz's own message lacks: it reads the first
    field as seconds, and then runs out of fields. A suggestion is shown only when Quartz
    accepts it and it means what the Unix cron meant (a Unix day-of-week number is one
    less than Quartz's, so one with a number gets no suggestion)."""
    fields = expression.split()
    if len(fields) != 5:
        return ""
    minute, hour, dom, month, dow = fields
    hint = "; Quartz cron has 6 or 7 fields, seconds first"
    if any(c.isdigit() for c in dow):
        return f"{hint}, and numbers day-of-week from Sunday = 1 (Unix: 0)"
    if dow == "*":
        dow = "?"
    elif dom == "*":
        dom = "?"
    guess = " ".join(("0", minute, hour, dom, month, dow))
    try:
        qp.parse(guess, dialect, last_year)
    except qp.QuartzParseError:
        return hint
    return f"{hint}: did you mean {guess!r}?"


def _next_table(values: set[int], size: int) -> tuple[int, ...]:
    """Table t where t[i] is the smallest allowed value >= i, or -1.

    One index past the field's maximum is included (and is always -1) so a carry such
    as minute 59 -> 60 needs no bounds check in the search loop.
    """
    table = [-1] * (size + 1)
    nxt = -1
    for i in range(size, -1, -1):
        if i in values:
            nxt = i
        table[i] = nxt
    return tuple(table)


def _real(values: set[int]) -> set[int]:
    """A Quartz value set without its '*' / '?' markers."""
    return values - {qp.ALL_SPEC, qp.NO_SPEC}


class _Spec:
    """A parsed expression, independent of any time zone (and so shared via a cache)."""

    __slots__ = (
        "dialect",
        "sec_next",
        "min_next",
        "hour_next",
        "month_next",
        "years",
        "dom_mask",
        "dom_last",
        "walk_only",
        "fields",
        "dow_mode",
        "dow_mask",
        "dow_day",
        "dow_nth",
        "_day_cache",
    )

    def __init__(self, expression: str, dialect: Dialect, last_year: int) -> None:
        if dialect not in DIALECTS:
            raise ValueError(f"unknown Quartz dialect {dialect!r} (expected one of {', '.join(DIALECTS)})")
        self.dialect = dialect
        try:
            f = qp.parse(expression, dialect, last_year)
        except qp.QuartzParseError as exc:
            name = "expression" if exc.field_index is None else qp.FIELD_NAMES[exc.field_index]
            raise CronSyntaxError(
                name, f"{exc.message} (in {expression!r}){_unix_cron_hint(expression, dialect, last_year)}"
            ) from None
        self.fields = f
        for index in (qp.SECOND, qp.MINUTE, qp.HOUR):
            if not _real(f.sets[index]):
                # Quartz 2.3 parses "L" (or "LW", "L-3") here into an empty set, then
                # getNextValidTimeAfter throws NoSuchElementException: the legacy admin saves
                # such a job but can never schedule it.
                raise CronSyntaxError(
                    qp.FIELD_NAMES[index],
                    f"Quartz {dialect} accepts this field but cannot "
                    f"compute a fire time from it (empty value set) (in {expression!r})",
                )
        sets = f.sets
        self.sec_next = _next_table(_real(sets[qp.SECOND]), 60)
        self.min_next = _next_table(_real(sets[qp.MINUTE]), 60)
        self.hour_next = _next_table(_real(sets[qp.HOUR]), 24)
        self.month_next = _next_table(_real(sets[qp.MONTH]), 13)
        self.years: tuple[int, ...] = tuple(sorted(y for y in _real(sets[qp.YEAR]) if MIN_YEAR <= y <= last_year))

        dom_values = _real(sets[qp.DAY_OF_MONTH])
        self.dom_mask = 0  # bit d set: day d of month (only days the month has count)
        self.dom_last: tuple[int, ...] = ()  # offsets n of "L-n" ("L" is 0)
        # Quartz's 'W' depends on where its search starts (a nW whose day has passed is not
        # looked at, even when the weekday it moves to has not), so it has no per-month day
        # mask: those expressions are evaluated by replaying Quartz's loop (_quartz_walk).
        self.walk_only = False
        self.dow_mode = _DOW_NONE
        self.dow_mask = 0  # bit q set: Quartz weekday q (1=SUN..7=SAT)
        self.dow_day = 0
        self.dow_nth = 0
        # (year * 16 + month) -> bitmask of firing days; at most 12 * 230 entries.
        self._day_cache: dict[int, int] = {}

        if qp.NO_SPEC not in sets[qp.DAY_OF_MONTH]:  # the day-of-month rule
            if dialect == "2.5":
                plain = {d for d in dom_values if d < qp.LAST_DAY_OFFSET_START}
                self.dom_mask = sum(1 << d for d in plain if d <= 31)
                self.dom_last = tuple(
                    sorted(
                        qp.LAST_DAY_OFFSET_END - c
                        for c in dom_values
                        if qp.LAST_DAY_OFFSET_START <= c <= qp.LAST_DAY_OFFSET_END
                    )
                )
                self.walk_only = bool(f.nearest_weekdays)
            elif f.nearest_weekday:
                if not f.last_day_of_month and min(dom_values) == 0:
                    # "0W" (or "0,15W"): Quartz 2.3's search reads day 0 as the previous
                    # month's last day and never returns; the legacy admin cannot run it.
                    raise CronSyntaxError(
                        _DOM,
                        f"Quartz 2.3 accepts '0W' but never returns from computing a fire time (in {expression!r})",
                    )
                self.walk_only = True
            elif f.last_day_of_month:
                self.dom_last = (f.last_day_offset,)  # Quartz 2.3 then ignores the day set
            else:
                self.dom_mask = sum(1 << d for d in dom_values if 1 <= d <= 31)
        else:  # the day-of-week rule
            days = _real(sets[qp.DAY_OF_WEEK])
            if f.last_day_of_week or f.nth_day_of_week:
                # Quartz looks only at the smallest weekday of the set here ("MON,WED#2" is MON#2).
                first = min(days)
                self.dow_day = 7 if first == 0 else first  # "0#k" lands on Saturday in Quartz's loop
                self.dow_mode = _DOW_LAST if f.last_day_of_week else _DOW_NTH
                self.dow_nth = f.nth_day_of_week
                if first > 7:
                    # Quartz's loop moves a week forward on every pass and never settles.
                    self.dow_mode = _DOW_NEVER
            else:
                self.dow_mode = _DOW_SET
                self.dow_mask = sum(1 << q for q in days if 1 <= q <= 7)

        if not _real(sets[qp.MONTH]):
            # "L" in month parses to an empty set; Quartz throws NoSuchElementException when
            # its search reaches the month step, which it never does when no day can ever
            # match (8#1, Quartz 2.5's 0W): then it just never fires.
            if not self._no_day_ever():
                raise CronSyntaxError(
                    qp.FIELD_NAMES[qp.MONTH],
                    f"Quartz {dialect} accepts this field but cannot "
                    f"compute a fire time from it (empty value set) (in {expression!r})",
                )
            self.years = ()

    def _no_day_ever(self) -> bool:
        """No day of any month matches the day rule (so Quartz's day step never settles)."""
        if self.dow_mode == _DOW_NEVER:
            return True
        if self.dow_mode != _DOW_NONE:
            return False
        f = self.fields
        if self.dialect == "2.5":
            # day 0 is the only base no month has ("0W"); every other day, code or W base
            # matches in some month
            return not self.dom_mask and not self.dom_last and _real(f.nearest_weekdays) <= {0}
        return False

    def days(self, year: int, month: int) -> int:
        """Bitmask of the days of (year, month) that match day-of-month / day-of-week."""
        key = year * 16 + month
        mask = self._day_cache.get(key)
        if mask is None:
            mask = self._compute_days(year, month)
            self._day_cache[key] = mask
        return mask

    def _compute_days(self, year: int, month: int) -> int:
        first_wd, ndays = calendar.monthrange(year, month)  # first_wd: Monday=0 .. Sunday=6
        all_days = (1 << (ndays + 1)) - 2  # bits 1..ndays
        mode = self.dow_mode
        if mode == _DOW_NONE:
            mask = self.dom_mask & all_days  # "31" simply has no day in a 30-day month
            for offset in self.dom_last:
                if ndays - offset >= 1:  # L-30 has no day in February
                    mask |= 1 << (ndays - offset)
            return mask
        if mode == _DOW_NEVER:
            return 0
        # Quartz weekday (1=SUN..7=SAT) of day 1 of the month.
        q1 = (first_wd + 1) % 7 + 1
        if mode == _DOW_SET:
            mask = 0
            for day in range(1, 8):
                if self.dow_mask >> ((q1 - 1 + day - 1) % 7 + 1) & 1:
                    # Same weekday every 7 days from here to the month's end.
                    for d in range(day, ndays + 1, 7):
                        mask |= 1 << d
            return mask
        first = 1 + (self.dow_day - q1) % 7  # first such weekday in the month
        if mode == _DOW_LAST:
            return 1 << (first + 7 * ((ndays - first) // 7))
        day = first + 7 * (self.dow_nth - 1)  # "#5" fires only in months with a 5th one
        return 1 << day if day <= ndays else 0


@lru_cache(maxsize=4096)
def _parse(expression: str, dialect: Dialect = "2.5", last_year: int = MAX_YEAR) -> _Spec:
    # Jobs share a handful of expressions; parse each once. _Spec is never mutated
    # after construction except for its day cache, which is valid for every zone.
    return _Spec(expression, dialect, last_year)


def validate(expression: str, dialect: Dialect = "2.5") -> None:
    """Raise CronSyntaxError if Quartz (of ``dialect``) rejects ``expression``, or accepts it
    but cannot compute a fire time from it."""
    if not isinstance(expression, str):
        raise CronSyntaxError("expression", f"expected a string, got {type(expression).__name__}")
    _parse(expression, dialect)


_Fields = tuple[int, int, int, int, int, int]  # year, month, day, hour, minute, second


def _search(spec: _Spec, y: int, mo: int, d: int, h: int, mi: int, s: int) -> _Fields | None:
    """The first wall-clock time >= (y, mo, d, h, mi, s) that matches every field.

    Classic carry search: each field takes its next allowed value; when a field has
    none left it resets itself and everything below to the minimum and carries into
    the field above. Lower fields are reset whenever a higher field moves forward.
    Values may arrive out of range (d past the month end, h == 24, ...) after a carry;
    the tables and masks map those to "none left", which carries again.
    """
    years = spec.years
    sec_next, min_next, hour_next, month_next = spec.sec_next, spec.min_next, spec.hour_next, spec.month_next
    if not years:
        return None
    while True:
        # year
        if y > years[-1]:
            return None
        i = bisect_left(years, y)
        if years[i] != y:
            y, mo, d, h, mi, s = years[i], 1, 1, 0, 0, 0
        # month
        nm = month_next[mo]
        if nm < 0:
            y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            continue
        if nm != mo:
            mo, d, h, mi, s = nm, 1, 0, 0, 0
        # day
        rest = spec.days(y, mo) >> d if d <= 31 else 0
        if rest == 0:
            if mo == 12:
                y, mo, d, h, mi, s = y + 1, 1, 1, 0, 0, 0
            else:
                mo, d, h, mi, s = mo + 1, 1, 0, 0, 0
            continue
        if not rest & 1:
            d += (rest & -rest).bit_length() - 1
            h, mi, s = 0, 0, 0
        # hour
        nh = hour_next[h]
        if nh < 0:
            d, h, mi, s = d + 1, 0, 0, 0
            continue
        if nh != h:
            h, mi, s = nh, 0, 0
        # minute
        nmi = min_next[mi]
        if nmi < 0:
            h, mi, s = h + 1, 0, 0
            continue
        if nmi != mi:
            mi, s = nmi, 0
        # second
        ns = sec_next[s]
        if ns < 0:
            mi, s = mi + 1, 0
            continue
        return y, mo, d, h, mi, ns


class CronExpression:
    """A Quartz cron expression bound to a time zone.

    >>> e = CronExpression("0 0/5 9-17 ? * MON-FRI", "Asia/Shanghai")
    >>> e.next_after(datetime(2026, 12, 5, 12, 0, tzinfo=e.tz)).isoformat()  # a Saturday
    '2026-12-07T09:00:00+08:00'
    """

    __slots__ = ("expression", "tz", "dialect", "_spec")

    def __init__(
        self, expression: str, tz: str | tzinfo, *, dialect: Dialect = "2.5", last_year: int = MAX_YEAR
    ) -> None:
        """Parse ``expression`` (CronSyntaxError if invalid) for zone ``tz``.

        ``tz`` is an IANA name or a PEP 495 tzinfo (``zoneinfo.ZoneInfo``,
        ``datetime.timezone``). It is required: xxl-job evaluates in the admin JVM's
        default zone, an implicit input that made its schedules differ per host.
        ``dialect`` is the Quartz line whose parser and search are followed: "2.5" (Quartz
        2.5.x, xxl-job 3.4+) or "2.3" (Quartz 2.3.x, xxl-job 2.1-3.0); docs/cron.md lists
        where they differ. ``last_year`` is the last year that may fire (Quartz: this year
        + 100; see MAX_YEAR).
        """
        if not isinstance(expression, str):
            raise CronSyntaxError("expression", f"expected a string, got {type(expression).__name__}")
        self.expression = expression
        self.dialect: Dialect = dialect
        if isinstance(tz, str):
            try:
                tz = ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {tz!r}") from exc
        elif not isinstance(tz, tzinfo):
            raise TypeError(f"tz must be a zone name or a tzinfo, not {type(tz).__name__}")
        self.tz: tzinfo = tz
        self._spec = _parse(expression, dialect, last_year)

    def __repr__(self) -> str:
        return f"CronExpression({self.expression!r}, {str(self.tz)!r})"

    def next_after(self, dt: datetime) -> datetime | None:
        """The first fire time strictly after ``dt``, or None if there is none.

        ``dt`` must be aware (ValueError otherwise); the result is aware, in ``self.tz``,
        on a whole second. Like Quartz's getTimeAfter, the search starts at ``dt``
        truncated to the second plus one second, converted to wall-clock time in the
        zone, and walks wall-clock time forward from there:

        * A matching wall time that does not exist (spring-forward gap) is skipped:
          ``0 30 2 * * ?`` in America/New_York has no fire on 2026-03-08. Quartz gets
          this from GregorianCalendar normalising 02:30 to 03:30, which no longer
          matches the hour.
        * A wall time that exists twice (fall-back overlap) fires once, at its second,
          standard-time occurrence (returned with ``fold=1``): GregorianCalendar
          resolves an ambiguous wall time to standard time. The wall-clock walk never
          goes back, so the first (daylight) pass through the repeated hour never
          fires: ``0 0 * * * ?`` goes 00:00 EDT -> 01:00 EST (two hours), and from
          01:57:30 EDT ``0 * * * * ?`` next fires at 01:58 EST, an hour later.
          shared/notes/xxl-job.md section 4 records this Quartz behaviour; we checked
          it against Quartz 2.3.2 and 2.5.2.

        * Right after a gap that is not one whole hour starting on the hour
          (Australia/Lord_Howe's 30 minutes, Antarctica/Troll's two hours), Quartz's
          calendar arithmetic also passes over some times that do exist; we replay
          Quartz's walk there to give the same answer (see ``_first_from_wall``).

        Results are therefore strictly increasing, as instants and as wall times, and
        each wall time fires at most once.
        """
        if dt.tzinfo is None or dt.utcoffset() is None:
            raise ValueError("next_after needs an aware datetime (with tzinfo)")
        try:
            start = dt.astimezone(UTC).replace(microsecond=0) + _ONE_SECOND
            wall = start.astimezone(self.tz)
        except OverflowError:  # within a second of datetime.max
            return None
        if self._spec.walk_only:
            return self._walk(datetime(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second), start)
        return self._first_from_wall(wall.year, wall.month, wall.day, wall.hour, wall.minute, wall.second)

    def iter_after(self, dt: datetime, limit: int | None = None) -> Iterator[datetime]:
        """Successive fire times after ``dt``: at most ``limit`` of them (None: no limit).

        Without a limit the iterator still ends, at the last fire before year 2199.
        """
        count = 0
        cursor: datetime | None = dt
        while limit is None or count < limit:
            assert cursor is not None
            cursor = self.next_after(cursor)
            if cursor is None:
                return
            yield cursor
            count += 1

    def _first_from_wall(self, y: int, mo: int, d: int, h: int, mi: int, s: int) -> datetime | None:
        tz = self.tz
        found = _search(self._spec, y, mo, d, h, mi, s)
        if found is None:
            return None
        candidate = datetime(*found, tzinfo=tz)
        off = candidate.utcoffset()
        later = candidate.replace(fold=1)
        off_later = later.utcoffset()
        if off == off_later and (candidate - _LOOKBACK).utcoffset() == off:
            # The usual case: an ordinary wall time with no clock change in the day
            # before it. Quartz's walk may still have crossed a gap earlier, but the
            # calendar only pushes it forward by the gap's length (plus an hour, see
            # _set_hour), which cannot carry it past a match that is more than a day
            # after the gap; so Quartz lands on this same first match.
            return candidate
        if off is not None and off_later is not None and off > off_later:
            # Fall-back overlap: fold=1 is the later, standard-time instant, the one
            # GregorianCalendar picks for an ambiguous wall time.
            return later
        # The candidate lies in a spring-forward gap, or less than a day after one.
        # Quartz does not skip the gap cleanly: GregorianCalendar moves a wall time in
        # the gap forward by the gap's length (02:10 -> 03:10 for a one-hour gap), and
        # Quartz's walk resumes from there, which passes over matches between the gap's
        # end and that point (Australia/Lord_Howe's 30-minute gap, Antarctica/Troll's
        # two-hour one; for whole-hour one-hour gaps the result is the same). Replay
        # Quartz's own walk, slowly, for these few days of the year.
        start = datetime(y, mo, d, h, mi, s, tzinfo=tz).astimezone(UTC)
        return self._walk(datetime(y, mo, d, h, mi, s), start)

    def _walk(self, wall: datetime, start: datetime) -> datetime | None:
        """Quartz's own loop from ``wall`` (``start`` is the same instant, as Quartz's afterTime)."""
        tz = self.tz
        found = _quartz_walk(self._spec, tz, wall, start)
        if found is None:
            return None
        result = found.replace(tzinfo=tz)
        if result.utcoffset() != result.replace(fold=1).utcoffset():
            result = result.replace(fold=1)  # ambiguous: standard time, as above
        return result


# How far back a clock change can still affect Quartz's result (see _first_from_wall):
# the longest gap in tzdata (Pacific/Apia skipped a whole day in 2011) plus the extra
# hour Quartz's setCalendarHour may add, with margin.
_LOOKBACK: Final = timedelta(hours=26)


def _java_wall(tz: tzinfo, y: int, mo: int, d: int, h: int, mi: int, s: int) -> datetime:
    """The wall time a lenient GregorianCalendar in ``tz`` shows after setting these fields.

    Out-of-range fields carry (minute 60 is the next hour, day 32 the next month's
    1st...). A wall time in a spring-forward gap is read with the offset in force before
    the gap, so it shows up shifted forward by the gap's length. (PEP 495 maps fold=0
    the same way.) An ambiguous wall time keeps its fields.
    """
    if not 1 <= mo <= 12:
        y, mo = y + (mo - 1) // 12, (mo - 1) % 12 + 1
    wall = datetime(y, mo, 1) + timedelta(days=d - 1, hours=h, minutes=mi, seconds=s)
    aware = wall.replace(tzinfo=tz)
    before, after = aware.utcoffset(), aware.replace(fold=1).utcoffset()
    if before is not None and after is not None and before < after:
        return wall + (after - before)
    return wall


def _quartz_walk(spec: _Spec, tz: tzinfo, wall: datetime, start: datetime) -> datetime | None:
    """Quartz's CronExpression.getTimeAfter loop, field by field, on a lenient calendar.

    A port of the loop's control flow (second, minute, hour, day, month, year; every
    change re-normalises the calendar and restarts the loop), used for the days near a
    spring-forward gap, where the calendar's normalisation changes the result, and for
    every expression with 'W' (its day step depends on where the search is, see
    _w_day_step). Other day rules use the day masks, which give the same days as
    Quartz's day step. ``start`` is Quartz's afterTime (the 'W' step compares with it).
    """
    sec_next, min_next, hour_next, month_next = spec.sec_next, spec.min_next, spec.hour_next, spec.month_next
    first_sec, first_min, first_hour = sec_next[0], min_next[0], hour_next[0]
    years = spec.years
    if not years:
        return None
    cl = wall
    for _ in range(_WALK_LIMIT):
        if cl.year > years[-1]:
            return None
        y, mo, d, hr, mi, sec = cl.year, cl.month, cl.day, cl.hour, cl.minute, cl.second
        # second: Quartz sets SECOND (and MINUTE+1 on a carry) without restarting.
        if sec_next[sec] >= 0:
            sec = sec_next[sec]
        else:
            sec, mi = first_sec, mi + 1
        cl = _java_wall(tz, y, mo, d, hr, mi, sec)
        y, mo, d, hr, mi = cl.year, cl.month, cl.day, cl.hour, cl.minute
        # minute
        if min_next[mi] < 0 or min_next[mi] != mi:
            if min_next[mi] >= 0:
                mi = min_next[mi]
            else:
                mi, hr = first_min, hr + 1
            cl = _set_hour(tz, y, mo, d, hr, mi, 0)
            continue
        # hour
        if hour_next[hr] < 0 or hour_next[hr] != hr:
            if hour_next[hr] >= 0:
                hr = hour_next[hr]
            else:
                hr, d = first_hour, d + 1
            cl = _set_hour(tz, y, mo, d, hr, 0, 0)
            continue
        # day (Quartz checks the day before the month)
        if spec.walk_only:
            moved, cl = _w_day_step(spec, tz, start, y, mo, d, hr, mi, sec)
            if moved:
                continue
            y, mo = cl.year, cl.month
        else:
            rest = spec.days(y, mo) >> d
            if rest == 0:
                cl = _java_wall(tz, y, mo + 1, 1, 0, 0, 0)
                continue
            if not rest & 1:
                cl = _java_wall(tz, y, mo, d + (rest & -rest).bit_length() - 1, 0, 0, 0)
                continue
        # month
        if month_next[mo] != mo:
            if month_next[mo] >= 0:
                cl = _java_wall(tz, y, month_next[mo], 1, 0, 0, 0)
            else:
                cl = _java_wall(tz, y + 1, month_next[1], 1, 0, 0, 0)
            continue
        # year
        i = bisect_left(years, y)
        if i == len(years):
            return None
        if years[i] != y:
            cl = _java_wall(tz, years[i], 1, 1, 0, 0, 0)
            continue
        return cl
    # Each pass moves the calendar forward, so this is a bug, not an input: fail loudly
    # rather than hang a scheduler thread.
    raise RuntimeError(f"Quartz walk did not settle within {_WALK_LIMIT} steps from {wall} ({spec.dialect})")


# A year of passes a day with every step taken is ~ 365 * 6; two centuries fit well under this.
_WALK_LIMIT: Final = 2_000_000


def _java_instant(tz: tzinfo, y: int, mo: int, d: int, h: int, mi: int, s: int) -> datetime:
    """The instant a lenient GregorianCalendar in ``tz`` gives for these fields (UTC)."""
    aware = _java_wall(tz, y, mo, d, h, mi, s).replace(tzinfo=tz)
    if aware.utcoffset() != aware.replace(fold=1).utcoffset():
        aware = aware.replace(fold=1)  # ambiguous: standard time, as in next_after
    return aware.astimezone(UTC)


def _smallest_day(day: int, last_day: int, values: set[int]) -> int | None:
    """Quartz 2.5's findSmallestDay: the first day >= ``day`` of a day-of-month set whose
    "L-n" entries are coded 62 - n (the raw set, '*' marker included, as Quartz reads it)."""
    if not values:
        return None
    codes = [c for c in values if c >= qp.LAST_DAY_OFFSET_END - (last_day - day)]
    smallest = min(codes) - qp.LAST_DAY_OFFSET_START + 1 if codes else None
    plain = [c for c in values if day <= c < qp.LAST_DAY_OFFSET_START]
    if plain and (smallest is None or min(plain) < smallest) and min(plain) <= last_day:
        return min(plain)
    if smallest is None:
        return None
    return smallest + last_day - qp.LAST_DAY_OFFSET_START + 1


def _weekday_nearest(y: int, mo: int, day: int, last_day: int) -> int:
    """Quartz's 'W' move of ``day`` (read leniently: day 0 is the previous month's last)."""
    weekday = (datetime(y, mo, 1) + timedelta(days=day - 1)).weekday()  # Monday=0
    if weekday == 5:  # Saturday
        return day + 2 if day == 1 else day - 1
    if weekday == 6:  # Sunday
        return day - 2 if day == last_day else day + 1
    return day


def _w_day_step(
    spec: _Spec, tz: tzinfo, start: datetime, y: int, mo: int, d: int, hr: int, mi: int, sec: int
) -> tuple[bool, datetime]:
    """Quartz's day-of-month step for an expression with 'W', in the spec's dialect.

    Returns (restart, calendar): restart means Quartz moved the calendar to another day
    at 00:00:00 and begins its loop again; otherwise the calendar is on the chosen day,
    keeping the time of day (Quartz 2.5 keeps it even when 'W' moved to a later day: a
    quirk the oracle confirms, see docs/cron.md).
    """
    f = spec.fields
    last_day = calendar.monthrange(y, mo)[1]
    if spec.dialect == "2.5":
        day = -1
        near = _smallest_day(d, last_day, f.nearest_weekdays)
        if near is not None:
            day = _weekday_nearest(y, mo, near, last_day)
            if _java_instant(tz, y, mo, day, hr, mi, sec) < start:
                day = -1
        plain = _smallest_day(d, last_day, f.sets[qp.DAY_OF_MONTH])
        mon, advance = mo, False
        if plain is not None:
            if day == -1 or plain < day:
                day, advance = plain, True
        elif day == -1:
            day, mon, advance = 1, mo + 1, True
        if advance and (day != d or mon != mo):
            return True, _java_wall(tz, y, mon, day, 0, 0, 0)
        return False, _java_wall(tz, y, mo, day, hr, mi, sec)
    # Quartz 2.3: one 'W' day, from "LW" / "L-nW", or else from the smallest day of the set
    # ("1,15W" is 1W; "1-5W" never gets here: the W after a range is ignored).
    base = last_day - f.last_day_offset if f.last_day_of_month else min(f.sets[qp.DAY_OF_MONTH])
    day = _weekday_nearest(y, mo, base, last_day)
    mon = mo
    if _java_instant(tz, y, mo, day, hr, mi, sec) < start:
        day = 1 if f.last_day_of_month else min(f.sets[qp.DAY_OF_MONTH])
        mon = mo + 1
    if day != d or mon != mo:
        return True, _java_wall(tz, y, mon, day, 0, 0, 0)
    return False, _java_wall(tz, y, mo, day, hr, mi, sec)


def _set_hour(tz: tzinfo, y: int, mo: int, d: int, hr: int, mi: int, sec: int) -> datetime:
    """Quartz's setCalendarHour: set the hour; if the calendar then shows another hour
    (the wall time fell in a gap), set hour + 1 instead. Hour 24 just carries."""
    cl = _java_wall(tz, y, mo, d, hr, mi, sec)
    if cl.hour != hr and hr != 24:
        # Java sets HOUR_OF_DAY on the calendar as it now is (already moved by the gap).
        cl = _java_wall(tz, cl.year, cl.month, cl.day, hr + 1, cl.minute, cl.second)
    return cl
