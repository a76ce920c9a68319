"""The span a comparison may honestly cover: the requested window clipped at the business's
switches (its dual-run start, each cutover and rollback, read from `dus_cutover_audit`).

Before the dual-run start only legacy fires; after a cutover only the new side; after a
rollback only legacy again. A window reaching across one of them blames the side that was
not running for the other's fires (seen: "call volume 128 vs legacy 216" four minutes after
`dualrun start`, with the default hour). So the compared span is the part of the window in
the business's dual-run period that contains the window's end (the latest one), and the
A/A baseline (legacy against its own schedule) never reaches across a switch either.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from dualrun.errors import DualRunError
from dualrun.model import CompareSpan, Window, iso
from dualrun.store import DualRunStore
from scheduler_core.times import from_ms

DUAL_RUN = "dual_run"  # dus_business.state / dus_cutover_audit.to_state of a dual-run


@dataclass(frozen=True, slots=True, kw_only=True)
class Switch:
    """One transition of the business's state (a `dus_cutover_audit` row that moved it)."""

    at: datetime
    from_state: str
    to_state: str

    @property
    def name(self) -> str:
        if self.to_state == DUAL_RUN:
            return "dual-run start"
        if self.to_state == "cutover":
            return "cutover"
        return "rollback"


class NotInDualRun(DualRunError):
    def __init__(self, biz_code: str, window: Window) -> None:
        super().__init__(
            f"{biz_code} was not in dual-run at any time in {iso(window.start)} .. {iso(window.end)}: "
            "nothing to compare (see `switchyard status` for its switches)"
        )


def fetch_switches(own: DualRunStore, biz_code: str) -> list[Switch]:
    """The business's state changes, oldest first (audit notes that changed nothing are not)."""
    return [Switch(at=from_ms(int(at)), from_state=f, to_state=t) for at, f, t in own.migration.switches(biz_code)]


def clip(biz_code: str, window: Window, switches: Sequence[Switch]) -> CompareSpan:
    """The compared span of `window`. Without any recorded switch (a business compared
    before any `dualrun start`, or records written by hand) the window is kept as asked,
    and the span says so."""
    if not switches:
        return CompareSpan(
            requested=window,
            window=window,
            clipped=(),
            note="no dual-run start recorded for this business: the window is compared as requested",
        )
    start, end = window.start, window.end
    clipped: list[str] = []
    # the last switch at or before the window's end decides the state at its end
    before_end = [s for s in switches if s.at < end]
    if not before_end or before_end[-1].to_state != DUAL_RUN:
        # not in dual-run at the end: the latest dual-run period that overlaps the window
        last_start = next((s for s in reversed(before_end) if s.to_state == DUAL_RUN), None)
        if last_start is None:
            raise NotInDualRun(biz_code, window)
        leave = next(s for s in switches if s.at > last_start.at)
        if leave.at <= start:
            raise NotInDualRun(biz_code, window)
        end = leave.at
        clipped.append(f"end clipped at the {leave.name} {iso(leave.at)}")
        before_end = [s for s in switches if s.at <= last_start.at]
    entered = before_end[-1]
    if entered.at > start:
        start = entered.at
        clipped.append(f"start clipped at the {entered.name} {iso(entered.at)}")
    if end <= start:
        raise DualRunError(
            f"{biz_code}: the {entered.name} was at {iso(entered.at)}, the end of the window: nothing to compare yet"
        )
    return CompareSpan(requested=window, window=Window(start=start, end=end), clipped=tuple(clipped))


def baseline_span(span: Window, offset: timedelta | None, switches: Sequence[Switch]) -> tuple[Window, tuple[str, ...]]:
    """The A/A window: the compared span shifted back (by `offset`, default its length),
    its start clipped at the latest switch inside it, so legacy is measured over one state."""
    base = span.shifted(offset or span.length)
    inside = [s for s in switches if base.start < s.at < base.end]
    if not inside:
        return base, ()
    cut = inside[-1]
    return Window(start=cut.at, end=base.end), (f"baseline start clipped at the {cut.name} {iso(cut.at)}",)
