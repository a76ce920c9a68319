"""What a report says, independent of its format: the content every renderer receives.

`BusinessReport.content()` and `OverviewReport.content()` are JSON-ready, already
redacted, and carry the formatted tables the Markdown and HTML templates share, so the
three forms say the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from dbkit.redact import redact_tree
from dualrun.model import Comparison, Mode, SideMeasures, as_dict, iso

REPORT_VERSION = 1


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f}%"


def _secs(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3f} s"


def _int(x: int) -> str:
    return f"{x:,}"


_ROWS: tuple[tuple[str, Any], ...] = (
    ("fires", lambda m: _int(m.fires)),
    ("calls (sharding items)", lambda m: _int(m.calls)),
    ("attempts (with retries)", lambda m: _int(m.attempts)),
    ("retries", lambda m: _int(m.retries)),
    ("expected fires", lambda m: _int(m.expected)),
    ("missing expected fires", lambda m: _int(m.missing)),
    ("late fires", lambda m: _int(m.late)),
    ("doubled items", lambda m: _int(m.duplicates)),
    ("unscheduled fires", lambda m: _int(m.unscheduled)),
    ("lag p50", lambda m: _secs(m.lag.p50)),
    ("lag p95", lambda m: _secs(m.lag.p95)),
    ("lag p99", lambda m: _secs(m.lag.p99)),
    ("lag max", lambda m: _secs(m.lag.max)),
    ("succeeded", lambda m: _int(m.succeeded)),
    ("failed", lambda m: _int(m.failed)),
    ("timed out", lambda m: _int(m.timed_out)),
    ("killed by an operator", lambda m: _int(m.killed)),
    ("unfinished", lambda m: _int(m.unfinished)),
    ("running (received, no result yet)", lambda m: _int(m.running)),
    ("success rate", lambda m: _pct(m.success_rate)),
    ("timeout rate", lambda m: _pct(m.timeout_rate)),
)

_NOISE_NAMES = {
    "missing": "missing fires per occurrence",
    "extra": "doubled fires per occurrence",
    "late": "late fires per occurrence",
    "items": "item-count differences",
    "lag_p99": "p99 lag (s)",
    "success_rate": "success rate",
    "timeout_rate": "timeout rate",
}


# what a handler's run decides: in shadow mode the new side records each command without
# invoking its handler, so these measures of the new side say nothing (a 0 % success rate
# or commands "timed out" beside a READY verdict would be read as a failure)
_INVOKED_ONLY = frozenset(
    {
        "attempts (with retries)",
        "retries",
        "succeeded",
        "failed",
        "timed out",
        "killed by an operator",
        "unfinished",
        "running (received, no result yet)",
        "success rate",
        "timeout rate",
    }
)
NOT_INVOKED = "not compared (shadow: not invoked)"


def measure_rows(
    legacy: SideMeasures, new: SideMeasures, baseline: SideMeasures, *, shadow: bool = False
) -> list[dict[str, str]]:
    return [
        {
            "measure": name,
            "legacy": fmt(legacy),
            "new": NOT_INVOKED if shadow and name in _INVOKED_ONLY else fmt(new),
            "baseline": fmt(baseline),
        }
        for name, fmt in _ROWS
    ]


def noise_rows(noise: dict[str, float]) -> list[dict[str, str]]:
    out = []
    for key, value in noise.items():
        shown = f"{value:.3f} s" if key == "lag_p99" else f"{value * 100:.3f}%"
        out.append({"measure": _NOISE_NAMES.get(key, key), "noise": shown})
    return out


@dataclass(frozen=True, slots=True, kw_only=True)
class HistoryPoint:
    computed_at: datetime
    verdict: str
    legacy_p99: float | None
    new_p99: float | None
    legacy_success: float | None
    new_success: float | None
    legacy_calls: int
    new_calls: int
    flagged: int

    @staticmethod
    def of(c: Comparison) -> HistoryPoint:
        flagged = sum(v.get("flagged", 0) for v in c.mismatch_counts.values())
        return HistoryPoint(
            computed_at=c.computed_at,
            verdict=c.verdict.value,
            legacy_p99=c.legacy.lag.p99,
            new_p99=c.new.lag.p99,
            legacy_success=c.legacy.success_rate,
            new_success=c.new.success_rate,
            legacy_calls=c.legacy.calls,
            new_calls=c.new.calls,
            flagged=flagged,
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "computed_at": iso(self.computed_at),
            "verdict": self.verdict,
            "legacy_p99": self.legacy_p99,
            "new_p99": self.new_p99,
            "legacy_success": self.legacy_success,
            "new_success": self.new_success,
            "legacy_calls": self.legacy_calls,
            "new_calls": self.new_calls,
            "flagged": self.flagged,
        }


STATE_LABELS = {"legacy": "on legacy", "dual_run": "in dual-run", "cutover": "cut over"}


def state_label(state: str | None, shadow: bool = False) -> str:
    """A cutover state as a sentence reads it ("cut over", not "cutover state cutover")."""
    if state is None:
        return "unknown"
    return STATE_LABELS.get(state, state) + (" (shadow)" if shadow and state == "dual_run" else "")


def staleness(computed_at: datetime | None, now: datetime, max_age: timedelta) -> dict[str, Any]:
    """How old a verdict is, and whether the cutover gate would still take it (`max_age`:
    the gate's own bound): a verdict shown without this reads as current when it is not."""
    if computed_at is None:
        return {"stale": False, "age": _age(None), "age_seconds": None, "max_age": _span(max_age)}
    age = now - computed_at
    return {
        "stale": age > max_age,
        "age": _age(age),
        "age_seconds": round(age.total_seconds()),
        "max_age": _span(max_age),
    }


def _span(d: timedelta) -> str:
    s = int(d.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size and s % size == 0:
            return f"{s // size} {unit}"
    return f"{s} s"


_BEFORE_CUTOVER = "; fix them before cutover"


def after_cutover(warning: str) -> str:
    """A verdict's warning, said of a business already cut over: "fix them before cutover"
    is advice it can no longer take."""
    return warning.replace(_BEFORE_CUTOVER, "; they keep firing there until fixed and migrated")


@dataclass(frozen=True, slots=True, kw_only=True)
class BusinessReport:
    biz_code: str
    generated_at: datetime
    comparison: Comparison
    comparison_id: int | None = None
    state: str | None = None  # cutover state from dus_business
    history: tuple[HistoryPoint, ...] = ()
    gate_stream: dict[str, Any] | None = None  # the change stream at the latest cutover's gate
    cutover: dict[str, Any] | None = None  # the latest cutover as audited (reports.load.last_cutover)
    verdict_max_age: timedelta  # the cutover gate's bound (MigrationRecords.verdict_max_age)
    boundary: tuple[dict[str, Any], ...] = ()  # the switches' boundary checks (BoundaryTally.as_dict)

    def content(self) -> dict[str, Any]:
        c = self.comparison
        body = as_dict(c)
        cut_over = self.state == "cutover"
        if cut_over:  # the verdict's advice "before cutover" comes too late: said as it stands
            body["checks"] = [{**ch, "sentence": after_cutover(ch["sentence"])} for ch in body["checks"]]
            body["warnings"] = [after_cutover(w) for w in body.get("warnings", [])]
        body.update(
            {
                "kind": "business_report",
                "report_version": REPORT_VERSION,
                "generated_at": iso(self.generated_at),
                "comparison_id": self.comparison_id,
                "state": self.state,
                "ready": c.is_ready,
                "measure_rows": measure_rows(c.legacy, c.new, c.baseline, shadow=c.mode is Mode.SHADOW),
                "noise_rows": noise_rows(c.noise),
                "history": [h.as_dict() for h in self.history],
                "gate_stream": self.gate_stream,
                "state_label": state_label(self.state, c.mode is Mode.SHADOW),
                "cut_over": cut_over,
                "cutover": self.cutover,
                "freshness": staleness(c.computed_at, self.generated_at, self.verdict_max_age),
                "verdict_warnings": [after_cutover(w) for w in c.warnings] if cut_over else list(c.warnings),
                "boundary": list(self.boundary),
                "flagged_total": sum(v.get("flagged", 0) for v in c.mismatch_counts.values()),
                "labelled_total": sum(v.get("labelled", 0) for v in c.mismatch_counts.values()),
            }
        )
        return redact_tree(body)  # type: ignore[no-any-return]


@dataclass(frozen=True, slots=True, kw_only=True)
class OverviewRow:
    biz_code: str
    source: str | None
    state: str | None
    shadow: bool
    verdict: str | None
    computed_at: datetime | None
    reasons: tuple[str, ...] = ()
    link: str | None = None
    warnings: tuple[str, ...] = ()  # e.g. quarantined jobs still running only on legacy
    stale_after: timedelta  # the cutover gate's bound (MigrationRecords.verdict_max_age)
    quarantined: int = 0  # jobs the migrator quarantined: they still fire on legacy
    boundary: tuple[dict[str, Any], ...] = ()  # the switches' boundary checks

    def as_dict(self, now: datetime) -> dict[str, Any]:
        fresh = staleness(self.computed_at, now, self.stale_after)
        cut_over = self.state == "cutover"
        return {
            "business": self.biz_code,
            "source": self.source,
            "state": self.state,
            "state_label": state_label(self.state, self.shadow),
            "shadow": self.shadow,
            "verdict": self.verdict,
            "computed_at": None if self.computed_at is None else iso(self.computed_at),
            "age": fresh["age"],
            "age_seconds": fresh["age_seconds"],
            "stale": self.verdict is not None and fresh["stale"],
            "max_age": fresh["max_age"],
            "reasons": list(self.reasons),
            "warnings": [after_cutover(w) for w in self.warnings] if cut_over else list(self.warnings),
            "quarantined": self.quarantined,
            "boundary": list(self.boundary),
            "link": self.link,
        }


def _age(age: timedelta | None) -> str:
    if age is None:
        return "never compared"
    s = int(age.total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s // size}{unit} ago"
    return f"{max(0, s)}s ago"


@dataclass(frozen=True, slots=True, kw_only=True)
class OverviewReport:
    generated_at: datetime
    rows: tuple[OverviewRow, ...]

    def content(self) -> dict[str, Any]:
        rows = [r.as_dict(self.generated_at) for r in self.rows]
        counts: dict[str, int] = {}
        for r in self.rows:
            counts[r.state or "unknown"] = counts.get(r.state or "unknown", 0) + 1
        return redact_tree(
            {
                "kind": "overview",
                "report_version": REPORT_VERSION,  # type: ignore[no-any-return]
                "generated_at": iso(self.generated_at),
                "rows": rows,
                "state_counts": counts,
                "state_label_counts": {state_label(k if k != "unknown" else None): n for k, n in counts.items()},
                "ready": sum(1 for r in rows if r["verdict"] == "ready" and not r["stale"]),
                "stale": sum(1 for r in rows if r["stale"]),
                "not_ready": sum(1 for r in self.rows if r.verdict == "not_ready"),
            }
        )
