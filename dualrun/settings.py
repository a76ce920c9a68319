"""Thresholds and matching tolerances of the comparator, with their defaults, written once.

A difference between the new path and the legacy path is flagged only when it clears
*both* thresholds of its check after the A/A noise is taken off (Diffy's rule):

    excess   = raw - noise                    raw: how much worse the new side is
    flagged  = excess > abs  and  excess / (raw + noise) > rel

`raw` and `noise` are in the check's own unit (a rate, seconds, percentage points).
Every value can be overridden per business (`thresholds_from_mapping`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any

_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
# one number and its unit; `ms` before `m` so that 500ms is not read as 500 minutes and an `s`
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_BARE = re.compile(r"\d+(?:\.\d+)?")
DURATION_EXAMPLES = "e.g. 500ms, 30s, 5m, 2h, 1h30m; a bare number is seconds"


def parse_duration(text: str | float | int | timedelta) -> timedelta:
    """The one way a duration is written, in settings files and on every command:
    `500ms`, `30s`, `5m`, `2h`, `7d`, `1w`, or units run together (`1h30m`); a bare
    number is seconds. ValueError naming the forms accepted."""
    if isinstance(text, timedelta):
        return text
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return timedelta(seconds=float(text))
    s = str(text).strip().lower()
    if _BARE.fullmatch(s):
        return timedelta(seconds=float(s))
    parts = _PART.findall(s)
    if not s or not parts or "".join(n + u for n, u in parts) != s:
        raise ValueError(f"not a duration: {text!r} ({DURATION_EXAMPLES})")
    return timedelta(seconds=sum(float(n) * _UNIT_S[u] for n, u in parts))


@dataclass(frozen=True, slots=True, kw_only=True)
class Thresholds:
    """Per-business verdict thresholds. Rates are fractions (0.0003 = 0.03 %)."""

    rel: float = 0.20  # Diffy's relative threshold, shared by every check
    missing_abs: float = 0.0003  # missing fires per reference fire (Diffy's 0.03 %)
    extra_abs: float = 0.0003  # extra or doubled fires per reference fire
    late_abs: float = 0.0003  # late fires per reference fire
    lag_p99_limit: timedelta = timedelta(seconds=1)  # the SLO: new p99 above this may fail
    lag_p99_abs: timedelta = timedelta(milliseconds=250)  # and worse than legacy by more than this
    success_rate_abs: float = 0.005  # 0.5 percentage points
    timeout_rate_abs: float = 0.005
    volume_abs: float = 0.01  # calls differ by more than 1 %
    max_due_backlog: int = 1000  # due commands waiting in the executor subscription
    min_fires: int = 1  # fewer fires than this on both sides: no verdict can be ready
    # A verdict needs evidence: a short window, or a job with a handful of occurrences in it,
    # says nothing about the rare failures a cutover must not bring. Lower them only for a
    # compressed clock (tests, the demo) or, per business, for jobs that are rare by nature.
    min_window: timedelta = timedelta(minutes=30)  # a shorter comparison window cannot be ready
    min_fires_per_job: int = 10  # expected fires in the window of every recurring migrated job


@dataclass(frozen=True, slots=True, kw_only=True)
class MatchSettings:
    """How executions are paired with expected occurrences and with each other."""

    # xxl-job stores no fire time: a log row belongs to the latest expected occurrence at
    # or before trigger_time + early, no further back than `nominal_tolerance`
    nominal_tolerance: timedelta = timedelta(seconds=30)
    # 2.x FIX_RATE can fire up to 999 ms early (a next time with a millisecond part fires at
    # the start of its second). Never a whole second: trigger_time is whole seconds, and
    # with 1 s every fire of a job due every second snapped to the occurrence after its
    # own (a rollback's first legacy fire read as the one after it: "fired by neither")
    early: timedelta = timedelta(milliseconds=999)
    retry_window: timedelta = timedelta(minutes=10)  # a retry row within this of its fire
    pair_tolerance: timedelta = timedelta(seconds=5)  # second pass: nearest pairing
    late_after: timedelta = timedelta(seconds=5)  # a fire later than this is "late"
    # a received run with no result is "running" until its job's timeout plus this (the
    # executor's own timeout result needs a moment to arrive); past it, it counts as timed out
    result_grace: timedelta = timedelta(seconds=30)
    legacy_misfire_threshold: timedelta = timedelta(seconds=5)  # xxl-job's PRE_READ_MS
    new_misfire_threshold: timedelta = timedelta(hours=2)  # the scheduler core's default
    settle: timedelta = timedelta(minutes=10)  # results this young may still change
    max_occurrences_per_job: int = 2_000_000
    max_listed: int = 200  # mismatches kept in the stored body (all are counted)
    buckets: int = 24  # time-series points per window


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareSettings:
    thresholds: Thresholds = Thresholds()
    match: MatchSettings = MatchSettings()
    window: timedelta = timedelta(hours=1)  # default comparison window (until - since)
    baseline_offset: timedelta | None = None  # A/A window = window shifted back; None: by its length


def _coerce(current: Any, value: Any, name: str) -> Any:
    if isinstance(current, timedelta):
        return parse_duration(value)
    if isinstance(current, bool) or not isinstance(current, (int, float)):
        raise ValueError(f"threshold {name}: unsupported type")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"threshold {name}: expected a number, got {value!r}")
    return type(current)(value)


def override(base: Thresholds, values: Mapping[str, Any]) -> Thresholds:
    known = {f.name: getattr(base, f.name) for f in fields(base)}
    changes: dict[str, Any] = {}
    for name, value in values.items():
        if name not in known:
            raise ValueError(f"unknown threshold {name!r} (known: {', '.join(sorted(known))})")
        changes[name] = _coerce(known[name], value, name)
    return replace(base, **changes)


def thresholds_from_mapping(data: Mapping[str, Any], biz_code: str) -> Thresholds:
    """Defaults < `[defaults]` < `[business.<B>]` of a parsed TOML mapping."""
    out = override(Thresholds(), data.get("defaults", {}))
    per_business = data.get("business", {}).get(biz_code, {})
    return override(out, per_business)


def thresholds_as_dict(t: Thresholds) -> dict[str, float | int]:
    out: dict[str, float | int] = {}
    for f in fields(t):
        v = getattr(t, f.name)
        out[f.name] = v.total_seconds() if isinstance(v, timedelta) else v
    return out
