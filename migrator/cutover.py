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

from sqlalchemy import select, update

from migrator.business import BusinessRecord, BusinessRegistry, TransitionRefused
from migrator.model import BusinessState as B
from migrator.model import LedgerStatus
from migrator.ports import CutoverGate, LegacyControl
from scheduler_core.model import Trigger, TriggerId, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after
from scheduler_core.ports import Clock, Transition
from scheduler_core.store.sql import SqlTriggerStore

log = logging.getLogger(__name__)
S = TriggerState
# a rollback retries taking a busy trigger off the scheduler this many times (see _deactivate_one)
DEACTIVATE_ATTEMPTS = 200


@dataclass
class SwitchReport:
    business: str
    from_state: str
    to_state: str
    forced: bool = False
    comparison_id: int | None = None
    handover: dict[str, str] = field(default_factory=dict)  # source key -> first time owned by the other side
    activated: int = 0
    deactivated: int = 0
    rewound: int = 0
    legacy_started: int = 0
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # the gate's: to fix before cutover, not refusals

    def as_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


@dataclass
class Link:
    source_key: str
    job_code: str
    trigger: Trigger


class BusinessSwitch:
    def __init__(self, store: SqlTriggerStore, control: LegacyControl, clock: Clock, gate: CutoverGate | None = None,
                 *, max_verdict_age: timedelta = timedelta(hours=1), acquired_patience: timedelta = timedelta(seconds=120)) -> None:
        self.store = store
        self.control = control
        self.clock = clock
        self.gate = gate
        self.registry = BusinessRegistry(store)
        self.max_verdict_age = max_verdict_age
        self.acquired_patience = acquired_patience

    # -- the three moves ------------------------------------------------------------------

    def start_dual_run(self, biz: str, *, shadow: bool, actor: str, reason: str = "") -> SwitchReport:
        current = self._current(biz, B.LEGACY)
        report = SwitchReport(biz, current.state.value, B.DUAL_RUN.value)
        self._set_shadow(biz, shadow)
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
        won = self.store.cas(Transition(ids=list(nexts), from_state=S.CREATED, to_state=S.WAITING, next_fire_at=nexts))
        report.activated = len(won)
        self.registry.transition(current, B.DUAL_RUN, actor=actor, reason=reason or "dual-run start", shadow=shadow,
                                 detail={"shadow": shadow, "activated": report.activated})
        return report

    def cutover(self, biz: str, *, actor: str, reason: str = "", force: bool = False) -> SwitchReport:
        current = self._current(biz, B.DUAL_RUN)
        decision = self.gate.decision(biz) if self.gate is not None else None
        refusals = self._gate_refusals(decision)
        warnings = list(decision.warnings) if decision is not None else []
        if refusals and not force:
            raise TransitionRefused(f"cutover of {biz} refused: " + "; ".join(refusals)
                                    + "".join(f"; warning: {w}" for w in warnings))
        if force and not reason:
            raise TransitionRefused("a forced cutover needs --reason: it is audited")
        report = SwitchReport(biz, current.state.value, B.CUTOVER.value, forced=bool(refusals) and force,
                              comparison_id=decision.comparison_id if decision else None, warnings=warnings)
        if refusals:
            report.notes.append("forced past: " + "; ".join(refusals))
        links = self.links(biz)
        settled = self.control.stop([ln.source_key for ln in links])
        report.notes += list(settled.notes)
        shadow = current.shadow
        # The jobs leave shadow BEFORE any trigger is rewound: the scheduler reads a job's
        # shadow flag when it fires, and a trigger rewound to H (seconds away, well inside
        # the lookahead) is admitted at once. Rewound first, H was fired as a shadow copy
        # (recorded, never invoked) whenever the scheduler won the race with the flag:
        # the occurrence at the switch instant was lost (seen under load in CI). Off
        # first, anything the scheduler fires meanwhile is at or after its next_fire_at,
        # which the stopped legacy side no longer fires: real, as it must be.
        self._set_shadow(biz, False)
        for ln in links:
            handover = settled.next_due.get(ln.source_key)
            self._align_new_side(ln, handover, shadow, report)
        self.registry.transition(current, B.CUTOVER, actor=actor, reason=reason or "cutover", shadow=False,
                                 comparison_id=report.comparison_id, forced=report.forced, detail=report.as_dict())
        return report

    def rollback(self, biz: str, *, actor: str, reason: str = "") -> SwitchReport:
        current = self.registry.get(biz)
        if current is None or current.state is B.LEGACY:
            raise TransitionRefused(f"{biz} is already on legacy" if current else f"unknown business {biz!r}")
        report = SwitchReport(biz, current.state.value, B.LEGACY.value)
        links = self.links(biz)
        deactivated = self._deactivate(links)
        report.deactivated = len(deactivated)
        legacy_kept_running = current.state is B.DUAL_RUN and current.shadow
        if not legacy_kept_running:
            keys = [ln.source_key for ln in links]
            settled = self.control.stop(keys) if current.state is B.DUAL_RUN else None
            if settled is not None:
                report.notes += list(settled.notes)
            starts: dict[str, datetime] = {}
            for ln in links:
                t = deactivated.get(ln.trigger.id)  # type: ignore[arg-type]
                if t is None:
                    continue  # paused, completed or cancelled on the new side: the legacy job stays off
                start = t.next_fire_at  # F: the first occurrence the new side has not fired
                legacy_next = settled.next_due.get(ln.source_key) if settled is not None else None
                if legacy_next is not None and legacy_next > start:
                    # a live dual-run whose new side fell behind: legacy already fired up to
                    # its own next time; starting it at F would fire [F, legacy_next) twice
                    start = legacy_next
                starts[ln.source_key] = start
                report.handover[ln.source_key] = start.isoformat()
            report.legacy_started = len(self.control.start(starts))
        else:
            report.notes.append("shadow dual-run: the legacy side never stopped; nothing changed on it")
        self._set_shadow(biz, False)
        self.registry.transition(current, B.LEGACY, actor=actor, reason=reason or "rollback", shadow=False,
                                 detail=report.as_dict())
        return report

    # -- pieces -----------------------------------------------------------------------------

    def links(self, biz: str) -> list[Link]:
        lg = self.store.t.ledger
        with self.store.engine.connect() as conn:
            rows = conn.execute(select(lg.c.source_key, lg.c.target_job_code).where(
                lg.c.business == biz, lg.c.status == LedgerStatus.MIGRATED.value)).all()
        by_code = {t.job_code: t for t in self.store.triggers_of(biz_code=biz)}
        return [Link(k, c, by_code[c]) for k, c in rows if c in by_code]

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
        j = self.store.t.job
        with self.store.engine.begin() as conn:
            conn.execute(update(j).where(j.c.biz_code == biz).values(shadow=int(shadow)))

    def _align_new_side(self, ln: Link, handover: datetime | None, shadow: bool, report: SwitchReport) -> None:
        t = self._settled_trigger(ln.trigger)
        if handover is None:
            # the legacy side will never fire this again (a finished one-shot, an ended
            # schedule): the new side must not either
            if t.state not in (S.COMPLETED, S.CANCELLED):
                self._move(t, t.state, S.CANCELLED)
                report.notes.append(f"{ln.source_key}: finished on the legacy side; new trigger cancelled")
            return
        report.handover[ln.source_key] = handover.isoformat()
        if t.state is S.COMPLETED and t.kind is TriggerKind.ONCE:
            if not shadow:
                return  # a live dual-run already fired the one-shot on the new side
            # The lookahead published it during the shadow dual-run, and the executor only
            # recorded it; the legacy side, now stopped, has not fired it either. Re-armed at
            # the legacy due time it fires for real, with the same command id.
            if not self.store.cas(Transition(ids=[t.id], from_state=S.COMPLETED, to_state=S.WAITING,  # type: ignore[list-item]
                                             next_fire_at={t.id: handover})):  # type: ignore[dict-item]
                raise TransitionRefused(f"trigger {t.id} changed during the cutover; run it again")
            report.rewound += 1
            return
        if t.state in (S.COMPLETED, S.CANCELLED):
            report.notes.append(f"{ln.source_key}: new trigger is {t.state.value} but legacy is due at {handover}")
            return
        if t.state is S.PAUSED:
            return  # disabled on the legacy side before migration: stays disabled
        target = handover if shadow else max(t.next_fire_at, handover)
        if target != t.next_fire_at or t.state is S.CREATED:
            # one conditional update (waiting -> waiting, or created -> waiting) with the new
            # next fire time: an interrupted cutover never leaves a trigger half-moved
            won = self.store.cas(Transition(ids=[t.id], from_state=t.state, to_state=S.WAITING,  # type: ignore[list-item]
                                            next_fire_at={t.id: target}))  # type: ignore[dict-item]
            if not won:
                raise TransitionRefused(f"trigger {t.id} changed during the cutover; run it again")
            report.rewound += int(target < t.next_fire_at)

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
