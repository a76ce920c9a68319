"""Job rows read from the driver (MySQL-compatible servers): the DATETIME decoder used
for the read gives exactly what PyMySQL's own gives, and is the connection's only during
the read."""

from __future__ import annotations

from typing import Any

import pytest
from pymysql.constants import FIELD_TYPE
from pymysql.converters import convert_datetime

from dbkit.fastpath import _datetime, _fast_datetimes


@pytest.mark.parametrize(
    "text",
    [
        "2026-12-04 10:00:00",
        "2026-12-04T10:00:00",
        "2026-12-04 10:00:00.123456",
        "2026-12-04 10:00:00.123",
        "0000-00-00 00:00:00",
        "2026-02-31 10:00:00",
        "2026-12-04 24:00:00",
        "2026-12-04 10:00+08:00",
        "1000-01-01 00:00:00",
        "9999-12-31 23:59:59.999999",
        "2026-12-04",
    ],
)
def test_the_read_decodes_datetimes_as_the_driver_does(text: str) -> None:
    got, want = _datetime(text), convert_datetime(text)
    assert got == want and type(got) is type(want)


class _Conn:
    def __init__(self, decoders: dict[int, Any]) -> None:
        self.decoders = decoders


def test_the_decoder_is_swapped_only_for_the_read() -> None:
    conn = _Conn({FIELD_TYPE.DATETIME: convert_datetime, FIELD_TYPE.TIMESTAMP: convert_datetime})
    with _fast_datetimes(conn):
        assert conn.decoders[FIELD_TYPE.DATETIME] is _datetime
    assert conn.decoders == {FIELD_TYPE.DATETIME: convert_datetime, FIELD_TYPE.TIMESTAMP: convert_datetime}


def test_a_customised_decoder_is_left_alone() -> None:
    mine = str
    conn = _Conn({FIELD_TYPE.DATETIME: mine, FIELD_TYPE.TIMESTAMP: convert_datetime})
    with _fast_datetimes(conn):
        assert conn.decoders[FIELD_TYPE.DATETIME] is mine
