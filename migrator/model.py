"""The migrator's terms: plans, ledger entries, quarantined rows, business states."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field


class Action(enum.StrEnum):
    CREATE = "create"
    UPDATE = "update"
    UNCHANGED = "unchanged"
    QUARANTINE = "quarantine"
    DELETE = "delete"


class LedgerStatus(enum.StrEnum):
    MIGRATED = "migrated"
    QUARANTINED = "quarantined"
    DELETED = "deleted"


class BusinessState(enum.StrEnum):
    LEGACY = "legacy"
    DUAL_RUN = "dual_run"
    CUTOVER = "cutover"


@dataclass(frozen=True, slots=True, kw_only=True)
class PlannedRow:
    source: str
    source_key: str
    biz_code: str
    action: Action
    job_code: str | None = None
    field: str | None = None
    reason: str | None = None


@dataclass
class MigrationSummary:
    biz_code: str | None
    counts: dict[str, int] = field(default_factory=lambda: {a.value: 0 for a in Action})
    rows: list[PlannedRow] = field(default_factory=list)
    rows_written: int = 0  # target + ledger rows actually written (0 on an unchanged re-run)
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)  # for the operator: e.g. legacy actions not applied after cutover

    def add(self, row: PlannedRow, keep: bool) -> None:
        self.counts[row.action.value] += 1
        if keep or row.action is Action.QUARANTINE:
            self.rows.append(row)

    def as_dict(self) -> dict[str, object]:
        return {
            "business": self.biz_code,
            "counts": self.counts,
            "rows_written": self.rows_written,
            "seconds": round(self.seconds, 3),
            "notes": self.notes,
            "rows": [_row(r) for r in self.rows],
        }


def _row(r: PlannedRow) -> dict[str, object]:
    return {
        "source": r.source,
        "source_key": r.source_key,
        "business": r.biz_code,
        "action": r.action.value,
        "job_code": r.job_code,
        "field": r.field,
        "reason": r.reason,
    }
