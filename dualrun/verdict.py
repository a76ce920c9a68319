"""The verdict: noise-aware checks (Diffy's rule); dualrun.verdict_store stores them.

Every check compares the new side (N) with the legacy side (L) over the same window and
takes the A/A noise off first: the legacy side over an earlier window (E), measured the
same way. A check fails only when the new side is worse by more than the noise *and*
the excess clears both the absolute and the relative threshold:

    raw = how much worse N is than L         noise = |L - E|  (or E's own deviation rate)
    fail  <=>  raw - noise > abs  and  (raw - noise) / (raw + noise) > rel

Count checks (missing / extra / late fires, sharding items) are rates per reference
occurrence; their noise is the legacy side's own rate of that deviation from its
schedule in the earlier window. The p99 lag check also needs N above the SLO limit.

Stored verdicts: `dualrun.verdict_store` (`put_comparison`, and `latest`, which the
cutover gate reads).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from dualrun.model import (
    Check,
    ConsumerLag,
    MismatchGroup,
    MismatchKind,
    Mode,
    QuarantinedJob,
    SideMeasures,
    Verdict,
    Window,
    from_iso,
    iso,
    quarantine_sentence,
)
from dualrun.settings import Thresholds

SHADOW_NOTE = (
    "shadow mode: the new path records commands without invoking the handlers, so this comparison "
    "covers timing and volume only (success rate, timeouts and failed fires are not compared)"
)
# A shadow "ready" says nothing about the new handlers' outcomes: the warning travels with
# the verdict (its `warnings`), so the report, `--json`, and the cutover gate's refusal and
# acceptance all say it, not only a note further down the report.
SHADOW_WARNING = (
    "shadow mode: success rate was not compared (the new path recorded its commands without invoking "
    "the handlers; only timing and volume were compared, so failures and timeouts of the new "
    "handlers are unknown)"
)
MAX_JOB_DETAILS = 10
INLINE_JOBS = 3  # short jobs named in the fires-per-job sentence; more go to its details


def clears(raw: float, noise: float, abs_threshold: float, rel: float) -> bool:
    """Diffy's rule: the excess over noise clears both thresholds."""
    excess = raw - noise
    if excess <= abs_threshold:
        return False
    total = raw + noise
    return (excess / total if total > 0 else 1.0) > rel


@dataclass(frozen=True, kw_only=True)
class Evidence:
    mode: Mode
    window: Window
    legacy: SideMeasures
    new: SideMeasures
    baseline: SideMeasures
    reference: int
    counts: dict[str, dict[str, int]]
    groups: tuple[MismatchGroup, ...]
    consumer_lag: ConsumerLag | None
    thresholds: Thresholds
    labelled_new_calls: int = 0  # calls of new-only fires that are labelled known differences
    quarantined: tuple[QuarantinedJob, ...] = ()  # legacy jobs never migrated, with their fires in the window
    # (job code, expected fires in the window) of every recurring job the new side was given
    fires_per_job: tuple[tuple[str, int], ...] = ()
    # legacy calls of the occurrences a rollback fence took from the new side: legacy's to
    # fire, not held against the new side's volume
    fenced_legacy_calls: int = 0

    @property
    def not_migrated_calls(self) -> int:
        """Legacy calls of quarantined jobs the new side was never given."""
        return sum(q.legacy_calls for q in self.quarantined)


@dataclass(frozen=True)
class Evaluation:
    verdict: Verdict
    checks: tuple[Check, ...]
    noise: dict[str, float]


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.2f}".rstrip("0").rstrip(".") + "%"


def _rate_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x * 100:.1f}%"


def _s(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g} s"


def _when(at: datetime) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def _plural(noun: str, n: int) -> str:
    return noun if n == 1 else noun.replace("fire", "fires", 1)


def _span(first: datetime, last: datetime) -> str:
    return f"at {_when(first)}" if first == last else f"between {_when(first)} and {_when(last)}"


def _job_details(groups: tuple[MismatchGroup, ...], kind: MismatchKind, noun: str) -> tuple[str, ...]:
    mine = [g for g in groups if g.kind is kind and g.flagged]
    out = [
        f"{g.count:,} {_plural(noun, g.count)} of job {g.job_code} {_span(g.first_at, g.last_at)}"
        for g in mine[:MAX_JOB_DETAILS]
    ]
    if len(mine) > MAX_JOB_DETAILS:
        rest = sum(g.count for g in mine[MAX_JOB_DETAILS:])
        out.append(f"... and {rest:,} more in {len(mine) - MAX_JOB_DETAILS} other job(s)")
    return tuple(out)


def _baseline_ref(b: SideMeasures) -> int:
    return max(1, b.fires + b.missing)


def _count_check(
    ev: Evidence, code: str, kind: MismatchKind, noise: float, abs_t: float, noun: str, adjective: str
) -> Check:
    n = ev.counts[kind.value]["flagged"]
    ref = max(1, ev.reference)
    raw = n / ref
    failed = clears(raw, noise, abs_t, ev.thresholds.rel)
    head = (
        f"{n:,} {adjective} fire{'' if n == 1 else 's'} on the new side of {ev.reference:,} "
        f"({_pct(raw)}; legacy baseline {_pct(noise)}, threshold {_pct(abs_t)} over noise)"
    )
    if not failed:
        sentence = f"no {adjective} fires on the new side" if n == 0 else f"{head}: within noise and thresholds"
        return Check(code=code, passed=True, sentence=sentence, new=raw, noise=noise)
    return Check(
        code=code, passed=False, sentence=head, new=raw, noise=noise, details=_job_details(ev.groups, kind, noun)
    )


def _lag_check(ev: Evidence) -> Check:
    t = ev.thresholds
    n, leg, base = ev.new.lag.p99, ev.legacy.lag.p99, ev.baseline.lag.p99
    if n is None:
        return Check(code="lag_p99", passed=True, skipped=True, sentence="p99 lag: no lag samples on the new side")
    raw = max(0.0, n - (leg or 0.0))
    noise = abs(leg - base) if leg is not None and base is not None else 0.0
    limit = t.lag_p99_limit.total_seconds()
    failed = n > limit and clears(raw, noise, t.lag_p99_abs.total_seconds(), t.rel)
    ctx = f"legacy {_s(leg)}, baseline noise {_s(noise)}"
    why = "within the limit" if n <= limit else "above the limit but no worse than legacy beyond noise"
    sentence = f"p99 lag {_s(n)} > {_s(limit)} ({ctx})" if failed else f"p99 lag {_s(n)} ({ctx}): {why} of {_s(limit)}"
    return Check(code="lag_p99", passed=not failed, sentence=sentence, new=n, legacy=leg, noise=noise)


def _rate_check(
    ev: Evidence,
    code: str,
    name: str,
    n: float | None,
    leg: float | None,
    base: float | None,
    abs_t: float,
    higher_is_worse: bool,
) -> Check:
    if ev.mode is Mode.SHADOW:
        return Check(code=code, passed=True, skipped=True, sentence=f"{name}: not compared in shadow mode")
    if n is None or leg is None:
        return Check(
            code=code,
            passed=True,
            skipped=True,
            sentence=f"{name}: not enough finished fires to compare (new {_rate_pct(n)}, legacy {_rate_pct(leg)})",
        )
    raw = max(0.0, (n - leg) if higher_is_worse else (leg - n))
    noise = abs(leg - base) if base is not None else 0.0
    failed = clears(raw, noise, abs_t, ev.thresholds.rel)
    sentence = f"{name} {_rate_pct(n)} vs legacy {_rate_pct(leg)} (baseline noise {noise * 100:.1f} pp)"
    details: tuple[str, ...] = ()
    if failed and code == "success_rate":
        details = _job_details(ev.groups, MismatchKind.FAILED_ON_NEW, "fire failed on the new side only")
    return Check(code=code, passed=not failed, sentence=sentence, new=n, legacy=leg, noise=noise, details=details)


def _per_unit(calls: int, expected: int, window: Window) -> float:
    return calls / expected if expected else calls / max(1e-9, window.length.total_seconds() / 3600)


def _volume_check(ev: Evidence) -> Check:
    n, b = ev.new.calls - ev.labelled_new_calls, ev.baseline
    leg = ev.legacy.calls - ev.not_migrated_calls - ev.fenced_legacy_calls
    raw = abs(n / leg - 1.0) if leg else (1.0 if n else 0.0)
    now_rate = _per_unit(leg, ev.legacy.expected, ev.window)
    base_rate = _per_unit(b.calls, b.expected, ev.window)
    noise = abs(now_rate - base_rate) / base_rate if base_rate else 0.0
    failed = clears(raw, noise, ev.thresholds.volume_abs, ev.thresholds.rel)
    delta = (n / leg - 1.0) if leg else None
    shown = "n/a" if delta is None else f"{delta * 100:+.1f}%"
    sentence = f"call volume {n:,} vs legacy {leg:,} ({shown}; baseline noise {noise * 100:.1f}%)"
    if ev.labelled_new_calls:
        sentence += f", not counting {ev.labelled_new_calls:,} new-side call(s) of labelled known differences"
    if ev.not_migrated_calls:
        sentence += f", not counting {ev.not_migrated_calls:,} legacy call(s) of quarantined (not migrated) jobs"
    if ev.fenced_legacy_calls:
        sentence += (
            f", not counting {ev.fenced_legacy_calls:,} legacy call(s) of occurrences a rollback fence "
            "or an operator's stop took from the new side"
        )
    return Check(code="volume", passed=not failed, sentence=sentence, new=float(n), legacy=float(leg), noise=noise)


def _quarantine_check(ev: Evidence) -> Check:
    """Quarantined legacy jobs are never counted against the new side, but never hidden
    either: a passing check with a warning (the report, the CLI and the summary say it)."""
    held = ev.quarantined
    if not held:
        return Check(
            code="quarantined",
            passed=True,
            sentence="no quarantined legacy jobs: every legacy job of this business in the migration "
            "ledger was migrated",
        )
    fires = sum(q.legacy_fires for q in held)
    sentence = (
        f"{quarantine_sentence(len(held))} ({fires:,} legacy fire(s) in the window labelled not_migrated, "
        "not counted as missing on the new side)"
    )
    details = tuple(
        f"{q.source_key} ({q.job_code}): {q.detail}; {q.legacy_fires:,} legacy fire(s) in the window"
        for q in held[:MAX_JOB_DETAILS]
    )
    if len(held) > MAX_JOB_DETAILS:
        details += (
            f"... and {len(held) - MAX_JOB_DETAILS} more quarantined job(s): `switchyard migrate "
            "quarantine` lists them all",
        )
    return Check(
        code="quarantined", passed=True, warning=True, sentence=sentence, new=float(len(held)), details=details
    )


def _consumer_check(ev: Evidence) -> Check:
    lag = ev.consumer_lag
    if lag is None:
        return Check(
            code="consumer_lag", passed=True, skipped=True, sentence="consumer lag: not measured (no Pulsar admin URL)"
        )
    limit = ev.thresholds.max_due_backlog
    sentence = (
        f"consumer lag: {lag.due:,} due command(s) waiting in subscription {lag.subscription!r} of "
        f"{lag.topic} ({lag.delayed:,} delayed, not yet due)"
    )
    if lag.due > limit:
        return Check(code="consumer_lag", passed=False, sentence=f"{sentence} > {limit:,}", new=float(lag.due))
    return Check(code="consumer_lag", passed=True, sentence=sentence, new=float(lag.due))


def _data_check(ev: Evidence) -> Check:
    total = ev.legacy.fires + ev.new.fires + ev.legacy.unscheduled
    w = ev.window
    if total < ev.thresholds.min_fires:
        return Check(
            code="data",
            passed=False,
            sentence=f"only {total} fire(s) on either side between {_when(w.start)} and {_when(w.end)}: "
            f"nothing to compare (need {ev.thresholds.min_fires})",
        )
    return Check(
        code="data",
        passed=True,
        sentence=f"{ev.legacy.fires:,} legacy and {ev.new.fires:,} new fires between {_when(w.start)} "
        f"and {_when(w.end)}",
    )


def duration_text(d: timedelta) -> str:
    """'45 s', '20 min', '1 h 30 min', '181 d' (whole seconds)."""
    total = int(d.total_seconds())
    days, rest = divmod(total, 86400)
    h, rest = divmod(rest, 3600)
    m, sec = divmod(rest, 60)
    parts = [
        f"{days} d" if days else "",
        f"{h} h" if h else "",
        f"{m} min" if m else "",
        f"{sec} s" if sec or not total else "",
    ]
    return " ".join(p for p in parts if p)


_DEFAULTS = Thresholds()


def _lowered(name: str, lowered: bool, default: str) -> str:
    """A minimum set below its default passes, with a warning: whoever reads the verdict (the
    report, the cutover gate) sees that it rests on less evidence than the default asks."""
    return f"; the minimum {name} was lowered from the default {default}" if lowered else ""


def _window_check(ev: Evidence) -> Check:
    """A short window is no evidence: whatever it shows, the verdict cannot be ready."""
    need, have, w = ev.thresholds.min_window, ev.window.length, ev.window
    span = f"{_when(w.start)} .. {_when(w.end)}"
    if have < need:
        return Check(
            code="window",
            passed=False,
            new=have.total_seconds(),
            sentence=f"the compared window {span} is {duration_text(have)} long, shorter than the minimum "
            f"of {duration_text(need)} (min_window): too little evidence for a verdict",
        )
    lowered = _lowered("min_window", need < _DEFAULTS.min_window, duration_text(_DEFAULTS.min_window))
    return Check(
        code="window",
        passed=True,
        warning=bool(lowered),
        new=have.total_seconds(),
        sentence=f"the compared window {span} is {duration_text(have)} long (minimum {duration_text(need)}){lowered}",
    )


def _fires_per_job_check(ev: Evidence) -> Check:
    """Every recurring job needs a number of expected fires in the window, named when short."""
    need, jobs, w = ev.thresholds.min_fires_per_job, ev.fires_per_job, ev.window
    span = f"{duration_text(w.length)} window {_when(w.start)} .. {_when(w.end)}"
    if not jobs:
        return Check(
            code="fires_per_job",
            passed=True,
            skipped=True,
            sentence="fires per job: no recurring migrated job to count (one-shot or stopped jobs only)",
        )
    short = [(code, n) for code, n in jobs if n < need]
    if short:
        head = (
            f"{len(short)} of {len(jobs)} recurring job(s) have fewer than {need:,} expected fires in the "
            f"{span} (min_fires_per_job): too little evidence per job"
        )
        if len(short) <= INLINE_JOBS:  # named in the sentence itself (the summary shows only sentences)
            named = ", ".join(f"job {code} has {n:,}" for code, n in short)
            return Check(code="fires_per_job", passed=False, new=float(short[0][1]), sentence=f"{head}: {named}")
        details = tuple(
            f"job {code}: {n:,} expected fire(s) in the window, need {need:,}" for code, n in short[:MAX_JOB_DETAILS]
        )
        if len(short) > MAX_JOB_DETAILS:
            details += (f"... and {len(short) - MAX_JOB_DETAILS} more job(s) with fewer than {need:,}",)
        return Check(code="fires_per_job", passed=False, new=float(short[0][1]), sentence=head, details=details)
    code, fewest = jobs[0]
    lowered = _lowered("min_fires_per_job", need < _DEFAULTS.min_fires_per_job, str(_DEFAULTS.min_fires_per_job))
    return Check(
        code="fires_per_job",
        passed=True,
        warning=bool(lowered),
        new=float(fewest),
        sentence=f"every recurring job has at least {need:,} expected fires in the {span} (fewest: job "
        f"{code}, {fewest:,}){lowered}",
    )


def noise_of(ev: Evidence) -> dict[str, float]:
    b = ev.baseline
    ref = _baseline_ref(b)
    out = {"missing": b.missing / ref, "late": b.late / ref, "extra": b.duplicates / ref, "items": 0.0}
    if ev.legacy.lag.p99 is not None and b.lag.p99 is not None:
        out["lag_p99"] = abs(ev.legacy.lag.p99 - b.lag.p99)
    for key in ("success_rate", "timeout_rate"):
        leg, base = getattr(ev.legacy, key), getattr(b, key)
        if leg is not None and base is not None:
            out[key] = abs(leg - base)
    return out


def evaluate(ev: Evidence) -> Evaluation:
    t, noise = ev.thresholds, noise_of(ev)
    checks: tuple[Check, ...] = (
        _data_check(ev),
        _window_check(ev),
        _fires_per_job_check(ev),
        _count_check(
            ev, "missing", MismatchKind.MISSING_ON_NEW, noise["missing"], t.missing_abs, "missing fire", "missing"
        ),
        _count_check(ev, "extra", MismatchKind.EXTRA_ON_NEW, noise["extra"], t.extra_abs, "extra fire", "extra"),
        _count_check(ev, "late", MismatchKind.LATE_ON_NEW, noise["late"], t.late_abs, "late fire", "late"),
        _count_check(
            ev,
            "items",
            MismatchKind.ITEMS_DIFFER,
            noise["items"],
            t.extra_abs,
            "fire with a different item count",
            "differently sharded",
        ),
        _lag_check(ev),
        _rate_check(
            ev,
            "success_rate",
            "success rate",
            ev.new.success_rate,
            ev.legacy.success_rate,
            ev.baseline.success_rate,
            t.success_rate_abs,
            higher_is_worse=False,
        ),
        _rate_check(
            ev,
            "timeout_rate",
            "timeout rate",
            ev.new.timeout_rate,
            ev.legacy.timeout_rate,
            ev.baseline.timeout_rate,
            t.timeout_rate_abs,
            higher_is_worse=True,
        ),
        _volume_check(ev),
        _consumer_check(ev),
        _quarantine_check(ev),
    )
    if ev.mode is Mode.SHADOW:
        checks += (Check(code="shadow", passed=True, skipped=True, warning=True, sentence=SHADOW_WARNING),)
    ready = all(c.passed or c.skipped for c in checks)
    return Evaluation(Verdict.READY if ready else Verdict.NOT_READY, checks, noise)


__all__ = ["SHADOW_NOTE", "SHADOW_WARNING", "clears", "duration_text", "evaluate", "from_iso", "iso"]
