"""Row images of a binlog rows event, decoded by a per-table plan.

Why not `event.rows`: python-mysql-replication decodes every value through a chain of
generic calls (a type switch, `packet.read`, `struct.unpack`, a name lookup in the table
map) that costs ~3 us per value plus ~60 us per event; a bc_task update carries 46 values
(FULL before and after images), so the library alone tops out at ~7K row events/s on a
free core, below the 10K/s the change stream must apply. Everything else of the library
stays in use: the replication protocol, event framing, positions, TableMap parsing and the
table-id bookkeeping; only the bytes of the row images are read here.

A plan is built once per table id from the TableMap's columns: one small reader per
column (a bound `struct.Struct.unpack_from` for fixed widths), in column order. Values are
exactly what the library returns for the same bytes (same types, same edge cases: zero
dates as None, TIMESTAMP as naive UTC, DECIMAL via its string form, text decoded with the
column's charset, strict). Column types it does not cover (JSON, GEOMETRY, the pre-5.6
temporal formats, ...) and images that are not FULL make `plan_for` answer None, and the
caller falls back to the library for that table. `tests/integration/test_row_decoder.py`
checks the equality against the library on the real server, value by value.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable, Sequence
from typing import Any

from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.constants.BINLOG import (
    DELETE_ROWS_EVENT_V1,
    DELETE_ROWS_EVENT_V2,
    UPDATE_ROWS_EVENT_V1,
    UPDATE_ROWS_EVENT_V2,
    WRITE_ROWS_EVENT_V1,
    WRITE_ROWS_EVENT_V2,
)
from pymysqlreplication.row_event import RowsEvent

Reader = Callable[[bytes, int], tuple[Any, int]]
Image = dict[str, Any]

# the plain (non-partial, uncompressed) rows events whose layout this module reads
_PLAIN_EVENTS = frozenset(
    {
        WRITE_ROWS_EVENT_V1,
        WRITE_ROWS_EVENT_V2,
        UPDATE_ROWS_EVENT_V1,
        UPDATE_ROWS_EVENT_V2,
        DELETE_ROWS_EVENT_V1,
        DELETE_ROWS_EVENT_V2,
    }
)
_UTC_EPOCH = datetime.datetime(1970, 1, 1)
_DECIMAL_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes for 0..9 leftover decimal digits


def _fixed(fmt: str, size: int) -> Reader:
    unpack = struct.Struct(fmt).unpack_from

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return unpack(data, pos)[0], pos + size

    return read


def _int24(signed: bool) -> Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        v = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
        if signed and v >= 0x800000:
            v -= 0x1000000
        return v, pos + 3

    return read


def _be_signed(data: bytes, pos: int, size: int) -> int:
    return int.from_bytes(data[pos : pos + size], "big", signed=True)


def _text(length_size: int, encoding: str | None) -> Reader:
    """Length-prefixed bytes decoded as the library does: the column's charset, strict; a
    charset Python does not know leaves the bytes as they are."""
    length = {
        1: lambda d, p: d[p],
        2: lambda d, p: d[p] | (d[p + 1] << 8),
        3: lambda d, p: d[p] | (d[p + 1] << 8) | (d[p + 2] << 16),
        4: lambda d, p: int.from_bytes(d[p : p + 4], "little"),
    }[length_size]

    if encoding is None:

        def raw(data: bytes, pos: int) -> tuple[Any, int]:
            n = length(data, pos)
            start = pos + length_size
            # the library's b"".decode(<unknown codec>) returns "" (CPython decodes empty
            # bytes without looking the codec up): an empty binary value is "" there too
            return (bytes(data[start : start + n]) if n else ""), start + n

        return raw

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        n = length(data, pos)
        start = pos + length_size
        return data[start : start + n].decode(encoding), start + n

    return read


def _fsp_reader(fsp: int) -> tuple[int, Callable[[bytes, int], int]]:
    """Bytes of the fractional seconds and their microseconds (the library's __read_fsp)."""
    size = (fsp + 1) // 2
    if size == 0:
        return 0, lambda d, p: 0
    scale = 10 ** (6 - fsp)

    def micro(data: bytes, pos: int) -> int:
        v = _be_signed(data, pos, size)
        if fsp % 2:
            v = int(v / 10)
        return v * scale

    return size, micro


def _with_fraction(width: int, whole: Callable[[bytes, int], datetime.datetime | None], fsp: int) -> Reader:
    """A DATETIME2 / TIMESTAMP2 value: `width` bytes of whole seconds, then the fraction
    (added only when > 0, as the library does; an invalid date is None, fraction skipped)."""
    size, micro = _fsp_reader(fsp)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        t = whole(data, pos)
        if t is None:
            return None, pos + width + size
        us = micro(data, pos + width)
        return (t.replace(microsecond=us) if us > 0 else t), pos + width + size

    return read


def _datetime2_whole(data: bytes, pos: int) -> datetime.datetime | None:
    v = int.from_bytes(data[pos : pos + 5], "big")
    ym = (v >> 22) & 0x1FFFF
    try:
        return datetime.datetime(ym // 13, ym % 13, (v >> 17) & 0x1F, (v >> 12) & 0x1F, (v >> 6) & 0x3F, v & 0x3F)
    except ValueError:  # a zero or invalid date: None, as the library
        return None


def _timestamp2_whole(data: bytes, pos: int) -> datetime.datetime:
    return _UTC_EPOCH + datetime.timedelta(seconds=_be_signed(data, pos, 4))


def _time2(fsp: int) -> Reader:
    size, micro = _fsp_reader(fsp)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        v = _be_signed(data, pos, 3)
        sign = 1 if (v >> 23) & 1 else -1
        if sign == -1:
            v = ~v + 1
        t = (
            datetime.timedelta(
                hours=(v >> 12) & 0x3FF, minutes=(v >> 6) & 0x3F, seconds=v & 0x3F, microseconds=micro(data, pos + 3)
            )
            * sign
        )
        return t, pos + 3 + size

    return read


def _date(data: bytes, pos: int) -> tuple[Any, int]:
    v = data[pos] | (data[pos + 1] << 8) | (data[pos + 2] << 16)
    year, month, day = (v >> 9) & 0x7FFF, (v >> 5) & 0xF, v & 0x1F
    if v == 0 or year == 0 or month == 0 or day == 0:
        return None, pos + 3
    return datetime.date(year, month, day), pos + 3


def _decimal(precision: int, decimals: int) -> Reader:
    """MySQL's packed DECIMAL, rebuilt through the same string as the library's."""
    integral = precision - decimals
    whole_int, rest_int = divmod(integral, 9)
    whole_frac, rest_frac = divmod(decimals, 9)
    head, tail = _DECIMAL_BYTES[rest_int], _DECIMAL_BYTES[rest_frac]
    size = head + 4 * (whole_int + whole_frac) + tail

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        buf = bytearray(data[pos : pos + size])
        positive = bool(buf[0] & 0x80)
        mask = 0 if positive else -1
        buf[0] ^= 0x80
        parts = [] if positive else ["-"]
        at = 0
        if head:
            parts.append(str(int.from_bytes(buf[:head], "big", signed=True) ^ mask))
            at = head
        for _ in range(whole_int):
            parts.append(f"{int.from_bytes(buf[at : at + 4], 'big', signed=True) ^ mask:09d}")
            at += 4
        parts.append(".")
        for _ in range(whole_frac):
            parts.append(f"{int.from_bytes(buf[at : at + 4], 'big', signed=True) ^ mask:09d}")
            at += 4
        if tail:
            parts.append(f"{int.from_bytes(buf[at : at + tail], 'big', signed=True) ^ mask:0{rest_frac}d}")
        return decimal.Decimal("".join(parts)), pos + size

    return read


def _uint_le(size: int) -> Callable[[bytes, int], int]:
    return lambda d, p: int.from_bytes(d[p : p + size], "little")


def _enum(size: int, values: Sequence[str] | None) -> Reader:
    number = _uint_le(size)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        return (values[number(data, pos)] if values else None), pos + size

    return read


def _set(size: int, values: Sequence[str] | None) -> Reader:
    number = _uint_le(size)

    def read(data: bytes, pos: int) -> tuple[Any, int]:
        mask = number(data, pos)
        chosen = {v for i, v in enumerate(values or ()) if mask & (1 << i)}
        return (chosen or None), pos + size

    return read


def _bit(bits: int, nbytes: int) -> Reader:
    def read(data: bytes, pos: int) -> tuple[Any, int]:
        out = []
        for i in range(nbytes):
            byte = data[pos + i]
            end = (bits if nbytes == 1 else (bits % 8 or 8)) if i == 0 else 8
            out.append("".join("1" if byte & (1 << b) else "0" for b in range(end))[::-1])
        return "".join(out), pos + nbytes

    return read


def _encoding(column: Any) -> str | None:
    """The Python codec the library decodes this column's text with; None: bytes kept."""
    name = column.character_set_name
    if name is None:
        return "utf-8"
    encoding = RowsEvent.charset_to_encoding(name)
    try:
        "".encode(encoding)
    except LookupError:
        return None
    return str(encoding)


def column_reader(column: Any) -> Reader | None:
    """The reader for one TableMap column, or None for a type this module does not cover."""
    t = column.type
    unsigned = bool(column.unsigned)
    if t == FIELD_TYPE.TINY:
        return _fixed("<B" if unsigned else "<b", 1)
    if t == FIELD_TYPE.SHORT:
        return _fixed("<H" if unsigned else "<h", 2)
    if t == FIELD_TYPE.INT24:
        return _int24(not unsigned)
    if t == FIELD_TYPE.LONG:
        return _fixed("<I" if unsigned else "<i", 4)
    if t == FIELD_TYPE.LONGLONG:
        return _fixed("<Q" if unsigned else "<q", 8)
    if t == FIELD_TYPE.FLOAT:
        return _fixed("<f", 4)
    if t == FIELD_TYPE.DOUBLE:
        return _fixed("<d", 8)
    if t in (FIELD_TYPE.VARCHAR, FIELD_TYPE.STRING):
        return _text(2 if column.max_length > 255 else 1, _encoding(column))
    if t == FIELD_TYPE.BLOB:
        return _text(column.length_size, _encoding(column)) if column.length_size in (1, 2, 3, 4) else None
    if t == FIELD_TYPE.DATETIME2:
        return _with_fraction(5, _datetime2_whole, column.fsp)
    if t == FIELD_TYPE.TIMESTAMP2:
        return _with_fraction(4, _timestamp2_whole, column.fsp)
    if t == FIELD_TYPE.TIME2:
        return _time2(column.fsp)
    if t == FIELD_TYPE.DATE:
        return _date
    if t == FIELD_TYPE.NEWDECIMAL:
        return _decimal(column.precision, column.decimals)
    if t == FIELD_TYPE.YEAR:
        return lambda d, p: (d[p] + 1900, p + 1)
    if t == FIELD_TYPE.ENUM:
        return _enum(column.size, column.enum_values)
    if t == FIELD_TYPE.SET:
        return _set(column.size, column.set_values)
    if t == FIELD_TYPE.BIT:
        return _bit(column.bits, column.bytes)
    return None  # JSON, GEOMETRY, VAR_STRING, the old DATETIME/TIME/TIMESTAMP: the library's


class RowPlan:
    """How to read one row image of one table id: (name, reader) per column, in order."""

    __slots__ = ("columns", "nulls")

    def __init__(self, columns: Sequence[tuple[str, Reader]]) -> None:
        self.columns = tuple(columns)
        self.nulls = (len(self.columns) + 7) // 8

    def image(self, data: bytes, pos: int) -> tuple[Image, int]:
        """One FULL row image at `pos`: its null bitmap, then every non-NULL value."""
        nulls = int.from_bytes(data[pos : pos + self.nulls], "little")
        pos += self.nulls
        out: Image = {}
        bit = 1
        for name, read in self.columns:
            if nulls & bit:
                out[name] = None
            else:
                out[name], pos = read(data, pos)
            bit <<= 1
        return out, pos


def plan_for(columns: Sequence[Any]) -> RowPlan | None:
    """A plan for a TableMap's columns; None when a column's type is not covered here, or a
    column has no name (binlog_row_metadata is not FULL: the stream refuses those anyway)."""
    plan = []
    for column in columns:
        read = column_reader(column)
        if read is None or not column.name:
            return None
        plan.append((str(column.name), read))
    return RowPlan(plan)


def _full(bitmap: bytes, n: int) -> bool:
    return int.from_bytes(bitmap, "little") == (1 << n) - 1


def event_images(event: Any, plan: RowPlan) -> list[tuple[Image | None, Image | None]] | None:
    """(before, after) per row of a rows event, read from the event's unread bytes; None when
    this event is not one the plan can read (partial JSON, compressed, MINIMAL images, bytes
    already buffered by the library): the caller uses `event.rows` for it."""
    if event.event_type not in _PLAIN_EVENTS or not getattr(event, "complete", True):
        return None
    wrapper = event.packet
    if getattr(wrapper, "_BinLogPacketWrapper__data_buffer", b""):
        return None
    n = len(plan.columns)
    if event.number_of_columns != n or not _full(event.columns_present_bitmap, n):
        return None
    update = event.event_type in (UPDATE_ROWS_EVENT_V1, UPDATE_ROWS_EVENT_V2)
    if update and not _full(event.columns_present_bitmap2, n):
        return None
    raw = wrapper.packet  # PyMySQL's packet: the whole event body and where the library stopped
    data, pos = raw._data, raw._position
    end = pos + (event.event_size - wrapper.read_bytes)
    out: list[tuple[Image | None, Image | None]] = []
    image = plan.image
    write = event.event_type in (WRITE_ROWS_EVENT_V1, WRITE_ROWS_EVENT_V2)
    while pos < end:
        first, pos = image(data, pos)
        if update:
            second, pos = image(data, pos)
            out.append((first, second))
        elif write:
            out.append((None, first))
        else:
            out.append((first, None))
    if pos != end:
        raise ValueError(
            f"row images of {event.schema}.{event.table} ended at byte {pos - end:+d} from the event's end: "
            "the table map does not describe these rows"
        )
    return out
