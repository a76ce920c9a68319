"""Quartz cron expressions: parse, validate and compute the next fire time.

The legacy schedulers we replace (xxl-job, and the batch center) evaluate schedules with
``org.quartz.CronExpression``; xxl-job carries a copy of it. A business that moves over
must see the same fire times, so this module follows Quartz's rules, not Unix cron's:

* 6 or 7 fields: seconds minutes hours day-of-month month day-of-week [year].
* Day-of-week is 1=SUN .. 7=SAT (Unix cron uses 0=SUN; APScheduler uses 0=MON).
* Exactly one of day-of-month / day-of-week is ``?``.
* ``L``, ``L-n``, ``LW``, ``nW`` in day-of-month; ``L``, ``nL``, ``n#k`` in day-of-week.
* Ranges may wrap around the field's end (``22-2``, ``FRI-MON``, ``NOV-FEB``).

Where the Quartz lineages disagree (xxl-job ships three copies, see
shared/notes/xxl-job.md section 4) we implement what the Quartz documentation describes
and note the lineage quirk next to the rule. Where Quartz silently ignores part of an
expression (``MON-FRI/2`` drops the step, ``1-5W`` drops the W, ``MONDAY`` reads as
``MON``) we reject it: a migration must flag such a job rather than guess.

Time zones follow Quartz's ``java.util.GregorianCalendar`` arithmetic: the search walks
wall-clock time in the expression's zone; a wall time inside a spring-forward gap does
not exist and is skipped; a wall time repeated by a fall-back resolves to its second
(standard-time) occurrence, as ``GregorianCalendar`` resolves ambiguous fields. See
``CronExpression.next_after``.

The module is pure (no I/O, no clock): its only inputs are its arguments. It imports
only the standard library.
"""
from __future__ import annotations

import calendar
import re
from bisect import bisect_left
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["MAX_YEAR", "MIN_YEAR", "CronExpression", "CronSyntaxError", "validate"]

# Quartz documents the year field as 1970-2199. Its code searches up to "the JVM's
# current year + 100" (MAX_YEAR in CronExpression.java), which would make results depend
# on the clock; we use the documented fixed bound so the function stays pure. The two
# only differ for a schedule whose next fire is more than ~100 years away.
MIN_YEAR: Final = 1970
MAX_YEAR: Final = 2199

_ONE_SECOND: Final = timedelta(seconds=1)

_MONTH_NAMES: Final = {
    name: i + 1
    for i, name in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))
}
# Quartz numbering: 1=SUN .. 7=SAT.
_DAY_NAMES: Final = {name: i + 1 for i, name in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}

# Field names used in error messages, in expression order.
_SECONDS, _MINUTES, _HOURS, _DOM, _MONTH, _DOW, _YEAR = (
    "seconds", "minutes", "hours", "day-of-month", "month", "day-of-week", "year"
)

# (low, high, largest step Quartz accepts). Quartz's checkIncrementRange rejects a step
# above these; we apply the same bound to "a-b/n" too, which Quartz forgets to check.
_BOUNDS: Final[dict[str, tuple[int, int, int]]] = {
    _SECONDS: (0, 59, 59),
    _MINUTES: (0, 59, 59),
    _HOURS: (0, 23, 23),
    _DOM: (1, 31, 31),
    _MONTH: (1, 12, 12),
    _DOW: (1, 7, 7),
    _YEAR: (MIN_YEAR, MAX_YEAR, MAX_YEAR - MIN_YEAR),
}

# One list item of the common grammar: "*", "v", "a-b", each optionally "/step"; and
# "/step" alone, which Quartz reads as "*/step". Values are numbers or 3-letter names.
_ITEM_RE: Final = re.compile(
    r"(?:(?P<all>\*)|(?P<start>[0-9]+|[A-Z]+)(?:-(?P<end>[0-9]+|[A-Z]+))?)?(?:/(?P<step>[0-9]*))?"
)
_LAST_OFFSET_RE: Final = re.compile(r"L-([0-9]+)(W?)")
_NEAREST_WEEKDAY_RE: Final = re.compile(r"([0-9]+)W")
_DOW_LAST_RE: Final = re.compile(r"([0-9]+|[A-Z]+)L")
_DOW_NTH_RE: Final = re.compile(r"([0-9]+|[A-Z]+)#([0-9]*)")

# Day-of-week modes.
_DOW_NONE: Final = 0  # day-of-week is "?": days come from day-of-month
_DOW_SET: Final = 1  # plain set of weekdays
_DOW_LAST: Final = 2  # "nL": last weekday n of the month
_DOW_NTH: Final = 3  # "n#k": k-th weekday n of the month


class CronSyntaxError(ValueError):
    """An expression Quartz would reject, or one whose meaning we refuse to guess.

    ``str(err)`` is ``"<field>: <reason>"``, for example
    ``"day-of-week: '8' out of range 1-7"``; ``field`` is one of seconds, minutes, hours,
    day-of-month, month, day-of-week, year, or ``expression`` for whole-expression
    problems such as the field count.
    """

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


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


def _number(field: str, token: str) -> int:
    low, high, _ = _BOUNDS[field]
    value = int(token)
    if not low <= value <= high:
        raise CronSyntaxError(field, f"'{token}' out of range {low}-{high}")
    return value


def _value(field: str, token: str, item: str) -> int:
    """A number or, in month / day-of-week, a 3-letter name."""
    if token.isdigit():
        return _number(field, token)
    names = _MONTH_NAMES if field == _MONTH else _DAY_NAMES if field == _DOW else None
    if names is not None and token in names:
        return names[token]
    if token in _MONTH_NAMES or token in _DAY_NAMES:
        raise CronSyntaxError(field, f"name '{token}' is not allowed in {field}")
    if names is not None and token[:3] in names:
        # Quartz reads only the first 3 letters, so "MONDAY" passes as MON (and so does
        # "MONX"); we accept the exact 3-letter names only.
        raise CronSyntaxError(field, f"invalid name '{token}' (names are 3 letters, e.g. '{token[:3]}')")
    raise _diagnose(field, item)


def _diagnose(field: str, item: str) -> CronSyntaxError:
    """Explain why an item of the common grammar did not parse."""
    if "?" in item:
        return CronSyntaxError(field, "'?' must stand alone, and only in day-of-month or day-of-week")
    if "#" in item:
        return CronSyntaxError(field, f"'#' is only allowed in day-of-week, alone ('{item}')")
    if "W" in item and field != _DOM:
        return CronSyntaxError(field, f"'W' is only allowed in day-of-month ('{item}')")
    if "W" in item:
        return CronSyntaxError(
            field, f"'W' needs a single day, as in 15W or LW ('{item}'); ranges and steps are not allowed"
        )
    if "L" in item and field not in (_DOM, _DOW):
        return CronSyntaxError(field, f"'L' is only allowed in day-of-month and day-of-week ('{item}')")
    if "L" in item:
        return CronSyntaxError(field, f"invalid use of 'L' ('{item}')")
    return CronSyntaxError(field, f"invalid value '{item}'")


def _expand_item(field: str, item: str) -> set[int]:
    """Values of one list item in the common grammar (no L, W, #, ?)."""
    low, high, max_step = _BOUNDS[field]
    m = _ITEM_RE.fullmatch(item)
    if m is None or item == "":
        raise _diagnose(field, item) if item else CronSyntaxError(field, "empty list item")
    star, start_tok, end_tok, step_tok = m.group("all"), m.group("start"), m.group("end"), m.group("step")
    if step_tok is not None:
        if step_tok == "":
            raise CronSyntaxError(field, f"'/' must be followed by a step ('{item}')")
        step = int(step_tok)
        # Quartz treats step 0 as "no step" (a/0 = a, */0 = *); almost surely a typo.
        if not 1 <= step <= max_step:
            raise CronSyntaxError(field, f"step '{step_tok}' out of range 1-{max_step}")
        named = [t for t in (start_tok, end_tok) if t is not None and not t.isdigit()]
        if named:
            # Quartz parses the name and silently drops the rest: MON-FRI/2 is MON-FRI.
            raise CronSyntaxError(field, f"a step cannot follow a name ('{item}'); Quartz would ignore it")
    else:
        step = 1
    if star is not None or start_tok is None:  # "*", "*/n", "/n"
        return set(range(low, high + 1, step))
    start = _value(field, start_tok, item)
    if end_tok is None:
        end = high if step_tok is not None else start  # "a/n" runs from a to the field's end
    else:
        end = _value(field, end_tok, item)
        if start_tok.isdigit() != end_tok.isdigit():
            # Quartz fails on these with an index or number-format error.
            raise CronSyntaxError(field, f"range mixes a name and a number ('{item}')")
    if end >= start:
        return set(range(start, end + 1, step))
    if field == _YEAR:
        raise CronSyntaxError(field, f"range '{item}' runs backwards; year ranges cannot wrap")
    # Quartz wraps an inverted range past the field's end: it walks start..end+span in
    # steps and folds each value back into [low, high] (addToSet, "overflowing ranges").
    span = high - low + 1
    return {(i - low) % span + low for i in range(start, end + span + 1, step)}


def _expand_list(field: str, token: str) -> set[int]:
    values: set[int] = set()
    for item in token.split(","):
        values |= _expand_item(field, item)
    return values


class _Spec:
    """A parsed expression, independent of any time zone (and so shared via a cache)."""

    __slots__ = (
        "sec_next", "min_next", "hour_next", "month_next", "years",
        "dom_mask", "dom_last", "dom_w", "dom_w_last",
        "dow_mode", "dow_mask", "dow_day", "dow_nth", "_day_cache",
    )

    def __init__(self, expression: str) -> None:
        fields = expression.upper().split()
        if not 6 <= len(fields) <= 7:
            raise CronSyntaxError(
                "expression",
                f"expected 6 or 7 fields (seconds minutes hours day-of-month month day-of-week [year]), "
                f"got {len(fields)}",
            )
        sec, minute, hour, dom, month, dow = fields[:6]
        year = fields[6] if len(fields) == 7 else "*"

        self.sec_next = _next_table(_expand_list(_SECONDS, sec), 60)
        self.min_next = _next_table(_expand_list(_MINUTES, minute), 60)
        self.hour_next = _next_table(_expand_list(_HOURS, hour), 24)
        self.month_next = _next_table(_expand_list(_MONTH, month), 13)
        self.years: tuple[int, ...] = tuple(sorted(_expand_list(_YEAR, year)))

        self.dom_mask = 0  # bit d set: day d of month (only days the month has count)
        self.dom_last: tuple[int, ...] = ()  # offsets n of "L-n" ("L" is 0)
        self.dom_w: tuple[int, ...] = ()  # days n of "nW"
        self.dom_w_last: tuple[int, ...] = ()  # offsets n of "L-nW" ("LW" is 0)
        self.dow_mode = _DOW_NONE
        self.dow_mask = 0  # bit q set: Quartz weekday q (1=SUN..7=SAT)
        self.dow_day = 0
        self.dow_nth = 0
        # (year * 16 + month) -> bitmask of firing days; at most 12 * 230 entries.
        self._day_cache: dict[int, int] = {}

        # Parse both day fields before checking that exactly one is '?', so a typo in
        # either one is reported as such rather than as a '?' problem.
        if dom != "?":
            self._parse_dom(dom)
        if dow != "?":
            self._parse_dow(dow)
        if dom == "?" and dow == "?":
            raise CronSyntaxError(_DOW, "'?' can only be specified for day-of-month -OR- day-of-week")
        if dom != "?" and dow != "?":
            # Quartz's message, word for word, so operators can search for it. Note that
            # "* * * * * *" is rejected too: one of the two must be '?'.
            raise CronSyntaxError(
                _DOW, "Support for specifying both a day-of-week AND a day-of-month parameter is not implemented."
            )

    def _parse_dom(self, token: str) -> None:
        last: set[int] = set()
        near: set[int] = set()
        near_last: set[int] = set()
        values: set[int] = set()
        for item in token.split(","):
            # Lists mixing L/W items with days (L,15 or 1,15W) are the union of the items,
            # as in Quartz 2.5 (xxl-job 3.x). xxl-job 2.x (Quartz 2.3) rejects "L,15" and
            # reads "1,15W" as 1W only; the migrator flags those lineage differences.
            if item == "L":
                last.add(0)
            elif item == "LW":
                near_last.add(0)
            elif item.startswith("L-"):
                m = _LAST_OFFSET_RE.fullmatch(item)
                if m is None:
                    raise CronSyntaxError(_DOM, f"expected L-n or L-nW with n in 0-30 ('{item}')")
                offset = int(m.group(1))
                if offset > 30:  # Quartz: "Offset from last day must be <= 30"
                    raise CronSyntaxError(_DOM, f"offset from last day '{m.group(1)}' out of range 0-30")
                (near_last if m.group(2) else last).add(offset)
            elif item.endswith("W") and _NEAREST_WEEKDAY_RE.fullmatch(item):
                near.add(_number(_DOM, item[:-1]))
            elif "L" in item:
                raise CronSyntaxError(_DOM, f"'L' in day-of-month must be L, L-n, LW or L-nW ('{item}')")
            elif item == "?":
                raise CronSyntaxError(_DOM, "'?' must stand alone")
            else:
                values |= _expand_item(_DOM, item)
        self.dom_mask = sum(1 << d for d in values)
        self.dom_last = tuple(sorted(last))
        self.dom_w = tuple(sorted(near))
        self.dom_w_last = tuple(sorted(near_last))

    def _parse_dow(self, token: str) -> None:
        if token == "L":
            # Alone in day-of-week, Quartz reads 'L' as 7 = Saturday.
            self.dow_mode = _DOW_SET
            self.dow_mask = 1 << 7
            return
        if "," in token and ("L" in token or "#" in token):
            # Quartz: "Support for specifying 'L' with other days of the week is not
            # implemented"; with '#' it keeps only the first weekday of the list, silently.
            raise CronSyntaxError(_DOW, f"'L' and '#' must stand alone in day-of-week ('{token}')")
        m = _DOW_LAST_RE.fullmatch(token)
        if m is not None:  # "6L" or "FRIL": last Friday of the month (Quartz accepts both)
            self.dow_mode = _DOW_LAST
            self.dow_day = _value(_DOW, m.group(1), token)
            return
        m = _DOW_NTH_RE.fullmatch(token)
        if m is not None:  # "6#3" or "FRI#3": third Friday
            self.dow_mode = _DOW_NTH
            self.dow_day = _value(_DOW, m.group(1), token)
            if not m.group(2) or not 1 <= int(m.group(2)) <= 5:
                raise CronSyntaxError(_DOW, f"'#' must be followed by 1-5 ('{token}')")
            self.dow_nth = int(m.group(2))
            return
        self.dow_mode = _DOW_SET
        self.dow_mask = sum(1 << q for q in _expand_list(_DOW, token))

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
            for day in self.dom_w:
                # nW needs day n in this month: 31W never fires in April, 30W never in
                # February. (xxl-job 2.x's copy overflows into the next month here and
                # sometimes fires on the 30th or Feb 29th; Quartz 2.5 does not.)
                if day <= ndays:
                    mask |= 1 << _nearest_weekday(day, first_wd, ndays)
            for offset in self.dom_w_last:
                if ndays - offset >= 1:
                    mask |= 1 << _nearest_weekday(ndays - offset, first_wd, ndays)
            return mask
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


def _nearest_weekday(day: int, first_wd: int, ndays: int) -> int:
    """Quartz's 'W' rule: the weekday nearest to ``day``, never leaving the month.

    Saturday moves to Friday, except the 1st, which moves to Monday the 3rd; Sunday
    moves to Monday, except the month's last day, which moves to Friday (ndays - 2).
    """
    weekday = (first_wd + day - 1) % 7  # Monday=0
    if weekday == 5:  # Saturday
        return 3 if day == 1 else day - 1
    if weekday == 6:  # Sunday
        return day - 2 if day == ndays else day + 1
    return day


@lru_cache(maxsize=4096)
def _parse(expression: str) -> _Spec:
    # Jobs share a handful of expressions; parse each once. _Spec is never mutated
    # after construction except for its day cache, which is valid for every zone.
    return _Spec(expression)


def validate(expression: str) -> None:
    """Raise CronSyntaxError if ``expression`` is not a valid Quartz expression."""
    if not isinstance(expression, str):
        raise CronSyntaxError("expression", f"expected a string, got {type(expression).__name__}")
    _parse(expression)


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

    __slots__ = ("expression", "tz", "_spec")

    def __init__(self, expression: str, tz: str | tzinfo) -> None:
        """Parse ``expression`` (CronSyntaxError if invalid) for zone ``tz``.

        ``tz`` is an IANA name or a PEP 495 tzinfo (``zoneinfo.ZoneInfo``,
        ``datetime.timezone``). It is required: xxl-job evaluates in the admin JVM's
        default zone, an implicit input that made its schedules differ per host.
        """
        validate(expression)
        self.expression = expression
        if isinstance(tz, str):
            try:
                tz = ZoneInfo(tz)
            except (ZoneInfoNotFoundError, ValueError) as exc:
                raise ValueError(f"unknown time zone {tz!r}") from exc
        elif not isinstance(tz, tzinfo):
            raise TypeError(f"tz must be a zone name or a tzinfo, not {type(tz).__name__}")
        self.tz: tzinfo = tz
        self._spec = _parse(expression)

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
        wall = _quartz_walk(self._spec, tz, datetime(y, mo, d, h, mi, s))
        if wall is None:
            return None
        result = wall.replace(tzinfo=tz)
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


def _quartz_walk(spec: _Spec, tz: tzinfo, wall: datetime) -> datetime | None:
    """Quartz's CronExpression.getTimeAfter loop, field by field, on a lenient calendar.

    A port of the loop's control flow (second, minute, hour, day, month, year; every
    change re-normalises the calendar and restarts the loop), kept only for the days
    near a spring-forward gap, where the calendar's normalisation changes the result.
    The day step uses our day masks, so the L/W/# quirks of individual Quartz versions
    are not reproduced; the calendar positions it visits are the same as Quartz's.
    """
    sec_next, min_next, hour_next, month_next = spec.sec_next, spec.min_next, spec.hour_next, spec.month_next
    first_sec, first_min, first_hour = sec_next[0], min_next[0], hour_next[0]
    years = spec.years
    cl = wall
    while True:
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


def _set_hour(tz: tzinfo, y: int, mo: int, d: int, hr: int, mi: int, sec: int) -> datetime:
    """Quartz's setCalendarHour: set the hour; if the calendar then shows another hour
    (the wall time fell in a gap), set hour + 1 instead. Hour 24 just carries."""
    cl = _java_wall(tz, y, mo, d, hr, mi, sec)
    if cl.hour != hr and hr != 24:
        # Java sets HOUR_OF_DAY on the calendar as it now is (already moved by the gap).
        cl = _java_wall(tz, cl.year, cl.month, cl.day, hr + 1, cl.minute, cl.second)
    return cl
