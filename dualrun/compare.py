"""One comparison of a business over a window: measures of both sides, the A/A baseline,
the mismatches, the time series, and the verdict, computed from frames (no I/O here;
`dualrun.collect` fetches the frames, `dualrun.verdict` stores the result)."""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np
import pandas as pd

from dualrun import verdict as rules
from dualrun.frames import FAIL, KILLED, NONE, SUCCESS, TIMEOUT, UNFINISHED, JobIndex, JobInfo
from dualrun.match import (
    KINDS,
    LABEL_CODE,
    LABELS,
    NO_LABEL,
    ClassifyContext,
    JobFlags,
    Keys,
    SideFires,
    Table,
    expected_keys,
    lineage_skips,
    match,
    member,
    new_late,
    prepare_legacy,
)
from dualrun.model import (
    LABEL_TEXT,
    Bucket,
    CompareSpan,
    Comparison,
    ConsumerLag,
    Label,
    LagStats,
    Mismatch,
    MismatchGroup,
    MismatchKind,
    Mode,
    QuarantinedJob,
    SideMeasures,
    Window,
    iso,
)
from dualrun.precision import floored, precision_of
from dualrun.settings import CompareSettings, MatchSettings, thresholds_as_dict
from readers.records import SourceSystem
from scheduler_core.times import duration_ms, from_ms, to_ms

_Q = (50, 95, 99, 100)
MAX_GROUPS = 500


@dataclass(frozen=True, kw_only=True)
class Inputs:
    """Everything one comparison is computed from."""

    biz_code: str
    source: str
    mode: Mode
    window: Window
    baseline_window: Window
    legacy: pd.DataFrame  # attempts, fetched with margins around the window
    baseline_legacy: pd.DataFrame
    new: pd.DataFrame
    expected: pd.DataFrame
    baseline_expected: pd.DataFrame
    jobs: JobIndex
    info: Mapping[int, JobInfo]
    legacy_biz_code: str = ""
    consumer_lag: ConsumerLag | None = None
    notes: tuple[str, ...] = ()
    quarantined: Mapping[int, QuarantinedJob] = field(default_factory=dict)  # job id -> never migrated
    span: CompareSpan | None = None  # the window asked for, clipped at the business's switches


# --- measures -----------------------------------------------------------------------------


def lag_stats(lag_ms: np.ndarray) -> LagStats:
    """Nearest-rank percentiles (scheduler_core.stats.percentile's definition), in seconds."""
    if not len(lag_ms):
        return LagStats()
    p = np.percentile(lag_ms, _Q, method="inverted_cdf") / 1000.0
    return LagStats(samples=len(lag_ms), p50=float(p[0]), p95=float(p[1]), p99=float(p[2]), max=float(p[3]))


def _item_lags(items: pd.DataFrame) -> np.ndarray:
    d = items["dispatch"]
    ok = d != NONE
    return d[ok] - items["sched"][ok]


@dataclass(frozen=True, slots=True)
class RunClock:
    """What tells a run still executing from one that outlived its timeout: the time of the
    comparison and each job's timeout."""

    now_ms: int
    timeout_ms: np.ndarray  # per job id, 0: none
    grace_ms: int

    def overdue(self, items: Table) -> np.ndarray:
        """Items received or started, with no result, past their job's timeout plus the grace."""
        d = np.asarray(items["dispatch"])
        jobs = np.asarray(items["job"])
        limit = self.timeout_ms[jobs] if len(self.timeout_ms) else np.zeros(len(jobs), dtype=np.int64)
        return (
            (np.asarray(items["status"]) == UNFINISHED)
            & (d != NONE)
            & (limit > 0)
            & (self.now_ms - d > limit + self.grace_ms)
        )


def side_measures(
    side: SideFires, *, expected_fk: np.ndarray, late: np.ndarray, unscheduled: int = 0, clock: RunClock | None = None
) -> SideMeasures:
    items, fires = side.items, side.fires
    status = items["status"]
    attempts = int(items["attempts"].sum())
    fk = fires["fk"]
    missing = len(expected_fk) - int(member(fk, expected_fk).sum())
    # a received run with no result is running within its timeout; past it (and the grace
    # its own timeout result needs to arrive) it is counted as timed out, never as running
    overdue = clock.overdue(items) if clock is not None else np.zeros(len(items), dtype=bool)
    unfinished = (status == UNFINISHED) & ~overdue
    return SideMeasures(
        fires=len(fires),
        calls=len(items),
        attempts=attempts,
        retries=attempts - len(items),
        duplicates=int(items["dups"].sum()),
        unscheduled=unscheduled,
        succeeded=int((status == SUCCESS).sum()),
        failed=int((status == FAIL).sum()),
        timed_out=int((status == TIMEOUT).sum()) + int(overdue.sum()),
        killed=int((status == KILLED).sum()),
        unfinished=int(unfinished.sum()),
        running=int((unfinished & (items["dispatch"] != NONE)).sum()),
        late=int(late.sum()),
        missing=missing,
        expected=len(expected_fk),
        lag=lag_stats(_item_lags(items)),
    )


def legacy_late(fires: pd.DataFrame, s: MatchSettings) -> np.ndarray:
    d = fires["dispatch"]
    return (d != NONE) & (d - fires["sched"] > s.late_after.total_seconds() * 1000)


def baseline_measures(inputs: Inputs, s: MatchSettings, flags: JobFlags, clock: RunClock | None = None) -> SideMeasures:
    """The legacy side over the earlier window, against its own schedule (the A/A run).
    Occurrences xxl-job's cron lineage is known to skip are not expected of it."""
    w = inputs.baseline_window
    start, end = to_ms(w.start), to_ms(w.end)
    keys = Keys(origin=start, job_bits=max(1, len(inputs.jobs).bit_length()))
    exp = Table.of(inputs.baseline_expected)
    side, unsched = prepare_legacy(Table.of(inputs.baseline_legacy), exp, start, end, s, keys)
    exp_fk = expected_keys(exp, start, end, keys)
    if inputs.source == SourceSystem.XXL_JOB and len(exp_fk):
        exp_fk = exp_fk[~lineage_skips(keys.job(exp_fk), keys.sched(exp_fk), flags)]
    return side_measures(
        side, expected_fk=exp_fk, late=legacy_late(side.fires, s), unscheduled=len(unsched), clock=clock
    )


def labelled_new_calls(frame: pd.DataFrame) -> int:
    """Calls of new-only fires labelled as known differences: not part of the volume check."""
    sel = (frame["kind"].to_numpy() == KINDS.index(MismatchKind.MISSING_ON_LEGACY)) & (
        frame["label"].to_numpy() != NO_LABEL
    )
    return int(frame["b"].to_numpy()[sel].sum())


def _not_migrated(frame: pd.DataFrame) -> np.ndarray:
    """Legacy fires of quarantined jobs the new side was never given (b: their calls)."""
    return (frame["kind"].to_numpy() == KINDS.index(MismatchKind.MISSING_ON_NEW)) & (
        frame["label"].to_numpy() == LABEL_CODE[Label.NOT_MIGRATED]
    )


def quarantined_jobs(
    frame: pd.DataFrame, quarantined: Mapping[int, QuarantinedJob], n_jobs: int
) -> tuple[QuarantinedJob, ...]:
    """The quarantined jobs with their not-migrated legacy fires and calls in the window
    (one bincount per measure, whatever the number of rows)."""
    if not quarantined:
        return ()
    sel = _not_migrated(frame)
    job = frame["job"].to_numpy()[sel]
    fires = np.bincount(job, minlength=n_jobs)
    calls = np.bincount(job, weights=frame["b"].to_numpy()[sel], minlength=n_jobs)
    out = [replace(q, legacy_fires=int(fires[jid]), legacy_calls=int(calls[jid])) for jid, q in quarantined.items()]
    return tuple(sorted(out, key=lambda q: (-q.legacy_fires, q.source_key)))


def fires_per_job(
    expected_fk: np.ndarray,
    keys: Keys,
    jobs: JobIndex,
    info: Mapping[int, JobInfo],
    quarantined: Mapping[int, QuarantinedJob],
) -> tuple[tuple[str, int], ...]:
    """Expected occurrences in the window of every recurring job the new side was given
    (job code, count), fewest first: the verdict's evidence per job. A recurring job with
    no occurrence in the window (a daily job in an hour) is listed with 0."""
    counts = np.bincount(keys.job(expected_fk), minlength=len(jobs)) if len(expected_fk) else np.zeros(len(jobs))
    out = [(jobs.code(jid), int(counts[jid])) for jid, ji in info.items() if ji.recurring and jid not in quarantined]
    return tuple(sorted(out, key=lambda jc: (jc[1], jc[0])))


# --- time series --------------------------------------------------------------------------


def _bucket_ms(window: Window, buckets: int) -> int:
    raw = window.length.total_seconds() * 1000 / max(1, buckets)
    return max(1000, int(-(-raw // 1000) * 1000))


def _bucket_pcts(bounds: np.ndarray, lag: np.ndarray, ok: np.ndarray) -> dict[int, np.ndarray]:
    """Per bucket nearest-rank p50/p95/p99 of lag (NaN where empty). Items are in fire-time
    order, so each bucket is one contiguous slice: one partition per bucket, no sort."""
    n = len(bounds) - 1
    out = {q: np.full(n, np.nan) for q in (50, 95, 99)}
    for i in range(n):
        sl = lag[bounds[i] : bounds[i + 1]][ok[bounds[i] : bounds[i + 1]]]
        if len(sl):
            p = np.percentile(sl, (50, 95, 99), method="inverted_cdf") / 1000.0
            out[50][i], out[95][i], out[99][i] = p
    return out


def _side_series(side: SideFires, start: int, width: int, n: int) -> dict[str, np.ndarray]:
    items = side.items
    sched, d, status = items["sched"], items["dispatch"], items["status"]
    bounds = np.searchsorted(sched, start + np.arange(n + 1, dtype=np.int64) * width)
    bounds[-1] = len(sched)
    pct = _bucket_pcts(bounds, d - sched, d != NONE)
    counts = np.diff(bounds)
    b = np.repeat(np.arange(n), counts)
    fin = np.bincount(b, weights=(status == SUCCESS) | (status == FAIL) | (status == TIMEOUT), minlength=n)
    suc = np.bincount(b, weights=status == SUCCESS, minlength=n)
    fires = np.diff(np.searchsorted(side.fires["sched"], start + np.arange(n + 1, dtype=np.int64) * width))
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(fin > 0, suc / np.where(fin > 0, fin, 1), np.nan)
    return {"fires": fires, "p50": pct[50], "p95": pct[95], "p99": pct[99], "success": rate}


def _opt(v: float) -> float | None:
    return None if np.isnan(v) else round(float(v), 3)


def build_series(legacy: SideFires, new: SideFires, window: Window, buckets: int) -> tuple[Bucket, ...]:
    width = _bucket_ms(window, buckets)
    start = to_ms(window.start)
    n = max(1, -(-(to_ms(window.end) - start) // width))
    ls, ns = _side_series(legacy, start, width, n), _side_series(new, start, width, n)
    return tuple(
        Bucket(
            start=from_ms(start + i * width),
            legacy_fires=int(ls["fires"][i]),
            new_fires=int(ns["fires"][i]),
            legacy_p50=_opt(ls["p50"][i]),
            legacy_p95=_opt(ls["p95"][i]),
            legacy_p99=_opt(ls["p99"][i]),
            new_p50=_opt(ns["p50"][i]),
            new_p95=_opt(ns["p95"][i]),
            new_p99=_opt(ns["p99"][i]),
            legacy_success=_opt(ls["success"][i]),
            new_success=_opt(ns["success"][i]),
        )
        for i in range(n)
    )


# --- mismatch summaries -------------------------------------------------------------------


def _flagged_mask(frame: pd.DataFrame) -> np.ndarray:
    against = np.asarray([k.against_new for k in KINDS])[frame["kind"].to_numpy()]
    return against & (frame["label"].to_numpy() == NO_LABEL)


def mismatch_counts(frame: pd.DataFrame) -> dict[str, dict[str, int]]:
    flagged = _flagged_mask(frame)
    kind, labelled = frame["kind"].to_numpy(), frame["label"].to_numpy() != NO_LABEL
    out: dict[str, dict[str, int]] = {}
    for code, k in enumerate(KINDS):
        sel = kind == code
        out[k.value] = {
            "total": int(sel.sum()),
            "flagged": int((sel & flagged).sum()),
            "labelled": int((sel & labelled).sum()),
        }
    return out


def _held_detail(quarantined: Mapping[int, QuarantinedJob], label: int, job: int) -> str | None:
    if label != LABEL_CODE[Label.NOT_MIGRATED]:
        return None
    q = quarantined.get(job)
    return q.detail if q is not None else "not migrated (quarantined)"


def mismatch_groups(
    frame: pd.DataFrame,
    jobs: JobIndex,
    limit: int = MAX_GROUPS,
    quarantined: Mapping[int, QuarantinedJob] | None = None,
) -> tuple[MismatchGroup, ...]:
    if not len(frame):
        return ()
    g = frame.groupby(["kind", "label", "job"], sort=False)["sched"].agg(["count", "min", "max"]).reset_index()
    g["flagged"] = _flagged_mask(g)
    g = g.sort_values(["flagged", "count", "kind", "job"], ascending=[False, False, True, True]).head(limit)
    return tuple(
        MismatchGroup(
            kind=KINDS[int(r.kind)],
            job_code=jobs.code(int(r.job)),
            count=int(r["count"]),
            first_at=from_ms(r["min"]),
            last_at=from_ms(r["max"]),
            label=None if r.label == NO_LABEL else LABELS[int(r.label)],
            detail=_held_detail(quarantined or {}, int(r.label), int(r.job)) or "",
        )
        for _, r in g.iterrows()
    )


_FAILED_WORD = {FAIL: "failed", TIMEOUT: "timed out"}


def _secs(ms: int) -> str:
    return "unknown" if ms == NONE else f"{ms / 1000:.1f} s"


def detail(kind: MismatchKind, a: int, b: int) -> str:
    texts = {
        MismatchKind.MISSING_ON_NEW: f"legacy fired it (lag {_secs(a)}); the new side did not"
        + {
            1: ", its misfire policy skipped it",
            2: ", a rollback fence skipped it there (the legacy side's to fire)",
            3: ", an operator's stop skipped it there (pause, cancel or freeze)",
        }.get(b, ""),
        MismatchKind.EXTRA_ON_NEW: (
            f"fired {b + 1} times on the new side (a doubled trigger)"
            if b > 0
            else "fired on the new side; not in the legacy schedule, not fired by legacy"
        ),
        MismatchKind.LATE_ON_NEW: (
            f"new side lag {_secs(a)} (legacy {_secs(b)})"
            if a != NONE
            else f"not received by an executor (legacy lag {_secs(b)})"
        ),
        MismatchKind.FAILED_ON_NEW: f"{_FAILED_WORD.get(a, 'failed')} on the new side; legacy succeeded",
        MismatchKind.FAILED_ON_LEGACY: f"{_FAILED_WORD.get(a, 'failed')} on legacy; the new side succeeded",
        MismatchKind.ITEMS_DIFFER: f"legacy {a} sharding items, new {b}",
        MismatchKind.MISSING_ON_LEGACY: f"expected by the schedule and fired by the new side only (lag {_secs(a)})",
        MismatchKind.UNSCHEDULED_ON_LEGACY: {
            2: "manual, API or parent-job fire on legacy",
            3: "misfire-compensation fire on legacy",
        }.get(a, "legacy fire that no expected occurrence explains"),
        MismatchKind.MISSING_ON_BOTH: "expected by the schedule; neither side fired it",
        MismatchKind.RETRIES_DIFFER: f"legacy made {a} attempt(s) ({a - 1} retries), the new side {b} ({b - 1} retries) "
        "for the same occurrence",
    }
    return texts[kind]


def mismatch_sample(
    frame: pd.DataFrame, jobs: JobIndex, limit: int, quarantined: Mapping[int, QuarantinedJob] | None = None
) -> tuple[Mismatch, ...]:
    if not len(frame) or limit <= 0:
        return ()
    flagged = _flagged_mask(frame)
    order = np.r_[np.flatnonzero(flagged)[:limit], np.flatnonzero(~flagged)[:limit]][:limit]
    rows = frame.iloc[order].sort_values(["kind", "sched", "job"], kind="stable")
    return tuple(
        Mismatch(
            kind=KINDS[int(r.kind)],
            job_code=jobs.code(int(r.job)),
            scheduled_at=from_ms(r.sched),
            label=None if r.label == NO_LABEL else LABELS[int(r.label)],
            detail=_held_detail(quarantined or {}, int(r.label), int(r.job))
            or detail(KINDS[int(r.kind)], int(r.a), int(r.b)),
        )
        for r in rows.itertuples(index=False)
    )


# --- the comparison -----------------------------------------------------------------------


def _notes(inputs: Inputs, counts: dict[str, dict[str, int]], frame: pd.DataFrame) -> tuple[str, ...]:
    notes = list(inputs.notes)
    if inputs.span is not None and (inputs.span.clipped or inputs.span.note):
        notes.insert(0, inputs.span.sentence)
    if inputs.mode is Mode.SHADOW:
        notes.insert(0, rules.SHADOW_NOTE)
    labels = frame["label"].to_numpy()
    for code, lab in enumerate(LABELS):
        n = int((labels == code).sum())
        if n:
            notes.append(f"{n:,} fire(s) labelled {lab.value}, not counted against the new side: {LABEL_TEXT[lab]}")
    tries = counts[MismatchKind.RETRIES_DIFFER.value]["total"]
    if tries:
        notes.append(
            f"{tries:,} occurrence(s) fired by both sides took a different number of attempts (retries "
            "compared per occurrence; listed as retries_differ, not counted against the new side)"
        )
    both = counts[MismatchKind.MISSING_ON_BOTH.value]["total"] - counts[MismatchKind.MISSING_ON_BOTH.value]["labelled"]
    if both:
        notes.append(
            f"{both:,} expected fire(s) were fired by neither side (both paths were down, or the definition changed)"
        )
    return tuple(notes)


def compare_frames(inputs: Inputs, settings: CompareSettings, now: datetime) -> Comparison:
    """The comparison of one business over one window, with its verdict."""
    t0 = time.perf_counter()
    s = settings.match
    precision = precision_of(inputs.source)
    inputs = replace(
        inputs,
        legacy=floored(inputs.legacy, "trig", precision.ms),
        baseline_legacy=floored(inputs.baseline_legacy, "trig", precision.ms),
        new=floored(inputs.new, "recv", precision.ms),
    )
    start, end = to_ms(inputs.window.start), to_ms(inputs.window.end)
    ctx = ClassifyContext(
        settings=s,
        flags=JobFlags.build(len(inputs.jobs), inputs.info, inputs.quarantined),
        xxl=inputs.source == SourceSystem.XXL_JOB,
        shadow=inputs.mode is Mode.SHADOW,
        now_ms=to_ms(now),
    )
    assert ctx.flags.timeout_ms is not None
    clock = RunClock(now_ms=to_ms(now), timeout_ms=ctx.flags.timeout_ms, grace_ms=duration_ms(s.result_grace))
    # the A/A baseline is independent of the current window: numpy and pandas release the
    # GIL in their sorts, searches and joins, so it runs beside the matching
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="dualrun-baseline") as pool:
        pending = pool.submit(baseline_measures, inputs, s, ctx.flags, clock)
        m = match(
            Table.of(inputs.legacy),
            Table.of(inputs.new),
            Table.of(inputs.expected),
            start=start,
            end=end,
            n_jobs=len(inputs.jobs),
            ctx=ctx,
        )
        baseline = pending.result()
    legacy = side_measures(
        m.legacy,
        expected_fk=m.expected_fk,
        late=legacy_late(m.legacy.fires, s),
        unscheduled=len(m.unscheduled),
        clock=clock,
    )
    # occurrences a rollback fence took from the new side are the legacy side's to fire
    new_expected = m.expected_fk[~member(m.fenced_fk, m.expected_fk)]
    keys = Keys(origin=start, job_bits=max(1, len(inputs.jobs).bit_length()))
    if inputs.quarantined and len(new_expected):  # the new side is not expected to fire what it was never given
        new_expected = new_expected[~ctx.flags.quarantined[keys.job(new_expected)]]
    new = side_measures(m.new, expected_fk=new_expected, late=new_late(m.new.fires, s, to_ms(now)), clock=clock)
    counts = mismatch_counts(m.mismatches)
    groups = mismatch_groups(m.mismatches, inputs.jobs, quarantined=inputs.quarantined)
    held = quarantined_jobs(m.mismatches, inputs.quarantined, len(inputs.jobs))
    evaluation = rules.evaluate(
        rules.Evidence(
            mode=inputs.mode,
            window=inputs.window,
            legacy=legacy,
            new=new,
            baseline=baseline,
            reference=m.reference,
            counts=counts,
            groups=groups,
            consumer_lag=inputs.consumer_lag,
            thresholds=settings.thresholds,
            labelled_new_calls=labelled_new_calls(m.mismatches),
            quarantined=held,
            fires_per_job=fires_per_job(new_expected, keys, inputs.jobs, inputs.info, inputs.quarantined),
            fenced_legacy_calls=m.fenced_legacy_calls,
        )
    )
    return Comparison(
        biz_code=inputs.biz_code,
        legacy_biz_code=inputs.legacy_biz_code or inputs.biz_code,
        source=inputs.source,
        mode=inputs.mode,
        window=inputs.window,
        baseline_window=inputs.baseline_window,
        computed_at=now,
        verdict=evaluation.verdict,
        checks=evaluation.checks,
        legacy=legacy,
        new=new,
        baseline=baseline,
        noise=evaluation.noise,
        reference_fires=m.reference,
        mismatch_counts=counts,
        mismatch_groups=groups,
        mismatches=mismatch_sample(m.mismatches, inputs.jobs, s.max_listed, inputs.quarantined),
        series=build_series(m.legacy, m.new, inputs.window, s.buckets),
        consumer_lag=inputs.consumer_lag,
        notes=_notes(inputs, counts, m.mismatches),
        thresholds=thresholds_as_dict(settings.thresholds),
        quarantined=held,
        seconds=time.perf_counter() - t0,
        span=inputs.span,
        lag_precision=precision,
    )


def baseline_window(window: Window, offset: timedelta | None) -> Window:
    """The A/A window: the same length, shifted back by `offset` (default: its length)."""
    return window.shifted(offset or window.length)


__all__ = ["Inputs", "baseline_window", "compare_frames", "iso"]
