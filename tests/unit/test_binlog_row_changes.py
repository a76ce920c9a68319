"""BinlogChangeStream's row decoding, fed library events built by hand (no server): the
per-table-id metadata (column names present, TIMESTAMP columns) is checked once per id and
forgotten when table ids may have changed meaning (a real rotation, a new reader)."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace
from typing import Any

import pytest
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import RotateEvent
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from readers.records import ChangeOp, StreamPosition
from readers.streams import BinlogChangeStream, StreamError
from readers.streams.binlog import _Tx


def _stream() -> BinlogChangeStream:
    s = BinlogChangeStream(
        {"host": "127.0.0.1", "port": 1, "user": "u", "password": "p"},
        server_id=1,
        schemas=["s"],
        tables=["t"],
        start=StreamPosition("bin.000001", 4),
    )
    # these events carry decoded rows and no packet bytes: the library's path (the row
    # decoder is checked against real binlog bytes in tests/integration/test_row_decoder.py)
    s.fast_rows = False
    return s


def _event(cls: type[Any], table_id: int, columns: list[tuple[str | None, int]], rows: list[dict[str, Any]]) -> Any:
    ev = cls.__new__(cls)  # type: ignore[call-overload]  # the library builds them from packets; only what the stream reads is set
    ev.schema, ev.table, ev.table_id = "s", "t", table_id
    ev.columns = [SimpleNamespace(name=n, type=t) for n, t in columns]
    ev._RowsEvent__rows = rows
    return ev


COLS: list[tuple[str | None, int]] = [
    ("id", FIELD_TYPE.LONGLONG),
    ("at", FIELD_TYPE.TIMESTAMP2),
    ("wall", FIELD_TYPE.DATETIME2),
]
NAIVE = datetime(2026, 12, 3, 8, 0, 0)


def test_images_are_handed_on_with_timestamps_marked_utc_and_datetimes_left_naive() -> None:
    s = _stream()
    ins = _event(WriteRowsEvent, 7, COLS, [{"values": {"id": 1, "at": NAIVE, "wall": NAIVE}}])
    upd = _event(
        UpdateRowsEvent,
        7,
        COLS,
        [
            {
                "before_values": {"id": 1, "at": NAIVE, "wall": NAIVE},
                "after_values": {"id": 1, "at": None, "wall": NAIVE},
            }
        ],
    )
    dele = _event(DeleteRowsEvent, 7, COLS, [{"values": {"id": 1, "at": NAIVE, "wall": NAIVE}}])
    changes = [*s._row_changes(ins), *s._row_changes(upd), *s._row_changes(dele)]
    assert [c.op for c in changes] == [ChangeOp.INSERT, ChangeOp.UPDATE, ChangeOp.DELETE]
    assert changes[0].before is None and changes[2].after is None
    assert changes[0].after == {"id": 1, "at": NAIVE.replace(tzinfo=timezone.utc), "wall": NAIVE}
    assert changes[1].before is not None and changes[1].before["at"] == NAIVE.replace(tzinfo=timezone.utc)
    assert changes[1].after == {"id": 1, "at": None, "wall": NAIVE}
    assert changes[2].before is not None and changes[2].before["wall"].tzinfo is None


def test_a_table_without_column_names_is_refused() -> None:
    s = _stream()
    ev = _event(
        WriteRowsEvent,
        8,
        [("id", FIELD_TYPE.LONGLONG), (None, FIELD_TYPE.LONG)],
        [{"values": {"id": 1, "UNKNOWN_COL1": 2}}],
    )
    with pytest.raises(StreamError, match="binlog_row_metadata=FULL"):
        s._row_changes(ev)


def _rotate(timestamp: int) -> Any:
    ev = RotateEvent.__new__(RotateEvent)
    ev.timestamp, ev.next_binlog, ev.position = timestamp, "bin.000002", 4
    return ev


@pytest.mark.parametrize("rotation_timestamp, forgotten", [(1_700_000_000, True), (0, False)])
def test_a_real_rotation_forgets_what_table_ids_meant(rotation_timestamp: int, forgotten: bool) -> None:
    """After a server restart (which rotates) an id may name another table: the TIMESTAMP
    columns of id 7 must then be read from the new events, not the old cache. The rotation
    sent at connect (timestamp 0) keeps the cache."""
    s = _stream()
    s._row_changes(_event(WriteRowsEvent, 7, COLS, [{"values": {"id": 1, "at": NAIVE, "wall": NAIVE}}]))
    s._handle(_rotate(rotation_timestamp), _Tx())
    # id 7 now names a table whose TIMESTAMP column is `wall`
    other: list[tuple[str | None, int]] = [
        ("id", FIELD_TYPE.LONGLONG),
        ("at", FIELD_TYPE.DATETIME2),
        ("wall", FIELD_TYPE.TIMESTAMP2),
    ]
    (ch,) = s._row_changes(_event(WriteRowsEvent, 7, other, [{"values": {"id": 2, "at": NAIVE, "wall": NAIVE}}]))
    assert ch.after is not None
    if forgotten:
        assert ch.after["wall"].tzinfo is timezone.utc and ch.after["at"].tzinfo is None
    else:
        assert ch.after["at"].tzinfo is timezone.utc and ch.after["wall"].tzinfo is None


def test_a_new_reader_forgets_what_table_ids_meant() -> None:
    """A reconnect opens a new reader (maybe to a restarted server): the cache goes with the old one."""
    s = _stream()
    s._row_changes(_event(WriteRowsEvent, 7, COLS, [{"values": {"id": 1, "at": NAIVE, "wall": NAIVE}}]))
    s._open(StreamPosition("bin.000001", 4))  # builds the library's reader; it connects on its first read only
    try:
        other: list[tuple[str | None, int]] = [
            ("id", FIELD_TYPE.LONGLONG),
            ("at", FIELD_TYPE.DATETIME2),
            ("wall", FIELD_TYPE.TIMESTAMP2),
        ]
        (ch,) = s._row_changes(_event(WriteRowsEvent, 7, other, [{"values": {"id": 2, "at": NAIVE, "wall": NAIVE}}]))
    finally:
        s.close()
    assert ch.after is not None and ch.after["wall"].tzinfo is timezone.utc and ch.after["at"].tzinfo is None


def test_a_row_decoder_failure_hands_the_table_to_the_library(monkeypatch: Any, caplog: Any) -> None:
    """A plan that cannot read an event's bytes must not stop the stream: the library
    decodes that event and every later one of the table, and the log says so once."""
    import readers.streams.binlog as binlog

    s = _stream()
    s.fast_rows = True
    calls = []

    def broken(event: Any, plan: Any) -> Any:
        calls.append(event)
        raise ValueError("row images ended at byte +3 from the event's end")

    monkeypatch.setattr(binlog, "event_images", broken)
    cols = [SimpleNamespace(name="id", type=FIELD_TYPE.LONGLONG, unsigned=False)]
    first = _event(WriteRowsEvent, 9, [], [{"values": {"id": 1}}])
    first.columns = cols
    second = _event(WriteRowsEvent, 9, [], [{"values": {"id": 2}}])
    second.columns = cols
    with caplog.at_level("ERROR", logger="readers.streams.binlog"):
        (a,) = s._row_changes(first)
        (b,) = s._row_changes(second)
    assert (a.after, b.after) == ({"id": 1}, {"id": 2})
    assert len(calls) == 1 and s.library_rows == 2
    assert sum("row decoder failed on s.t" in r.getMessage() for r in caplog.records) == 1
