"""Where the boundary checks of the switches are kept (`dus_boundary_check`), so that the
reports, the overview and the console show them, not only the terminal that ran them.

A tally is per switch (a cutover or a rollback of one business): how many occurrences
from the handover on were checked, how many of those the owning side did not fire
(missing) and how many both sides fired (doubled). `checked` is kept beside the two
counts: 0 missing and 0 doubled over 0 checked is no evidence of a clean boundary.

The demo stores its own tallies; `record_cutover_boundary` checks a cutover's boundary
with the comparator's matching (dualrun.boundary) and stores it, for a command to call."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import insert, select

from dbkit.connections import begin, connect
from dualrun.boundary import BoundaryCheck, HandoverPlan, check_boundary
from dualrun.model import Window, iso
from dualrun.store import DualRunStore
from readers.ports import LegacyReader
from scheduler_core.ports import RunRecordReads
from scheduler_core.times import from_ms, to_ms


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundaryTally:
    biz_code: str
    switch: str  # cutover | rollback
    switched_at: datetime
    checked_at: datetime
    horizon: datetime
    checked: int
    missing: int
    doubled: int

    @property
    def clean(self) -> bool:
        return self.checked > 0 and not self.missing and not self.doubled

    def as_dict(self) -> dict[str, Any]:
        return {
            "business": self.biz_code,
            "switch": self.switch,
            "switched_at": iso(self.switched_at),
            "checked_at": iso(self.checked_at),
            "horizon": iso(self.horizon),
            "checked": self.checked,
            "missing": self.missing,
            "doubled": self.doubled,
            "clean": self.clean,
            "sentence": self.sentence,
        }

    @property
    def sentence(self) -> str:
        if not self.checked:
            return f"{self.switch}: no occurrence due yet from the handover on, nothing checked"
        return (
            f"{self.switch}: {self.checked:,} occurrence(s) checked from the handover on, "
            f"{self.missing:,} missing, {self.doubled:,} doubled"
        )


def put_boundary_tally(own: DualRunStore, tally: BoundaryTally) -> None:
    t = own.t.boundary
    with begin(own.engine) as conn:
        conn.execute(
            insert(t).values(
                biz_code=tally.biz_code,
                switch=tally.switch,
                switched_at=to_ms(tally.switched_at),
                checked_at=to_ms(tally.checked_at),
                horizon=to_ms(tally.horizon),
                checked=tally.checked,
                missing=tally.missing,
                doubled=tally.doubled,
            )
        )


def boundary_tallies(own: DualRunStore, biz_code: str | None = None) -> dict[str, list[BoundaryTally]]:
    """Per business, the latest check of each of its switches, in switch order (a switch
    checked again shows its latest tally only)."""
    t = own.t.boundary
    stmt = select(t).order_by(t.c.switched_at, t.c.checked_at, t.c.id)
    if biz_code is not None:
        stmt = stmt.where(t.c.biz_code == biz_code)
    latest: dict[tuple[str, str, int], BoundaryTally] = {}
    with connect(own.engine) as conn:
        for r in conn.execute(stmt).mappings():
            latest[(r["biz_code"], r["switch"], int(r["switched_at"]))] = BoundaryTally(
                biz_code=r["biz_code"],
                switch=r["switch"],
                switched_at=from_ms(int(r["switched_at"])),
                checked_at=from_ms(int(r["checked_at"])),
                horizon=from_ms(int(r["horizon"])),
                checked=int(r["checked"]),
                missing=int(r["missing"]),
                doubled=int(r["doubled"]),
            )
    out: dict[str, list[BoundaryTally]] = {}
    for tally in latest.values():  # insertion order is switch order
        out.setdefault(tally.biz_code, []).append(tally)
    return out


def tally_of(
    check: BoundaryCheck, *, biz_code: str, switch: str, switched_at: datetime, now: datetime
) -> BoundaryTally:
    """A boundary check (dualrun.boundary) as the tally kept for the reports: its owned
    occurrences checked, missing and doubled (a stray fire of the side that no longer owns
    the job is counted by the checker; the tally keeps the two the reports show)."""
    return BoundaryTally(
        biz_code=biz_code,
        switch=switch,
        switched_at=switched_at,
        checked_at=now,
        horizon=check.window.end,
        checked=check.owned,
        missing=check.missing,
        doubled=check.doubled,
    )


def record_cutover_boundary(
    store: RunRecordReads,
    own: DualRunStore,
    reader: LegacyReader,
    biz_code: str,
    *,
    now: datetime,
    settle: timedelta = timedelta(minutes=1),
) -> BoundaryTally | None:
    """Check the boundary of the business's latest cutover, from the switch to `now -
    settle` (occurrences due since may not have reached an executor yet), with the
    handover times its audit row keeps, and store the tally. None: never cut over, or no
    handover recorded (nothing to check against)."""
    found = own.migration.last_cutover(biz_code)
    if found is None:
        return None
    at_ms, *_rest, detail = found
    try:
        handover = json.loads(detail or "{}").get("handover") or {}
    except (ValueError, AttributeError):
        handover = {}
    if not isinstance(handover, dict) or not handover:
        return None
    at = from_ms(int(at_ms))
    horizon = max(at, now - settle)
    check = check_boundary(
        store,
        own,
        reader,
        biz_code,
        [HandoverPlan(handover=handover, to_new=True, at=at)],
        window=Window(start=at, end=horizon),
        now=now,
    )
    tally = tally_of(check, biz_code=biz_code, switch="cutover", switched_at=at, now=now)
    put_boundary_tally(own, tally)
    return tally
