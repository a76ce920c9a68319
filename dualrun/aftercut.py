"""After the switch: a cut-over business checked against its expected occurrences, with no
legacy side. Real migrations (Uber's, PowerJob users' after a Quartz move) found duplicate
fires in the days after cutover; this is where they show, and missing or late ones too.

- expected: the occurrences of the business's migrated definitions (their schedules, even
  though the cutover switched the legacy jobs off) since the cutover;
- missing: an expected occurrence with no fired record `late_after` after its time;
- doubled: one (job, fire time, item) fired under more than one command id (a trigger
  doubled by a re-migration, or two triggers of one job); a redelivered command keeps its
  id and is not a double;
- late: received by an executor more than `late_after` after its time, or not received at
  all that long after (a run the executor stamped received is running, not late).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
import pandas as pd
from prometheus_client import CollectorRegistry, Gauge

from dualrun.collect import Collector
from dualrun.errors import DualRunError
from dualrun.model import Window, iso
from dualrun.ports import NewSide
from dualrun.settings import CompareSettings
from dualrun.span import fetch_switches
from dualrun.stopped import stopped_occurrences
from dualrun.store import DualRunStore
from readers.ports import LegacyReader
from readers.records import SourceSystem
from scheduler_core.model import FiredState
from scheduler_core.ports import RunRecordReads
from scheduler_core.times import duration_ms, from_ms, to_ms

MAX_LISTED = 50
_NOT_RUN = (FiredState.SKIPPED.value,)  # a misfire policy's or a fence's skip: recorded, not a fire


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    kind: str  # missing | doubled | late | overdue
    job_code: str
    scheduled_at: datetime
    detail: str

    def as_dict(self) -> dict[str, str]:
        return {
            "kind": self.kind,
            "job_code": self.job_code,
            "scheduled_at": iso(self.scheduled_at),
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class AfterCutover:
    biz_code: str
    cutover_at: datetime
    window: Window
    expected: int
    fired: int
    missing: int
    doubled: int
    late: int
    running: int
    overdue: int = 0  # received, no result, past the job's timeout (+ the result grace): hung or lost
    findings: tuple[Finding, ...] = field(default_factory=tuple)  # a bounded sample

    @property
    def ok(self) -> bool:
        return not (self.missing or self.doubled or self.late or self.overdue)

    @property
    def counts(self) -> dict[str, int]:
        return {"missing": self.missing, "doubled": self.doubled, "late": self.late, "overdue": self.overdue}

    @property
    def sentence(self) -> str:
        head = (
            f"{self.biz_code} after its cutover {iso(self.cutover_at)}, checked {iso(self.window.start)} .. "
            f"{iso(self.window.end)}: {self.expected:,} expected, {self.fired:,} fired"
        )
        if self.ok:
            return head + (f", {self.running:,} running" if self.running else "") + ": nothing missing, doubled or late"
        parts = [f"{n:,} {k}" for k, n in self.counts.items() if n]
        return head + ": " + ", ".join(parts)

    def as_dict(self) -> dict[str, object]:
        return {
            "business": self.biz_code,
            "cutover_at": iso(self.cutover_at),
            "window": self.window.as_dict(),
            "expected": self.expected,
            "fired": self.fired,
            **self.counts,
            "running": self.running,
            "ok": self.ok,
            "sentence": self.sentence,
            "findings": [f.as_dict() for f in self.findings],
        }


class NotCutOver(DualRunError):
    def __init__(self, biz_code: str) -> None:
        super().__init__(
            f"{biz_code} has no recorded cutover: nothing to watch after it "
            "(`switchyard cutover` first; a dual-run is compared with `dualrun compare`)"
        )


def cutover_time(own: DualRunStore, biz_code: str) -> datetime:
    """The latest cutover of the business still in force (no rollback after it)."""
    switches = fetch_switches(own, biz_code)
    if not switches or switches[-1].to_state != "cutover":
        raise NotCutOver(biz_code)
    return switches[-1].at


_COLS = ("command_id", "job_code", "item_index", "scheduled_at", "received_at", "state")


def _fired(store: RunRecordReads, biz_code: str, window: Window) -> pd.DataFrame:
    return pd.DataFrame(
        store.fired_rows_of(biz_code, to_ms(window.start), to_ms(window.end), _COLS), columns=list(_COLS)
    )


def check_after_cutover(
    store: NewSide,
    own: DualRunStore,
    reader: LegacyReader,
    biz_code: str,
    *,
    source: SourceSystem,
    settings: CompareSettings,
    now: datetime,
    lookback: timedelta | None = None,
    legacy_biz_code: str | None = None,
) -> AfterCutover:
    """Missing, doubled and late fires of a cut-over business since its cutover (at most
    `lookback` back), up to `now`."""
    cut = cutover_time(own, biz_code)
    start = cut if lookback is None else max(cut, now - lookback)
    if now <= start:
        raise DualRunError(f"{biz_code}: cut over at {iso(cut)}, nothing to check yet")
    window = Window(start=start, end=now)
    late_ms = duration_ms(settings.match.late_after)
    collector = Collector(
        store, own, reader, source=source, biz_code=biz_code, legacy_biz_code=legacy_biz_code, settings=settings
    )
    exp = collector.legacy(window, all_schedules=True).expected
    s, e = to_ms(window.start), to_ms(window.end)
    exp = exp[(exp["sched"] >= s) & (exp["sched"] < e)]
    held = set(collector.quarantined)  # never migrated: still legacy's (it runs there only)
    exp = exp[~exp["job"].isin(held)]
    due = exp[exp["sched"] <= to_ms(now) - late_ms]  # younger ones may not have been received yet
    fired = _fired(store, biz_code, window)
    fired = fired[~fired["state"].isin(_NOT_RUN)].copy()
    fired["job"] = [collector.jobs.id(c) for c in fired["job_code"].astype(str)]
    findings: list[Finding] = []

    # missing: a due occurrence with no record of the job at that time
    have = set(zip(fired["job"].tolist(), fired["scheduled_at"].astype(np.int64).tolist(), strict=True))
    # an occurrence an operator stopped on purpose is no missing one (dualrun.stopped)
    stopped = stopped_occurrences(store, biz_code)
    missing = [
        (int(j), int(t))
        for j, t in zip(due["job"].tolist(), due["sched"].tolist(), strict=True)
        if (j, t) not in have and not stopped(collector.jobs.code(j), int(t))
    ]
    findings += [
        Finding(
            kind="missing",
            job_code=collector.jobs.code(j),
            scheduled_at=from_ms(t),
            detail="expected by the schedule; no fired record on the new side",
        )
        for j, t in missing
    ]

    # doubled: one (job, time, item) under more than one command id
    ids = fired.groupby(["job_code", "scheduled_at", "item_index"])["command_id"].nunique()
    doubled = ids[ids > 1]
    for (code, at, item), n in doubled.items():
        cids = sorted(
            fired[(fired["job_code"] == code) & (fired["scheduled_at"] == at) & (fired["item_index"] == item)][
                "command_id"
            ].astype(str)
        )
        findings.append(
            Finding(
                kind="doubled",
                job_code=str(code),
                scheduled_at=from_ms(int(at)),
                detail=f"item {item} fired {n} times: command ids {', '.join(cids)}",
            )
        )

    # late: received after late_after, or not received that long after its time
    recv = fired["received_at"]
    sched = fired["scheduled_at"].astype(np.int64)
    got = recv.notna()
    lag = recv.fillna(-1).astype(np.int64) - sched
    late_rows = fired[(got & (lag > late_ms)) | (~got & (to_ms(now) - sched > late_ms))]
    for r in late_rows.itertuples(index=False):
        what = (
            f"received {(int(r.received_at) - int(r.scheduled_at)) / 1000:.1f} s after its time"
            if pd.notna(r.received_at)
            else f"not received by an executor {(to_ms(now) - int(r.scheduled_at)) / 1000:.0f} s after its time"
        )
        findings.append(
            Finding(kind="late", job_code=str(r.job_code), scheduled_at=from_ms(int(r.scheduled_at)), detail=what)
        )
    unresolved = got & ~fired["state"].isin(
        [FiredState.SUCCEEDED.value, FiredState.FAILED.value, FiredState.TIMED_OUT.value, FiredState.KILLED.value]
    )
    # running within its job's timeout is fine; past it (plus the grace the executor's own
    # timeout result needs) the run hung or its result was lost: a finding
    grace_ms = duration_ms(settings.match.result_grace)
    timeout_ms = np.array(
        [collector.info[j].timeout_s * 1000 if j in collector.info else 0 for j in fired["job"].tolist()],
        dtype=np.int64,
    )
    overdue_mask = (
        unresolved & (timeout_ms > 0) & (to_ms(now) - recv.fillna(0).astype(np.int64) > timeout_ms + grace_ms)
    ).to_numpy()
    for r in fired[overdue_mask].itertuples(index=False):
        findings.append(
            Finding(
                kind="overdue",
                job_code=str(r.job_code),
                scheduled_at=from_ms(int(r.scheduled_at)),
                detail=f"received {(to_ms(now) - int(r.received_at)) / 1000:.0f} s ago, no result, "
                "past the job's timeout",
            )
        )
    running = int((unresolved.to_numpy() & ~overdue_mask).sum())
    findings.sort(key=lambda f: (f.kind != "doubled", f.kind != "missing", f.scheduled_at, f.job_code))
    return AfterCutover(
        biz_code=biz_code,
        cutover_at=cut,
        window=window,
        expected=len(due),
        fired=len(set(zip(fired["job"].tolist(), sched.tolist(), strict=True))),
        missing=len(missing),
        doubled=len(doubled),
        late=len(late_rows),
        running=running,
        overdue=int(overdue_mask.sum()),
        findings=tuple(findings[:MAX_LISTED]),
    )


class AfterCutoverGauges:
    """`switchyard_after_cutover_fires{biz_code, kind}`: the missing, doubled and late fires
    of a cut-over business found by its latest check (0 when none): alert on > 0."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        self.fires = Gauge(
            "switchyard_after_cutover_fires",
            "Fires of a cut-over business found missing, doubled or late by its latest after-cutover check",
            ["biz_code", "kind"],
            registry=self.registry,
        )
        self.checked = Gauge(
            "switchyard_after_cutover_checked_timestamp_seconds",
            "When the business was last checked after its cutover",
            ["biz_code"],
            registry=self.registry,
        )

    def record(self, result: AfterCutover) -> None:
        for kind, n in result.counts.items():
            self.fires.labels(biz_code=result.biz_code, kind=kind).set(n)
        self.checked.labels(biz_code=result.biz_code).set(result.window.end.timestamp())
