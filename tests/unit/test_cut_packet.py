"""A packet cut short (PyMySQL's bare AssertionError, a server restarting mid-packet) is
a lost connection at the store's boundary too (the fast path's own cursor raises past
SQLAlchemy); any other assertion stays what it is."""

from __future__ import annotations

import pytest

from dbkit.errors import StoreUnavailable
from dbkit.translate import lost_in_cut_packet, store_errors, translated


def _cut() -> None:
    raise AssertionError("Result length not requested length:\nExpected=4.  Actual=1.  Position: 0.")


def test_a_cut_packet_leaves_the_store_as_unreachable() -> None:
    with pytest.raises(StoreUnavailable, match="2013"):
        translated(_cut)()
    with pytest.raises(StoreUnavailable), store_errors():
        _cut()


def test_any_other_assertion_is_left_alone() -> None:
    def wrong() -> None:
        raise AssertionError("an invariant of ours")

    with pytest.raises(AssertionError, match="invariant"):
        translated(wrong)()
    assert lost_in_cut_packet(AssertionError()) is None
    assert lost_in_cut_packet(ValueError("Result length not requested length")) is None
