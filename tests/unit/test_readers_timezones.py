"""readers.timezones: the one place legacy wall-clock times become aware UTC."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from readers.timezones import (
    LegacyTimeError,
    LegacyTimeZone,
    WallTimeKind,
    from_epoch_ms,
    parse_wall,
    to_epoch_ms,
)

UTC = timezone.utc
SHANGHAI = LegacyTimeZone("Asia/Shanghai")


@pytest.mark.parametrize(
    "stored",
    ["2026-12-02 08:00:00", datetime(2026, 12, 2, 8, 0, 0), b"2026-12-02 08:00:00", "2026-12-02 08:00:00.000000"],
)
def test_shanghai_wall_time_becomes_utc_exactly(stored: object) -> None:
    assert SHANGHAI.to_utc(stored) == datetime(2026, 12, 2, 0, 0, tzinfo=UTC)  # type: ignore[arg-type]


def test_milliseconds_survive_conversion() -> None:
    assert SHANGHAI.to_utc("2026-12-02 08:00:00.250") == datetime(2026, 12, 2, 0, 0, 0, 250_000, tzinfo=UTC)


def test_to_wall_is_the_inverse_for_queries() -> None:
    assert SHANGHAI.to_wall(datetime(2026, 12, 2, 0, 0, tzinfo=UTC)) == datetime(2026, 12, 2, 8, 0)


def test_a_time_in_the_1986_spring_gap_is_read_with_the_offset_before_the_jump() -> None:
    # Given Shanghai's clocks jumped 1986-05-04 02:00 -> 03:00, 02:30 never happened there
    wall = datetime(1986, 5, 4, 2, 30)
    assert SHANGHAI.kind(wall) is WallTimeKind.GAP
    # Then fold=0 reads it at +08:00: shifted forward by the gap (= 03:30 summer time)
    assert SHANGHAI.to_utc(wall) == datetime(1986, 5, 3, 18, 30, tzinfo=UTC)


def test_a_time_in_the_1986_autumn_overlap_is_the_earlier_instant() -> None:
    # Given clocks went back 1986-09-14 02:00 -> 01:00, 01:30 happened twice
    wall = datetime(1986, 9, 14, 1, 30)
    assert SHANGHAI.kind(wall) is WallTimeKind.OVERLAP
    # Then fold=0 takes the first one, still on summer time (+09:00)
    assert SHANGHAI.to_utc(wall) == datetime(1986, 9, 13, 16, 30, tzinfo=UTC)


def test_ordinary_times_are_normal() -> None:
    assert SHANGHAI.kind(datetime(2026, 12, 2, 8, 0)) is WallTimeKind.NORMAL


@pytest.mark.parametrize(
    "stored",
    ["1969-12-31 23:59:59", "1970-01-01 07:59:59", "2101-01-01 08:00:00", "2150-01-01 00:00:00"],
)
def test_out_of_range_times_raise_a_legacy_time_error(stored: str) -> None:
    with pytest.raises(LegacyTimeError, match="out of range"):
        SHANGHAI.to_utc(stored)


def test_the_range_edges_are_inclusive_then_exclusive() -> None:
    assert SHANGHAI.to_utc("1970-01-01 08:00:00") == datetime(1970, 1, 1, tzinfo=UTC)
    assert SHANGHAI.to_utc("2101-01-01 07:59:59") == datetime(2100, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize("stored", ["0000-00-00 00:00:00", "yesterday", ""])
def test_values_that_are_not_dates_raise_a_legacy_time_error(stored: str) -> None:
    with pytest.raises(LegacyTimeError, match="not a date-time"):
        SHANGHAI.to_utc(stored)


def test_aware_values_are_refused_as_wall_times() -> None:
    with pytest.raises(LegacyTimeError):
        parse_wall(datetime(2026, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError):
        SHANGHAI.to_wall(datetime(2026, 1, 1))


def test_epoch_ms_round_trip_and_range() -> None:
    at = datetime(2026, 12, 2, 0, 0, 0, 123_000, tzinfo=UTC)
    assert from_epoch_ms(to_epoch_ms(at)) == at
    assert from_epoch_ms(0) == datetime(1970, 1, 1, tzinfo=UTC)
    for bad in (-1, 9_999_999_999_999, 10**30):
        with pytest.raises(LegacyTimeError, match="out of range"):
            from_epoch_ms(bad)


def test_unknown_zone_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown time zone"):
        LegacyTimeZone("Mars/Olympus")


def test_the_zone_is_configurable() -> None:
    assert LegacyTimeZone("UTC").to_utc("2026-12-02 08:00:00") == datetime(2026, 12, 2, 8, tzinfo=UTC)
    # New York in the 2025 fall-back overlap: fold=0 is EDT
    ny = LegacyTimeZone("America/New_York")
    assert ny.to_utc("2025-11-02 01:30:00") == datetime(2025, 11, 2, 5, 30, tzinfo=UTC)


@settings(deadline=None)  # pure arithmetic: a loaded CI box must not make it flaky
@given(st.datetimes(min_value=datetime(1992, 1, 1), max_value=datetime(2100, 12, 30)))
def test_wall_and_utc_round_trip_in_shanghai_since_its_last_dst(wall: datetime) -> None:
    at = SHANGHAI.to_utc(wall)
    assert at.tzinfo is UTC
    assert SHANGHAI.to_wall(at) == wall
    assert at - wall.replace(tzinfo=UTC) == -timedelta(hours=8)
