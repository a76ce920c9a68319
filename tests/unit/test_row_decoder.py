"""The row decoder's refusals: what it does not cover goes to the library (the values it
reads are checked against the library on real binlog bytes in
tests/integration/test_row_decoder.py)."""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.constants import BINLOG, FIELD_TYPE

from readers.streams.row_decoder import event_images, plan_for


def _col(name: str | None, t: int, **meta: Any) -> Any:
    return SimpleNamespace(name=name, type=t, unsigned=False, character_set_name=None, **meta)


COLS = [_col("id", FIELD_TYPE.LONG), _col("v", FIELD_TYPE.VARCHAR, max_length=40)]


def _event(event_type: int, present: bytes, body: bytes, present2: bytes | None = None) -> Any:
    raw = SimpleNamespace(_data=body, _position=0)
    wrapper = SimpleNamespace(packet=raw, read_bytes=0)
    return SimpleNamespace(
        event_type=event_type,
        complete=True,
        packet=wrapper,
        number_of_columns=2,
        columns_present_bitmap=present,
        columns_present_bitmap2=present2 or present,
        event_size=len(body),
        schema="s",
        table="t",
    )


def test_uncovered_types_and_nameless_columns_have_no_plan() -> None:
    assert plan_for([COLS[0], _col("g", FIELD_TYPE.GEOMETRY, length_size=4)]) is None
    assert plan_for([COLS[0], _col("j", FIELD_TYPE.JSON, length_size=4)]) is None  # MySQL's binary JSON
    assert plan_for([COLS[0], _col(None, FIELD_TYPE.LONG)]) is None
    assert plan_for(COLS) is not None


def test_full_images_are_read_and_a_null_is_none() -> None:
    plan = plan_for(COLS)
    assert plan is not None
    body = bytes([0b00]) + (7).to_bytes(4, "little") + bytes([2]) + b"hi" + bytes([0b10]) + (8).to_bytes(4, "little")
    assert event_images(_event(BINLOG.WRITE_ROWS_EVENT_V1, b"\x03", body), plan) == [
        (None, {"id": 7, "v": "hi"}),
        (None, {"id": 8, "v": None}),
    ]


def test_minimal_images_partial_events_and_buffered_bytes_go_to_the_library() -> None:
    plan = plan_for(COLS)
    assert plan is not None
    body = bytes([0]) + (7).to_bytes(4, "little")
    assert event_images(_event(BINLOG.WRITE_ROWS_EVENT_V1, b"\x01", body), plan) is None  # MINIMAL: v absent
    assert event_images(_event(BINLOG.UPDATE_ROWS_EVENT_V1, b"\x03", body, b"\x01"), plan) is None
    assert event_images(_event(BINLOG.PARTIAL_UPDATE_ROWS_EVENT, b"\x03", body), plan) is None
    ev = _event(BINLOG.WRITE_ROWS_EVENT_V1, b"\x03", body)
    ev.packet._BinLogPacketWrapper__data_buffer = b"\x00"  # the library pushed a byte back
    assert event_images(ev, plan) is None


def test_images_that_do_not_fit_the_event_are_an_error() -> None:
    plan = plan_for(COLS)
    assert plan is not None
    body = bytes([0]) + (7).to_bytes(4, "little") + bytes([2]) + b"hi" + b"\x00"  # one stray byte
    with pytest.raises((ValueError, IndexError, struct.error)):  # the stream then hands the table to the library
        event_images(_event(BINLOG.WRITE_ROWS_EVENT_V1, b"\x03", body), plan)
