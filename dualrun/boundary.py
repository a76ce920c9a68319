"""The boundary of a cutover or a rollback, seen through the comparator's own matching.

Outside dual-run, every occurrence must be fired by exactly one side: the side that owns
it. A switch hands each job over at a time H (the report of `BusinessSwitch.cutover` /
`.rollback`: source key -> H); from H on, the new side owns the job's occurrences after
a cutover, the legacy side after a rollback. Several switches apply in order (a cutover,
then a rollback): an occurrence belongs to the owner named by the last switch whose
handover time for that job is at or before it.

The check runs the very pipeline a comparison report runs (`dualrun.collect.Collector`
for the legacy log rows and their rebuilt occurrences, the fired records, and
`dualrun.match.match`), so anything the report would show across the switch shows here:

- **missing**: an occurrence after the switch began that neither side fired
  (`missing_on_both`), or an owned one its owner did not fire (a `missing_on_new` after
  a cutover, a `missing_on_legacy` after a rollback);
- **doubled**: an owned occurrence fired by both sides (a pair in the matching, whatever
  its own mismatch), or twice by one side (a doubled trigger, a legacy duplicate row);
- **stray**: a fire by the side that does not own the job any more that no occurrence
  explains (`extra_on_new` after a rollback, `unscheduled_on_legacy` after a cutover).

Two deliberate differences from a dual-run comparison, both because the switch itself
changes what the report would otherwise read:

- the legacy job is switched off by a cutover, and a switched-off definition expects no
  occurrences in a comparison; here every definition's schedule is rebuilt
  (`Collector.legacy(all_schedules=True)`): it still says what is due;
- a fired record the executor only recorded in shadow mode, or one never published
  (`pending`), is not a fire of the new side: the handler never ran.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pandas as pd

from dualrun.collect import FENCED_STATE, Collector, CompareRequest, new_frame_from, resolve
from dualrun.compare import detail
from dualrun.followup_runs import followup_runs, without_followup_runs
from dualrun.frames import JobIndex
from dualrun.match import KINDS, ClassifyContext, JobFlags, Keys, Table, match, pair
from dualrun.model import MismatchKind, Window
from dualrun.settings import CompareSettings
from dualrun.store import DualRunStore
from readers.ports import LegacyReader
from readers.records import SourceSystem
from scheduler_core.ports import RunRecordReads
from scheduler_core.times import duration_ms, from_ms, to_ms


@dataclass(frozen=True, slots=True)
class HandoverPlan:
    """One switch: source key -> handover time (ISO text or aware datetime), the side
    that owns the job from then on, and the instant the switch began (`at`: dual-run
    ends there; from then on no occurrence of a handed-over job may go unfired, even one
    before its handover time, which the side switched off fires while it settles)."""

    handover: Mapping[str, str | datetime]
    to_new: bool
    at: datetime | None = None


@dataclass(frozen=True, slots=True)
class BoundaryIssue:
    what: str  # missing | doubled | stray
    job_code: str
    scheduled_at: datetime
    owner: str  # new | legacy
    detail: str

    def __str__(self) -> str:
        return f"{self.what}: {self.job_code} at {self.scheduled_at.isoformat()} (owner {self.owner}): {self.detail}"


@dataclass
class BoundaryCheck:
    window: Window
    owned: int = 0  # occurrences checked (owned by one side after a switch)
    issues: list[BoundaryIssue] = field(default_factory=list)
    mismatch_counts: dict[str, int] = field(default_factory=dict)  # the matching's kinds after the switch

    def count(self, what: str) -> int:
        return sum(1 for i in self.issues if i.what == what)

    @property
    def missing(self) -> int:
        return self.count("missing")

    @property
    def doubled(self) -> int:
        return self.count("doubled")

    @property
    def stray(self) -> int:
        return self.count("stray")

    @property
    def clean(self) -> bool:
        return not self.issues


_FIRED = (
    "job_code",
    "item_index",
    "item_total",
    "state",
    "scheduled_at",
    "received_at",
    "misfired",
    "attempt",
    "message",
)


def fetch_new_fired(store: RunRecordReads, biz_code: str, window: Window, jobs: JobIndex) -> pd.DataFrame:
    """The new side's fired records of the window, as `dualrun.collect.fetch_new` reads
    them, without records that never ran a handler (shadow-only, never published; one a
    rollback fence skipped is not a fire of the new side either: `match` sets it apart)."""
    rows = store.fired_rows_of(
        biz_code, to_ms(window.start), to_ms(window.end), _FIRED, fenced_as=FENCED_STATE, by_time=True
    )
    raw = pd.DataFrame(rows, columns=list(_FIRED))
    if len(raw):
        shadow_only = (raw["state"] == "received") & raw["message"].fillna("").str.contains("shadow")
        raw = raw[~shadow_only & (raw["state"] != "pending")].reset_index(drop=True)
        raw = without_followup_runs(raw, followup_runs(store, biz_code, window))  # as fetch_new
    return new_frame_from(raw.drop(columns=["message"]), jobs)


def _when(v: str | datetime) -> datetime:
    return datetime.fromisoformat(v) if isinstance(v, str) else v


def check_boundary(
    store: RunRecordReads,
    own: DualRunStore,
    reader: LegacyReader,
    biz_code: str,
    switches: Sequence[HandoverPlan],
    *,
    window: Window,
    settings: CompareSettings | None = None,
    now: datetime | None = None,
) -> BoundaryCheck:
    """Match both sides of `business` over `window` exactly as a comparison does and
    report every owned occurrence (at or after its job's handover time, inside the
    window) that is missing, doubled, or met by a stray fire of the other side."""
    settings = settings or CompareSettings()
    s = settings.match
    source, _ = resolve(own, CompareRequest(biz_code=biz_code, window=window))
    collector = Collector(store, own, reader, source=source, biz_code=biz_code, legacy_biz_code=None, settings=settings)
    legacy = collector.legacy(window, all_schedules=True)
    new = fetch_new_fired(store, biz_code, window, collector.jobs)
    jobs = collector.jobs
    # per job id: handover times in order, and the owner from each (1 = new, 0 = legacy)
    handovers: dict[int, list[tuple[int, int]]] = {}
    for sw in switches:
        for key, at in sw.handover.items():
            handovers.setdefault(jobs.id(collector.code_for_key(key)), []).append((to_ms(_when(at)), int(sw.to_new)))
    began = [to_ms(sw.at) for sw in switches if sw.at is not None]
    covered_from = {jid: min([*began, *(at for at, _ in steps)]) for jid, steps in handovers.items()}
    n_jobs = len(jobs)
    start, end = to_ms(window.start), to_ms(window.end)
    ctx = ClassifyContext(
        settings=s,
        flags=JobFlags.build(n_jobs, collector.info, collector.quarantined),
        xxl=source == SourceSystem.XXL_JOB,
        shadow=False,
        now_ms=to_ms(now) if now is not None else end,
    )
    m = match(
        Table.of(legacy.frame), Table.of(new), Table.of(legacy.expected), start=start, end=end, n_jobs=n_jobs, ctx=ctx
    )
    keys = Keys(origin=start, job_bits=max(1, n_jobs.bit_length()))

    def owner_of(job: np.ndarray, sched: np.ndarray) -> np.ndarray:
        """-1: not owned by one side (before the first handover, or never handed over)."""
        out = np.full(len(job), -1, dtype=np.int64)
        for jid, steps in handovers.items():
            sel = job == jid
            if not sel.any():
                continue
            # in time order; at the same handover time the later switch wins (a one-shot
            # handed to the new side and back before it was due has the same H twice)
            for at, side in sorted(steps, key=lambda step: step[0]):
                out[sel & (sched >= at)] = side
        return out

    def covered(job: np.ndarray, sched: np.ndarray) -> np.ndarray:
        """After the switch began: some side must fire it."""
        out = np.zeros(len(job), dtype=bool)
        for jid, at in covered_from.items():
            out |= (job == jid) & (sched >= at)
        return out

    check = BoundaryCheck(window=window)

    def add(what: str, job: np.ndarray, sched: np.ndarray, owner: np.ndarray, text: Sequence[str] | str) -> None:
        texts = [text] * len(job) if isinstance(text, str) else list(text)
        for j, t, o, d in zip(job.tolist(), sched.tolist(), owner.tolist(), texts, strict=True):
            check.issues.append(BoundaryIssue(what, jobs.code(int(j)), from_ms(t), "new" if o == 1 else "legacy", d))

    exp_fk = m.expected_fk
    check.owned = int(covered(keys.job(exp_fk), keys.sched(exp_fk)).sum())

    # both sides fired the same occurrence (exact, or paired within the tolerance)
    lf, nf = m.legacy.fires, m.new.fires
    li, ni = pair(lf, nf, duration_ms(s.pair_tolerance))
    pj, ps = nf["job"][ni], nf["sched"][ni]
    po = owner_of(pj, ps)
    both = po >= 0
    add(
        "doubled",
        pj[both],
        ps[both],
        po[both],
        [
            f"fired by both sides (legacy at {lt}, new at {nt})"
            for lt, nt in zip(_iso(lf["sched"][li][both]), _iso(ps[both]), strict=True)
        ],
    )
    # one side fired it twice
    for side, fires in (("legacy", lf), ("new", nf)):
        o = owner_of(fires["job"], fires["sched"])
        sel = (o >= 0) & (fires["dups"] > 0)
        add(
            "doubled",
            fires["job"][sel],
            fires["sched"][sel],
            o[sel],
            [f"fired {d + 1} times on the {side} side" for d in fires["dups"][sel].tolist()],
        )

    # what the report's mismatches say after the switch
    frame = m.mismatches
    kind, job, sched = frame["kind"].to_numpy(), frame["job"].to_numpy(), frame["sched"].to_numpy()
    a, b = frame["a"].to_numpy(), frame["b"].to_numpy()
    owner = owner_of(job, sched)
    for code, k in enumerate(KINDS):
        sel = (kind == code) & covered(job, sched)
        if sel.any():
            check.mismatch_counts[k.value] = int(sel.sum())
    texts = np.asarray(
        [detail(KINDS[int(kc)], int(x), int(y)) for kc, x, y in zip(kind, a, b, strict=True)], dtype=object
    )

    def kinds(*ks: MismatchKind) -> np.ndarray:
        return np.isin(kind, [KINDS.index(k) for k in ks])

    new_owned, legacy_owned = owner == 1, owner == 0
    missing = (
        (kinds(MismatchKind.MISSING_ON_BOTH) & covered(job, sched))
        | (kinds(MismatchKind.MISSING_ON_NEW) & new_owned)
        | (kinds(MismatchKind.MISSING_ON_LEGACY) & legacy_owned)
    )
    add("missing", job[missing], sched[missing], owner[missing], texts[missing].tolist())
    stray = (kinds(MismatchKind.EXTRA_ON_NEW) & legacy_owned & (b == 0)) | (
        kinds(MismatchKind.UNSCHEDULED_ON_LEGACY) & new_owned
    )
    add("stray", job[stray], sched[stray], owner[stray], texts[stray].tolist())
    check.issues.sort(key=lambda i: (i.scheduled_at, i.job_code, i.what))
    return check


def _iso(ms: np.ndarray) -> list[str]:
    return [from_ms(int(v)).isoformat() for v in np.asarray(ms).tolist()]


__all__ = ["BoundaryCheck", "BoundaryIssue", "HandoverPlan", "check_boundary", "fetch_new_fired"]
