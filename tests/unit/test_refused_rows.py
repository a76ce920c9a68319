"""A chunk the store refuses for one row's value (issue 30): written in halves down to the
refused rows, which are quarantined with the column the server named and its words; the
others land; anything but a value refusal, or a refusal of a write that is not a legacy
row's, still raises. The store is a fake that refuses any statement holding a marked row."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pymysql
import pytest
from sqlalchemy.exc import DataError, OperationalError

from dbkit.translate import as_store_error
from migrator.ledger_hash import HALF, source_half
from migrator.mapping import Mapped
from migrator.model import Action
from migrator.refused_rows import UNKNOWN_FIELD, write_or_quarantine
from migrator.target import Rendered, Write
from scheduler_core.errors import StoreUnavailable, StoreValueRefused

MARIADB_1366 = "Incorrect string value: '\\xF0\\x9F\\x9A\\x80' for column `store`.`dus_job`.`params` at row 2"
MYSQL_1406 = "Data too long for column 'handler' at row 1"


def _put(key: str, action: Action = Action.CREATE) -> Write:
    return Write(
        action=action,
        source="xxl-job",
        source_key=key,
        biz_code="app",
        mapped=cast(Mapped, object()),
        raw={"id": key, "executor_param": "emoji=🚀"},
        content_hash="h" * 2 * HALF,
    )


class RefusingStore:
    """Applies writes in one transaction each call; refuses (as PyMySQL does, past
    SQLAlchemy on the fast path) any call holding a put of a refused key, and, when
    `ledger_refuses`, a quarantine carrying an excerpt."""

    def __init__(self, refused: dict[str, str], *, ledger_refuses: bool = False) -> None:
        self.refused = refused
        self.ledger_refuses = ledger_refuses
        self.calls: list[list[str]] = []
        self.landed: dict[str, Write] = {}

    def apply(self, writes: Sequence[Write], rendered: Rendered | None) -> int:
        self.calls.append([w.source_key for w in writes])
        for w in writes:
            if w.action is not Action.QUARANTINE and w.source_key in self.refused:
                raise pymysql.err.DataError(1366, self.refused[w.source_key])
            if w.action is Action.QUARANTINE and self.ledger_refuses and w.raw is not None:
                raise DataError("INSERT", {}, pymysql.err.DataError(1366, "for column 'raw_excerpt'"))
        self.landed.update({w.source_key: w for w in writes})  # only a whole call lands
        return len(writes)


def test_one_refused_row_is_quarantined_with_its_column_and_the_rest_lands() -> None:
    store = RefusingStore({"5": MARIADB_1366})
    writes = [_put(str(i)) for i in range(8)]
    written, refused = write_or_quarantine(store.apply, writes, None)
    assert [r.write.source_key for r in refused] == ["5"]
    q = refused[0].quarantine
    assert (q.action, q.field, q.mapped, q.source_key) == (Action.QUARANTINE, "params", None, "5")
    # the server's words as it said them (not the driver's tuple with its escapes doubled)
    assert q.reason is not None and q.reason.startswith(
        f"the store cannot hold this value in dus_job.params ({MARIADB_1366} (error 1366))"
    )
    assert q.raw == writes[5].raw  # the row's excerpt goes to the ledger
    # no source half: the next run reads and maps the row again
    assert source_half(q.content_hash) == "-" * HALF
    assert {k: w.action for k, w in store.landed.items()} == {
        **{str(i): Action.CREATE for i in range(8) if i != 5},
        "5": Action.QUARANTINE,
    }
    assert written == 8
    # halves, not a transaction per row: the whole, 2 halves, 2 quarters, 2 eighths, the quarantine
    assert len(store.calls) == 1 + 2 + 2 + 2 + 1


def test_a_column_named_the_mysql_way_and_no_column_at_all() -> None:
    store = RefusingStore({"a": MYSQL_1406, "b": "Out of range value"})
    _, refused = write_or_quarantine(store.apply, [_put("a"), _put("b"), _put("c")], None)
    assert {r.write.source_key: r.quarantine.field for r in refused} == {"a": "handler", "b": UNKNOWN_FIELD}


def test_a_ledger_that_cannot_hold_the_excerpt_still_records_the_row_field_and_reason() -> None:
    store = RefusingStore({"1": MARIADB_1366}, ledger_refuses=True)
    written, refused = write_or_quarantine(store.apply, [_put("0"), _put("1")], None)
    assert written == 2
    q = store.landed["1"]
    assert (q.action, q.field, q.raw) == (Action.QUARANTINE, "params", None)
    assert refused[0].quarantine == q


def test_a_refused_write_that_is_not_a_legacy_rows_put_raises() -> None:
    store = RefusingStore({"1": MARIADB_1366})
    ledger_only = Write(action=Action.UNCHANGED, source="xxl-job", source_key="1", biz_code="app")
    with pytest.raises(pymysql.err.DataError):
        write_or_quarantine(store.apply, [_put("0"), ledger_only], None)


def test_other_errors_are_no_quarantines_and_pass_as_they_are() -> None:
    def down(writes: Sequence[Write], rendered: Rendered | None) -> int:
        raise OperationalError("INSERT", {}, pymysql.err.OperationalError(2013, "Lost connection"))

    # raised untranslated: the migrator's callers (the stream's retry) decide on them as before
    with pytest.raises(OperationalError):
        write_or_quarantine(down, [_put("0")], None)


@pytest.mark.parametrize(
    ("raw", "kind", "said"),
    [
        (pymysql.err.DataError(1366, MARIADB_1366), StoreValueRefused, "`dus_job`.`params` at row 2"),
        (pymysql.err.OperationalError(2013, "Lost connection"), StoreUnavailable, "Lost connection"),
    ],
)
def test_a_driver_error_raised_past_sqlalchemy_is_translated(raw: Any, kind: type, said: str) -> None:
    translated = as_store_error(raw)
    assert isinstance(translated, kind)
    assert said in str(translated)
