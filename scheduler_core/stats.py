"""Fire-time lag and volume, computed from fired records: the SLI from day one.

Lag is measured at two points: executor receipt minus T, and handler start minus T.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

from scheduler_core.model import FiredRecord, FiredState


def percentile(sorted_values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending sequence (q in 0..100)."""
    if not sorted_values:
        return None
    k = max(0, min(len(sorted_values) - 1, round(q / 100 * len(sorted_values) + 0.5) - 1))
    return sorted_values[k]


@dataclass
class BusinessStats:
    biz_code: str
    commands: int = 0
    states: Counter[str] = field(default_factory=Counter)
    received_lag_s: dict[str, float | None] = field(default_factory=dict)
    started_lag_s: dict[str, float | None] = field(default_factory=dict)
    misfired: int = 0

    def as_dict(self) -> dict[str, object]:
        return {
            "biz_code": self.biz_code,
            "commands": self.commands,
            "states": dict(self.states),
            "received_lag_s": self.received_lag_s,
            "started_lag_s": self.started_lag_s,
            "misfired": self.misfired,
        }


def lag_stats(records: Sequence[FiredRecord]) -> dict[str, BusinessStats]:
    by_biz_code: dict[str, BusinessStats] = {}
    received: dict[str, list[float]] = defaultdict(list)
    started: dict[str, list[float]] = defaultdict(list)
    for r in records:
        d = by_biz_code.setdefault(r.biz_code, BusinessStats(r.biz_code))
        d.commands += 1
        d.states[r.state.value] += 1
        d.misfired += int(r.misfired)
        if r.received_at is not None and r.state is not FiredState.SKIPPED:
            received[r.biz_code].append((r.received_at - r.scheduled_at).total_seconds())
        if r.started_at is not None:
            started[r.biz_code].append((r.started_at - r.scheduled_at).total_seconds())
    for biz_code, d in by_biz_code.items():
        for target, values in ((d.received_lag_s, received[biz_code]), (d.started_lag_s, started[biz_code])):
            values.sort()
            for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100)):
                target[name] = percentile(values, q)
    return by_biz_code
