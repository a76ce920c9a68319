"""Expected occurrences, rebuilt from the legacy definitions' schedules.

xxl_job_log stores no fire time, so the comparator needs the occurrences the schedule
asked for: cron (Quartz, in the definition's zone, through `scheduler_core.cron`),
fixed rate (anchored at the legacy's next fire time), one-shot (its fire time).
Disabled definitions expect nothing; a schedule that cannot be evaluated is reported.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta

import numpy as np
import pandas as pd

from dualrun.frames import EXPECTED_COLUMNS, JobIndex, empty
from dualrun.model import Window
from readers.records import LegacyDefinition, ScheduleKind
from scheduler_core.cron import CronExpression
from scheduler_core.times import to_ms


@dataclass
class Expected:
    frame: pd.DataFrame
    notes: list[str] = field(default_factory=list)


def _cron_ms(defn: LegacyDefinition, window: Window, cap: int) -> list[int]:
    assert defn.cron is not None
    expr = CronExpression(defn.cron, defn.time_zone, dialect=defn.cron_dialect)  # type: ignore[arg-type]
    out: list[int] = []
    for at in expr.iter_after(window.start - timedelta(milliseconds=1), limit=cap):
        if at >= window.end:
            break
        out.append(to_ms(at))
    return out


def _rate_ms(defn: LegacyDefinition, window: Window, cap: int) -> np.ndarray:
    assert defn.interval_seconds
    step = defn.interval_seconds * 1000
    anchor = to_ms(defn.next_fire_at) if defn.next_fire_at else to_ms(window.start)
    start, end = to_ms(window.start), to_ms(window.end)
    first = anchor + -(-(start - anchor) // step) * step  # first anchor + k*step >= start
    return np.arange(first, end, step, dtype=np.int64)[:cap]


def _occurrences(defn: LegacyDefinition, window: Window, cap: int) -> np.ndarray:
    if defn.schedule is ScheduleKind.CRON and defn.cron:
        return np.asarray(_cron_ms(defn, window, cap), dtype=np.int64)
    if defn.schedule is ScheduleKind.FIXED_RATE and defn.interval_seconds:
        return _rate_ms(defn, window, cap)
    if defn.schedule is ScheduleKind.ONCE and defn.next_fire_at and window.start <= defn.next_fire_at < window.end:
        return np.asarray([to_ms(defn.next_fire_at)], dtype=np.int64)
    return np.zeros(0, dtype=np.int64)


def build_expected(
    defs: Iterable[tuple[str, LegacyDefinition]], window: Window, jobs: JobIndex, *, cap: int = 2_000_000
) -> Expected:
    """Occurrences in [window.start, window.end) of every enabled definition (job code, definition)."""
    parts: list[pd.DataFrame] = []
    notes: list[str] = []
    for code, defn in defs:
        if not defn.enabled:
            continue
        try:
            occ = _occurrences(defn, window, cap)
        except ValueError as exc:  # a cron the evaluator refuses: its fires are matched by time only
            notes.append(
                f"job {code}: schedule {defn.cron or defn.interval_seconds!r} cannot be evaluated "
                f"({exc}); its fires are compared without expected occurrences"
            )
            continue
        if len(occ) >= cap:
            notes.append(
                f"job {code}: more than {cap:,} occurrences in the window; only the first {cap:,} are expected"
            )
        if len(occ):
            parts.append(
                pd.DataFrame(copy=False, data={"job": np.full(len(occ), jobs.id(code), dtype=np.int64), "sched": occ})
            )
    frame = pd.concat(parts, ignore_index=True) if parts else empty(EXPECTED_COLUMNS)
    return Expected(frame=frame, notes=notes)
