"""Tests for scheduler_core.cron, the Quartz-compatible cron evaluator.

Expected values were worked out by hand with a calendar, and every table row below
(the known cases, DST cases and rejected expressions) was also run through the real
org.quartz.CronExpression from the Quartz 2.3.2 and 2.5.2 jars (2.3.x is what xxl-job
2.x copies; 2.5.x what xxl-job 3.4 copies) when these tests were written. Where Quartz
versions disagree, or Quartz misbehaves, the row says so and follows the documented rule.
"""

from __future__ import annotations

import calendar
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta
from typing import NamedTuple
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduler_core.cron import DIALECTS, MAX_YEAR, CronExpression, CronSyntaxError, validate

SHANGHAI = ZoneInfo("Asia/Shanghai")
NEW_YORK = ZoneInfo("America/New_York")
BERLIN = ZoneInfo("Europe/Berlin")

# Start of the infra probe's table (shared/notes/infra-probe.md section 4): a Wednesday.
PROBE_START = datetime(2026, 12, 2, 13, 0, 1, tzinfo=SHANGHAI)


def sh(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=SHANGHAI)


def nexts(expr: str, start: datetime, n: int, tz: ZoneInfo | None = None) -> list[datetime]:
    return list(CronExpression(expr, tz or start.tzinfo).iter_after(start, n))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- known cases

# (expression, start, first fire times). Dec 2026: the 1st is a Tuesday.
KNOWN: list[tuple[str, datetime, list[datetime]]] = [
    # the infra probe's cases, from 2026-12-02 13:00:01 (Wednesday)
    ("0/5 * * * * ?", PROBE_START, [sh(2026, 12, 2, 13, 0, 5), sh(2026, 12, 2, 13, 0, 10)]),
    ("*/10 * * * * ?", PROBE_START, [sh(2026, 12, 2, 13, 0, 10), sh(2026, 12, 2, 13, 0, 20)]),
    ("0 0 9 ? * MON-FRI", PROBE_START, [sh(2026, 12, 3, 9), sh(2026, 12, 4, 9), sh(2026, 12, 7, 9)]),
    ("0 0 9 ? * 1", PROBE_START, [sh(2026, 12, 6, 9), sh(2026, 12, 13, 9)]),  # 1 = SUNDAY in Quartz
    ("0 0 0 L * ?", PROBE_START, [sh(2026, 12, 31), sh(2027, 1, 31), sh(2027, 2, 28), sh(2027, 3, 31)]),
    ("0 0 0 L-2 * ?", PROBE_START, [sh(2026, 12, 29), sh(2027, 1, 29), sh(2027, 2, 26)]),
    # Dec 5 2026 is a Saturday -> Friday the 4th; Jan 5 2027 Tuesday; Jun 5 2027 Saturday -> 4th
    (
        "0 0 0 5W * ?",
        PROBE_START,
        [
            sh(2026, 12, 4),
            sh(2027, 1, 5),
            sh(2027, 2, 5),
            sh(2027, 3, 5),
            sh(2027, 4, 5),
            sh(2027, 5, 5),
            sh(2027, 6, 4),
        ],
    ),
    # Dec 31 2026 Thursday; Jan 31 2027 Sunday -> Fri 29th; Feb 28 2027 Sunday -> Fri 26th
    ("0 0 0 LW * ?", PROBE_START, [sh(2026, 12, 31), sh(2027, 1, 29), sh(2027, 2, 26)]),
    ("0 0 0 ? * 6L", PROBE_START, [sh(2026, 12, 25), sh(2027, 1, 29), sh(2027, 2, 26)]),  # last Friday
    ("0 0 0 ? * 6#3", PROBE_START, [sh(2026, 12, 18), sh(2027, 1, 15), sh(2027, 2, 19)]),  # third Friday
    ("0 0 0 ? * FRI#3", PROBE_START, [sh(2026, 12, 18), sh(2027, 1, 15)]),
    ("0 0 0 1 1 ? 2028", PROBE_START, [sh(2028, 1, 1)]),  # and then never again
    ("0 0 0 29 2 ?", PROBE_START, [sh(2028, 2, 29), sh(2032, 2, 29), sh(2036, 2, 29)]),
    (
        "0 0 0 1/5 * ?",
        PROBE_START,
        [
            sh(2026, 12, 6),
            sh(2026, 12, 11),
            sh(2026, 12, 16),
            sh(2026, 12, 21),
            sh(2026, 12, 26),
            sh(2026, 12, 31),
            sh(2027, 1, 1),
        ],
    ),
    (
        "0 0 0 ? JAN,JUL MON",
        PROBE_START,
        [sh(2027, 1, 4), sh(2027, 1, 11), sh(2027, 1, 18), sh(2027, 1, 25), sh(2027, 7, 5)],
    ),
    # more day-of-month rules. May 1 2027 is a Saturday: 1W moves forward to Monday the 3rd
    # (it never crosses into April), also from after midnight of the 1st (xxl-job 3.4's
    # copy and Quartz 2.5.2 skip to June there).
    ("0 0 10 1W * ?", sh(2027, 4, 15), [sh(2027, 5, 3, 10), sh(2027, 6, 1, 10)]),
    # May 1st 2027 is a Saturday, so 1W is Monday the 3rd; but from after midnight on the 1st,
    # Quartz 2.5 no longer looks at "1" this month and moves on to June (measured against the
    # 2.5.2 jar; xxl-job 3.4.x has the same copy). Quartz 2.3 gives May 3: see test_dialects_differ.
    ("0 0 10 1W * ?", sh(2027, 5, 1, 12), [sh(2027, 6, 1, 10)]),
    # Jan 31 2027 is a Sunday: 31W moves back to Friday the 29th. 31W never fires in a month
    # without a 31st (xxl-job 2.x's copy overflows and sometimes fires on the 30th).
    ("0 0 0 31W * ?", sh(2027, 1, 1), [sh(2027, 1, 29), sh(2027, 3, 31), sh(2027, 5, 31), sh(2027, 7, 30)]),
    # 15W: Saturday May 15 2027 -> Friday 14th; Sunday Aug 15 2027 -> Monday 16th
    ("0 0 0 15W * ?", sh(2027, 5, 1), [sh(2027, 5, 14), sh(2027, 6, 15), sh(2027, 7, 15), sh(2027, 8, 16)]),
    ("0 0 0 L-3W * ?", sh(2027, 2, 1), [sh(2027, 2, 25), sh(2027, 3, 29)]),  # Feb 25 Thu; Mar 28 Sun -> 29th
    ("0 0 0 L 2 ?", sh(2027, 3, 1), [sh(2028, 2, 29), sh(2029, 2, 28)]),
    ("0 0 0 L-30 * ?", sh(2027, 1, 15), [sh(2027, 3, 1), sh(2027, 5, 1)]),  # only 31-day months have one
    ("0 0 0 L,15 * ?", sh(2027, 2, 1), [sh(2027, 2, 15), sh(2027, 2, 28), sh(2027, 3, 15)]),  # union (Quartz 2.5)
    ("0 0 0 1,15W * ?", sh(2027, 5, 2), [sh(2027, 5, 14), sh(2027, 6, 1), sh(2027, 6, 15)]),
    (
        "0 0 0 28-3 * ?",
        sh(2027, 2, 26),
        [sh(2027, 2, 28), sh(2027, 3, 1), sh(2027, 3, 2), sh(2027, 3, 3), sh(2027, 3, 28)],
    ),
    # day-of-week rules. Thursdays 2027: Jan 7..28 (4), Feb 4..25 (4), Mar 4..25 (4), Apr 1..29 (5)
    ("0 0 0 ? * 5#5", sh(2027, 1, 1), [sh(2027, 4, 29), sh(2027, 7, 29)]),
    ("0 0 0 ? * FRIL", sh(2027, 1, 1), [sh(2027, 1, 29), sh(2027, 2, 26)]),  # Quartz accepts FRIL = 6L
    ("0 0 0 ? * L", sh(2027, 1, 1), [sh(2027, 1, 2), sh(2027, 1, 9)]),  # 'L' alone is 7 = Saturday
    (
        "0 0 0 ? * FRI-MON",
        sh(2027, 1, 4),
        [sh(2027, 1, 8), sh(2027, 1, 9), sh(2027, 1, 10), sh(2027, 1, 11), sh(2027, 1, 15)],
    ),
    # */3 is 1,4,7 = SUN,WED,SAT; Jan 1 2027 is a Friday
    ("0 0 0 ? * */3", sh(2027, 1, 1), [sh(2027, 1, 2), sh(2027, 1, 3), sh(2027, 1, 6), sh(2027, 1, 9)]),
    # wrapping ranges in the time and month fields
    (
        "0 0 22-2 * * ?",
        sh(2027, 1, 1, 23, 30),
        [sh(2027, 1, 2, 0), sh(2027, 1, 2, 1), sh(2027, 1, 2, 2), sh(2027, 1, 2, 22)],
    ),
    ("50-10/10 0 0 * * ?", sh(2027, 1, 1), [sh(2027, 1, 1, 0, 0, 10), sh(2027, 1, 1, 0, 0, 50), sh(2027, 1, 2)]),
    (
        "0 0 0 1 NOV-FEB ?",
        sh(2027, 3, 1),
        [sh(2027, 11, 1), sh(2027, 12, 1), sh(2028, 1, 1), sh(2028, 2, 1), sh(2028, 11, 1)],
    ),
    ("0 0 12 1 */4 ?", sh(2027, 1, 2), [sh(2027, 5, 1, 12), sh(2027, 9, 1, 12), sh(2028, 1, 1, 12)]),
    # names, case, lists, years
    ("0 15 10 ? * mon-fri", sh(2027, 1, 1, 10, 15), [sh(2027, 1, 4, 10, 15)]),
    ("0 0 8,12,18 * * ?", sh(2027, 1, 1, 12), [sh(2027, 1, 1, 18), sh(2027, 1, 2, 8)]),
    ("0 0 0 1 1 ? 2027-2031/2", sh(2026, 6, 1), [sh(2027, 1, 1), sh(2029, 1, 1), sh(2031, 1, 1)]),
    ("0 0 0 1 1 ? 2199", sh(2198, 6, 1), [sh(2199, 1, 1)]),
    ("0 0 9 ? * 2-6", PROBE_START, [sh(2026, 12, 3, 9), sh(2026, 12, 4, 9), sh(2026, 12, 7, 9)]),  # = MON-FRI
]


@pytest.mark.parametrize(("expr", "start", "expected"), KNOWN, ids=[f"{e} @ {s:%Y-%m-%d}" for e, s, _ in KNOWN])
def test_known_cases(expr: str, start: datetime, expected: list[datetime]) -> None:
    got = nexts(expr, start, len(expected) + 1)
    assert got[: len(expected)] == expected
    for g in got:
        assert g.tzinfo is SHANGHAI


@pytest.mark.parametrize(
    ("expr", "start"),
    [
        ("0 0 0 1 1 ? 2020", sh(2026, 1, 1)),  # schedule over
        ("0 0 0 1 1 ? 2027", sh(2027, 1, 1)),  # strictly after: the only fire is the start itself
        ("0 0 0 30 2 ?", sh(2026, 1, 1)),  # there is no Feb 30
        ("0 0 0 31 4,6,9,11 ?", sh(2026, 1, 1)),
        ("0 0 0 30W 2 ?", sh(2026, 1, 1)),  # nW needs day n to exist (Quartz 2.3 fires on some Feb 29ths)
        ("0 0 0 L-30 2 ?", sh(2026, 1, 1)),
        ("0 0 0 ? 2 2#5 2026", sh(2026, 1, 1)),  # Feb 2026 has four Mondays
        ("0 0 0 1 1 ? 2199", sh(2199, 1, 1)),  # past the search horizon
    ],
)
def test_never_fires_again(expr: str, start: datetime) -> None:
    assert CronExpression(expr, SHANGHAI).next_after(start) is None
    assert list(CronExpression(expr, SHANGHAI).iter_after(start)) == []


def test_probe_table_last_fire_of_year_field() -> None:
    e = CronExpression("0 0 0 1 1 ? 2028", SHANGHAI)
    first = e.next_after(PROBE_START)
    assert first == sh(2028, 1, 1)
    assert e.next_after(first) is None


def test_strictly_after_and_whole_seconds() -> None:
    e = CronExpression("* * * * * ?", "UTC")
    t = datetime(2027, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC)
    assert e.next_after(t) == datetime(2027, 1, 1, 12, 0, 1, tzinfo=UTC)  # not 12:00:00.250
    exact = datetime(2027, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert CronExpression("0 0 12 * * ?", "UTC").next_after(exact) == datetime(2027, 1, 2, 12, tzinfo=UTC)
    almost = datetime(2027, 1, 1, 11, 59, 59, 999_999, tzinfo=UTC)
    assert CronExpression("0 0 12 * * ?", "UTC").next_after(almost) == exact


def test_start_in_another_zone_is_converted() -> None:
    # 2026-12-02 05:00:01 UTC is 13:00:01 in Shanghai.
    e = CronExpression("0 0 14 * * ?", "Asia/Shanghai")
    got = e.next_after(datetime(2026, 12, 2, 5, 0, 1, tzinfo=UTC))
    assert got == sh(2026, 12, 2, 14)
    assert got is not None and got.tzinfo is e.tz and got.utcoffset() == timedelta(hours=8)


def test_iter_after_limit_and_order() -> None:
    got = list(CronExpression("0 0/20 * * * ?", SHANGHAI).iter_after(sh(2027, 1, 1), 5))
    assert got == [
        sh(2027, 1, 1, 0, 20),
        sh(2027, 1, 1, 0, 40),
        sh(2027, 1, 1, 1),
        sh(2027, 1, 1, 1, 20),
        sh(2027, 1, 1, 1, 40),
    ]
    assert list(CronExpression("0 0 0 1 1 ? 2027,2028", SHANGHAI).iter_after(sh(2026, 1, 1))) == [
        sh(2027, 1, 1),
        sh(2028, 1, 1),
    ]


def test_api_surface() -> None:
    e = CronExpression("0 0/5 9-17 ? * MON-FRI", "Asia/Shanghai")
    assert e.expression == "0 0/5 9-17 ? * MON-FRI"
    assert e.tz == ZoneInfo("Asia/Shanghai")
    assert CronExpression("0 0 0 * * ?", SHANGHAI).tz is SHANGHAI
    assert CronExpression("0 0 0 * * ?", UTC).next_after(datetime(2027, 1, 1, tzinfo=UTC)) == datetime(
        2027, 1, 2, tzinfo=UTC
    )
    assert "MON-FRI" in repr(e)
    assert issubclass(CronSyntaxError, ValueError)
    validate("0 0 12 ? * WED")
    with pytest.raises(CronSyntaxError):
        validate("0 0 12 * * WED")


def test_naive_datetime_is_rejected() -> None:
    with pytest.raises(ValueError, match="aware"):
        CronExpression("0 0 0 * * ?", SHANGHAI).next_after(datetime(2027, 1, 1))


def test_unknown_time_zone() -> None:
    with pytest.raises(ValueError, match="time zone"):
        CronExpression("0 0 0 * * ?", "Mars/Olympus_Mons")
    with pytest.raises(TypeError):
        CronExpression("0 0 0 * * ?", 8)  # type: ignore[arg-type]


def test_end_of_datetime_range() -> None:
    e = CronExpression("* * * * * ?", "UTC")
    assert e.next_after(datetime.max.replace(tzinfo=UTC)) is None
    assert e.next_after(datetime(2199, 12, 31, 23, 59, 58, tzinfo=UTC)) == datetime(
        2199, 12, 31, 23, 59, 59, tzinfo=UTC
    )
    assert e.next_after(datetime(2199, 12, 31, 23, 59, 59, tzinfo=UTC)) is None  # MAX_YEAR is the horizon
    assert MAX_YEAR == 2199


def test_start_before_1970_jumps_to_first_year() -> None:
    e = CronExpression("0 0 0 1 1 ?", "UTC")
    assert e.next_after(datetime(1900, 6, 1, tzinfo=UTC)) == datetime(1970, 1, 1, tzinfo=UTC)


# --------------------------------------------------------------------------- time zones and DST


def ny(year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, fold: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=NEW_YORK, fold=fold)


def instants(values: list[datetime]) -> list[str]:
    """UTC ISO strings: compares instants, never wall times (same-tzinfo comparisons
    in Python ignore the UTC offset)."""
    return [v.astimezone(UTC).isoformat() for v in values]


def test_new_york_spring_forward_gap_is_skipped() -> None:
    # 2026-03-08: 02:00 EST jumps to 03:00 EDT, so 02:30 does not exist that day.
    got = nexts("0 30 2 * * ?", ny(2026, 3, 7, 12), 3, NEW_YORK)
    assert [g.isoformat() for g in got] == [
        "2026-03-09T02:30:00-04:00",
        "2026-03-10T02:30:00-04:00",
        "2026-03-11T02:30:00-04:00",
    ]
    # an expression whose only fire falls in the gap never fires
    assert CronExpression("0 15 2 8 3 ? 2026", NEW_YORK).next_after(ny(2026, 1, 1)) is None


def test_new_york_every_minute_across_spring_forward() -> None:
    got = nexts("0 * * * * ?", ny(2026, 3, 8, 1, 58, 30), 3, NEW_YORK)
    assert [g.isoformat() for g in got] == [
        "2026-03-08T01:59:00-05:00",
        "2026-03-08T03:00:00-04:00",
        "2026-03-08T03:01:00-04:00",
    ]


def test_new_york_fall_back_fires_once_in_standard_time() -> None:
    # 2026-11-01: 02:00 EDT goes back to 01:00 EST; 01:30 happens twice. Quartz fires
    # once, at the second (EST) 01:30.
    got = nexts("0 30 1 * * ?", ny(2026, 10, 31, 12), 2, NEW_YORK)
    assert [g.isoformat() for g in got] == ["2026-11-01T01:30:00-05:00", "2026-11-02T01:30:00-05:00"]
    assert got[0].fold == 1
    assert instants(got)[0] == "2026-11-01T06:30:00+00:00"


def test_new_york_hourly_across_fall_back() -> None:
    # Each wall-clock hour fires once; the repeated 01:00 hour fires in its EST pass only,
    # so 00:00 EDT -> 01:00 EST is two real hours, as in Quartz.
    got = nexts("0 0 * * * ?", ny(2026, 11, 1, 0, 30), 3, NEW_YORK)
    assert instants(got) == ["2026-11-01T06:00:00+00:00", "2026-11-01T07:00:00+00:00", "2026-11-01T08:00:00+00:00"]
    assert [g.isoformat() for g in got] == [
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
        "2026-11-01T03:00:00-05:00",
    ]


def test_new_york_start_inside_first_pass_of_repeated_hour() -> None:
    # From 01:57:30 EDT the wall-clock walk goes to 01:58, which resolves to EST: the
    # 60 minutely fires in between (01:58 EDT .. 01:57 EST) are skipped, as in Quartz.
    start = ny(2026, 11, 1, 1, 57, 30)  # fold=0: EDT
    assert start.utcoffset() == timedelta(hours=-4)
    got = nexts("0 * * * * ?", start, 3, NEW_YORK)
    assert instants(got) == ["2026-11-01T06:58:00+00:00", "2026-11-01T06:59:00+00:00", "2026-11-01T07:00:00+00:00"]
    half_hourly = nexts("0 0/30 1-3 * * ?", start, 2, NEW_YORK)
    assert [g.isoformat() for g in half_hourly] == ["2026-11-01T02:00:00-05:00", "2026-11-01T02:30:00-05:00"]
    # and from inside the EST pass, just the next minute
    est = ny(2026, 11, 1, 1, 10, 0, fold=1)
    assert instants(nexts("0 * * * * ?", est, 1, NEW_YORK)) == ["2026-11-01T06:11:00+00:00"]


def test_berlin_gap_and_overlap() -> None:
    # 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
    spring = nexts("0 30 2 * * ?", datetime(2026, 3, 28, 12, tzinfo=BERLIN), 2, BERLIN)
    assert [g.isoformat() for g in spring] == ["2026-03-30T02:30:00+02:00", "2026-03-31T02:30:00+02:00"]
    autumn = nexts("0 30 2 * * ?", datetime(2026, 10, 24, 12, tzinfo=BERLIN), 2, BERLIN)
    assert [g.isoformat() for g in autumn] == ["2026-10-25T02:30:00+01:00", "2026-10-26T02:30:00+01:00"]
    quarter = nexts("0 */15 2 * * ?", datetime(2026, 10, 25, 1, 50, tzinfo=BERLIN), 5, BERLIN)
    assert [g.isoformat() for g in quarter] == [
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T02:15:00+01:00",
        "2026-10-25T02:30:00+01:00",
        "2026-10-25T02:45:00+01:00",
        "2026-10-26T02:00:00+01:00",
    ]


def test_shanghai_has_no_dst() -> None:
    got = nexts("0 30 2 * * ?", sh(2026, 3, 7, 12), 3)
    assert got == [sh(2026, 3, 8, 2, 30), sh(2026, 3, 9, 2, 30), sh(2026, 3, 10, 2, 30)]
    assert all(g.utcoffset() == timedelta(hours=8) for g in got)
    assert nexts("0 30 2 * * ?", sh(2026, 10, 31, 12), 2) == [sh(2026, 11, 1, 2, 30), sh(2026, 11, 2, 2, 30)]


def test_lord_howe_half_hour_gap_matches_quartz() -> None:
    # Australia/Lord_Howe, 2026-10-04: 02:00 jumps to 02:30 (+10:30 -> +11). Quartz's
    # calendar moves the missing 02:10 to 02:40 and resumes there, so it passes over the
    # real 02:35. We reproduce that (checked against Quartz 2.3.2 and 2.5.2).
    tz = ZoneInfo("Australia/Lord_Howe")
    start = datetime(2026, 10, 4, 1, 50, tzinfo=tz)
    assert [g.isoformat() for g in nexts("0 10,35 * * * ?", start, 2, tz)] == [
        "2026-10-04T03:10:00+11:00",
        "2026-10-04T03:35:00+11:00",
    ]
    assert [g.isoformat() for g in nexts("0 10,40 * * * ?", start, 2, tz)] == [
        "2026-10-04T02:40:00+11:00",
        "2026-10-04T03:10:00+11:00",
    ]


def test_troll_two_hour_gap_matches_quartz() -> None:
    # Antarctica/Troll, 2026-03-29 01:00 +00 -> 03:00 +02. Quartz's setCalendarHour adds
    # one hour to a time that fell in the gap, which lands in the gap again: the first
    # fire after the change is 04:00, not 03:00.
    tz = ZoneInfo("Antarctica/Troll")
    got = nexts("0 0 * * * ?", datetime(2026, 3, 28, 23, 30, tzinfo=tz), 3, tz)
    assert [g.isoformat() for g in got] == [
        "2026-03-29T00:00:00+00:00",
        "2026-03-29T04:00:00+02:00",
        "2026-03-29T05:00:00+02:00",
    ]


def test_apia_skipped_day() -> None:
    # Pacific/Apia skipped 2011-12-30 entirely (-10:00 -> +14:00).
    tz = ZoneInfo("Pacific/Apia")
    got = nexts("0 0 12 * * ?", datetime(2011, 12, 28, 12, tzinfo=tz), 3, tz)
    assert [g.isoformat() for g in got] == [
        "2011-12-29T12:00:00-10:00",
        "2011-12-31T12:00:00+14:00",
        "2012-01-01T12:00:00+14:00",
    ]


# --------------------------------------------------------------------------- rejected expressions

INVALID: list[tuple[str, str, str | None]] = [
    # (expression, field named in the message, part of Quartz 2.5.2's own message): each
    # rejected by the Quartz jars too (tests/unit/test_cron_quartz_oracle.py checks them all).
    ("0 0 12 * *", "expression", "Unexpected end of expression."),
    ("0 0 12 * * ? 2027 extra", "expression", "too many terms"),  # Quartz 2.3 ignores the 8th term
    ("", "expression", "Unexpected end of expression."),
    ("0 0 12 ? * ?", "day-of-week", "-OR-"),
    ("0 0 12 * * *", "day-of-week", "Support for specifying both a day-of-week AND a day-of-month"),
    ("0 0 12 1 * MON", "day-of-week", "Support for specifying both"),
    ("60 0 12 * * ?", "seconds", "Minute and Second values must be between 0 and 59"),
    ("0 60 12 * * ?", "minutes", "Minute and Second values must be between 0 and 59"),
    ("0 0 24 * * ?", "hours", "Hour values must be between 0 and 23"),
    ("0 0 12 32 * ?", "day-of-month", "Day of month values must be between 1 and 31"),
    ("0 0 12 0 * ?", "day-of-month", "between 1 and 31"),
    ("0 0 12 * 13 ?", "month", "Month values must be between 1 and 12"),
    ("0 0 12 * 0 ?", "month", "between 1 and 12"),
    ("0 0 12 ? * 8", "day-of-week", "Day-of-Week values must be between 1 and 7"),
    ("0 0 12 ? * 0", "day-of-week", "between 1 and 7"),  # Unix cron's Sunday
    ("0 0 12 * * ? 2030-2027", "year", "Start year must be less than stop year"),
    ("0/60 * * * * ?", "seconds", "Increment > 60 : 60"),
    ("0 0 */24 * * ?", "hours", "Increment > 24 : 24"),
    ("0 0 0 */32 * ?", "day-of-month", "Increment > 32"),
    ("0 0 0 1 */13 ?", "month", "Increment > 13"),
    ("0 0 0 ? * */8", "day-of-week", "Increment > 8"),
    ("0 0 0 1/ * ?", "day-of-month", "'/' must be followed by an integer."),
    ("0 0 0 ? * FOO", "day-of-week", "Invalid Day-of-Week value: 'FOO'"),
    ("0 0 0 ? JAN MON-5", "day-of-week", "Illegal cron expression format"),
    ("0 0 0 1 MON ?", "month", "Invalid Month value: 'MON'"),
    ("0 0 0 ? JAN ? ", "day-of-week", "-OR-"),
    # Quartz 2.3 parses L in these fields and then throws computing a fire time; 2.5 rejects it
    ("L * * * * ?", "seconds", "'L' not expected in seconds, minutes or hours fields."),
    ("0 L * * * ?", "minutes", "'L' not expected"),
    ("0 0 L * * ?", "hours", "'L' not expected"),
    ("0 0 0 1 L ?", "month", "cannot compute a fire time"),  # both versions throw NoSuchElementException
    ("0 0 0 5L * ?", "day-of-month", "'L' option is not valid here."),
    ("0 0 0 L-31 * ?", "day-of-month", "Offset from last day must be <= 30"),
    ("0 0 0 L- * ?", "day-of-month", "Illegal cron expression format"),
    ("0 0 0 ? * 6L,2", "day-of-week", "Support for specifying 'L' with other days of the week"),
    ("0 0 0 */5W * ?", "day-of-month", "Illegal cron expression format"),
    ("0 0 0 32W * ?", "day-of-month", "The 'W' option does not make sense"),
    ("0 0 0 ? * 5W", "day-of-week", "'W' option is not valid here."),
    ("0 0 W * * ?", "hours", "Illegal cron expression format"),
    ("0 0 0 ? * 6#6", "day-of-week", "A numeric value between 1 and 5 must follow the '#' option"),
    ("0 0 0 ? * 6#0", "day-of-week", "between 1 and 5"),
    ("0 0 0 ? * 6#", "day-of-week", "between 1 and 5"),
    ("0 0 0 ? * 6#3,2#1", "day-of-week", 'multiple "nth" days'),
    ("0 0 0 1#2 * ?", "day-of-month", "'#' option is not valid here."),
    ("? 0 0 1 * ?", "seconds", "'?' can only be specified for Day-of-Month or Day-of-Week."),
    ("0 0 0 ?,1 * ?", "day-of-week", "-OR-"),
    ("0 0 12-x * * ?", "hours", "Illegal cron expression format"),
    ("abc def ghi jkl mno pqr", "seconds", "Illegal characters for this position: 'ABC'"),
    ("0 0 12 * * ? abc", "year", "Illegal characters for this position"),
    ("0 0 -1 * * ?", "hours", "Unexpected character: -"),
]


@pytest.mark.parametrize(("expr", "field", "reason"), INVALID, ids=[r[0] or "<empty>" for r in INVALID])
def test_invalid_expressions(expr: str, field: str, reason: str | None) -> None:
    with pytest.raises(CronSyntaxError) as info:
        CronExpression(expr, SHANGHAI)
    err = info.value
    assert err.field == field
    assert str(err).startswith(f"{field}: ")
    if reason is not None:
        assert reason in str(err)
    with pytest.raises(CronSyntaxError):
        validate(expr)


def test_error_message_format() -> None:
    # Quartz's message, then the expression (for a row in a migration report)
    with pytest.raises(
        CronSyntaxError,
        match=r"^day-of-week: Day-of-Week values must be between 1 and 7 "
        r"\(in '0 0 12 \? \* 8'\)$",
    ):
        validate("0 0 12 ? * 8")


# Shapes Quartz accepts though its documentation does not describe them (measured against
# the 2.3.2 and 2.5.2 jars): (expression, start, first fires; [] = accepted, never fires).
ACCEPTED_ODD: list[tuple[str, datetime, list[datetime]]] = [
    ("*/0 * * 1 1 ? 2027", sh(2026, 12, 31, 23, 59, 58), [sh(2027, 1, 1), sh(2027, 1, 1, 0, 0, 1)]),  # */0 = *
    ("5/0 * * 1 1 ? 2027", sh(2026, 12, 31), [sh(2027, 1, 1, 0, 0, 5), sh(2027, 1, 1, 0, 1, 5)]),  # a/0 = a
    ("0-59/60 0 0 * * ?", sh(2026, 12, 31), [sh(2027, 1, 1)]),  # a-b/n is not range-checked: {0}
    ("0 0 0 1-5W * ?", sh(2027, 1, 1), [sh(2027, 1, 2)]),  # the W after a range is ignored: 1-5
    ("0 0 12 ? * MON/2", sh(2026, 12, 2), [sh(2026, 12, 7, 12), sh(2026, 12, 14, 12)]),  # step after a name ignored
    ("0 0 0 ? * MON-FRI/2", sh(2026, 12, 5), [sh(2026, 12, 7), sh(2026, 12, 8)]),
    ("0 0 0 ? * MONDAY", sh(2026, 12, 2), [sh(2026, 12, 7)]),  # names are read by their first 3 letters
    ("0 0 0 1 JANUARY ?", sh(2026, 12, 2), [sh(2027, 1, 1)]),
    ("0 0 0 ? * 1-3L", sh(2026, 12, 2), [sh(2026, 12, 6)]),  # trailing L after a range ignored: SUN-TUE
    ("0 0 0 1,,2 * ?", sh(2026, 12, 2), [sh(2027, 1, 1), sh(2027, 1, 2)]),  # empty list items skipped
    ("0 0 1.5 * * ?", sh(2026, 12, 2), [sh(2026, 12, 2, 1)]),  # anything after a value is ignored: 1
    ("0 0 12 ? * MON,WED#2", sh(2026, 12, 2), [sh(2026, 12, 14, 12)]),  # '#' uses the smallest weekday: MON#2
    ("0 0 12 ? * 8#1", sh(2026, 12, 2), []),
    ("0 0 12 * * ? 1969", sh(2026, 12, 2), []),
    ("0 0 12 * * ? 2300", sh(2026, 12, 2), []),  # past Quartz's horizon: never fires
]


@pytest.mark.parametrize(("expr", "start", "expected"), ACCEPTED_ODD, ids=[e for e, _, _ in ACCEPTED_ODD])
def test_quartz_accepts_odd_shapes(expr: str, start: datetime, expected: list[datetime]) -> None:
    for dialect in DIALECTS:
        validate(expr, dialect)
        assert list(CronExpression(expr, SHANGHAI, dialect=dialect).iter_after(start, len(expected) + 0)) == expected, (
            dialect
        )
        if not expected:
            assert CronExpression(expr, SHANGHAI, dialect=dialect).next_after(start) is None


# Where the two Quartz lines differ (docs/cron.md), measured against their jars.
DIALECT_DIFFERENCES: list[tuple[str, datetime, list[datetime] | None, list[datetime] | None]] = [
    # (expression, start, Quartz 2.3 fires or None = invalid, Quartz 2.5 fires or None = invalid)
    ("0 0 12 * * ? 2027 extra", sh(2026, 12, 2), [sh(2027, 1, 1, 12)], None),
    ("0 0 0 L,15 * ?", sh(2026, 12, 2), None, [sh(2026, 12, 15), sh(2026, 12, 31)]),
    ("0 0 0 1,15W * ?", sh(2026, 12, 2), [sh(2027, 1, 1), sh(2027, 2, 1)], [sh(2026, 12, 15), sh(2027, 1, 1)]),
    ("0 0 10 1W * ?", sh(2027, 5, 1, 12), [sh(2027, 5, 3, 10)], [sh(2027, 6, 1, 10)]),
    ("L * * * * ?", sh(2026, 12, 2), None, None),  # 2.3 parses it but cannot compute a fire time
]


@pytest.mark.parametrize(("expr", "start", "old", "new"), DIALECT_DIFFERENCES, ids=[e for e, *_ in DIALECT_DIFFERENCES])
def test_dialects_differ(expr: str, start: datetime, old: list[datetime] | None, new: list[datetime] | None) -> None:
    for dialect, expected in (("2.3", old), ("2.5", new)):
        if expected is None:
            with pytest.raises(CronSyntaxError):
                CronExpression(expr, SHANGHAI, dialect=dialect)  # type: ignore[arg-type]
        else:
            got = list(CronExpression(expr, SHANGHAI, dialect=dialect).iter_after(start, len(expected)))  # type: ignore[arg-type]
            assert got == expected, dialect


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown Quartz dialect"):
        CronExpression("0 0 0 * * ?", SHANGHAI, dialect="2.4")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "expr",
    [
        "0 0 12 ? * SUN-SAT",
        "0 0 12 ? * sun,mon",
        "0 0 12 L * ?",
        "0 0 12 lw * ?",
        "0 0 12 L-0 * ?",
        "0 0 12 L-30W * ?",
        "0 0 12 ? * 7L",
        "0 0 12 ? * SATL",
        "0 0 12 ? * 1#5",
        "0 0 12 * * ? *",
        "0 0 12 * * ? 1970-2199",
        "*/1 */1 */1 */1 */1 ?",
        "/5 * * * * ?",
        "0\t0\t12  *  *  ?",
        "59 59 23 31 12 ? 2199",
        "0 0 0 1,L * ?",
        "0 0 0 LW,1 * ?",
        "0 0 0 05 * ?",
        "0 0 0 ? * 06#03",
        "0 0 0 ? NOV-FEB *",
        "0 0 0 ? * 7-1",
    ],
)
def test_valid_expressions(expr: str) -> None:
    validate(expr)
    assert CronExpression(expr, "UTC").next_after(datetime(2026, 1, 1, tzinfo=UTC)) is not None


# --------------------------------------------------------------------------- properties
#
# Expressions are built field by field together with the set of values each field
# means, worked out here independently of the parser; a brute-force reference then
# scans days, hours, minutes and seconds in order.


def _wrap_values(start: int, end: int, step: int, low: int, high: int) -> set[int]:
    """Values of "start-end/step"; an inverted range runs on past the field's end and
    continues from its start (Quartz's "overflowing ranges")."""
    span = high - low + 1
    distance = (end - start) % span
    return {low + (start - low + k) % span for k in range(0, distance + 1, step)}


@st.composite
def field(draw: st.DrawFn, low: int, high: int, names: list[str] | None = None) -> tuple[str, set[int]]:
    kind = draw(st.sampled_from(["star", "step", "value", "range", "list"]))
    max_step = high - low
    if kind == "star":
        return "*", set(range(low, high + 1))
    if kind == "step":
        step = draw(st.integers(1, max(1, max_step)))
        start = draw(st.none() | st.integers(low, high))
        if start is None:
            return f"*/{step}", set(range(low, high + 1, step))
        return f"{start}/{step}", set(range(start, high + 1, step))
    if kind == "value":
        v = draw(st.integers(low, high))
        if names and draw(st.booleans()):
            return names[v - low], {v}
        return str(v), {v}
    if kind == "range":
        a, b = draw(st.integers(low, high)), draw(st.integers(low, high))
        step = draw(st.integers(1, max(1, max_step)))
        text = f"{a}-{b}" if step == 1 else f"{a}-{b}/{step}"
        if names and step == 1 and draw(st.booleans()):
            text = f"{names[a - low]}-{names[b - low]}"
        return text, _wrap_values(a, b, step, low, high)
    items = draw(st.lists(st.integers(low, high), min_size=1, max_size=5))
    return ",".join(map(str, items)), set(items)


MONTHS = ["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
DAYS = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


def quartz_weekday(d: date) -> int:
    return (d.weekday() + 1) % 7 + 1  # Monday=0 -> 2 ... Sunday=6 -> 1


DayPredicate = Callable[[date], bool]


class Spec(NamedTuple):
    """What a generated expression means, worked out by the generator."""

    secs: list[int]
    mins: list[int]
    hours: list[int]
    months: set[int]
    day_ok: DayPredicate
    years: set[int] | None


def nearest_weekday(year: int, month: int, n: int) -> int:
    """The weekday closest to day n without leaving the month (independent of the
    implementation's Saturday/Sunday case analysis)."""
    ndays = calendar.monthrange(year, month)[1]
    best = min((d for d in range(1, ndays + 1) if date(year, month, d).weekday() < 5), key=lambda d: (abs(d - n), d))
    return best


@st.composite
def day_rule(draw: st.DrawFn, specials: bool) -> tuple[str, str, DayPredicate]:
    """(dom text, dow text, predicate(date) -> bool)."""
    if draw(st.booleans()):
        if specials and draw(st.booleans()):
            # No 'W' here: Quartz's W depends on where its search starts (see
            # test_dialects_differ); the differential against Quartz's jars covers it.
            choice = draw(st.sampled_from(["L", "L-n"]))
            n = draw(st.integers(0, 30))
            w = draw(st.integers(1, 31))

            def last(d: date) -> int:
                return calendar.monthrange(d.year, d.month)[1]

            if choice == "L":
                return "L", "?", lambda d: d.day == last(d)
            if choice == "L-n":
                return f"L-{n}", "?", lambda d: d.day == last(d) - n
            if choice == "nW":
                return f"{w}W", "?", lambda d: w <= last(d) and d.day == nearest_weekday(d.year, d.month, w)
            if choice == "LW":
                return "LW", "?", lambda d: d.day == nearest_weekday(d.year, d.month, last(d))
            m = draw(st.integers(0, 5))
            return f"L-{m}W", "?", lambda d: d.day == nearest_weekday(d.year, d.month, last(d) - m)
        text, values = draw(field(1, 31))
        return text, "?", lambda d: d.day in values
    if specials and draw(st.booleans()):
        q = draw(st.integers(1, 7))
        name = draw(st.sampled_from([str(q), DAYS[q - 1]]))
        if draw(st.booleans()):
            return "?", f"{name}L", lambda d: quartz_weekday(d) == q and (d + timedelta(days=7)).month != d.month
        k = draw(st.integers(1, 5))
        return "?", f"{name}#{k}", lambda d: quartz_weekday(d) == q and (d.day - 1) // 7 + 1 == k
    text, values = draw(field(1, 7, DAYS))
    return "?", text, lambda d: quartz_weekday(d) in values


@st.composite
def expression(draw: st.DrawFn, specials: bool = False) -> tuple[str, Spec]:
    sec_t, secs = draw(field(0, 59))
    min_t, mins = draw(field(0, 59))
    hour_t, hours = draw(field(0, 23))
    mon_t, months = draw(field(1, 12, MONTHS))
    dom_t, dow_t, day_ok = draw(day_rule(specials))
    text = f"{sec_t} {min_t} {hour_t} {dom_t} {mon_t} {dow_t}"
    years: set[int] | None = None
    if draw(st.integers(0, 4)) == 0:
        a = draw(st.integers(2024, 2030))
        b = draw(st.integers(a, 2031))
        text += f" {a}-{b}"
        years = set(range(a, b + 1))
    spec = Spec(sorted(secs), sorted(mins), sorted(hours), months, day_ok, years)
    return text, spec


HORIZON_DAYS = 3 * 366


def reference_next(spec: Spec, t: datetime) -> datetime | None:
    """First matching UTC time strictly after t (whole seconds), within HORIZON_DAYS."""
    secs, mins, hours, months, day_ok, years = spec
    after = t.replace(microsecond=0)
    day = after.date()
    for _ in range(HORIZON_DAYS):
        if day.month in months and (years is None or day.year in years) and day_ok(day):
            for h in hours:
                if day == after.date() and h < after.hour:
                    continue
                for m in mins:
                    if day == after.date() and (h, m) < (after.hour, after.minute):
                        continue
                    for s in secs:
                        cand = datetime(day.year, day.month, day.day, h, m, s, tzinfo=UTC)
                        if cand > after:
                            return cand
        day += timedelta(days=1)
    return None


instants_2024_2030 = st.datetimes(
    min_value=datetime(2024, 1, 1), max_value=datetime(2030, 12, 31), timezones=st.just(UTC)
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression(specials=False), instants_2024_2030)
def test_matches_brute_force_reference(expr_spec: tuple[str, Spec], t: datetime) -> None:
    text, spec = expr_spec
    got = CronExpression(text, "UTC").next_after(t)
    want = reference_next(spec, t)
    if want is None:
        assert got is None or got > t + timedelta(days=HORIZON_DAYS - 1)
    else:
        assert got == want, text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression(specials=True), instants_2024_2030)
def test_special_days_match_reference(expr_spec: tuple[str, Spec], t: datetime) -> None:
    text, spec = expr_spec
    got = CronExpression(text, "UTC").next_after(t)
    want = reference_next(spec, t)
    if want is None:
        assert got is None or got > t + timedelta(days=HORIZON_DAYS - 1)
    else:
        assert got == want, text


ZONES = ["UTC", "Asia/Shanghai", "America/New_York", "Europe/Berlin", "Australia/Sydney", "Australia/Lord_Howe"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression(specials=True), st.sampled_from(ZONES), instants_2024_2030)
def test_successive_fires_strictly_increase(expr_spec: tuple[str, Spec], zone: str, t: datetime) -> None:
    text, _ = expr_spec
    e = CronExpression(text, zone)
    previous = t
    seen_walls: set[tuple[int, ...]] = set()
    for fire in e.iter_after(t, 8):
        assert fire.astimezone(UTC) > previous.astimezone(UTC)
        assert fire.microsecond == 0
        assert fire.tzinfo is e.tz
        wall = fire.timetuple()[:6]
        assert wall not in seen_walls  # each wall time fires at most once
        seen_walls.add(wall)
        # an existing wall time: it survives a round trip through UTC
        assert fire.astimezone(UTC).astimezone(e.tz).replace(tzinfo=None) == fire.replace(tzinfo=None)
        previous = fire


def wall_reference(e: CronExpression, spec: Spec, t: datetime) -> datetime | None:
    """Quartz's DST rule for zones whose clock changes are one whole hour on the hour:
    the first matching wall time at or after wall(floor(t) + 1 s) that exists, at its
    later (standard-time) instant when it is ambiguous."""
    secs, mins, hours, months, day_ok, years = spec
    start = (t.astimezone(UTC).replace(microsecond=0) + timedelta(seconds=1)).astimezone(e.tz).replace(tzinfo=None)
    day = start.date()
    for _ in range(HORIZON_DAYS):
        if day.month in months and (years is None or day.year in years) and day_ok(day):
            for h in hours:
                if day == start.date() and h < start.hour:
                    continue
                for m in mins:
                    if day == start.date() and (h, m) < (start.hour, start.minute):
                        continue
                    for s in secs:
                        wall = datetime(day.year, day.month, day.day, h, m, s)
                        if wall < start:
                            continue
                        aware = wall.replace(tzinfo=e.tz, fold=1)
                        if aware.astimezone(UTC).astimezone(e.tz).replace(tzinfo=None) != wall:
                            continue  # in a spring-forward gap
                        return aware
        day += timedelta(days=1)
    return None


@st.composite
def near_dst_change(draw: st.DrawFn) -> datetime:
    zone = draw(st.sampled_from([NEW_YORK, BERLIN]))
    year = draw(st.integers(2024, 2030))
    # the clock changes in March and in October/November; start up to two days before
    month = draw(st.sampled_from([3, 10, 11]))
    day = draw(st.integers(1, 31 if month != 11 else 30))
    base = datetime(year, month, day, tzinfo=zone)
    return base + timedelta(minutes=draw(st.integers(0, 48 * 60)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expression(specials=False), near_dst_change())
def test_dst_rule_matches_wall_clock_reference(expr_spec: tuple[str, Spec], t: datetime) -> None:
    text, spec = expr_spec
    e = CronExpression(text, t.tzinfo)  # type: ignore[arg-type]
    got = e.next_after(t)
    want = wall_reference(e, spec, t)
    if want is None:
        assert got is None or got > t + timedelta(days=HORIZON_DAYS - 1)
        return
    assert got is not None, text
    assert got.astimezone(UTC) == want.astimezone(UTC), text


@settings(max_examples=150, deadline=None)
@given(expression(specials=True))
def test_parse_is_stable(expr_spec: tuple[str, Spec]) -> None:
    text, _ = expr_spec
    validate(text)
    validate(text.lower())  # names and L/W are case-insensitive
    assert CronExpression(text.lower(), "UTC").next_after(datetime(2027, 1, 1, tzinfo=UTC)) == CronExpression(
        text, "UTC"
    ).next_after(datetime(2027, 1, 1, tzinfo=UTC))
