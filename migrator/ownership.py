"""The ownership invariant, shown and enforced.

Every migrated job is live on exactly one side (on both during a dual-run, by design),
or deliberately off on both (paused on the new side, or ended). `status --check` finds
any job that is meant to run but fires on neither side ("orphaned") and any job of a
business cut over that fires on both ("double"). `trigger pause|resume|cancel` asks
`guard_trigger_operation` first: a change that would leave a job firing nowhere, or on
both sides, is refused (exit 5) unless it is an explicit, audited decision (--reason).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select

from migrator.business import BusinessRegistry
from migrator.cutover import migrated_job_codes
from migrator.holds import LegacyHolds
from migrator.model import BusinessState as B
from migrator.model import LedgerStatus
from migrator.store import MigratorStore
from scheduler_core.model import Trigger, TriggerId, TriggerState
from scheduler_core.ports import CatalogReads, TriggerBrief, TriggerStore

S = TriggerState
_RUNNABLE = (S.CREATED, S.WAITING, S.ACQUIRED)  # meant to run: not paused, not ended


class Firing(enum.StrEnum):
    """Which side fires a job (`status --check`: ORPHANED and DOUBLE are the problems)."""

    NEW = "new"
    LEGACY = "legacy"
    BOTH = "both"  # a live dual-run: by design
    PAUSED = "paused"  # off on both by an operator's action
    ENDED = "ended"  # completed or cancelled on the new side, not live on legacy
    ORPHANED = "orphaned"  # meant to run, fires on neither side
    DOUBLE = "double"  # fires on both sides outside a live dual-run


PROBLEMS = (Firing.ORPHANED, Firing.DOUBLE)


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOwnership:
    biz_code: str
    source_key: str
    job_code: str
    trigger_id: int | None
    trigger_state: str
    new_live: bool
    legacy_live: bool
    legacy_known: bool  # read from the legacy tables (else inferred from the store)
    held: bool  # stopped on legacy by the switch itself
    side: Firing
    why: str = ""

    def as_dict(self) -> dict[str, object]:
        return {
            "business": self.biz_code,
            "source_key": self.source_key,
            "job_code": self.job_code,
            "trigger_id": self.trigger_id,
            "trigger_state": self.trigger_state,
            "new_live": self.new_live,
            "legacy_live": self.legacy_live,
            "legacy_known": self.legacy_known,
            "held": self.held,
            "side": self.side.value,
            "why": self.why,
        }


@dataclass
class BusinessOwnership:
    biz_code: str
    source_system: str
    state: B
    shadow: bool
    jobs: list[JobOwnership] = field(default_factory=list)

    @property
    def problems(self) -> list[JobOwnership]:
        return [j for j in self.jobs if j.side in PROBLEMS]

    def counts(self) -> dict[str, int]:
        out = {s.value: 0 for s in Firing}
        for j in self.jobs:
            out[j.side.value] += 1
        return out


def classify(state: B, shadow: bool, trigger_state: TriggerState, legacy_live: bool, held: bool) -> tuple[Firing, str]:
    """Which side fires a job, from its business's state, its new-side trigger and its
    legacy switch. Pure: the whole rule in one place."""
    # the scheduler fires waiting triggers whatever the business state; a legacy
    # business's triggers are `created` (not admitted), and shadow commands invoke nothing
    new_live = trigger_state in (S.WAITING, S.ACQUIRED) and not shadow
    if new_live and legacy_live:
        if state is B.DUAL_RUN:
            return Firing.BOTH, ""
        return Firing.DOUBLE, (
            f"live on both sides while the business is {state.value}: stop it in the legacy admin"
            if state is B.CUTOVER
            else "roll back again, or pause the trigger"
        )
    if new_live:
        return Firing.NEW, ""
    if legacy_live:
        return Firing.LEGACY, ""
    if trigger_state is S.PAUSED:
        return Firing.PAUSED, ""
    if trigger_state in (S.COMPLETED, S.CANCELLED):
        return Firing.ENDED, ""
    why = f"the new-side trigger is {trigger_state.value}" + (" (shadow)" if shadow else "")
    why += "; on legacy it is stopped" + (" by the switch (cutover)" if held else "")
    return Firing.ORPHANED, why


LegacyLive = Callable[[str, Sequence[str]], set[str] | None]  # (source system, keys) -> live keys, None: unknown


def ownership(
    store: CatalogReads,
    own: MigratorStore,
    legacy_live: LegacyLive | None = None,
    biz_codes: Sequence[str] | None = None,
) -> list[BusinessOwnership]:
    """Per business and job, which side fires it. `legacy_live` reads the legacy switches
    (the legacy database); without it, legacy is inferred from the store: a job the
    switch stopped (held) is off; in a business cut over every legacy job is off; else a
    job is live on legacy unless its mirrored trigger says the legacy job is off.

    The jobs are those of `links_of` and `native_links`, read for every business at once
    (the console's overview asks for all of them on every load): the ledger, the holds,
    the triggers' id, job, kind and state with whether the job exists, one query each."""
    records = [r for r in BusinessRegistry(own).all() if not biz_codes or r.biz_code in biz_codes]
    if not records:
        return []
    wanted = None if not biz_codes else [r.biz_code for r in records]
    migrated, ledger_codes = _ledger_links(own, wanted)
    held_by = LegacyHolds(own).of_businesses(wanted)
    newest: dict[tuple[str, str], TriggerBrief] = {}  # per (business, job): its newest trigger
    oldest_live: dict[tuple[str, str], TriggerBrief] = {}  # its oldest not cancelled
    for t in store.trigger_briefs(wanted):  # in id order
        key = (t.biz_code, t.job_code)
        newest[key] = t
        if t.state is not S.CANCELLED:
            oldest_live.setdefault(key, t)
    # jobs created in the new center (never migrated): no legacy side to fire them
    natives: dict[str, list[TriggerBrief]] = {}
    for (biz, code), t in oldest_live.items():
        if code not in ledger_codes.get(biz, ()):
            natives.setdefault(biz, []).append(t)
    out: list[BusinessOwnership] = []
    for rec in records:
        bo = BusinessOwnership(rec.biz_code, rec.source_system, rec.state, rec.shadow)
        links = [
            (k, code, newest[(rec.biz_code, code)], False)
            for k, code in migrated.get(rec.biz_code, [])
            if (rec.biz_code, code) in newest
        ]
        keys = [k for k, _c, _t, _n in links]
        links += [(t.job_code, t.job_code, t, True) for t in natives.get(rec.biz_code, []) if t.has_job]
        held = held_by.get(rec.biz_code, set())
        live = legacy_live(rec.source_system, keys) if legacy_live is not None and keys else None
        for source_key, job_code, t, native in links:
            if native:
                leg = False
            elif live is not None:
                leg = source_key in live
            else:
                leg = source_key not in held and rec.state is not B.CUTOVER and t.state in _RUNNABLE
            side, why = classify(rec.state, rec.shadow, t.state, leg, source_key in held)
            new_live = t.state in (S.WAITING, S.ACQUIRED) and not rec.shadow
            bo.jobs.append(
                JobOwnership(
                    biz_code=rec.biz_code,
                    source_key=source_key,
                    job_code=job_code,
                    trigger_id=t.id,
                    trigger_state=t.state.value,
                    new_live=new_live,
                    legacy_live=leg,
                    legacy_known=live is not None,
                    held=source_key in held,
                    side=side,
                    why=why,
                )
            )
        out.append(bo)
    return out


def _ledger_links(
    own: MigratorStore, biz_codes: Sequence[str] | None
) -> tuple[dict[str, list[tuple[str, str]]], dict[str, set[str]]]:
    """Per business: its migrated (source key, job code) pairs (`links_of`), and every job
    code the migration ever wrote for it, whatever the status (`migrated_job_codes`)."""
    lg = own.t.ledger
    stmt = select(lg.c.business, lg.c.source_key, lg.c.target_job_code, lg.c.status)
    if biz_codes is not None:
        stmt = stmt.where(lg.c.business.in_(sorted(set(biz_codes))))
    migrated: dict[str, list[tuple[str, str]]] = {}
    codes: dict[str, set[str]] = {}
    with own.engine.connect() as conn:
        for biz, key, code, status in conn.execute(stmt).all():
            if code is None:
                continue
            codes.setdefault(str(biz), set()).add(str(code))
            if status == LedgerStatus.MIGRATED.value:
                migrated.setdefault(str(biz), []).append((str(key), str(code)))
    return migrated, codes


@dataclass
class GuardOutcome:
    allowed: list[TriggerId] = field(default_factory=list)
    refused: dict[TriggerId, str] = field(default_factory=dict)
    audited: dict[str, list[TriggerId]] = field(default_factory=dict)  # business -> ids to audit


class MigratedJobs:
    """Whether a trigger's job came from a legacy row (a ledger row names it): only such a
    job has a legacy twin that a new-side trigger could fire beside. A job created in the
    new center (issue 28) is the new side's alone, whatever its business's state. The
    ledger is read once per business per call (an operation over a business's thousands
    of triggers asks for every one)."""

    def __init__(self, own: MigratorStore) -> None:
        self.own = own
        self._codes: dict[str, set[str]] = {}

    def __call__(self, t: Trigger) -> bool:
        if t.biz_code not in self._codes:
            self._codes[t.biz_code] = migrated_job_codes(self.own, t.biz_code)
        return t.job_code in self._codes[t.biz_code]


def guard_trigger_operation(
    store: TriggerStore, own: MigratorStore, action: str, ids: Sequence[TriggerId], reason: str = ""
) -> GuardOutcome:
    """Which of these triggers `action` (pause, resume, cancel) may change without
    breaking the ownership invariant.

    - resume in a business on legacy: the legacy job is the live one; the trigger would
      fire beside it (twice) while the business is not even in dual-run: refused.
    - pause or cancel of a migrated job's trigger live only on the new side (a business
      cut over, its legacy job stopped): the job would fire nowhere while an operator
      might take it for a switch's leftover; allowed only as an explicit decision (a
      reason), audited. A job created here (a native business's) is paused as any stop.
    Every operation on a business in dual-run or cut over is audited."""
    states: Mapping[str, B] = {r.biz_code: r.state for r in BusinessRegistry(own).all()}
    is_migrated = MigratedJobs(own)
    out = GuardOutcome()
    triggers: dict[TriggerId, Trigger] = {t.id: t for t in store.get_triggers(list(ids)) if t.id is not None}
    for tid in ids:
        t = triggers.get(tid)
        if t is None:
            out.allowed.append(tid)  # reported as "no such trigger" by the operation
            continue
        state = states.get(t.biz_code, B.LEGACY)
        if action == "resume" and state is B.LEGACY and t.biz_code in states and is_migrated(t):
            out.refused[tid] = (
                f"{t.job_code}: business {t.biz_code} is on legacy, where this job runs; resumed "
                "here it would fire on both sides. Start it in the legacy admin (the next migrate "
                "run follows), or start a dual-run"
            )
            continue
        if (
            action in ("pause", "cancel")
            and state is B.CUTOVER
            and t.state in (S.WAITING, S.ACQUIRED)
            and not reason
            and is_migrated(t)  # a job created here has no legacy job: its pause is a plain stop
        ):
            out.refused[tid] = (
                f"{t.job_code}: business {t.biz_code} is cut over and its legacy job is stopped; "
                f"to {action} it here leaves it firing on neither side. Say why with --reason "
                "to do it on purpose (audited)"
            )
            continue
        out.allowed.append(tid)
        if state is not B.LEGACY:
            out.audited.setdefault(t.biz_code, []).append(tid)
    return out
