"""scheduler_core.times is the one owner of aware datetimes <-> epoch ms (issue 20 item 5)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

import dualrun.model
import readers.timezones
from scheduler_core.times import duration_ms, from_ms, require_aware, to_ms


def test_duration_ms_is_exact_where_float_seconds_are_not() -> None:
    # 1001 ms as float seconds times 1000 is 1000.999..., which int() cut to 1000
    assert int(timedelta(milliseconds=1001).total_seconds() * 1000) == 1000
    assert duration_ms(timedelta(milliseconds=1001)) == 1001
    assert [duration_ms(timedelta(milliseconds=m)) for m in range(5000)] == list(range(5000))
    assert duration_ms(timedelta(days=400, microseconds=999)) == 400 * 86_400_000


@pytest.mark.parametrize("check", [require_aware, readers.timezones.require_aware], ids=["core", "readers"])
def test_require_aware_has_one_owner_on_each_side_of_the_readers_boundary(check: object) -> None:
    # dual-run and the rest share the core's; readers import nothing of ours (DESIGN's
    # dependency rule), so theirs is a copy that must say the same
    assert dualrun.model.require_aware is require_aware
    assert callable(check)
    naive = datetime(2026, 1, 2, 3, 4, 5)
    with pytest.raises(ValueError, match=r"^start must be an aware datetime, got naive 2026-01-02T03:04:05$"):
        check(naive, "start")
    aware = naive.replace(tzinfo=timezone.utc)
    assert check(aware, "start") is aware


def test_ms_round_trip() -> None:
    at = datetime(2026, 12, 5, 6, 7, 8, 123000, tzinfo=timezone.utc)
    assert from_ms(to_ms(at)) == at
    with pytest.raises(ValueError, match="datetime must be an aware datetime"):
        to_ms(at.replace(tzinfo=None))
