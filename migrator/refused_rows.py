"""Legacy rows the store refuses to hold: quarantined with the column and the server's
words, while the rest of the chunk is written (issue 30).

A mapped row can still be refused by the store: a 4-byte character (an emoji) in a
column an operator left latin1, a value longer than its column. The server refuses the
whole statement, so the whole chunk's transaction; the chunk is then written in halves,
each in its own transaction, down to the rows that are refused alone: at most
2 x log2(chunk) transactions per bad row instead of one per row of the chunk. Each
refused row gets a quarantine ledger row, so `migrate run` goes on and reports it.

Its ledger hash has no source half, so every later run reads and maps the row again (a
store fixed by `db init`, or the column converted by hand, then takes it), unlike a
mapping quarantine, which the same content would repeat.
"""

from __future__ import annotations

import ast
import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from dbkit.translate import as_store_error
from migrator.ledger_hash import combined
from migrator.model import Action
from migrator.target import Rendered, Write
from scheduler_core.errors import StoreValueRefused

# MySQL/MariaDB name the column: "... for column `db`.`table`.`col` at row 2" (MariaDB),
# "... for column 'col' at row 2" (MySQL, TiDB); "Data too long for column 'col' at row 1"
_COLUMN = re.compile(r"for column (?:`[^`]*`\.`(?P<table>[^`]*)`\.`(?P<col>[^`]*)`|'(?P<plain>[^']*)')")
UNKNOWN_FIELD = "row"  # the server named no column

Apply = Callable[[Sequence[Write], Rendered | None], int]


@dataclass(frozen=True, slots=True)
class Refused:
    """A write the store refused, and the quarantine written in its place."""

    write: Write
    quarantine: Write


def value_refused(exc: BaseException) -> StoreValueRefused | None:
    """`exc` as the store's refusal of a value, or None for any other error (which the
    caller raises as it is: the callers of the migrator decide on those)."""
    err = as_store_error(exc)
    return err if isinstance(err, StoreValueRefused) else None


def write_or_quarantine(apply: Apply, writes: Sequence[Write], rendered: Rendered | None) -> tuple[int, list[Refused]]:
    """`apply(writes, rendered)` (one transaction, or one savepoint); when the store
    refuses a value, the writes in halves, each its own, and a write refused alone
    quarantined. Returns the rows written and the refused writes. A refused write that is
    not a mapped create or update (a ledger-only write, a delete) is not a legacy row's
    value: its error is raised, as is any other error."""
    try:
        return apply(writes, rendered), []
    except Exception as exc:
        refusal = value_refused(exc)
        if refusal is None:
            raise
        if len(writes) > 1:
            half = len(writes) // 2
            # the chunk's rendered rows serve only the whole chunk: halves render their own
            first, refused_first = write_or_quarantine(apply, writes[:half], None)
            rest, refused_rest = write_or_quarantine(apply, writes[half:], None)
            return first + rest, refused_first + refused_rest
        (w,) = writes
        if w.mapped is None or w.action not in (Action.CREATE, Action.UPDATE):
            raise
        quarantine = quarantine_of(w, refusal)
        try:
            return apply([quarantine], None), [Refused(w, quarantine)]
        except Exception as again:
            if value_refused(again) is None:
                raise
            # the ledger cannot hold the row's excerpt either (a ledger column left latin1):
            # the row, its field and the reason still are recorded
            quarantine = replace(quarantine, raw=None)
            return apply([quarantine], None), [Refused(w, quarantine)]


def in_place(writes: Sequence[Write], refused: Sequence[Refused]) -> list[Write]:
    """`writes` with each refused write's quarantine in its place."""
    instead = {x.write.source_key: x.quarantine for x in refused}
    return [instead.get(w.source_key, w) for w in writes]


def quarantine_of(w: Write, exc: StoreValueRefused) -> Write:
    """The quarantine of a refused write: the field is the column the server named."""
    m = _COLUMN.search(exc.detail)
    table = m.group("table") if m else None
    column = (m.group("col") or m.group("plain")) if m else None
    where = f"{table}.{column}" if table and column else (column or "the row")
    reason = (
        f"the store cannot hold this value in {where} ({_server_said(exc.detail)}); "
        "`switchyard db check` names a table or column that is not utf8mb4 and `db init` converts it"
    )
    digest = hashlib.sha256(f"{w.source}\0{w.source_key}\0{reason}".encode()).hexdigest()
    return replace(
        w,
        action=Action.QUARANTINE,
        mapped=None,
        field=column or UNKNOWN_FIELD,
        reason=reason,
        content_hash=combined("", digest),  # no source half: see the module doc
        noop=False,
        flag_pending=False,
    )


def _server_said(detail: str) -> str:
    """What the server said, as it said it: "Incorrect string value: '\\xF0...' for
    column ... (error 1366)" rather than the driver's tuple with its escapes doubled."""
    try:  # PyMySQL's error as text is the repr of its args: (1366, "Incorrect string value: ...")
        code, said = ast.literal_eval(detail)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return detail
    return f"{said} (error {code})" if isinstance(code, int) and isinstance(said, str) else detail
