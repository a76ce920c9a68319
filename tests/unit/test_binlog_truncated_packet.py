"""A binlog packet cut short (the server died while sending it: a restart) makes pymysql's
packet reader raise AssertionError. The stream must reconnect from its checkpoint as on any
lost connection; the chaos soak saw `migrate stream` exit 1 on it."""

from __future__ import annotations

import pytest

from readers.streams import binlog


class _CutShort:
    def fetchone(self) -> object:
        raise AssertionError("Result length not requested length:\nExpected=4.  Actual=1.")


def test_a_truncated_packet_is_a_lost_connection_not_a_crash() -> None:
    stream = object.__new__(binlog.BinlogChangeStream)
    stream._reader = _CutShort()  # type: ignore[assignment]
    with pytest.raises(binlog._Reconnect, match="a truncated packet"):
        stream._fetch()
