"""The soak's checker: after the run, every occurrence of every business accounted for.

It reads what both sides left behind, never what the workload believes it did:

- the legacy logs (xxl-job's `xxl_job_log`, the batch center's `bc_task_exec_log`)
  through the readers, and the new side's fired records, matched by the comparator's own
  pipeline (`dualrun.boundary.check_boundary`: the one a dual-run report and
  `dualrun check-boundary` run);
- the migration audit (`dus_cutover_audit`): every switch with its handover times;
- the stops (`scheduler_core.stops`, through `dualrun.stopped`);
- the handler invocations the executor processes wrote (`tests.soak.handlers`);
- the `status --json` samples taken during the run, and `status --check` at its end.

What each check proves is in docs/soak.md.
"""

from __future__ import annotations

import json
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

from dualrun.boundary import BoundaryIssue, HandoverPlan, check_boundary
from dualrun.model import Window
from dualrun.stopped import stopped_occurrences
from readers.ports import LegacyReader
from scheduler_core.fence import is_fence_skip
from scheduler_core.model import FiredState, parse_command_id
from scheduler_core.stops import Cause, StopIndex
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms, to_ms
from switchyard.wiring import dualrun_store

# A live dual-run's new side starts with the first occurrence it admits after the switch
# (its triggers are activated then): this much after the switch's instant it owns every one.
DUAL_RUN_LEAD = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class AuditedSwitch:
    """One row of the cutover audit: a state change of the business."""

    at: datetime
    from_state: str
    to_state: str
    shadow: bool
    handover: dict[str, str]
    # a dual-run start: the instant its new side began firing (its fence lift), which a
    # slow broadcast of the lift (a broker restarting) can put seconds before `at`
    began: datetime | None = None


def audited_switches(store: SqlTriggerStore, biz_code: str) -> list[AuditedSwitch]:
    """The business's state changes from its audit, oldest first (notes that changed
    nothing, from = to, left out)."""
    with store.engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT at, from_state, to_state, detail FROM dus_cutover_audit "
                "WHERE biz_code = :b AND from_state <> to_state ORDER BY id"
            ),
            {"b": biz_code},
        ).all()
    out = []
    for at, frm, to, detail in rows:
        d = json.loads(detail or "{}") if detail else {}
        handover = d.get("handover") or {} if isinstance(d, dict) else {}
        began = d.get("from") if isinstance(d, dict) else None
        out.append(
            AuditedSwitch(
                from_ms(int(at)),
                str(frm),
                str(to),
                bool(d.get("shadow")),
                dict(handover),
                datetime.fromisoformat(began) if isinstance(began, str) else None,
            )
        )
    return out


@dataclass(frozen=True, slots=True)
class DualSpan:
    """A live dual-run: both sides fire from `start` (+ the lead) to each job's handover
    (the cutover's H, or the end of the rollback that ended it)."""

    start: datetime
    end: datetime


def plan_switches(
    switches: Sequence[AuditedSwitch], keys: Iterable[str], start: datetime, now: datetime
) -> tuple[list[HandoverPlan], list[DualSpan]]:
    """The boundary checker's switches (who owns each job from when), and the live
    dual-run spans inside which a fire by both sides is the dual-run itself.

    A live dual-run is read as the new side owning from its start (+ DUAL_RUN_LEAD): so a
    new-side miss inside it counts; the legacy side's fires there are the double the
    dual-run means (see `accept`). A shadow dual-run's new side only records: legacy
    keeps owning. A rollback hands back the jobs in its handover at their F; a job it
    left out (legacy kept firing it) at the rollback's instant. Before the first switch
    legacy owns every job (from `start`)."""
    keys = list(keys)
    # every business starts on legacy: legacy owns each job from the window's start
    out: list[HandoverPlan] = [HandoverPlan(handover=dict.fromkeys(keys, start), to_new=False, at=start)]
    spans: list[DualSpan] = []
    open_dual: datetime | None = None
    for sw in switches:
        if sw.to_state == "dual_run" and not sw.shadow:
            lead = sw.at + DUAL_RUN_LEAD
            out.append(HandoverPlan(handover=dict.fromkeys(keys, lead), to_new=True, at=lead))
            # the triggers are activated before the audit row is written: an occurrence
            # due in between is the dual-run's first (seconds, when the fence lift's
            # broadcast waited on a restarting broker: the audit says when it began)
            open_dual = sw.at - DUAL_RUN_LEAD if sw.began is None else min(sw.at - DUAL_RUN_LEAD, sw.began)
        elif sw.to_state == "cutover":
            out.append(HandoverPlan(handover=sw.handover, to_new=True, at=sw.at))
            if open_dual is not None:
                last = max([datetime.fromisoformat(v) for v in sw.handover.values()], default=sw.at)
                spans.append(DualSpan(open_dual, max(last, sw.at)))
                open_dual = None
        elif sw.to_state == "legacy":
            handover: dict[str, str | datetime] = {k: sw.at for k in keys}
            handover.update(sw.handover)
            out.append(HandoverPlan(handover=handover, to_new=False, at=sw.at))
            if open_dual is not None:
                last = max([datetime.fromisoformat(v) for v in sw.handover.values()], default=sw.at)
                spans.append(DualSpan(open_dual, max(last, sw.at)))
                open_dual = None
    if open_dual is not None:
        spans.append(DualSpan(open_dual, now))
    return out, spans


@dataclass(frozen=True, slots=True)
class Invocation:
    pid: int
    command_id: str
    scheduled_ms: int
    wall_ms: int
    job_code: str


def read_invocations(paths: Iterable[Path]) -> list[Invocation]:
    """Every handler invocation the executor processes logged (a line cut short by a
    kill -9 is left out: the process died before it could run anything more)."""
    out = []
    for p in paths:
        if not p.exists():
            continue
        for line in p.read_text(errors="replace").splitlines():
            parts = line.split()
            if len(parts) == 5 and parts[0].isdigit():
                out.append(Invocation(int(parts[0]), parts[1], int(parts[2]), int(parts[3]), parts[4]))
    return out


@dataclass
class BusinessCheck:
    biz_code: str
    switches: int = 0
    owned: int = 0  # occurrences checked (every one in the window)
    both: int = 0  # fired by both sides inside a live dual-run, as it should be
    stopped: int = 0  # occurrences a stop covered (not missing: stopped on purpose)
    across: int = 0  # two occurrences either side of a handover, paired by the matching's tolerance
    missing: list[BoundaryIssue] = field(default_factory=list)
    # legacy's own occurrences it could not fire while its database restarted (the xxl-job
    # admin and the batch center read and lock their tables to fire: no database, no fire)
    legacy_lost_in_restart: list[BoundaryIssue] = field(default_factory=list)
    doubled: list[BoundaryIssue] = field(default_factory=list)
    stray: list[BoundaryIssue] = field(default_factory=list)
    ran_after_stop: list[str] = field(default_factory=list)
    # invoked for an occurrence at or after a stop's S before the command that wrote the
    # stop had returned: the stop was still going out (README "A stop is a stop": no
    # handler at or after S *after the command returned*); reported, not a failure
    ran_while_stop_went_out: list[str] = field(default_factory=list)
    stopped_not_skipped: list[str] = field(default_factory=list)
    skipped_without_reason: list[str] = field(default_factory=list)


_BOTH = re.compile(r"legacy at (\S+), new at (\S+)\)")


def owner_at(planned: Sequence[HandoverPlan], key: str, at: datetime) -> bool | None:
    """True: the new side owns the job's occurrence at `at`; False: legacy; None: nobody
    yet (as `check_boundary` reads the switches: the last handover at or before wins)."""
    owner = None
    steps = sorted(
        ((datetime.fromisoformat(h) if isinstance(h, str) else h, sw.to_new) for sw in planned
         if (h := sw.handover.get(key)) is not None),
        key=lambda step: step[0],
    )  # fmt: skip
    for when, to_new in steps:
        if when <= at:
            owner = to_new
    return owner


def _each_on_its_side(issue: BoundaryIssue, planned: Sequence[HandoverPlan], key: str | None) -> bool:
    """A "fired by both sides" pair the matching made of two different occurrences within
    its tolerance, each fired by the side that owned it (a legacy fire just before a
    handover and a new-side one just after, or the reverse): two right fires, no double.
    The matching pairs by tolerance because xxl-job logs no fire time (only the trigger
    time); two fires of one occurrence carry the same time and are still doubled."""
    m = _BOTH.search(issue.detail)
    if m is None or key is None:
        return False
    legacy_at, new_at = datetime.fromisoformat(m.group(1)), datetime.fromisoformat(m.group(2))
    return legacy_at != new_at and owner_at(planned, key, legacy_at) is False and bool(owner_at(planned, key, new_at))


def _legacy_log_disproves(reader: LegacyReader, biz_code: str, key: str | None, issue: BoundaryIssue) -> bool:
    """A new-side-owned occurrence the matching says legacy fired too, when the legacy log
    holds no fire of that job at or after it (within 3 s): the matching gave a legacy fire
    of the occurrence before (xxl-job logs trigger times to the second, no fire time) to
    this one. Seen on per-second jobs right at a cutover's handover."""
    if key is None or issue.owner != "new" or "both sides" not in issue.detail:
        return False
    rows = reader.executions(biz_code, issue.scheduled_at, issue.scheduled_at + timedelta(seconds=3))
    return not any(r.source_key == key for r in rows)


def in_spans(at: datetime, spans: Sequence[DualSpan]) -> bool:
    return any(s.start <= at <= s.end for s in spans)


def check_business(
    store: SqlTriggerStore,
    reader: LegacyReader,
    biz_code: str,
    window: Window,
    invocations: Sequence[Invocation],
    *,
    now: datetime,
    stop_returned: Mapping[tuple[str, int], int] | None = None,
) -> BusinessCheck:
    """Occurrence by occurrence over `window`: the boundary of every switch, the dual-runs,
    and the stops of the business (see docs/soak.md)."""
    own = dualrun_store(store)
    switches = audited_switches(store, biz_code)
    keys = own.migration.job_codes(reader.system.value, biz_code)  # source key -> job code
    planned, spans = plan_switches(switches, keys, window.start, now)
    out = BusinessCheck(biz_code, switches=len(switches))
    stopped = stopped_occurrences(store, biz_code)
    if keys:
        check = check_boundary(store, own, reader, biz_code, planned, window=window, now=now)
        out.owned = check.owned
        key_of = {code: key for key, code in keys.items()}
        kept_paused = left_paused_by_rollback(store, biz_code, switches)
        for issue in check.issues:
            if stop_excuses(issue, spans, stopped) or kept_paused(issue, key_of.get(issue.job_code)):
                out.stopped += 1
            elif issue.what == "doubled" and (
                _each_on_its_side(issue, planned, key_of.get(issue.job_code))
                or _legacy_log_disproves(reader, biz_code, key_of.get(issue.job_code), issue)
            ):
                out.across += 1
            elif (issue.what == "doubled" and "both sides" in issue.detail and in_spans(issue.scheduled_at, spans)) or (
                issue.what == "stray" and in_spans(issue.scheduled_at, spans)
            ):
                out.both += 1
            else:
                getattr(out, issue.what).append(issue)
    _check_stops(store, biz_code, window, invocations, out, stop_returned or {})
    return out


def left_paused_by_rollback(
    store: SqlTriggerStore, biz_code: str, switches: Sequence[AuditedSwitch]
) -> Callable[[BoundaryIssue, str | None], bool]:
    """Whether a legacy-owned miss is a job the last rollback before it left off on both
    sides, as documented (README, "rollback of a job paused or cancelled on the new side"):
    not in that rollback's handover, and an operator's pause or cancel of its trigger
    standing over the occurrence. Only then does a new-side stop account for a legacy
    miss (`stop_excuses`): a job handed back is legacy's to fire whatever the new side's
    stops, so the self-test's planted misses are still found."""
    index = StopIndex({(st.scope, st.key): st for st in store.stops()})
    trigger_ids: dict[str, list[int]] = defaultdict(list)
    for t in store.triggers_of(biz_code=biz_code):
        if t.id is not None:
            trigger_ids[str(t.job_code)].append(int(t.id))
    rollbacks = [sw for sw in switches if sw.to_state == "legacy"]

    def kept(issue: BoundaryIssue, key: str | None) -> bool:
        if key is None or issue.what != "missing" or issue.owner != "legacy":
            return False
        last = next((sw for sw in reversed(switches) if sw.at <= issue.scheduled_at), None)
        if last is None or last not in rollbacks or key in last.handover:
            return False
        ms = to_ms(issue.scheduled_at)
        return any(
            (w := index.covering(tid, issue.job_code, biz_code, ms)) is not None
            and w.cause in (Cause.PAUSE, Cause.CANCEL)
            for tid in trigger_ids.get(issue.job_code, ())
        )

    return kept


def stop_excuses(issue: BoundaryIssue, spans: Sequence[DualSpan], stopped: Callable[[str, int], bool]) -> bool:
    """Whether a stop on the new side (a pause, a freeze, a rollback's fence) accounts for
    the issue. Never for an occurrence legacy alone owned going missing: the new side's
    stops do not stop legacy, and a fence stays open over everything legacy owns after a
    rollback, so it excused (and hid) every legacy miss from then on; the self-test's
    planted misses came back "stopped on purpose"."""
    if not stopped(issue.job_code, to_ms(issue.scheduled_at)):
        return False
    legacy_alone = issue.what == "missing" and issue.owner == "legacy" and not in_spans(issue.scheduled_at, spans)
    return not legacy_alone


def _check_stops(
    store: SqlTriggerStore,
    biz_code: str,
    window: Window,
    invocations: Sequence[Invocation],
    out: BusinessCheck,
    stop_returned: Mapping[tuple[str, int], int],
) -> None:
    """None at or after a stop's instant ran once the command that wrote the stop had
    returned; each stopped record says skipped and why (but for a run invoked before)."""
    index = StopIndex({(s.scope, s.key): s for s in store.stops()})
    stopped = stopped_occurrences(store, biz_code)
    triggers: dict[str, list[int]] = {}
    for t in store.triggers_of(biz_code=biz_code):
        if t.id is not None:
            triggers.setdefault(str(t.job_code), []).append(int(t.id))
    in_flight: set[str] = set()
    for inv in invocations:
        if inv.job_code not in triggers:
            continue
        windows = [
            w for tid in triggers[inv.job_code] if (w := index.covering(tid, inv.job_code, biz_code, inv.scheduled_ms))
        ]
        if not windows:
            continue
        what = f"{inv.command_id} ({inv.job_code} at {from_ms(inv.scheduled_ms)})"
        if ran_before_its_stop_returned(inv, biz_code, [w.from_ms for w in windows], stop_returned):
            in_flight.add(inv.command_id)
            out.ran_while_stop_went_out.append(
                f"{what}, invoked {inv.wall_ms - min(w.from_ms for w in windows)} ms after S"
            )
        else:
            out.ran_after_stop.append(what)
    for r in store.fired_between(biz_code, window.start, window.end):
        if not stopped(str(r.job_code), to_ms(r.scheduled_at)):
            continue
        if r.state is FiredState.SKIPPED:
            msg = r.message or ""
            if not (msg.startswith("stopped:") or is_fence_skip(r.state, msg)):
                out.skipped_without_reason.append(f"{r.command_id}: {msg!r}")
        elif r.state in (FiredState.SUCCEEDED, FiredState.FAILED) and r.command_id not in in_flight:
            out.stopped_not_skipped.append(f"{r.command_id} {r.state.value}")


# what a stopping command prints its S as: `pause ... from <S>`, `froze business X from
# <S>`, a rollback's `fence: the new side invokes nothing at or after <S>`
_STOP_FROM = re.compile(r"(?:\bfrom|at or after) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?\+00:00)")
STOPPING = ("pause", "freeze", "rollback", "cancel")


def ran_before_its_stop_returned(
    inv: Invocation, biz_code: str, froms: Sequence[int], stop_returned: Mapping[tuple[str, int], int]
) -> bool:
    """Whether `inv`, covered by stops starting at `froms`, was invoked before every command
    that wrote them had returned. A stop no operator command wrote (a schedule edit's,
    written by the stream) never excuses a run."""
    returned = [stop_returned.get((biz_code, f)) for f in froms]
    return bool(returned) and all(r is not None and inv.wall_ms < r for r in returned)


def stop_returns(actions: Iterable[Any], t0_wall: datetime) -> dict[tuple[str, int], int]:
    """(business, S in ms) -> when the command that wrote that stop returned (wall ms),
    from the operator's actions (`at`: seconds after `t0_wall`, taken as it returned)."""
    out: dict[tuple[str, int], int] = {}
    for a in actions:
        if a.code != 0 or not a.what.startswith(STOPPING):
            continue
        returned = to_ms(t0_wall + timedelta(seconds=a.at))
        for m in _STOP_FROM.finditer(a.out):
            out[(a.biz, to_ms(datetime.fromisoformat(m.group(1))))] = returned
    return out


@dataclass
class Duplicates:
    redelivered: int = 0  # a command id invoked again by another executor process (after a kill)
    twice_in_one_process: list[str] = field(default_factory=list)
    split_ids: list[str] = field(default_factory=list)  # one occurrence under two command ids


def check_duplicates(invocations: Sequence[Invocation]) -> Duplicates:
    """Delivery is at least once: a command id may come again after an executor died
    (counted: redelivered). The executor answers a repeat in one process from memory, so
    a second invocation there is a defect; and an occurrence has one command id."""
    out = Duplicates()
    by_cid: defaultdict[str, Counter[int]] = defaultdict(Counter)
    ids_of: defaultdict[tuple[int, int, int], set[str]] = defaultdict(set)
    for inv in invocations:
        by_cid[inv.command_id][inv.pid] += 1
        tid, ms, item = parse_command_id(inv.command_id)  # type: ignore[arg-type]
        ids_of[(int(tid), ms, item)].add(inv.command_id)
    for cid, pids in by_cid.items():
        out.redelivered += len(pids) - 1
        out.twice_in_one_process += [f"{cid} pid {pid} x{n}" for pid, n in pids.items() if n > 1]
    out.split_ids = [f"{occ}: {sorted(ids)}" for occ, ids in ids_of.items() if len(ids) > 1]
    return out


@dataclass(frozen=True, slots=True)
class StatusSample:
    at: datetime
    problems: tuple[str, ...]  # "<business> <job> <side>": firing on neither side, or on both
    error: str = ""


def problems_of(status_json: str) -> tuple[str, ...]:
    """The jobs `status --json` names as firing on neither side or on both."""
    rows = json.loads(status_json)
    return tuple(
        f"{row['business']} {p.get('job_code')} {p.get('side')} {p.get('why', '')}".strip()
        for row in rows
        for p in row.get("problems", [])
    )


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """RSS samples of one process instance (pid), in KiB."""

    role: str
    pid: int
    samples: tuple[tuple[float, int], ...]  # (seconds since the soak began, RSS KiB)


def memory_growth(series: MemorySeries, warm_up_s: float, min_life_s: float) -> float | None:
    """The growth of RSS after warm-up: the peak after it over the first sample at or
    after it, minus one; None when the process lived too short past warm-up to tell."""
    if not series.samples:
        return None
    born = series.samples[0][0]
    after = [(t, kb) for t, kb in series.samples if t - born >= warm_up_s]
    if len(after) < 3 or after[-1][0] - born < min_life_s:
        return None
    return max(kb for _t, kb in after) / after[0][1] - 1.0


__all__ = [
    "AuditedSwitch",
    "BusinessCheck",
    "Duplicates",
    "Invocation",
    "MemorySeries",
    "StatusSample",
    "audited_switches",
    "check_business",
    "check_duplicates",
    "memory_growth",
    "plan_switches",
    "problems_of",
    "ran_before_its_stop_returned",
    "read_invocations",
    "stop_returns",
]


def set_apart_legacy_outages(check: BusinessCheck, outages: Sequence[tuple[datetime, datetime]]) -> None:
    """The missing occurrences legacy owned that fell in a restart of the database legacy
    fires from: legacy's loss, as the real admin's would be, not the new side's (listed
    apart in the report). The new side's are never set apart."""
    kept: list[BoundaryIssue] = []
    for issue in check.missing:
        if issue.owner == "legacy" and any(a <= issue.scheduled_at <= b for a, b in outages):
            check.legacy_lost_in_restart.append(issue)
        else:
            kept.append(issue)
    check.missing = kept
