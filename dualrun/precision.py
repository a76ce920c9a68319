"""The precision of each side's dispatch times, and lag compared at the coarser of the two.

xxl-job stores `xxl_job_log.trigger_time` as DATETIME (whole seconds); the batch center's
contract stores `bc_task_exec_log.start_time` as DATETIME(3) (milliseconds); the new side
stamps `received_at` in milliseconds. Compared as stored, xxl-job's lag reads 0 s for any
dispatch within the second while the new side shows its milliseconds: the new side would
look worse by truncation alone. Both sides' times are floored to the coarser precision
before any lag is taken.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from dualrun.frames import NONE
from dualrun.model import LagPrecision

NEW_SIDE_MS = 1  # dus_fired_record.received_at: epoch milliseconds
_LEGACY: dict[str, tuple[int, str]] = {
    "xxl-job": (1000, "xxl_job_log.trigger_time, DATETIME"),
    "batch-center": (1, "bc_task_exec_log.start_time, DATETIME(3)"),
}


def precision_of(source: str) -> LagPrecision:
    try:
        legacy_ms, column = _LEGACY[source]
    except KeyError:
        raise ValueError(f"unknown source system {source!r} (known: {', '.join(sorted(_LEGACY))})") from None
    return LagPrecision(legacy_ms=legacy_ms, new_ms=NEW_SIDE_MS, legacy_source=column)


def floored(frame: pd.DataFrame, column: str, ms: int) -> pd.DataFrame:
    """`frame` with `column` (epoch ms, NONE where unknown) floored to `ms`; the same frame
    when nothing changes."""
    if ms <= 1 or not len(frame):
        return frame
    v = frame[column].to_numpy(dtype=np.int64)
    out = frame.copy()
    out[column] = np.where(v == NONE, NONE, v - np.mod(v, ms))
    return out
