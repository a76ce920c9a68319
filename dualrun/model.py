"""The comparator's terms: window, side measures, mismatches, checks, verdict, comparison.

Pure stdlib: frozen dataclasses with aware-UTC datetimes. A `Comparison` round-trips
through `as_dict` / `comparison_from_dict` (the JSON stored in `dus_comparison.body`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from scheduler_core.times import require_aware

BODY_VERSION = 1


def iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat().replace("+00:00", "Z")


def from_iso(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


class Verdict(enum.StrEnum):
    READY = "ready"
    NOT_READY = "not_ready"


class Mode(enum.StrEnum):
    BOTH = "dual_run"  # both paths invoke the handlers: everything is compared
    SHADOW = "shadow"  # the new path records without invoking: timing and volume only


class Side(enum.StrEnum):
    LEGACY = "legacy"
    NEW = "new"


class MismatchKind(enum.StrEnum):
    MISSING_ON_NEW = "missing_on_new"  # legacy fired (or the schedule says so), new did not
    EXTRA_ON_NEW = "extra_on_new"  # new fired what nobody expected, or fired it twice
    LATE_ON_NEW = "late_on_new"  # both fired, new later than late_after, legacy on time
    FAILED_ON_NEW = "failed_on_new"  # both fired, new failed or timed out, legacy succeeded
    FAILED_ON_LEGACY = "failed_on_legacy"  # both fired, legacy failed, new succeeded
    ITEMS_DIFFER = "items_differ"  # both fired with a different number of sharding items
    MISSING_ON_LEGACY = "missing_on_legacy"  # expected and fired by new, not by legacy
    UNSCHEDULED_ON_LEGACY = "unscheduled_on_legacy"  # a legacy fire no schedule explains
    MISSING_ON_BOTH = "missing_on_both"  # expected, fired by neither
    # both fired and finished with a different number of attempts (retries) for the same
    # occurrence: shown (a bridged run's retry policy should match legacy's), not counted
    # against the new side: a first attempt failing on one side only is the handler's luck
    RETRIES_DIFFER = "retries_differ"

    @property
    def against_new(self) -> bool:
        """A difference where the new side is the one that did worse."""
        return self in _AGAINST_NEW


_AGAINST_NEW = frozenset(
    {
        MismatchKind.MISSING_ON_NEW,
        MismatchKind.EXTRA_ON_NEW,
        MismatchKind.LATE_ON_NEW,
        MismatchKind.FAILED_ON_NEW,
        MismatchKind.ITEMS_DIFFER,
    }
)


class Label(enum.StrEnum):
    """A known, legitimate difference: shown, never counted against the new side."""

    XXL_MONTH_END = "xxl_month_end"
    MISFIRE_THRESHOLD = "misfire_threshold"
    LEGACY_UNSCHEDULED = "legacy_unscheduled"
    BROADCAST_ITEMS = "broadcast_items"
    LEGACY_MISSED = "legacy_missed"
    NOT_MIGRATED = "not_migrated"  # the legacy job is quarantined in the migration ledger
    ROLLBACK_FENCE = "rollback_fence"  # the new side skipped it by a rollback's fence: legacy's to fire
    OPERATOR_STOP = "operator_stop"  # an operator stopped it on the new side (pause, cancel, freeze)


LABEL_TEXT: dict[Label, str] = {
    Label.XXL_MONTH_END: "xxl-job 3.1-3.3 (Quartz 2.5.0 cron lineage) skips L/W day-of-month fires in months "
    "shorter than 31 days; the new side fires them as Quartz documents",
    Label.MISFIRE_THRESHOLD: "xxl-job skips a fire more than 5 s late (misfire threshold 5 s, DO_NOTHING); "
    "the new side's misfire threshold is 2 h, so it fired late instead",
    Label.LEGACY_UNSCHEDULED: "a manual, API, parent-job or misfire-compensation fire on the legacy side: "
    "no schedule asks the new side for it",
    Label.BROADCAST_ITEMS: "xxl-job SHARDING_BROADCAST has one item per live executor; the new side's item "
    "count comes from the sharding configuration",
    Label.LEGACY_MISSED: "the legacy side missed an expected fire that the new side fired",
    Label.NOT_MIGRATED: "not migrated: the legacy job is quarantined in the migration ledger (field and reason "
    "listed) and still runs only on legacy; the new side was never given it",
    Label.ROLLBACK_FENCE: "a rollback handed the occurrence back to legacy: the new side had published it and "
    "its executor skipped it, with a record, by the rollback's fence",
    Label.OPERATOR_STOP: "an operator stopped it on the new side (trigger pause or cancel, freeze): skipped "
    "there with a record naming who and why; the legacy side fired it",
}


def not_migrated_text(field_name: str | None, reason: str | None) -> str:
    """The detail of a fire of a quarantined job: 'not migrated (quarantined: <field>: <reason>)'."""
    what = ": ".join(x for x in (field_name or "", reason or "") if x) or "no reason recorded"
    return f"not migrated (quarantined: {what})"


def quarantine_sentence(n: int) -> str:
    return f"{n:,} legacy job(s) of this business are quarantined and still run only on legacy; fix them before cutover"


@dataclass(frozen=True, slots=True, kw_only=True)
class Window:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        require_aware(self.start, "start")
        require_aware(self.end, "end")
        if self.end <= self.start:
            raise ValueError(f"empty window: {iso(self.start)} .. {iso(self.end)}")

    @property
    def length(self) -> timedelta:
        return self.end - self.start

    def shifted(self, back: timedelta) -> Window:
        return Window(start=self.start - back, end=self.end - back)

    def as_dict(self) -> dict[str, str]:
        return {"start": iso(self.start), "end": iso(self.end)}

    @staticmethod
    def from_dict(d: dict[str, str]) -> Window:
        return Window(start=from_iso(d["start"]), end=from_iso(d["end"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class CompareSpan:
    """The span a comparison covered: the window asked for, clipped at the business's
    switches (dual-run start, cutover, rollback); `clipped` says where and why."""

    requested: Window
    window: Window
    clipped: tuple[str, ...] = ()
    note: str = ""

    @property
    def sentence(self) -> str:
        what = f"compared {iso(self.window.start)} .. {iso(self.window.end)}"
        if self.clipped:
            return (
                f"{what} (asked {iso(self.requested.start)} .. {iso(self.requested.end)}; "
                + "; ".join(self.clipped)
                + ")"
            )
        return what + (f" ({self.note})" if self.note else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested.as_dict(),
            "window": self.window.as_dict(),
            "clipped": list(self.clipped),
            "note": self.note,
            "sentence": self.sentence,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> CompareSpan:
        return CompareSpan(
            requested=Window.from_dict(d["requested"]),
            window=Window.from_dict(d["window"]),
            clipped=tuple(d.get("clipped", ())),
            note=d.get("note", ""),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LagPrecision:
    """The time precision lag is compared at: the coarser of the two sides' (xxl-job's
    trigger_time has whole seconds, the new side milliseconds), so neither side looks
    better by truncation. Both sides' times are floored to it before lag is taken."""

    legacy_ms: int
    new_ms: int
    legacy_source: str  # the column that sets the legacy precision

    @property
    def ms(self) -> int:
        return max(self.legacy_ms, self.new_ms)

    @property
    def sentence(self) -> str:
        return (
            f"lag compared at {_precision(self.ms)} precision, the coarser of legacy "
            f"({self.legacy_source}: {_precision(self.legacy_ms)}) and the new side "
            f"({_precision(self.new_ms)}); both sides' times are truncated to it"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "legacy_ms": self.legacy_ms,
            "new_ms": self.new_ms,
            "legacy_source": self.legacy_source,
            "ms": self.ms,
            "sentence": self.sentence,
        }


def _precision(ms: int) -> str:
    return f"{ms // 1000} s" if ms >= 1000 and ms % 1000 == 0 else f"{ms} ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamState:
    """The change stream of the business when it was checked (by the CLI, with the
    migrator's catch-up check): whether the target holds every legacy edit, and how far
    behind it is otherwise."""

    caught_up: bool
    sentence: str
    checked_at: datetime
    stream_id: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "caught_up": self.caught_up,
            "sentence": self.sentence,
            "checked_at": iso(self.checked_at),
            "stream_id": self.stream_id,
        }

    @staticmethod
    def from_dict(d: dict[str, Any]) -> StreamState:
        return StreamState(
            caught_up=bool(d["caught_up"]),
            sentence=d["sentence"],
            checked_at=from_iso(d["checked_at"]),
            stream_id=d.get("stream_id", ""),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LagStats:
    """Fire-time lag in seconds (dispatch or receipt minus the scheduled time)."""

    samples: int = 0
    p50: float | None = None
    p95: float | None = None
    p99: float | None = None
    max: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SideMeasures:
    """One side over one window. Calls are sharding items; retries are grouped."""

    fires: int = 0  # logical fires (one per job and scheduled time)
    calls: int = 0  # items of those fires
    attempts: int = 0  # log rows or attempts, retries included
    retries: int = 0
    duplicates: int = 0  # the same item fired twice (not a retry)
    unscheduled: int = 0  # fires no schedule explains (legacy manual/API/misfire)
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    killed: int = 0  # stopped by an operator's `run kill`: fired, not missing, not in the success rate
    unfinished: int = 0
    running: int = 0  # received or started by an executor, no result yet, within the job's timeout
    late: int = 0  # fires later than late_after
    missing: int = 0  # expected occurrences this side did not fire
    expected: int = 0
    lag: LagStats = LagStats()

    @property
    def finished(self) -> int:
        return self.succeeded + self.failed + self.timed_out

    @property
    def success_rate(self) -> float | None:
        return self.succeeded / self.finished if self.finished else None

    @property
    def timeout_rate(self) -> float | None:
        return self.timed_out / self.finished if self.finished else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Mismatch:
    kind: MismatchKind
    job_code: str
    scheduled_at: datetime
    label: Label | None = None
    detail: str = ""

    @property
    def flagged(self) -> bool:
        return self.kind.against_new and self.label is None


@dataclass(frozen=True, slots=True, kw_only=True)
class MismatchGroup:
    """All mismatches of one kind (and label) of one job: the basis of the reason sentences."""

    kind: MismatchKind
    job_code: str
    count: int
    first_at: datetime
    last_at: datetime
    label: Label | None = None
    detail: str = ""  # e.g. the quarantine field and reason of a not_migrated group

    @property
    def flagged(self) -> bool:
        return self.kind.against_new and self.label is None


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantinedJob:
    """A legacy job of the business the migrator quarantined (never handed to the new side),
    with its legacy fires in the compared window."""

    source_key: str
    job_code: str
    field: str | None = None
    reason: str | None = None
    legacy_fires: int = 0  # scheduled legacy fires in the window (labelled not_migrated, not missing)
    legacy_calls: int = 0

    @property
    def detail(self) -> str:
        return not_migrated_text(self.field, self.reason)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One verdict rule, evaluated: passed or not, with the numbers and a sentence."""

    code: str
    passed: bool
    sentence: str
    new: float | None = None
    legacy: float | None = None
    noise: float | None = None
    details: tuple[str, ...] = ()
    skipped: bool = False  # not applicable (shadow mode, not measured)
    warning: bool = False  # passed (not against the new side) but needs action before cutover


@dataclass(frozen=True, slots=True, kw_only=True)
class Bucket:
    """One time-series point: per side, fires, lag percentiles and success rate."""

    start: datetime
    legacy_fires: int = 0
    new_fires: int = 0
    legacy_p50: float | None = None
    legacy_p95: float | None = None
    legacy_p99: float | None = None
    new_p50: float | None = None
    new_p95: float | None = None
    new_p99: float | None = None
    legacy_success: float | None = None
    new_success: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerLag:
    topic: str
    subscription: str
    due: int
    delayed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison:
    biz_code: str
    source: str  # xxl-job | batch-center
    mode: Mode
    window: Window
    baseline_window: Window
    computed_at: datetime
    verdict: Verdict
    checks: tuple[Check, ...]
    legacy: SideMeasures
    new: SideMeasures
    baseline: SideMeasures  # the legacy side over the earlier window (A/A)
    noise: dict[str, float]
    reference_fires: int  # distinct occurrences: expected + fired by either side
    mismatch_counts: dict[str, dict[str, int]]  # kind -> {"flagged": n, "labelled": n}
    mismatch_groups: tuple[MismatchGroup, ...]
    mismatches: tuple[Mismatch, ...]  # a bounded sample, flagged first
    series: tuple[Bucket, ...]
    consumer_lag: ConsumerLag | None = None
    notes: tuple[str, ...] = ()
    thresholds: dict[str, float | int] = field(default_factory=dict)
    legacy_biz_code: str = ""
    seconds: float = 0.0  # compute time
    quarantined: tuple[QuarantinedJob, ...] = ()  # legacy jobs never migrated (ledger: quarantined)
    span: CompareSpan | None = None  # the window asked for and where it was clipped (None: not clipped)
    lag_precision: LagPrecision | None = None
    stream: StreamState | None = None  # the business's change stream, when the caller checked it

    def __post_init__(self) -> None:
        require_aware(self.computed_at, "computed_at")

    @property
    def is_ready(self) -> bool:
        return self.verdict is Verdict.READY

    @property
    def reasons(self) -> tuple[str, ...]:
        """Every reason the verdict is not ready, as human sentences (empty when ready)."""
        out: list[str] = []
        for c in self.checks:
            if not c.passed and not c.skipped:
                out.append(c.sentence)
                out.extend(c.details)
        return tuple(out)

    @property
    def warnings(self) -> tuple[str, ...]:
        """What must be done before cutover although it does not fail the verdict (e.g.
        quarantined jobs still running only on legacy), as sentences."""
        return tuple(c.sentence for c in self.checks if c.warning)

    @property
    def summary(self) -> str:
        """The verdict in one sentence, warnings included."""
        head = (
            "ready"
            if self.is_ready
            else "not ready: " + "; ".join(c.sentence for c in self.checks if not c.passed and not c.skipped)
        )
        return head + "".join(f"; {w}" for w in self.warnings)


# --- JSON form ------------------------------------------------------------------------------


def _side(m: SideMeasures) -> dict[str, Any]:
    d = {
        k: getattr(m, k)
        for k in (
            "fires",
            "calls",
            "attempts",
            "retries",
            "duplicates",
            "unscheduled",
            "succeeded",
            "failed",
            "timed_out",
            "killed",
            "unfinished",
            "running",
            "late",
            "missing",
            "expected",
        )
    }
    d["success_rate"] = m.success_rate
    d["timeout_rate"] = m.timeout_rate
    d["lag"] = {k: getattr(m.lag, k) for k in ("samples", "p50", "p95", "p99", "max")}
    return d


def _side_from(d: dict[str, Any]) -> SideMeasures:
    plain = {k: v for k, v in d.items() if k not in ("success_rate", "timeout_rate", "lag")}
    return SideMeasures(**plain, lag=LagStats(**d["lag"]))


def _check(c: Check) -> dict[str, Any]:
    return {
        "code": c.code,
        "passed": c.passed,
        "skipped": c.skipped,
        "warning": c.warning,
        "sentence": c.sentence,
        "new": c.new,
        "legacy": c.legacy,
        "noise": c.noise,
        "details": list(c.details),
    }


def _mismatch(m: Mismatch) -> dict[str, Any]:
    return {
        "kind": m.kind.value,
        "job_code": m.job_code,
        "scheduled_at": iso(m.scheduled_at),
        "label": m.label.value if m.label else None,
        "flagged": m.flagged,
        "detail": m.detail,
    }


def _group(g: MismatchGroup) -> dict[str, Any]:
    return {
        "kind": g.kind.value,
        "job_code": g.job_code,
        "count": g.count,
        "first_at": iso(g.first_at),
        "last_at": iso(g.last_at),
        "label": g.label.value if g.label else None,
        "flagged": g.flagged,
        "detail": g.detail,
    }


def _quarantined(q: QuarantinedJob) -> dict[str, Any]:
    return {
        "source_key": q.source_key,
        "job_code": q.job_code,
        "field": q.field,
        "reason": q.reason,
        "legacy_fires": q.legacy_fires,
        "legacy_calls": q.legacy_calls,
        "detail": q.detail,
    }


def _bucket(b: Bucket) -> dict[str, Any]:
    d: dict[str, Any] = {k: getattr(b, k) for k in Bucket.__dataclass_fields__ if k != "start"}
    d["start"] = iso(b.start)
    return d


def as_dict(c: Comparison) -> dict[str, Any]:
    """The full comparison as JSON-ready data (what `dus_comparison.body` stores)."""
    return {
        "body_version": BODY_VERSION,
        "business": c.biz_code,
        "legacy_business": c.legacy_biz_code or c.biz_code,
        "source": c.source,
        "mode": c.mode.value,
        "window": c.window.as_dict(),
        "baseline_window": c.baseline_window.as_dict(),
        "computed_at": iso(c.computed_at),
        "verdict": c.verdict.value,
        "reasons": list(c.reasons),
        "warnings": list(c.warnings),
        "summary": c.summary,
        "checks": [_check(x) for x in c.checks],
        "measures": {"legacy": _side(c.legacy), "new": _side(c.new), "baseline": _side(c.baseline)},
        "noise": dict(c.noise),
        "reference_fires": c.reference_fires,
        "mismatch_counts": c.mismatch_counts,
        "mismatch_groups": [_group(g) for g in c.mismatch_groups],
        "mismatches": [_mismatch(m) for m in c.mismatches],
        "labels": {lab.value: text for lab, text in LABEL_TEXT.items()},
        "series": [_bucket(b) for b in c.series],
        "consumer_lag": None
        if c.consumer_lag is None
        else {
            "topic": c.consumer_lag.topic,
            "subscription": c.consumer_lag.subscription,
            "due": c.consumer_lag.due,
            "delayed": c.consumer_lag.delayed,
        },
        "quarantined": [_quarantined(q) for q in c.quarantined],
        "notes": list(c.notes),
        "thresholds": dict(c.thresholds),
        "seconds": round(c.seconds, 3),
        "span": (c.span or CompareSpan(requested=c.window, window=c.window)).as_dict(),
        "lag_precision": None if c.lag_precision is None else c.lag_precision.as_dict(),
        "stream": None if c.stream is None else c.stream.as_dict(),
    }


def _label(v: str | None) -> Label | None:
    return None if v is None else Label(v)


def comparison_from_dict(d: dict[str, Any]) -> Comparison:
    lag = d.get("consumer_lag")
    return Comparison(
        biz_code=d["business"],
        legacy_biz_code=d.get("legacy_business", ""),
        source=d["source"],
        mode=Mode(d["mode"]),
        window=Window.from_dict(d["window"]),
        baseline_window=Window.from_dict(d["baseline_window"]),
        computed_at=from_iso(d["computed_at"]),
        verdict=Verdict(d["verdict"]),
        checks=tuple(
            Check(
                code=x["code"],
                passed=x["passed"],
                skipped=x.get("skipped", False),
                warning=x.get("warning", False),
                sentence=x["sentence"],
                new=x.get("new"),
                legacy=x.get("legacy"),
                noise=x.get("noise"),
                details=tuple(x.get("details", ())),
            )
            for x in d["checks"]
        ),
        legacy=_side_from(d["measures"]["legacy"]),
        new=_side_from(d["measures"]["new"]),
        baseline=_side_from(d["measures"]["baseline"]),
        noise=dict(d.get("noise", {})),
        reference_fires=d.get("reference_fires", 0),
        mismatch_counts=d.get("mismatch_counts", {}),
        mismatch_groups=tuple(
            MismatchGroup(
                kind=MismatchKind(g["kind"]),
                job_code=g["job_code"],
                count=g["count"],
                first_at=from_iso(g["first_at"]),
                last_at=from_iso(g["last_at"]),
                label=_label(g.get("label")),
                detail=g.get("detail", ""),
            )
            for g in d.get("mismatch_groups", ())
        ),
        mismatches=tuple(
            Mismatch(
                kind=MismatchKind(m["kind"]),
                job_code=m["job_code"],
                scheduled_at=from_iso(m["scheduled_at"]),
                label=_label(m.get("label")),
                detail=m.get("detail", ""),
            )
            for m in d.get("mismatches", ())
        ),
        series=tuple(
            Bucket(start=from_iso(b["start"]), **{k: v for k, v in b.items() if k != "start"})
            for b in d.get("series", ())
        ),
        consumer_lag=None if lag is None else ConsumerLag(**lag),
        notes=tuple(d.get("notes", ())),
        thresholds=dict(d.get("thresholds", {})),
        seconds=float(d.get("seconds", 0.0)),
        quarantined=tuple(
            QuarantinedJob(
                source_key=q["source_key"],
                job_code=q["job_code"],
                field=q.get("field"),
                reason=q.get("reason"),
                legacy_fires=q.get("legacy_fires", 0),
                legacy_calls=q.get("legacy_calls", 0),
            )
            for q in d.get("quarantined", ())
        ),
        span=None if d.get("span") is None else CompareSpan.from_dict(d["span"]),
        lag_precision=None
        if d.get("lag_precision") is None
        else LagPrecision(
            legacy_ms=d["lag_precision"]["legacy_ms"],
            new_ms=d["lag_precision"]["new_ms"],
            legacy_source=d["lag_precision"]["legacy_source"],
        ),
        stream=None if d.get("stream") is None else StreamState.from_dict(d["stream"]),
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredVerdict:
    """The latest stored verdict of a business, as the cutover gate reads it."""

    comparison_id: int
    biz_code: str
    verdict: Verdict
    reasons: tuple[str, ...]
    window: Window
    computed_at: datetime
    mode: Mode
    warnings: tuple[str, ...] = ()  # e.g. quarantined jobs still running only on legacy

    @property
    def is_ready(self) -> bool:
        return self.verdict is Verdict.READY

    def age(self, now: datetime) -> timedelta:
        return require_aware(now, "now") - self.computed_at

    def is_fresh(self, now: datetime, max_age: timedelta) -> bool:
        return self.age(now) <= max_age
