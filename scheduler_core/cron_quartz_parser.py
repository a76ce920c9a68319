"""Quartz's own cron parser, ported statement by statement, in both of its dialects.

``org.quartz.CronExpression`` accepts many shapes its documentation does not describe
(``*/0``, ``0-59/60``, ``MON/2``, ``1-5W``, ``8#1``, ``MONDAY``, year 2300, trailing
characters after a value...) and gives each a precise, if surprising, meaning. A job the
legacy scheduler runs must migrate, so rather than re-deriving the grammar we follow
Quartz's parser (``buildExpression``, ``storeExpressionVals``, ``checkNext``, ``addToSet``,
``getValue``) line by line, and keep its results: the same value sets and flags Quartz
keeps, which ``scheduler_core.cron`` then evaluates.

Two dialects, checked against Quartz's jars by tests/unit/test_cron_quartz_oracle.py:

* ``"2.5"``: Quartz 2.5.x (2.5.2), copied by xxl-job 3.4.x (lineage C, see docs/cron.md).
* ``"2.3"``: Quartz 2.3.x (2.3.2), copied by xxl-job 2.1.0-3.0.0 (lineage A).

Their differences are listed in docs/cron.md. Pure: no clock, no I/O; the year bound that
Quartz takes from the clock ("this year + 100") is an argument.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Final, Literal

Dialect = Literal["2.5", "2.3"]
DIALECTS: Final[tuple[Dialect, ...]] = ("2.5", "2.3")

SECOND, MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK, YEAR = range(7)
FIELD_NAMES: Final = ("seconds", "minutes", "hours", "day-of-month", "month", "day-of-week", "year")

NO_SPEC: Final = 98  # '?'
ALL_SPEC: Final = 99  # '*' (a marker kept beside the values, as Quartz does)
# Quartz 2.5 stores "L-n" in day-of-month as the code 62 - n (and "L" as 62).
LAST_DAY_OFFSET_START: Final = 32
LAST_DAY_OFFSET_END: Final = 62

_MONTHS: Final = {
    m: i for i, m in enumerate(("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"))
}
_DAYS: Final = {d: i + 1 for i, d in enumerate(("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"))}
# (low, high) of each field but the year; also the largest step Quartz's checkIncrementRange allows
_LIMITS: Final = ((0, 59), (0, 59), (0, 23), (1, 31), (1, 12), (1, 7))
_LAST_FORM: Final = re.compile(r"L-[0-9]*W?")
_JAVA_INT: Final = re.compile(r"[+-]?[0-9]+")
_MAX_INT: Final = 2**31 - 1


class QuartzParseError(Exception):
    """Quartz's ParseException: ``field`` is the field being parsed (None: the whole expression)."""

    def __init__(self, field_index: int | None, message: str) -> None:
        super().__init__(message)
        self.field_index = field_index
        self.message = message


class _JavaRuntimeError(Exception):
    """A Java runtime exception inside Quartz's parser (index out of range, bad number...).
    Quartz wraps these as ParseException("Illegal cron expression format (...)")."""


@dataclass
class QuartzFields:
    """What Quartz keeps after parsing: value sets per field, and the day flags."""

    dialect: Dialect
    sets: list[set[int]] = field(default_factory=lambda: [set() for _ in range(7)])
    # Quartz 2.5: "nW" days and "LW"/"L-nW" codes (62 - n). Quartz 2.3 keeps nW days in
    # sets[DAY_OF_MONTH] with nearest_weekday set instead.
    nearest_weekdays: set[int] = field(default_factory=set)
    nearest_weekday: bool = False  # 2.3 only
    last_day_of_month: bool = False  # 2.3 only ("L", "LW", "L-n", "L-nW")
    last_day_offset: int = 0  # 2.3 only
    last_day_of_week: bool = False
    nth_day_of_week: int = 0


def _java_int(text: str) -> int:
    """Integer.parseInt: an optional sign and ASCII digits, within 32 bits."""
    if _JAVA_INT.fullmatch(text) is None:
        raise _JavaRuntimeError(f'NumberFormatException: For input string: "{text}"')
    value = int(text)
    if not -_MAX_INT - 1 <= value <= _MAX_INT:
        raise _JavaRuntimeError(f'NumberFormatException: For input string: "{text}"')
    return value


def _char(s: str, i: int) -> str:
    if not 0 <= i < len(s):
        raise _JavaRuntimeError(f"StringIndexOutOfBoundsException: index {i}, length {len(s)}")
    return s[i]


def _substring(s: str, begin: int, end: int | None = None) -> str:
    end = len(s) if end is None else end
    if begin < 0 or end > len(s) or begin > end:
        raise _JavaRuntimeError(f"StringIndexOutOfBoundsException: begin {begin}, end {end}, length {len(s)}")
    return s[begin:end]


def _is_digit(c: str) -> bool:
    return "0" <= c <= "9"


class _Parser:
    def __init__(self, dialect: Dialect, last_year: int) -> None:
        self.f = QuartzFields(dialect)
        self.v25 = dialect == "2.5"
        self.last_year = last_year

    # buildExpression
    def build(self, expression: str) -> QuartzFields:
        f = self.f
        current: int | None = None
        try:
            tokens = [t for t in re.split(r"[ \t]+", expression) if t]  # StringTokenizer(" \t")
            if self.v25 and len(tokens) > 7:
                raise QuartzParseError(None, f"Invalid expression has too many terms: {expression}")
            for expr_on, expr in enumerate(tokens[:7]):  # Quartz 2.3 ignores terms after the 7th
                current = expr_on
                if not self.v25 and expr_on == DAY_OF_MONTH and "L" in expr and len(expr) > 1 and "," in expr:
                    raise QuartzParseError(
                        expr_on, "Support for specifying 'L' and 'LW' with other days of the month is not implemented"
                    )
                if expr_on == DAY_OF_WEEK and "L" in expr and len(expr) > 1 and "," in expr:
                    raise QuartzParseError(
                        expr_on, "Support for specifying 'L' with other days of the week is not implemented"
                    )
                if expr_on == DAY_OF_WEEK and expr.count("#") > 1:
                    raise QuartzParseError(expr_on, 'Support for specifying multiple "nth" days is not implemented.')
                for v in expr.split(","):
                    if v:  # StringTokenizer(",") skips empty items
                        self.store(0, v, expr_on)
            current = None
            if len(tokens) <= DAY_OF_WEEK:
                raise QuartzParseError(None, "Unexpected end of expression.")
            if len(tokens) <= YEAR:
                self.store(0, "*", YEAR)
            dom_spec = NO_SPEC not in f.sets[DAY_OF_MONTH]
            dow_spec = NO_SPEC not in f.sets[DAY_OF_WEEK]
            if dom_spec == dow_spec:
                raise QuartzParseError(
                    DAY_OF_WEEK,
                    "Support for specifying both a day-of-week AND a day-of-month parameter is not implemented.",
                )
        except _JavaRuntimeError as exc:
            raise QuartzParseError(current, f"Illegal cron expression format ({exc})") from None
        return f

    # storeExpressionVals
    def store(self, pos: int, s: str, type_: int) -> int:  # noqa: C901 (a port: Quartz's shape kept)
        f = self.f
        incr = 0
        i = pos
        if i >= len(s):
            return i
        c = s[i]
        if "A" <= c <= "Z" and s not in ("L", "LW") and _LAST_FORM.fullmatch(s) is None:
            sub = _substring(s, i, i + 3)
            sval = eval_ = -1
            if type_ == MONTH:
                sval = _MONTHS.get(sub, -1) + 1
                if sval <= 0:
                    raise QuartzParseError(type_, f"Invalid Month value: '{sub}'")
                if len(s) > i + 3 and s[i + 3] == "-":
                    i += 4
                    sub = _substring(s, i, i + 3)
                    eval_ = _MONTHS.get(sub, -1) + 1
                    if eval_ <= 0:
                        raise QuartzParseError(type_, f"Invalid Month value: '{sub}'")
            elif type_ == DAY_OF_WEEK:
                sval = _DAYS.get(sub, -1)
                if sval < 0:
                    raise QuartzParseError(type_, f"Invalid Day-of-Week value: '{sub}'")
                if len(s) > i + 3:
                    c = s[i + 3]
                    if c == "-":
                        i += 4
                        sub = _substring(s, i, i + 3)
                        eval_ = _DAYS.get(sub, -1)
                        if eval_ < 0:
                            raise QuartzParseError(type_, f"Invalid Day-of-Week value: '{sub}'")
                    elif c == "#":
                        i += 4
                        self._nth(s, i)
                    elif c == "L":
                        f.last_day_of_week = True
                        i += 1
            else:
                raise QuartzParseError(type_, f"Illegal characters for this position: '{sub}'")
            if eval_ != -1:
                incr = 1
            self.add(sval, eval_, incr, type_)
            return i + 3

        if c == "?":
            i += 1
            if i + 1 < len(s) and s[i] != " " and s[i + 1] != "\t":
                raise QuartzParseError(type_, f"Illegal character after '?': {s[i]}")
            if type_ not in (DAY_OF_WEEK, DAY_OF_MONTH):
                raise QuartzParseError(type_, "'?' can only be specified for Day-of-Month or Day-of-Week.")
            if type_ == DAY_OF_WEEK:
                dom = f.sets[DAY_OF_MONTH]
                if self.v25:
                    clash = bool(dom) and max(dom) == NO_SPEC
                elif not f.last_day_of_month:
                    if not dom:
                        raise _JavaRuntimeError("NoSuchElementException")
                    clash = max(dom) == NO_SPEC
                else:
                    clash = False
                if clash:
                    raise QuartzParseError(type_, "'?' can only be specified for Day-of-Month -OR- Day-of-Week.")
            self.add(NO_SPEC, -1, 0, type_)
            return i

        if c in "*/":
            if c == "*" and i + 1 >= len(s):
                self.add(ALL_SPEC, -1, incr, type_)
                return i + 1
            if c == "/" and (i + 1 >= len(s) or s[i + 1] in " \t"):
                raise QuartzParseError(type_, "'/' must be followed by an integer.")
            if c == "*":
                i += 1
            c = _char(s, i)
            if c == "/":
                i += 1
                if i >= len(s):
                    raise QuartzParseError(type_, "Unexpected end of string.")
                incr = _java_int(_substring(s, i))  # getNumericValue: the rest of the item
                i += 1
                if incr > 10:
                    i += 1
                self._check_increment(incr, type_)
            else:
                incr = 1  # "*X": the X is ignored
            self.add(ALL_SPEC, -1, incr, type_)
            return i

        if c == "L":
            if self.v25 and type_ < DAY_OF_MONTH:
                raise QuartzParseError(type_, "'L' not expected in seconds, minutes or hours fields.")
            i += 1
            if not self.v25 and type_ == DAY_OF_MONTH:
                f.last_day_of_month = True
            if type_ == DAY_OF_WEEK:
                self.add(7, 7, 0, type_)
            if type_ == DAY_OF_MONTH:
                offset, nearest = 0, False
                if len(s) > i:
                    if s[i] == "-":
                        value, pos = self._value(0, s, i + 1)
                        offset = value
                        if offset > 30:
                            raise QuartzParseError(type_, "Offset from last day must be <= 30")
                        i = pos
                    if len(s) > i and s[i] == "W":
                        nearest = True
                        i += 1
                if self.v25:
                    code = LAST_DAY_OFFSET_END - offset
                    (f.nearest_weekdays if nearest else f.sets[DAY_OF_MONTH]).add(code)
                else:
                    f.last_day_offset = offset
                    f.nearest_weekday = f.nearest_weekday or nearest
            return i

        if _is_digit(c):
            val = int(c)
            i += 1
            if i >= len(s):
                self.add(val, -1, -1, type_)
            else:
                if _is_digit(s[i]):
                    val, i = self._value(val, s, i)
                return self._check_next(i, s, val, type_)
            return i

        raise QuartzParseError(type_, f"Unexpected character: {c}")

    def _nth(self, s: str, i: int) -> None:
        try:
            nth = _java_int(_substring(s, i))
            if not 1 <= nth <= 5:
                raise ValueError
        except (_JavaRuntimeError, ValueError):
            raise QuartzParseError(DAY_OF_WEEK, "A numeric value between 1 and 5 must follow the '#' option") from None
        self.f.nth_day_of_week = nth

    def _check_increment(self, incr: int, type_: int) -> None:
        if type_ == YEAR:
            return
        limit = _LIMITS[type_][1]
        if incr > limit:
            raise QuartzParseError(type_, f"Increment > {limit + 1} : {incr}")

    # checkNext
    def _check_next(self, pos: int, s: str, val: int, type_: int) -> int:  # noqa: C901
        f = self.f
        end = -1
        i = pos
        if i >= len(s):
            self.add(val, end, -1, type_)
            return i
        c = s[pos]
        if c == "L":
            if type_ != DAY_OF_WEEK:
                raise QuartzParseError(type_, f"'L' option is not valid here. (pos={i})")
            if not 1 <= val <= 7:
                raise QuartzParseError(type_, "Day-of-Week values must be between 1 and 7")
            f.last_day_of_week = True
            f.sets[type_].add(val)
            return i + 1
        if c == "W":
            if type_ != DAY_OF_MONTH:
                raise QuartzParseError(type_, f"'W' option is not valid here. (pos={i})")
            if val > 31:
                raise QuartzParseError(
                    type_,
                    "The 'W' option does not make sense with values larger than 31 (max number of days in a month)",
                )
            if self.v25:
                f.nearest_weekdays.add(val)
            else:
                f.nearest_weekday = True
                f.sets[type_].add(val)
            return i + 1
        if c == "#":
            if type_ != DAY_OF_WEEK:
                raise QuartzParseError(type_, f"'#' option is not valid here. (pos={i})")
            self._nth(s, i + 1)
            f.sets[type_].add(val)  # no range check: "8#1" parses (and never fires)
            return i + 2
        if c == "-":
            i += 1
            v = _java_int(_char(s, i))
            end = v
            i += 1
            if i >= len(s):
                self.add(val, end, 1, type_)
                return i
            if _is_digit(s[i]):
                end, i = self._value(v, s, i)
            if i < len(s) and s[i] == "/":
                i += 1
                v2 = _java_int(_char(s, i))
                i += 1
                if i >= len(s):
                    self.add(val, end, v2, type_)  # no increment check on ranges: "0-59/60" parses
                    return i
                if _is_digit(s[i]):
                    v3, i = self._value(v2, s, i)
                    self.add(val, end, v3, type_)
                    return i
                self.add(val, end, v2, type_)
                return i
            self.add(val, end, 1, type_)  # anything after the range ("1-5W") is ignored
            return i
        if c == "/":
            if i + 1 >= len(s) or s[i + 1] in " \t":
                raise QuartzParseError(type_, "'/' must be followed by an integer.")
            i += 1
            v2 = _java_int(_char(s, i))
            i += 1
            if i >= len(s):
                self._check_increment(v2, type_)
                self.add(val, end, v2, type_)
                return i
            if _is_digit(s[i]):
                v3, i = self._value(v2, s, i)
                self._check_increment(v3, type_)
                self.add(val, end, v3, type_)
                return i
            raise QuartzParseError(type_, f"Unexpected character '{s[i]}' after '/'")
        self.add(val, end, 0, type_)  # any other trailing character is ignored: "5X" is 5
        return i + 1

    # getValue: more digits after a first one; returns (value, position after them)
    def _value(self, v: int, s: str, i: int) -> tuple[int, int]:
        c = _char(s, i)
        digits = str(v)
        while _is_digit(c):
            digits += c
            i += 1
            if i >= len(s):
                break
            c = s[i]
        return _java_int(digits), (i if i < len(s) else i + 1)

    # addToSet
    def add(self, val: int, end: int, incr: int, type_: int) -> None:  # noqa: C901
        target = self.f.sets[type_]
        special = val in (ALL_SPEC, NO_SPEC)
        if type_ in (SECOND, MINUTE):
            if (val < 0 or val > 59 or end > 59) and val != ALL_SPEC:
                raise QuartzParseError(type_, "Minute and Second values must be between 0 and 59")
        elif type_ == HOUR:
            if (val < 0 or val > 23 or end > 23) and val != ALL_SPEC:
                raise QuartzParseError(type_, "Hour values must be between 0 and 23")
        elif type_ == DAY_OF_MONTH:
            if (val < 1 or val > 31 or end > 31) and not special:
                raise QuartzParseError(type_, "Day of month values must be between 1 and 31")
        elif type_ == MONTH:
            if (val < 1 or val > 12 or end > 12) and val != ALL_SPEC:
                raise QuartzParseError(type_, "Month values must be between 1 and 12")
        elif type_ == DAY_OF_WEEK:  # noqa: SIM102 - the same shape as the other fields' range checks
            if (val == 0 or val > 7 or end > 7) and not special:
                raise QuartzParseError(type_, "Day-of-Week values must be between 1 and 7")
        if incr in (0, -1) and val != ALL_SPEC:
            target.add(val if val != -1 else NO_SPEC)
            return
        start, stop = val, end
        if val == ALL_SPEC and incr <= 0:
            incr = 1
            target.add(ALL_SPEC)
        low, high = (1970, self.last_year) if type_ == YEAR else _LIMITS[type_]
        if stop == -1:
            stop = high
        if start in (-1, ALL_SPEC):
            start = low
        span = -1
        if stop < start:
            if type_ == YEAR:
                raise _JavaRuntimeError("IllegalArgumentException: Start year must be less than stop year")
            span = _LIMITS[type_][1] + (1 if type_ in (SECOND, MINUTE, HOUR) else 0)
            stop += span
        for value in range(start, stop + 1, incr):
            if span == -1:
                target.add(value)
            else:
                folded = value % span
                if folded == 0 and type_ in (MONTH, DAY_OF_WEEK, DAY_OF_MONTH):
                    folded = span  # 1-based fields include their max, never 0
                target.add(folded)


def parse(expression: str, dialect: Dialect, last_year: int) -> QuartzFields:
    """Quartz's parse of ``expression`` (as ``new CronExpression(expression)``: upper-cased
    first). QuartzParseError carries Quartz's message and the field it was parsing."""
    return _Parser(dialect, last_year).build(expression.upper())
