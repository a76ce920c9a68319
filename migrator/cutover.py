"""Dual-run start, cutover and rollback of one business, exact at the boundary.

Legacy -> new (cutover): the legacy jobs are switched off and the legacy side is left to
settle (xxl-job pre-reads ~5 s; a stop can race a scan); its settled next time H is the
first occurrence it will not fire. Each new trigger is aligned so that its first fire on
its own (not shadow) is H: after a live dual-run the new side already published every
occurrence up to its next_fire_at, so it keeps max(next, H); after a shadow dual-run it
rewinds to H, so the occurrences it only recorded are fired for real (same command ids,
and the shadow copies still in the bus are never invoked).

New -> legacy (rollback): the new triggers are deactivated; commands already admitted
are in the bus with their deliver-at and past the cancellation boundary, so the first
occurrence the new side has NOT fired is its next_fire_at F; the legacy next time is set
to F and the legacy job is switched back on. (From a shadow dual-run the legacy side
never stopped and nothing is changed on it.)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy import select

from dbkit.connections import connect
from migrator.business import BusinessRecord, BusinessRegistry, TransitionRefused
from migrator.catchup import StreamCatchup
from migrator.child_jobs import ChildChains, child_chains
from migrator.holds import LegacyHolds
from migrator.model import BusinessState as B
from migrator.model import LedgerStatus
from migrator.ports import VERDICT_MAX_AGE, CutoverGate, FencePort, LegacyControl
from migrator.store import MigratorStore
from scheduler_core.executor.bridge_xxljob import BRIDGE_JOB_ID_LIMIT, XXL_JOB_HANDLER
from scheduler_core.model import JobCode, Trigger, TriggerId, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after, times_until
from scheduler_core.operations import BACKLOG_CAP
from scheduler_core.ports import BusinessSwitchRows, Clock, Transition, TriggerStore
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)
S = TriggerState
# a rollback retries taking a busy trigger off the scheduler this many times (see _deactivate_one)
DEACTIVATE_ATTEMPTS = 200
# a dual-run start after a rollback lifts the fence this far ahead when fenced commands are
# due sooner: the executors hear the lift in milliseconds (measured p50 4 ms, max 36 ms)
LIFT_MARGIN = timedelta(seconds=1)


@dataclass
class SwitchReport:
    biz_code: str
    from_state: str
    to_state: str
    forced: bool = False
    comparison_id: int | None = None
    handover: dict[str, str] = field(default_factory=dict)  # source key -> first time owned by the other side
    activated: int = 0
    deactivated: int = 0
    rewound: int = 0
    legacy_started: int = 0
    # rollback: job -> why it was not handed back (paused or cancelled on the new side,
    # or legacy did not switch it on); not empty = the rollback is not a success
    not_handed_back: dict[str, str] = field(default_factory=dict)
    fence_at: str | None = None  # rollback: the new side invokes nothing at or after this
    fenced: int = 0  # rollback: fired records already published for >= fence_at, recorded as skipped
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the gate's: to fix before cutover, not refusals
    stream: dict[str, object] | None = None  # cutover: the change stream's catch-up state at the gate
    # a forced cutover: the gate's refusals it went past, and the verdict the gate read
    # (ready | not_ready | None: none stored), kept with the audit row for the reports
    overrode: list[str] = field(default_factory=list)
    gate_verdict: str | None = None

    @property
    def ok(self) -> bool:
        return not self.not_handed_back

    def as_dict(self) -> dict[str, object]:
        return {**self.__dict__, "ok": self.ok}


@dataclass
class Link:
    source_key: str
    job_code: str
    trigger: Trigger
    native: bool = False  # a job created in the new center: no legacy key, no legacy side


class SwitchedStore(TriggerStore, BusinessSwitchRows, Protocol):
    """The new side as a business switch uses it: its triggers, and the switch's own rows."""


class BusinessSwitch:
    def __init__(
        self,
        store: SwitchedStore,
        own: MigratorStore,
        control: LegacyControl,
        clock: Clock,
        gate: CutoverGate | None = None,
        *,
        max_verdict_age: timedelta = VERDICT_MAX_AGE,
        acquired_patience: timedelta = timedelta(seconds=120),
        fences: FencePort | None = None,
        catchup: StreamCatchup | None = None,
    ) -> None:
        self.store, self.own = store, own
        # the change stream must hold every legacy edit before a cutover (migrator.catchup);
        # None: not checked (no legacy binlog or stream wired)
        self.catchup = catchup
        self.holds = LegacyHolds(own)
        # without a fence (a caller that wires none) a rollback hands over at the first
        # occurrence the new side has not published, up to one lookahead away
        self.fences = fences
        self.control = control
        self.clock = clock
        self.gate = gate
        self.registry = BusinessRegistry(own)
        self.max_verdict_age = max_verdict_age
        self.acquired_patience = acquired_patience
        # set by a rollback once it has changed something (its triggers off the scheduler),
        # by a cutover once it holds legacy jobs to stop them, by a dual-run start once it
        # sets the jobs' shadow flag: cut short after that, the jobs may be live on neither
        # side (or on both) until it is run again
        self.half_done = False

    # -- the three moves ------------------------------------------------------------------

    def _refuse_unmirrorable(self, biz: str) -> None:
        """A live dual-run drives the business's own xxl-job executors under a job id of the
        bridge's own (the mirror of legacy's id, so the two sides never share a job
        thread); ids of 2^30 and up have no mirror. Refused before anything changes,
        naming the jobs: a shadow dual-run does not call the executors."""
        links = self.links(biz)
        jobs = self.store.get_jobs([JobCode(ln.job_code) for ln in links])
        big = sorted(
            (
                ln.source_key
                for ln in links
                if ln.source_key.isdigit()
                and int(ln.source_key) >= BRIDGE_JOB_ID_LIMIT
                and (job := jobs.get(JobCode(ln.job_code))) is not None
                and job.handler == XXL_JOB_HANDLER
            ),
            key=int,
        )
        if big:
            raise TransitionRefused(
                f"live dual-run of {biz} refused: xxl-job job id(s) {', '.join(big[:10])}"
                + (f" and {len(big) - 10} more" if len(big) > 10 else "")
                + f" are {BRIDGE_JOB_ID_LIMIT} or more, and the bridge cannot give them a job thread of their own "
                "on the executor (it would share legacy's); dual-run with --shadow"
            )

    def start_dual_run(self, biz: str, *, shadow: bool, actor: str, reason: str = "") -> SwitchReport:
        current = self._current(biz, B.LEGACY)
        if not shadow:
            self._refuse_unmirrorable(biz)
        report = SwitchReport(biz, current.state.value, B.DUAL_RUN.value)
        # from here a failure can leave the new side firing beside legacy before the
        # business is recorded in dual-run (live on both, as `status --check` says)
        self.half_done = True
        self._set_shadow(biz, shadow=shadow)
        now = self.clock.now()
        created = [ln.trigger for ln in self.links(biz) if ln.trigger.state is S.CREATED]
        nexts: dict[TriggerId, datetime] = {}
        for t in created:
            assert t.id is not None
            if t.kind is TriggerKind.ONCE:
                nexts[t.id] = t.next_fire_at
            else:
                # the first occurrence after now: the new side starts beside the legacy one
                nxt = next_after(t, now - timedelta(milliseconds=1)) if t.next_fire_at < now else t.next_fire_at
                nexts[t.id] = nxt or t.next_fire_at
        if self.fences is not None:
            # A rollback's fence skipped the commands the new side had published for the
            # rollback's handover F and later. Lifted, those still ahead run again: each
            # trigger resumes at its first occurrence it never published (next_fire_at,
            # above), so each runs once, from its first publication. When some are due
            # within moments, the lift is LIFT_MARGIN ahead: an executor hears it in
            # milliseconds, and a command delivered before that would be skipped (missing
            # on the new side; seen in the 50-switch stress run). The new side then starts
            # at the lift.
            lift_at = now + LIFT_MARGIN if self._published_after(biz, now) else now
            for t in created:
                if t.kind is not TriggerKind.ONCE and nexts[t.id] < lift_at:  # type: ignore[index]
                    nexts[t.id] = self._first_at_or_after(t, lift_at) or nexts[t.id]  # type: ignore[index]
            self.fences.lift_fence(biz, lift_at)
        began = lift_at if self.fences is not None else now
        won = self.store.cas(Transition(ids=list(nexts), from_state=S.CREATED, to_state=S.WAITING, next_fire_at=nexts))
        report.activated = len(won)
        self._dual_run_links(biz, shadow, report)
        self.registry.transition(
            current,
            B.DUAL_RUN,
            actor=actor,
            reason=reason or "dual-run start",
            shadow=shadow,
            # when the new side began: the lift's broadcast (a broker slow or restarting)
            # can put it seconds before this row
            detail={"shadow": shadow, "activated": report.activated, "from": began.isoformat()},
        )
        self.half_done = False  # completed: nothing left half-way
        return report

    def cutover(self, biz: str, *, actor: str, reason: str = "", force: bool = False) -> SwitchReport:
        current = self._current(biz, B.DUAL_RUN)
        chains = self._child_chain_gate(biz)
        decision = self.gate.decision(biz) if self.gate is not None else None
        refusals = self._gate_refusals(decision)
        stream = self.catchup.check(biz, current.source_system) if self.catchup is not None else None
        if stream is not None and not stream.caught_up:
            refusals.append(stream.sentence)
        links = self.links(biz)
        keys = [ln.source_key for ln in links]
        # (a cutover run again after one stopped half-way: the jobs it held are its own)
        resumed = self.holds.of_business(biz) & set(keys)
        running = self.control.live(keys) | resumed
        dark = _left_dark(links, running)
        if dark:
            refusals.append(dark)
        warnings = list(decision.warnings) if decision is not None else []
        if resumed and refusals and not dark:
            # An earlier cutover stopped these jobs on legacy and was cut short (a database
            # restart) before the new side took them over: refusing now, on a verdict grown
            # old or a stream lagging after that restart, would leave them live on neither
            # side. The gate was passed when legacy was stopped; the rest is finished.
            warnings.append(
                f"finishing a cutover cut short after it stopped {len(resumed)} legacy job(s), past: "
                + "; ".join(refusals)
            )
            refusals = []
        if refusals and not force:
            raise TransitionRefused(
                f"cutover of {biz} refused: " + "; ".join(refusals) + "".join(f"; warning: {w}" for w in warnings)
            )
        if force and not reason:
            raise TransitionRefused("a forced cutover needs --reason: it is audited")
        report = SwitchReport(
            biz,
            current.state.value,
            B.CUTOVER.value,
            forced=bool(refusals) and force,
            comparison_id=decision.comparison_id if decision else None,
            warnings=warnings,
        )
        report.stream = None if stream is None else stream.as_dict()
        report.gate_verdict = None if decision is None else ("ready" if decision.ready else "not_ready")
        if refusals:
            report.overrode = list(refusals)
            report.notes.append("forced past: " + "; ".join(refusals))
        report.notes += chains.notes
        source = current.source_system
        # Only the jobs running on legacy now are switched off by this cutover; the others
        # were stopped by an operator and stay paused on both sides. The holds are
        # committed BEFORE the stop: a change stream or a `migrate run` that reads the
        # stopped rows meanwhile (the business is still dual_run until the end) must see
        # the switch's own stop, never an operator's.
        self.half_done = True  # from here a failure can leave jobs stopped on legacy alone
        self.holds.add(source, biz, running)
        try:
            settled = self.control.stop(keys)
        except Exception:
            # the stop was undone (xxl-job) or stopped half-way (batch center): a job that
            # is still live on legacy is not held; one left stopped stays held
            self.holds.remove(source, self.control.live(list(running)))
            raise
        report.notes += list(settled.notes)
        shadow = current.shadow
        # The jobs leave shadow BEFORE any trigger is rewound: the scheduler reads a job's
        # shadow flag when it fires, and a trigger rewound to H (seconds away, well inside
        # the lookahead) is admitted at once. Rewound first, H was fired as a shadow copy
        # (recorded, never invoked) whenever the scheduler won the race with the flag:
        # the occurrence at the switch instant would be lost. Off
        # first, anything the scheduler fires meanwhile is at or after its next_fire_at,
        # which the stopped legacy side no longer fires: real, as it must be.
        self._set_shadow(biz, shadow=False)
        # the parents' child jobs follow their successful runs from the first one on
        self.store.set_followups(chains.links, to_ms(self.clock.now()))
        left_off = self._left_off_by_rollbacks(biz)
        for ln in links:
            if ln.source_key in running:
                self._align_new_side(ln, settled.next_due.get(ln.source_key), shadow, report)
            else:
                self._keep_stopped(ln, report, shadow, ln.source_key in left_off)
        self.registry.transition(
            current,
            B.CUTOVER,
            actor=actor,
            reason=reason or "cutover",
            shadow=False,
            comparison_id=report.comparison_id,
            forced=report.forced,
            detail=report.as_dict(),
        )
        self.half_done = False  # completed: nothing left half-way
        return report

    def rollback(self, biz: str, *, actor: str, reason: str = "") -> SwitchReport:
        """Back to legacy, in seconds. F = now + the legacy side's start margin: the new
        side fires what it published before F (the fence lets it through), the fence skips
        (with a record) every command of the business at or after F, and each job handed
        back is started on legacy at its first occurrence at or after F. Order: refuse
        before anything changes if a job could not be handed back and would be left
        nowhere; take the triggers off the scheduler; store the fence; start the legacy
        jobs; tell the executors of the fence; release the holds. A failure half-way leaves the business in its state, and
        the rollback can simply be run again."""
        current = self.registry.get(biz)
        if current is None or current.state is B.LEGACY:
            raise TransitionRefused(f"{biz} is already on legacy" if current else f"unknown business {biz!r}")
        report = SwitchReport(biz, current.state.value, B.LEGACY.value)
        source = current.source_system
        links = self.links(biz)
        keys = [ln.source_key for ln in links]
        held = self.holds.of_business(biz)
        legacy_live = self.control.live(keys)
        known = self.control.next_due(keys)
        gone = [
            ln
            for ln in links
            if ln.source_key not in known
            and ln.source_key not in legacy_live
            and self._settled_trigger(ln.trigger).state in (S.WAITING, S.ACQUIRED)
        ]
        if gone:
            raise TransitionRefused(
                f"rollback of {biz} refused, nothing changed: "
                + "; ".join(
                    f"job {ln.source_key} ({ln.job_code}) fires only on the new side and its legacy row is gone: "
                    "handed back it would fire nowhere"
                    for ln in gone[:20]
                )
                + " — re-create the legacy job(s), or cancel the trigger(s) with `switchyard trigger cancel "
                "--reason`, then roll back"
            )
        # Off the scheduler first: until the fence, the new side only runs what it has
        # already published. F is taken after that (waiting out a trigger being fired can
        # take a moment), so the whole start margin is left for legacy to pick its jobs
        # up (the xxl-job admin loses a fire it finds less than ~4 s ahead, see
        # LegacyControl.start_margin); the fence is raised before legacy starts.
        self.half_done = True
        deactivated = self._deactivate(links)
        report.deactivated = len(deactivated)
        # legacy fires the children again (its parents run there): the new side's links go
        # with its triggers (written again at the next live dual-run start or cutover)
        self.store.set_followups(
            {ln.trigger.id: [] for ln in links if ln.trigger.id is not None}, to_ms(self.clock.now())
        )
        fence_at = self._handover_instant()
        live_dual = current.state is B.DUAL_RUN and not current.shadow
        if self.fences is not None:
            # stored now, told to the executors once legacy is started: the broadcast can
            # take seconds on a loaded broker, and legacy must be started within its start
            # margin of F (started after it, the xxl-job admin fires the first occurrence
            # late or not at all; a leader relays a stored fence within 200 ms anyway)
            report.fenced = self.fences.store_fence(biz, fence_at)
            report.fence_at = fence_at.isoformat()
        starts: dict[str, datetime] = {}
        before_fence: list[Trigger] = []  # their occurrences before F are the new side's runs
        ending: list[tuple[Trigger, str]] = []  # nothing left from F on: they end there
        for ln in links:
            key = ln.source_key
            if key in legacy_live:
                # a dual-run (or an operator's start): legacy fires it already; the new side
                # stops at the fence, which is this job's handover
                t = deactivated.get(ln.trigger.id)  # type: ignore[arg-type]
                if t is not None and self.fences is not None and live_dual:
                    # both sides fire up to the fence: what the new side was behind on is its
                    # runs too (else it stops short of the fence). Only in a live dual-run: in
                    # a shadow one the new side invokes nothing, and its backlog published as
                    # runs would run every occurrence it was behind on a second time
                    before_fence.append(t)
                    at = self._legacy_start(t, fence_at)
                    if at is not None:
                        report.handover[key] = at.isoformat()
                continue
            t = deactivated.get(ln.trigger.id)  # type: ignore[arg-type]
            if t is None:
                t = self.store.get_trigger(ln.trigger.id)  # type: ignore[arg-type]
                assert t is not None
                start = self._once_fenced(t, fence_at)
                if start is not None:
                    starts[key] = start  # fired on the new side only as a fenced command
                elif (t.state is S.PAUSED or t.state is S.CANCELLED) and key in held:
                    # the cutover stopped it on legacy and the new side no longer fires it:
                    # handing back a stopped job would start nothing, so it is said per job
                    report.not_handed_back[key] = (
                        f"{ln.job_code} is {t.state.value} on the new side and was stopped on legacy by the "
                        "cutover: left stopped on both (start it in the legacy admin, or `switchyard trigger "
                        "resume` it before rolling back)"
                    )
                elif t.state is S.PAUSED:
                    report.notes.append(
                        f"{key}: stopped on legacy by an operator and paused on the new side: stays paused on both"
                    )
                continue
            before_fence.append(t)
            at = self._legacy_start(t, fence_at)
            if at is None:
                ending.append((t, key))
            else:
                starts[key] = at
        for key, start in starts.items():
            report.handover[key] = start.isoformat()
        started = set(self.control.start(starts))
        if self.fences is not None:
            self.fences.broadcast_fence(biz)
        for t in before_fence:
            self._run_before_fence(t, fence_at)
        for t, key in ending:
            self._end_before_fence(t, key, report)
        for key in sorted(set(starts) - started - self.control.live(list(starts))):
            report.not_handed_back[key] = "the legacy job did not switch back on (its row changed or is gone)"
        # a hold is released once its job is live on legacy again, or left to an operator's
        # pause; a job the switch could not start stays held (status --check shows it)
        self.holds.remove(source, [k for k in held if not (k in starts and k in report.not_handed_back)])
        report.legacy_started = len(started)
        if current.state is B.DUAL_RUN and current.shadow:
            report.notes.append("shadow dual-run: the legacy side never stopped")
        self._set_shadow(biz, shadow=False)
        self.registry.transition(
            current, B.LEGACY, actor=actor, reason=reason or "rollback", shadow=False, detail=report.as_dict()
        )
        self._hand_back_late(biz, source, fence_at, report, actor)
        self.half_done = False  # completed: nothing left half-way
        return report

    def _hand_back_late(self, biz: str, source: str, fence_at: datetime, report: SwitchReport, actor: str) -> None:
        """Triggers admitted while the rollback ran (an operator's `trigger resume`, or the
        legacy admin's start of a paused job mirrored by the change stream before the
        transition) would fire on the new side of a business back on legacy: each is taken
        off and started on legacy like the others. The business is legacy now and nothing
        admits its triggers any more (a legacy row read back never does, and the writer
        reads the business state share-locked: migrator.edited_state; `trigger resume`
        refuses), so one pass after the transition finds them all."""
        late = [ln for ln in self.links(biz) if ln.trigger.state in (S.WAITING, S.ACQUIRED)]
        if not late:
            return
        off = self._deactivate(late)
        keys = [ln.source_key for ln in late]
        live = self.control.live(keys)
        starts: dict[str, datetime] = {}
        for ln in late:
            t = off.get(ln.trigger.id)  # type: ignore[arg-type]
            if ln.source_key in live or t is None:
                continue
            self._run_before_fence(t, fence_at)
            at = self._legacy_start(t, fence_at)
            if at is None:
                self._end_before_fence(t, ln.source_key, report)
            else:
                starts[ln.source_key] = at
        started = set(self.control.start(starts))
        for key in sorted(set(starts) - started - self.control.live(list(starts))):
            report.not_handed_back[key] = (
                "admitted on the new side while the rollback ran; the legacy job did not switch back on"
            )
        report.handover.update((k, at.isoformat()) for k, at in starts.items())
        report.deactivated += len(off)
        report.legacy_started += len(started)
        self.holds.remove(source, [k for k in keys if k not in report.not_handed_back])
        # what was said of these jobs before ("stays paused on both") is no longer true
        report.notes = [n for n in report.notes if n.split(":", 1)[0] not in set(keys)]
        report.notes.append(
            f"{len(late)} job(s) admitted on the new side while the rollback ran, taken off and handed back: "
            + ", ".join(sorted(keys)[:20])
        )
        self.registry.note(biz, actor=actor, reason=report.notes[-1], detail=report.as_dict())

    # -- pieces -----------------------------------------------------------------------------

    def links(self, biz: str) -> list[Link]:
        return links_of(self.store, self.own, biz)

    def _dual_run_links(self, biz: str, shadow: bool, report: SwitchReport) -> None:
        """Child jobs during a dual-run. Legacy keeps running its children after its own
        parent runs. A live dual-run mirrors legacy on the new side, children included:
        after each successful new-side run of a parent, the new side runs each child of
        the same business (that business is live on the new side: its handlers run
        there, as they will after the cutover, and the comparison sees the chain work).
        A child of another business is not run by the new side (its business may be on
        legacy; the cutover refuses such a chain anyway), nor one it cannot run; each is
        noted. A shadow dual-run invokes nothing, so it links nothing."""
        links = self.links(biz)
        parents: dict[TriggerId, list[TriggerId]] = {ln.trigger.id: [] for ln in links if ln.trigger.id is not None}
        if shadow:
            self.store.set_followups(parents, to_ms(self.clock.now()))
            return
        chains = child_chains(self.store, self.own, biz, links)
        self.store.set_followups({**parents, **chains.links}, to_ms(self.clock.now()))
        report.notes += chains.notes
        report.notes += [f"not run on the new side during the dual-run (legacy runs it): {r}" for r in chains.refusals]
        n = sum(len(c) for c in chains.links.values())
        if n:
            report.notes.append(
                f"{n} child job link(s): the new side runs each child after its own successful "
                "run of the parent, as legacy does after its own"
            )

    def _child_chain_gate(self, biz: str) -> ChildChains:
        """xxl-job child jobs the new side could not fire refuse the cutover, forced or
        not, naming each chain: a child run must never be lost silently."""
        chains = child_chains(self.store, self.own, biz, self.links(biz))
        if chains.refusals:
            raise TransitionRefused(
                f"cutover of {biz} refused: child job chain(s) the new side cannot run: "
                + "; ".join(chains.refusals[:20])
                + (f" (+{len(chains.refusals) - 20} more)" if len(chains.refusals) > 20 else "")
            )
        return chains

    def _current(self, biz: str, expected: B) -> BusinessRecord:
        current = self.registry.get(biz)
        if current is None:
            raise TransitionRefused(f"unknown business {biz!r}: migrate it first")
        if current.state is not expected:
            raise TransitionRefused(f"{biz} is {current.state.value}, not {expected.value}")
        return current

    def _gate_refusals(self, decision) -> list[str]:  # type: ignore[no-untyped-def]
        if decision is None:
            return ["no comparison verdict yet: run `switchyard dualrun compare` first"]
        out: list[str] = []
        if not decision.ready:
            out.append("latest verdict is not ready" + (": " + "; ".join(decision.reasons) if decision.reasons else ""))
        if decision.computed_at is not None and self.clock.now() - decision.computed_at > self.max_verdict_age:
            age = self.clock.now() - decision.computed_at
            out.append(f"latest verdict is {age} old (max {self.max_verdict_age})")
        return out

    def _set_shadow(self, biz: str, shadow: bool) -> None:
        self.store.set_shadow(biz, shadow)

    def _align_new_side(self, ln: Link, handover: datetime | None, shadow: bool, report: SwitchReport) -> None:
        t = self._settled_trigger(ln.trigger)
        if handover is None:
            # the legacy side will never fire this again: a one-shot that fired while the
            # stop settled is done (the new side must not fire it again); anything else is
            # paused, resumable, never cancelled (a stop is not an end)
            if t.kind is TriggerKind.ONCE and t.state in (S.CREATED, S.WAITING):
                self._move(t, t.state, S.CANCELLED)
                report.notes.append(
                    f"{ln.source_key}: the one-shot fired on legacy while it stopped; new trigger cancelled"
                )
            elif t.state in (S.CREATED, S.WAITING):
                self._move(t, t.state, S.PAUSED)
                report.notes.append(
                    f"{ln.source_key}: legacy has no next time for it; paused on the new side "
                    "(`switchyard trigger resume` runs it there)"
                )
            return
        report.handover[ln.source_key] = handover.isoformat()
        if t.state is S.COMPLETED and t.kind is TriggerKind.ONCE:
            if not shadow:
                return  # a live dual-run already fired the one-shot on the new side
            # The lookahead published it during the shadow dual-run, and the executor only
            # recorded it; the legacy side, now stopped, has not fired it either. Re-armed at
            # the legacy due time it fires for real, with the same command id.
            if not self.store.cas(
                Transition(
                    ids=[t.id],  # type: ignore[list-item]
                    from_state=S.COMPLETED,
                    to_state=S.WAITING,
                    next_fire_at={t.id: handover},  # type: ignore[dict-item]
                )
            ):  # type: ignore[dict-item]
                raise TransitionRefused(f"trigger {t.id} changed during the cutover; run it again")
            report.rewound += 1
            return
        if t.state in (S.COMPLETED, S.CANCELLED):
            report.notes.append(f"{ln.source_key}: new trigger is {t.state.value} but legacy is due at {handover}")
            return
        if t.state is S.PAUSED:
            return  # disabled on the legacy side before migration: stays disabled
        # One conditional update (waiting -> waiting, or created -> waiting) with the new
        # next fire time, so an interrupted cutover never leaves a trigger half-moved. A
        # trigger due every second is re-acquired by the scheduler about once a second:
        # the update can lose to a tick between the read and the write (a few ms, seen in
        # ~2% of cutovers under load), so it is retried on the trigger as it then is.
        for _attempt in range(DEACTIVATE_ATTEMPTS):
            if t.state not in (S.WAITING, S.CREATED):
                raise TransitionRefused(f"trigger {t.id} became {t.state.value} during the cutover; run it again")
            if not shadow and t.state is S.WAITING:
                # A live dual-run's new side fires every occurrence already, and keeps doing
                # so: left as it is. One behind (its broker down: the occurrences before H
                # not fired yet) fires them late, as the dual-run it still is would have;
                # moved on to H, as it was, it skipped them unrecorded (the chaos soak,
                # seed 23: 138 occurrences of a live dual-run the new side never fired
                # after a 140 s Pulsar outage and a cutover right after it).
                return
            target = handover if shadow else max(t.next_fire_at, handover)
            if target == t.next_fire_at and t.state is S.WAITING:
                return
            won = self.store.cas(
                Transition(
                    ids=[t.id],  # type: ignore[list-item]
                    from_state=t.state,
                    to_state=S.WAITING,
                    next_fire_at={t.id: target},  # type: ignore[dict-item]
                )
            )  # type: ignore[dict-item]
            if won:
                report.rewound += int(target < t.next_fire_at)
                return
            t = self._settled_trigger(t)
        raise TransitionRefused(f"trigger {t.id} keeps changing during the cutover; run it again")

    def _published_after(self, biz: str, at: datetime) -> bool:
        """Whether the new side published a command of the business due after `at` (a
        rollback's fenced lookahead)."""
        return self.store.published_after(biz, to_ms(at))

    def _left_off_by_rollbacks(self, biz: str) -> set[str]:
        """The jobs whose legacy job is stopped by a switch, not by an operator: a rollback
        left them off on both sides (paused on the new side then, `not_handed_back`), and no
        switch handed them over since (from the business's audit, oldest first)."""
        left: set[str] = set()
        for a in self.registry.audit(biz):
            if a.from_state == a.to_state:
                continue
            left -= set(a.detail.get("handover") or {})
            if a.to_state == B.LEGACY.value:
                left |= set(a.detail.get("not_handed_back") or {})
        return left

    def _keep_stopped(self, ln: Link, report: SwitchReport, shadow: bool, left_by_rollback: bool) -> None:
        """A job an operator stopped on legacy before the cutover: paused on both sides,
        resumable on the new one (`trigger resume`), never cancelled.

        One a rollback left off on both sides (its legacy job stopped by the switch, not an
        operator) whose trigger waits again was resumed on the new side since: it is handed
        over to the new side, at H = now + the legacy start margin, as a job running on
        legacy is (`_align_new_side`: a live dual-run's trigger left running, a shadow
        one's rewound to H to fire for real). Paused by the cutover as if the legacy stop
        were an operator's newer word, it fired on neither side (the chaos soak, seed 23:
        ten minutes of `reminder-executor:6`)."""
        t = self._settled_trigger(ln.trigger)
        if t.state is S.WAITING and left_by_rollback:
            self._align_new_side(ln, self._handover_instant(), shadow, report)
            report.notes.append(
                f"{ln.source_key}: left stopped on legacy by a rollback, resumed on the new side since: handed over to it"
            )
            return
        if t.state in (S.CREATED, S.WAITING):
            # the legacy stop is newer than the last migration: mirror it
            self._move(t, t.state, S.PAUSED)
            report.notes.append(
                f"{ln.source_key}: stopped on legacy before the cutover; paused on the new side too "
                "(`switchyard trigger resume` runs it there)"
            )

    def _handover_instant(self) -> datetime:
        return self.clock.now() + self.control.start_margin

    def _legacy_start(self, t: Trigger, fence_at: datetime) -> datetime | None:
        """Where legacy takes over a trigger taken off the scheduler (next_fire_at = the
        first occurrence it has not published): with a fence, its first occurrence at or
        after the fence (what was published from there on is skipped). The occurrences
        before the fence the new side has not published (it was behind: a trigger just
        resumed, a leader failing over; or a lookahead shorter than the margin) are the
        new side's to run (`_run_before_fence`): handed to legacy they would be due less
        than its start margin ahead, which the xxl-job admin loses (the chaos soak found
        occurrences fired by neither side so). None: no occurrence is left from the fence
        on (a one-shot or a cron with a year due before it): nothing for legacy to fire."""
        if self.fences is None:
            return t.next_fire_at
        return self._first_at_or_after(t, fence_at)

    def _run_before_fence(self, t: Trigger, fence_at: datetime) -> None:
        """The occurrences of `t` from its first unpublished one up to the fence, published
        as runs by whoever holds the bus (the relay of pending runs, as a resume's backlog:
        command ids of (trigger, time), so a repeat is a redelivery). Also for a trigger
        with no occurrence left from the fence on: handed to legacy its last ones would be
        due inside legacy's start margin, which loses them. Bounded."""
        if self.fences is None:
            return
        times = times_until(t, t.next_fire_at, fence_at, BACKLOG_CAP)
        if times:
            self.store.add_pending(t, times)

    def _end_before_fence(self, t: Trigger, key: str, report: SwitchReport) -> None:
        """A trigger whose every occurrence left falls before the fence: the new side runs
        them (`_run_before_fence`) and the trigger ends there (completed: `status --check`
        counts it ended, not orphaned); legacy is not started, it has nothing left to fire."""
        if self.store.cas(Transition(ids=[t.id], from_state=S.CREATED, to_state=S.COMPLETED)):  # type: ignore[list-item]
            report.notes.append(
                f"{key}: every occurrence left is before the fence ({t.next_fire_at.isoformat()} on): "
                "the new side runs them and the job ends there; legacy is not started"
            )
            return
        # changed since it was taken off (an operator's pause, an edit read from the change
        # stream): it is not ended, and saying so would hide where it stands. Admitted
        # again, `_hand_back_late` takes it off once the business is on legacy.
        now = self._settled_trigger(t)
        report.notes.append(
            f"{key}: every occurrence left is before the fence ({t.next_fire_at.isoformat()} on): the new side "
            f"runs them; the trigger changed meanwhile and is {now.state.value}, not ended; legacy is not started"
        )

    def _once_fenced(self, t: Trigger, fence_at: datetime) -> datetime | None:
        """A one-shot the new side published for at or after the fence: it will be skipped,
        so legacy fires it (its due time); None otherwise."""
        if (
            self.fences is not None
            and t.kind is TriggerKind.ONCE
            and t.state is S.COMPLETED
            and t.next_fire_at >= fence_at
        ):
            return t.next_fire_at
        return None

    @staticmethod
    def _first_at_or_after(t: Trigger, at: datetime) -> datetime | None:
        return first_at_or_after(t, at)

    def _deactivate(self, links: Sequence[Link]) -> dict[TriggerId, Trigger]:
        """waiting -> created for every link (retrying rows being fired); returns the
        deactivated triggers as they were left (next_fire_at = first unfired occurrence)."""
        out: dict[TriggerId, Trigger] = {}
        for ln in links:
            t = self._deactivate_one(ln.trigger)
            if t is not None:
                out[t.id] = t  # type: ignore[index]
        return out

    def _deactivate_one(self, t: Trigger) -> Trigger | None:
        """One trigger waiting -> created; None if it is in no state to fire (paused,
        completed, cancelled). A trigger due more often than the lookahead is re-acquired
        by the scheduler as soon as it is rescheduled, so the CAS can lose to the next tick
        many times in a row: it is retried (bounded), each time after the fire settles."""
        for _attempt in range(DEACTIVATE_ATTEMPTS):
            t = self._settled_trigger(t)
            if t.state is S.CREATED:
                return t
            if t.state is not S.WAITING:
                return None
            won = self.store.cas(Transition(ids=[t.id], from_state=S.WAITING, to_state=S.CREATED))  # type: ignore[list-item]
            if won:
                return won[0]
        raise TransitionRefused(f"trigger {t.id} keeps changing; retry the rollback")

    def _settled_trigger(self, t: Trigger) -> Trigger:
        """The trigger re-read, waiting while the scheduler holds it (acquired)."""
        waited = 0.0
        while True:
            cur = self.store.get_trigger(t.id)  # type: ignore[arg-type]
            assert cur is not None
            if cur.state is not S.ACQUIRED:
                return cur
            if waited > self.acquired_patience.total_seconds():
                raise TransitionRefused(f"trigger {t.id} stays acquired; is a scheduler stuck?")
            self.clock.sleep(0.05)
            waited += 0.05

    def _move(self, t: Trigger, src: TriggerState, dst: TriggerState) -> None:
        if src is dst:
            return
        won = self.store.cas(Transition(ids=[t.id], from_state=src, to_state=dst))  # type: ignore[list-item]
        if not won:
            raise TransitionRefused(f"trigger {t.id} changed during the switch ({src.value} -> {dst.value}); retry")


def _left_dark(links: Sequence[Link], running: set[str]) -> str:
    """The refusal for jobs running on legacy whose new-side trigger is paused or cancelled
    (an operator's action during the dual-run, while legacy still fired them): the cutover
    stops them on legacy and nothing takes them over, so they would fire on neither side.
    Forced, the reason is audited: off on both by a recorded decision. "" when none."""
    off = [ln for ln in links if ln.source_key in running and ln.trigger.state in (S.PAUSED, S.CANCELLED)]
    if not off:
        return ""
    return (
        "job(s) running on legacy but paused or cancelled on the new side would fire on neither side: "
        + ", ".join(f"{ln.source_key} ({ln.job_code}, {ln.trigger.state.value})" for ln in off[:20])
        + (f" and {len(off) - 20} more" if len(off) > 20 else "")
        + " (resume them with `switchyard trigger resume`, stop them in the legacy admin, or force with --reason)"
    )


def links_of(store: TriggerStore, own: MigratorStore, biz: str) -> list[Link]:
    """The business's migrated legacy jobs and their triggers (the ledger's migrated rows)."""
    lg = own.t.ledger
    with connect(own.engine) as conn:
        rows = conn.execute(
            select(lg.c.source_key, lg.c.target_job_code).where(
                lg.c.business == biz, lg.c.status == LedgerStatus.MIGRATED.value
            )
        ).all()
    by_code = {t.job_code: t for t in store.triggers_of(biz_code=biz)}
    return [Link(k, c, by_code[c]) for k, c in rows if c in by_code]


def migrated_job_codes(own: MigratorStore, biz: str) -> set[str]:
    """Every job code the migration ever wrote for the business (any ledger status)."""
    lg = own.t.ledger
    with connect(own.engine) as conn:
        return {
            str(c) for (c,) in conn.execute(select(lg.c.target_job_code).where(lg.c.business == biz)) if c is not None
        }


def native_links(store: TriggerStore, own: MigratorStore, biz: str) -> list[Link]:
    """The business's jobs created in the new center (issue 28): jobs of the store the
    migration never wrote (no ledger row names them), each with its schedule: its oldest
    trigger that is not cancelled (a run-now adds one-shots after it; a deleted job's
    cancelled triggers are history, not a job). Keyed by job code: they have no legacy key."""
    migrated = migrated_job_codes(own, biz)
    schedules: dict[str, Trigger] = {}
    for t in store.triggers_of(biz_code=biz):  # in id order: the first one kept is the oldest
        if t.job_code not in migrated and t.state is not TriggerState.CANCELLED:
            schedules.setdefault(t.job_code, t)
    jobs = store.get_jobs([JobCode(c) for c in schedules])
    return [Link(code, code, t, native=True) for code, t in schedules.items() if code in jobs]


def first_at_or_after(t: Trigger, at: datetime) -> datetime | None:
    """The trigger's first occurrence at or after `at` (a fixed rate on its grid through
    next_fire_at, which may lie after `at`); None when it has none."""
    if t.kind is TriggerKind.ONCE:
        return t.next_fire_at if t.next_fire_at >= at else None
    if t.kind is TriggerKind.FIXED_RATE and t.interval is not None and at <= t.next_fire_at:
        # anchored at next_fire_at: step back to the first occurrence at or after `at`
        return t.next_fire_at - ((t.next_fire_at - at) // t.interval) * t.interval
    return next_after(t, at - timedelta(milliseconds=1))
