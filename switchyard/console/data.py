"""What the console shows, read from the store (and the schedulers' metrics): plain
dicts, the same for the pages and the JSON API. No HTTP here.

Every dict leaves through `redact_tree`, so a URL password or a token that made its way
into a reason, an audit detail or an error never reaches a page, the API or a log.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from dualrun.boundary_store import boundary_tallies
from dualrun.errors import UnknownBusiness
from dualrun.settings import parse_duration
from dualrun.store import DualRunStore
from dualrun.verdict_store import latest_by_business, verdicts_of
from migrator.business import BusinessRegistry
from migrator.cutover import first_at_or_after
from migrator.model import BusinessState
from migrator.ownership import PROBLEMS, Firing, LegacyLive, ownership
from migrator.ports import VERDICT_MAX_AGE
from migrator.store import MigratorStore
from migrator.target import TargetWriter
from reports.model import after_cutover
from reports.redact import redact, redact_tree
from scheduler_core.model import Trigger, TriggerId
from scheduler_core.stats import lag_stats
from scheduler_core.store.reads import waiting_summary
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms
from switchyard.freezes import standing_freezes
from switchyard.wiring import dualrun_store, migrator_store


@dataclass(frozen=True)
class LaneGauges:
    """A scheduler's lane gauges (scheduler_core.lookahead, with --adaptive-lookahead):
    per (lane, business) the window in use, the forecast and the published-not-yet-due
    backlog it counts; per lane the lookahead lag (negative: admission behind now)."""

    lookahead_s: dict[tuple[str, str], float] = field(default_factory=dict)
    forecast: dict[tuple[str, str], float] = field(default_factory=dict)
    backlog: dict[tuple[str, str], float] = field(default_factory=dict)
    lag_s: dict[str, float] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.lookahead_s or self.forecast or self.backlog or self.lag_s)


_LANE_GAUGES = {
    "switchyard_lane_lookahead_seconds": "lookahead_s",
    "switchyard_lane_forecast_triggers": "forecast",
    "switchyard_lane_published_not_due": "backlog",
}


@dataclass(frozen=True, kw_only=True)
class Member:
    """One scheduler process as its metrics show it."""

    name: str
    reachable: bool
    leader: bool | None = None
    lookahead_lag_s: float | None = None
    # how far admission is behind now + lookahead (the worst partition); None with
    # admission_idle: nothing was due at the last tick of any partition
    admission_lag_s: float | None = None
    admission_idle: bool = False
    published: float | None = None
    error: str = ""
    lanes: LaneGauges = field(default_factory=LaneGauges)

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "reachable": self.reachable,
            "leader": self.leader,
            "lookahead_lag_s": self.lookahead_lag_s,
            "admission_lag_s": self.admission_lag_s,
            "admission_idle": self.admission_idle,
            "commands_published": self.published,
            "error": self.error,
        }


Members = Callable[[], list[Member]]


def member_from_text(name: str, text: str) -> Member:
    """A scheduler's figures from its Prometheus exposition (scheduler_core.metrics)."""
    leader: float | None = None
    lag: float | None = None
    admission: list[float] = []
    published = 0.0
    lanes = LaneGauges()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in _LANE_GAUGES:
                key = (sample.labels.get("lane", ""), sample.labels.get("biz_code", ""))
                getattr(lanes, _LANE_GAUGES[sample.name])[key] = sample.value
            elif sample.name == "switchyard_lane_lookahead_lag_seconds":
                lanes.lag_s[sample.labels.get("lane", "")] = sample.value
            elif sample.name == "switchyard_is_leader":
                leader = sample.value
            elif sample.name == "switchyard_lookahead_lag_seconds":
                lag = sample.value
            elif sample.name == "switchyard_admission_lag_seconds":
                admission.append(sample.value)
            elif sample.name == "switchyard_commands_published_total":
                published += sample.value
    behind = [v for v in admission if not math.isnan(v)]
    return Member(
        name=name,
        reachable=True,
        leader=None if leader is None else leader >= 1,
        lookahead_lag_s=lag,
        admission_lag_s=max(behind) if behind else None,
        admission_idle=bool(admission) and not behind,
        published=published,
        lanes=lanes,
    )


def scraped_members(urls: Sequence[str], timeout: float = 2.0) -> Members:
    """Members read from the schedulers' metrics endpoints (`scheduler run --metrics-port`)."""

    def read() -> list[Member]:
        out = []
        for url in urls:
            name = redact(url)
            try:
                with urllib.request.urlopen(url, timeout=timeout) as resp:  # noqa: S310 (operator's own URL)
                    out.append(member_from_text(name, resp.read().decode("utf-8", "replace")))
            except (OSError, urllib.error.URLError, ValueError) as exc:
                out.append(Member(name=name, reachable=False, error=redact(f"{type(exc).__name__}: {exc}")))
        return out

    return read


def registry_members(name: str, registry: CollectorRegistry) -> Members:
    """The member of this process (`switchyard serve`): its own metrics registry."""
    return lambda: [member_from_text(name, generate_latest(registry).decode("utf-8"))]


@dataclass
class Sources:
    store: SqlTriggerStore
    legacy_live: LegacyLive | None = None
    members: Members | None = None
    lag_window: timedelta = timedelta(hours=1)
    # the legacy databases the executor registry page reads the xxl-job registrations from
    legacy_urls: tuple[str, ...] = ()
    legacy_db_tz: str = "Asia/Shanghai"
    # the migrator's and dual-run's stores beside the trigger store, built once (the wiring's)
    migrator: MigratorStore = field(init=False)
    dualrun: DualRunStore = field(init=False)

    def __post_init__(self) -> None:
        self.migrator = migrator_store(self.store)
        self.dualrun = dualrun_store(self.store)

    def now(self) -> datetime:
        return self.store.clock.now()


def _iso(at: datetime | None) -> str | None:
    return None if at is None else at.isoformat()


def _verdict(v: Any, now: datetime, state: BusinessState) -> dict[str, Any] | None:
    if v is None:
        return None
    age = now - v.computed_at
    warnings = [after_cutover(w) for w in v.warnings] if state is BusinessState.CUTOVER else list(v.warnings)
    return {
        "verdict": v.verdict.value,
        "comparison_id": v.comparison_id,
        "computed_at": _iso(v.computed_at),
        "age_s": round(age.total_seconds(), 1),
        # the cutover gate's own bound: an older verdict would not pass it, so it is not shown as current
        "stale": age > VERDICT_MAX_AGE,
        "max_age_s": VERDICT_MAX_AGE.total_seconds(),
        "mode": v.mode.value,
        "reasons": list(v.reasons),
        "warnings": warnings,
        "window": {"start": _iso(v.window.start), "end": _iso(v.window.end)},
    }


def businesses(src: Sources) -> list[dict[str, Any]]:
    """Every business: its cutover state, latest verdict (reasons, age), which side fires its jobs."""
    now = src.now()
    records = {r.biz_code: r for r in BusinessRegistry(src.migrator).all()}
    verdicts = latest_by_business(src.dualrun)
    frozen = standing_freezes(src.store)
    held = _quarantined_on_legacy(src)
    tallies = boundary_tallies(src.dualrun)
    out = []
    for bo in ownership(src.store, src.migrator, src.legacy_live):
        r = records[bo.biz_code]
        out.append(
            {
                "business": r.biz_code,
                "source": r.source_system,
                "state": r.state.value,
                "shadow": r.shadow,
                "frozen": frozen.of(r.biz_code),
                "since": _iso(r.updated_at),
                "verdict": _verdict(verdicts.get(r.biz_code), now, r.state),
                "jobs": len(bo.jobs) + held.get(r.biz_code, 0),
                "sides": bo.counts(),
                "quarantined": held.get(r.biz_code, 0),
                "problems": len(bo.problems),
                "boundary": [t.as_dict() for t in tallies.get(r.biz_code, [])],
                "legacy_read": src.legacy_live is not None,
            }
        )
    return redact_tree(out)


def _quarantined_on_legacy(src: Sources, code: str | None = None) -> dict[str, int]:
    """Per business, its quarantined jobs (never migrated) that still fire on legacy: read
    from the legacy switches when the console can, else all of them (nothing of ours ever
    stopped one). They are jobs of the business like the migrated ones, and left out of a
    count by live side they would vanish from view."""
    by_key: dict[tuple[str, str], list[str]] = {}
    for row in TargetWriter(src.store, src.migrator).quarantined(code):
        by_key.setdefault((row["business"], row["source_system"]), []).append(row["source_key"])
    out: dict[str, int] = {}
    for (biz, source), keys in by_key.items():
        live = src.legacy_live(source, keys) if src.legacy_live is not None else None
        out[biz] = out.get(biz, 0) + (len(keys) if live is None else len(set(keys) & live))
    return out


def _schedule(t: Trigger | None) -> str:
    if t is None:
        return ""
    if t.cron:
        return f"cron {t.cron} ({t.time_zone})"
    if t.interval is not None:
        return f"every {t.interval.total_seconds():g} s"
    return t.kind.value


def _next_fire(t: Trigger | None, side: Firing, now: datetime) -> dict[str, Any]:
    """When the job fires next, on the side that fires it: the new side's stored next
    fire time, or (on legacy) the definition's next occurrence from now; none for a job
    that fires nowhere (paused, ended, orphaned)."""
    if t is None:
        return {"next_fire_at": None, "next_fire_from": None}
    if side in (Firing.NEW, Firing.BOTH, Firing.DOUBLE):
        return {"next_fire_at": _iso(t.next_fire_at), "next_fire_from": "store"}
    if side is Firing.LEGACY:
        try:
            at = first_at_or_after(t, now)
        except ValueError:  # a schedule that cannot be evaluated has no next time to show
            at = None
        return {"next_fire_at": _iso(at), "next_fire_from": "schedule"}
    return {"next_fire_at": None, "next_fire_from": None}


def business(src: Sources, code: str) -> dict[str, Any]:
    """One business: per job its live side, next fire time, orphans and doubles flagged;
    its audit log and quarantined rows."""
    record = BusinessRegistry(src.migrator).get(code)
    if record is None:
        raise UnknownBusiness(code, "not in the store")
    now = src.now()
    owned = ownership(src.store, src.migrator, src.legacy_live, [code])
    triggers = {t.id: t for t in src.store.triggers_of(biz_code=code)}
    jobs = []
    for bo in owned:
        for j in bo.jobs:
            t = triggers.get(TriggerId(j.trigger_id)) if j.trigger_id is not None else None
            jobs.append(
                {**j.as_dict(), "problem": j.side in PROBLEMS, "schedule": _schedule(t), **_next_fire(t, j.side, now)}
            )
    jobs.sort(key=lambda j: (not j["problem"], j["source_key"]))
    verdict = latest_by_business(src.dualrun).get(code)
    sides: dict[str, int] = {}
    for row in jobs:
        sides[row["side"]] = sides.get(row["side"], 0) + 1
    return redact_tree(
        {
            "business": code,
            "source": record.source_system,
            "state": record.state.value,
            "shadow": record.shadow,
            "frozen": standing_freezes(src.store).of(code),
            "since": _iso(record.updated_at),
            "verdict": _verdict(verdict, now, record.state),
            "legacy_read": src.legacy_live is not None,
            "jobs": jobs,
            "sides": sides,
            "quarantined": _quarantined_on_legacy(src, code).get(code, 0),
            "boundary": [t.as_dict() for t in boundary_tallies(src.dualrun, code).get(code, [])],
            "problems": sum(1 for j in jobs if j["problem"]),
            "audit": audit(src, code),
            "quarantine": quarantine(src, code),
        }
    )


def audit(src: Sources, code: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
    """The cutover/rollback audit log, newest first."""
    entries = BusinessRegistry(src.migrator).audit(code)[-limit:]
    verdicts = verdicts_of(src.dualrun, [e.comparison_id for e in entries if e.comparison_id is not None])
    return redact_tree(
        [
            {
                "business": e.biz_code,
                "from": e.from_state,
                "to": e.to_state,
                "at": _iso(e.at),
                "actor": e.actor,
                "reason": e.reason,
                # the verdict the switch read at the gate, and which comparison it was
                "verdict": None if e.comparison_id is None else verdicts.get(e.comparison_id),
                "comparison_id": e.comparison_id,
                "forced": e.forced,
                "detail": e.detail,
            }
            for e in reversed(entries)
        ]
    )


def quarantine(src: Sources, code: str | None = None) -> list[dict[str, Any]]:
    """Rows that could not be migrated, with field and reason."""
    rows = TargetWriter(src.store, src.migrator).quarantined(code)
    return redact_tree(
        [{k: r[k] for k in ("source_system", "source_key", "business", "field", "reason")} for r in rows]
    )


WINDOWS = ("15m", "1h", "24h")  # the scheduler page's choices; the API takes any duration
CHART_BUCKETS = 48


def parse_window(raw: str) -> timedelta:
    """A window as the scheduler page and the API take it: 15m, 1h, 24h, 90s, or a bare
    number of seconds; up to 30 days."""
    try:
        span = parse_duration(raw)
    except ValueError:
        raise ValueError(f"window: {raw!r} is not a duration (e.g. {', '.join(WINDOWS)}, or seconds)") from None
    if not timedelta(0) < span <= timedelta(days=30):
        raise ValueError(f"window: {raw!r} must be more than 0 and at most 30 days")
    return span


def fired_per_bucket(scheduled: Sequence[datetime], start: datetime, span: timedelta) -> list[int]:
    """Fired records per equal slice of [start, start + span), by their scheduled time."""
    counts = [0] * CHART_BUCKETS
    width = span / CHART_BUCKETS
    for at in scheduled:
        i = int((at - start) / width)
        if 0 <= i < CHART_BUCKETS:
            counts[i] += 1
    return counts


def lag(src: Sources, window: timedelta | None = None) -> dict[str, Any]:
    """Per-business fire-time lag percentiles from the fired records of the last window,
    and the fired records per slice of it (the page's chart)."""
    span = window or src.lag_window
    now = src.now()
    start = now - span
    records = src.store.fired_between(None, start, now)
    return redact_tree(
        {
            "window_s": span.total_seconds(),
            "start": start.isoformat(timespec="seconds"),
            "end": now.isoformat(timespec="seconds"),
            "fired": len(records),
            "per_bucket": fired_per_bucket([r.scheduled_at for r in records], start, span),
            "businesses": [d.as_dict() for d in sorted(lag_stats(records).values(), key=lambda d: d.biz_code)],
        }
    )


def scheduler(src: Sources) -> dict[str, Any]:
    """The store's leader epoch, the members with their lookahead lag (from their
    metrics), and how far the oldest waiting trigger is past due (from the store)."""
    now = src.now()
    count, oldest_ms = waiting_summary(src.store)
    oldest = None if oldest_ms is None else from_ms(oldest_ms)
    members = [m.as_dict() for m in src.members()] if src.members is not None else []
    leaders = [m["name"] for m in members if m["leader"]]
    return redact_tree(
        {
            "epoch": int(src.store.current_epoch()),
            "members": members,
            "leader": leaders[0] if leaders else None,
            "members_known": src.members is not None,
            "waiting_triggers": int(count),
            "oldest_waiting_due_s": None if oldest is None else round((now - oldest).total_seconds(), 3),
        }
    )


def business_exists(src: Sources, code: str) -> bool:
    return BusinessRegistry(src.migrator).get(code) is not None
