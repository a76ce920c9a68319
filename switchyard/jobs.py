"""Jobs as first-class, migrated or not (issue 28): the one validated path that creates,
edits, copies, deletes, starts, stops and runs a job and its trigger, for the CLI
(`switchyard job`) and whatever else acts as an operator.

- the input is checked field by field (`scheduler_core.jobspec`: a bad one is a
  JobInputError naming the field), the first fire time is computed from the schedule;
- a business first seen here is registered native (`BusinessRegistry.register_native`),
  so `status`, `status --check` and the console list it;
- a schedule edit takes effect at E = now + 5 s through the schedule-edit path
  (`SqlJobAdmin.reschedule`: supersede what was published, publish what is new);
- start and stop are the operators' resume and pause (`switchyard.trigger_actions.act`:
  the stop of "A stop is a stop"), a delete cancels the job's live triggers the same way
  before the definition goes, so nothing fires after it;
- every write is audited in the business's audit log (who, what, before and after).
"""

from __future__ import annotations

import functools
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from migrator.business import BusinessRegistry
from migrator.cutover import migrated_job_codes
from migrator.model import BusinessState
from migrator.store import MigratorStore
from scheduler_core import operations
from scheduler_core.alert_rule import AlertRule
from scheduler_core.executor.bridge_xxljob import run_once_params
from scheduler_core.executor.bridges import XXL_JOB_HANDLER
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule
from scheduler_core.model import Job, JobCode, Lane, Trigger, TriggerId, TriggerKind, TriggerState
from scheduler_core.occurrences import next_after
from scheduler_core.ports import MessageBus, TriggerStore
from scheduler_core.run_now import publish_run
from scheduler_core.stops import StopService
from scheduler_core.store.job_admin import Rescheduled, SqlJobAdmin, TriggerBusy
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.supersedes import SqlSupersedes
from switchyard.trigger_actions import STOP_LEAD, act
from switchyard.wiring import alert_store

S = TriggerState
# how long an edit tries again while the job's trigger is being fired
BUSY_WAIT = timedelta(seconds=3)
# sharding items' parameters shown (list, show, the audit): a job may have 100,000 of them
SHOWN_ITEMS = 20


class UnknownName(LookupError):
    """A job or business that does not exist (the CLI's exit 2, naming it)."""


def find_job(store: TriggerStore, name: str, biz_code: str | None = None) -> Job:
    """A job named by its code or as `business:job`, as every command that takes a job
    reads it (a migrated job's code has colons of its own: the whole name is tried as a
    code first). An unknown job, or one of another business than `biz_code`, raises
    UnknownName naming it."""
    job = store.get_job(JobCode(name))
    if job is None and ":" in name:
        biz, _, code = name.partition(":")
        found = store.get_job(JobCode(code))
        if found is not None and found.biz_code == biz:
            job = found
        elif found is not None:
            raise UnknownName(f"job {code} is of business {found.biz_code}, not {biz}")
    if job is None:
        raise UnknownName(f"no such job: {name}")
    if biz_code is not None and job.biz_code != biz_code:
        raise UnknownName(f"job {job.job_code} is of business {job.biz_code}, not {biz_code}")
    return job


@dataclass(frozen=True, slots=True)
class JobView:
    """A job as an operator reads it: its definition, its schedule trigger, its children."""

    job: Job
    trigger: Trigger | None  # the schedule (oldest trigger not cancelled); None: none left
    children: tuple[str, ...]
    items: tuple[str, ...]  # every item's parameter, or the first SHOWN_ITEMS (items_complete)
    items_complete: bool = True
    alerts: AlertRule = field(default_factory=AlertRule)

    @property
    def state(self) -> str:
        t = self.trigger
        return job_state(None if t is None else t.kind, None if t is None else t.state)

    def spec(self) -> JobSpec:
        """The job as a JobSpec (needs every item: `Jobs.view(job, all_items=True)`)."""
        if not self.items_complete:
            raise RuntimeError("JobView.spec needs the view with every sharding item")
        j, t = self.job, self.trigger
        return JobSpec(
            job_code=j.job_code,
            biz_code=j.biz_code,
            handler=j.handler,
            params=j.params,
            shard_total=j.shard_total,
            items=self.items,
            timeout=j.timeout,
            max_retry=j.max_retry,
            priority=j.priority,
            lane=j.lane,
            block=j.block,
            children=self.children,
            alerts=self.alerts,
            schedule=Schedule.of(t) if t is not None else Schedule(kind=TriggerKind.NONE),
        )

    def as_dict(self) -> dict[str, Any]:
        j, t = self.job, self.trigger
        return {
            "job": j.job_code,
            "business": j.biz_code,
            "handler": j.handler,
            "params": j.params,
            "shards": j.shard_total,
            "items": list(self.items[:SHOWN_ITEMS]),
            "items_total": j.shard_total if j.explicit_items else 0,
            "timeout_s": j.timeout.total_seconds(),
            "retries": j.max_retry,
            "priority": j.priority,
            "lane": j.lane.value,
            "block": j.block.value,
            "children": list(self.children),
            "alerts": {
                "targets": list(self.alerts.targets),
                "on": list(self.alerts.kinds) if self.alerts.targets else [],
            },
            "state": self.state,
            "trigger_id": None if t is None else t.id,
            "schedule": None if t is None else _schedule_dict(t),
            "next_fire_at": None if t is None or t.state not in (S.WAITING, S.ACQUIRED) else t.next_fire_at.isoformat(),
        }


def job_state(kind: TriggerKind | None, state: S | None) -> str:
    """A job's state as the list and its page name it, from its schedule trigger's kind
    and state (None: no trigger left, the job is deleted)."""
    if kind is None or state is None:
        return "deleted"
    if kind is TriggerKind.NONE:
        return "child"
    if state in (S.WAITING, S.ACQUIRED):
        return "running"
    return {S.PAUSED: "stopped", S.CREATED: "not admitted"}.get(state, state.value)


_NUMBERS = re.compile(r"(\d+)")


@functools.lru_cache(maxsize=1 << 16)
def natural_key(code: str) -> tuple[tuple[int, int | str], ...]:
    """A job code's sort key with its numbers as numbers: xxl:billing:9 before xxl:billing:10.
    Kept per code: the job list sorts every job on every load."""
    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in _NUMBERS.split(code) if part)


def preview(t: Trigger | None, now: datetime, n: int = 5) -> list[str]:
    """The next `n` fire times of a job's schedule, in its zone (as its cron reads them):
    from its stored next fire time when it is running, else from now."""
    if t is None or t.kind is TriggerKind.NONE:
        return []
    if t.state in (S.WAITING, S.ACQUIRED):
        at: datetime | None = t.next_fire_at
    elif t.kind is TriggerKind.ONCE:
        at = t.next_fire_at if t.next_fire_at >= now and t.state is not S.COMPLETED else None
    else:
        at = next_after(t, now)
    zone = ZoneInfo(t.time_zone)
    out: list[str] = []
    while at is not None and len(out) < n:
        out.append(at.astimezone(zone).isoformat())
        at = next_after(t, at)
    return out


def _schedule_dict(t: Trigger) -> dict[str, Any]:
    return {
        "kind": t.kind.value,
        "cron": t.cron,
        "dialect": t.cron_dialect if t.kind is TriggerKind.CRON else None,
        "zone": t.time_zone,
        "every_s": None if t.interval is None else t.interval.total_seconds(),
        "at": t.next_fire_at.isoformat() if t.kind is TriggerKind.ONCE else None,
        "end_at": None if t.end_at is None else t.end_at.isoformat(),
        "misfire": t.misfire_policy.value,
    }


class Jobs:
    def __init__(self, store: SqlTriggerStore, own: MigratorStore, stops: StopService, actor: str) -> None:
        self.store = store
        self.own = own
        self.stops = stops
        self.actor = actor
        self.admin = SqlJobAdmin(store)
        self.registry = BusinessRegistry(own)
        self.alerts = alert_store(store)

    # -- reading ---------------------------------------------------------------------

    def resolve(self, name: str, biz_code: str | None = None) -> Job:
        return find_job(self.store, name, biz_code)

    def check_business(self, biz_code: str) -> None:
        # known as `switchyard.cli.names.known_business` knows it: registered, a job of the
        # store's is of it, or runs were recorded for it
        known = (
            self.registry.get(biz_code) is not None
            or biz_code in self.store.job_biz_codes()
            or self.store.has_fired_records(biz_code)
        )
        if not known:
            raise UnknownName(f"no such business: {biz_code}")

    def view(self, job: Job, *, all_items: bool = False) -> JobView:
        trigger = self._schedule_trigger(job.job_code)
        children: tuple[str, ...] = ()
        if trigger is not None and trigger.id is not None:
            child_ids = self.store.followups_of([trigger.id]).get(trigger.id, [])
            by_id = {t.id: t.job_code for t in self.store.get_triggers(child_ids)}
            children = tuple(by_id[c] for c in child_ids if c in by_id)
        items: tuple[str, ...] = ()
        wanted = job.shard_total if all_items else min(job.shard_total, SHOWN_ITEMS)
        if job.explicit_items:
            items = tuple(i.param for i in self.store.sharding_page(job.job_code, 0, wanted))
        return JobView(
            job,
            trigger,
            children,
            items,
            items_complete=wanted == job.shard_total,
            alerts=self.alerts.rule(job.job_code),
        )

    def all(self, biz_code: str | None = None) -> list[JobView]:
        if biz_code is not None:
            self.check_business(biz_code)
        jobs = sorted(self.admin.jobs(biz_code), key=lambda j: (j.biz_code, natural_key(j.job_code)))
        return [self.view(j) for j in jobs]

    def triggers(self, code: JobCode) -> list[Trigger]:
        return [t for t in self.store.triggers_of(job_code=code) if t.state is not S.CANCELLED]

    def _schedule_trigger(self, code: JobCode) -> Trigger | None:
        found = self.triggers(code)
        return found[0] if found else None

    # -- writing ---------------------------------------------------------------------

    def add(self, spec: JobSpec, *, stopped: bool = False, reason: str = "") -> JobView:
        job = spec.job()  # checks every field
        if self.store.get_job(job.job_code) is not None:
            raise JobInputError("job", f"{job.job_code} exists already (edit it, or copy it to a new code)")
        child_triggers = self._child_triggers(spec.children)
        now = self.store.clock.now()
        business = self.registry.get(spec.biz_code)
        if spec.lane is None:  # the business's default (a business new here: `default`)
            job = replace(job, lane=business.default_lane if business is not None else Lane.DEFAULT)
        trigger = spec.schedule.trigger(job, now, S.PAUSED if stopped else S.WAITING)  # first fire computed
        if business is None:
            self.registry.register_native(spec.biz_code, actor=self.actor, reason=reason)
        saved = self.store.put_job(job)
        if spec.items:
            self._put_items(saved, spec.items)
        (added,) = self.store.add_triggers([trigger])
        assert added.id is not None
        if child_triggers:
            self.store.set_followups({added.id: child_triggers}, self.store.clock.now_ms())
        if spec.alerts.targets:
            self.alerts.set_rule(saved.job_code, saved.biz_code, spec.alerts)
        out = self.view(saved)
        self._audit(saved.biz_code, "job add", reason, before=None, after=out.as_dict())
        return out

    def edit(self, job: Job, changes: Mapping[str, Any], *, reason: str = "") -> tuple[JobView, str]:
        """`changes`: JobSpec fields, `schedule` a whole Schedule. Returns the job after and
        what the schedule change did."""
        self._refuse_legacy_owned(job, "edit")
        before = self.view(job, all_items=True)
        spec = before.spec().with_changes(**dict(changes))
        if spec.job_code != job.job_code or spec.biz_code != job.biz_code:
            raise JobInputError("job", "the code and business of a job do not change (copy it instead)")
        new_job = spec.job()
        child_triggers = self._child_triggers(spec.children) if "children" in changes else None
        note = "schedule unchanged"
        new_sched: Trigger | None = None
        t = before.trigger
        if t is not None and t.id is not None and not spec.schedule.same_timing(Schedule.of(t)):
            new_sched = spec.schedule.trigger(new_job, self.store.clock.now())  # checks it, first fire computed
        elif t is not None and spec.schedule.misfire_policy is not t.misfire_policy:
            new_sched = replace(t, misfire_policy=spec.schedule.misfire_policy)
        if new_sched is not None and t is not None and t.id is not None:
            # first, so a trigger still being fired after a few tries leaves nothing written
            done = self._reschedule(t.id, new_sched)
            s = done.supersede
            note = (
                f"schedule changed; next fire {done.trigger.next_fire_at.isoformat()}"
                if done.trigger.kind is not TriggerKind.NONE
                else "schedule changed: none (runs only after its parent or by hand)"
            )
            if s is not None:
                note += (
                    f"; effective {datetime.fromtimestamp(s.effective_ms / 1000, done.trigger.next_fire_at.tzinfo)}"
                    f" ({len(s.skipped_ms)} published run(s) superseded, {len(s.pending_ms)} of the new schedule"
                    " to publish)"
                )
        # what the operator cannot set here stays as it was (a migrated job's envelope, a
        # dual-run's shadow)
        saved = self.store.put_job(replace(new_job, id=job.id, envelope_size=job.envelope_size, shadow=job.shadow))
        if "items" in changes or (spec.items and spec.shard_total != job.shard_total):
            self._put_items(saved, spec.items)
        if new_job.lane is not job.lane:
            self.admin.set_lane(job.job_code, new_job.lane)
        if child_triggers is not None and t is not None and t.id is not None:
            self.store.set_followups({t.id: child_triggers}, self.store.clock.now_ms())
        if "alerts" in changes:
            self.alerts.set_rule(saved.job_code, saved.biz_code, spec.alerts)
        after = self.view(saved)
        self._audit(job.biz_code, "job edit", reason, before=before.as_dict(), after=after.as_dict())
        return after, note

    def default_lane(self, biz_code: str, lane: Lane | None = None, *, reason: str = "") -> Lane:
        """The business's default lane (the lane its jobs get when they name none); with
        `lane`, set it first (jobs added or migrated from now on; a job keeps its lane)."""
        self.check_business(biz_code)
        business = self.registry.get(biz_code)
        if lane is None:
            return business.default_lane if business is not None else Lane.DEFAULT
        if business is None:
            # known by its jobs or runs only: registering it here would guess its cutover state
            raise UnknownName(f"business {biz_code} is not registered (migrate it, or add a job of it here first)")
        return self.registry.set_default_lane(biz_code, lane, actor=self.actor, reason=reason).default_lane

    def copy(self, job: Job, new_code: str, *, biz_code: str | None = None, reason: str = "") -> JobView:
        """A new job with the definition and schedule of `job`, created stopped (as the
        xxl-job admin's copy: two jobs firing the same work from the moment of a copy is
        never what was meant); `job start` starts it."""
        spec = self.view(job, all_items=True).spec()
        sched = spec.schedule
        if sched.kind is TriggerKind.ONCE and sched.at is not None and sched.at < self.store.clock.now():
            raise JobInputError("at", f"the one-shot time of {job.job_code} ({sched.at.isoformat()}) is past")
        copied = replace(spec, job_code=new_code, biz_code=biz_code or spec.biz_code)
        return self.add(copied, stopped=True, reason=reason or f"copy of {job.job_code}")

    def delete(self, job: Job, *, reason: str = "") -> operations.OperationReport | None:
        """The job's live triggers are cancelled first (a stop at S = now + 1 s: nothing
        runs at or after it, published or not), then its definition goes."""
        self._refuse_legacy_owned(job, "delete")
        before = self.view(job)
        report = None
        live = [t.id for t in self.triggers(job.job_code) if t.id is not None and _live(t, self.store.clock.now())]
        if live:
            report, guard = self._act("cancel", live, reason or "job delete")
            if guard or not report.ok or report.still_acquired:
                raise TriggerBusy(
                    f"job {job.job_code}: its triggers could not all be stopped yet "
                    f"({guard or report.unchanged or report.still_acquired}); the definition is kept: "
                    "run the delete again"
                )
        self.admin.delete_job(job.job_code)
        self.alerts.set_rule(job.job_code, job.biz_code, AlertRule())  # a job's alerts go with it
        self._audit(job.biz_code, "job delete", reason, before=before.as_dict(), after=None)
        return report

    def start(self, job: Job, *, reason: str = "") -> operations.OperationReport:
        return self._start_stop(job, "resume", reason)

    def stop(self, job: Job, *, reason: str = "") -> operations.OperationReport:
        return self._start_stop(job, "pause", reason)

    def run(
        self,
        job: Job,
        *,
        params: str | None = None,
        addresses: Sequence[str] = (),
        bus: MessageBus | None = None,
        reason: str = "",
    ) -> Trigger:
        """One run now, outside the schedule (the schedule is not moved): a one-shot
        trigger due now, which the scheduler fires on its next tick as any one-shot; with
        `params` (the run's own parameter), published here on `bus` with it
        (`scheduler_core.run_now`). A bridged xxl-job job's parameter goes into its bridge
        params as the admin's executor parameter, and `addresses` (its executors' addresses,
        the admin's "run once" address list) replace the app's registered executors for
        this run; other jobs run on their business's executors, so they take none."""
        bridged = job.handler == XXL_JOB_HANDLER
        if addresses and not bridged:
            raise JobInputError(
                "address",
                f"job {job.job_code} runs on its business's executors (handler {job.handler}): "
                "only a bridged xxl-job job runs on chosen executor addresses",
            )
        own = params
        if bridged and (params is not None or addresses):
            try:
                own = run_once_params(job.params, params, addresses)
            except ValueError as exc:
                raise JobInputError("address" if addresses else "param", str(exc)) from None
        now = self.store.clock.now()
        if own is not None and bus is None:
            what = "its own parameter" if params is not None else "chosen executor addresses"
            raise JobInputError("param", f"a run with {what} is published by this command: give --bus")
        state = S.WAITING if own is None else S.COMPLETED  # completed: the scheduler never fires it
        once = Schedule(kind=TriggerKind.ONCE, at=now).trigger(job, now, state)
        (added,) = self.store.add_triggers([once])
        if own is not None and bus is not None:
            publish_run(self.store, bus, added, job, own)
        after: dict[str, Any] = {
            "job": job.job_code,
            "trigger_id": added.id,
            "params": job.params if own is None else own,
        }
        if addresses:
            after["addresses"] = list(addresses)
        self._audit(job.biz_code, "job run", reason, before=None, after=after)
        return added

    # -- helpers ---------------------------------------------------------------------

    def _reschedule(self, trigger_id: TriggerId, new: Trigger) -> Rescheduled:
        """`SqlJobAdmin.reschedule`, tried again while the trigger is being fired (its fire
        ends in milliseconds; a leader that died holding it is reclaimed in seconds)."""
        deadline = time.monotonic() + BUSY_WAIT.total_seconds()
        while True:
            try:
                return self.admin.reschedule(trigger_id, new)
            except TriggerBusy:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def _refuse_legacy_owned(self, job: Job, action: str) -> None:
        """A migrated job whose business is not cut over is the legacy admin's: the
        migration carries the legacy definition over again and would undo an edit made
        here (and a delete here would leave the legacy job firing on alone)."""
        rec = self.registry.get(job.biz_code)
        if rec is None or rec.state is BusinessState.CUTOVER:
            return
        if job.job_code in migrated_job_codes(self.own, job.biz_code):
            raise PermissionError(
                f"job {job.job_code} is migrated from {rec.source_system} and business {job.biz_code} is "
                f"{rec.state.value}: {action} it in the legacy admin (the migration carries it over), "
                "or after the cutover here"
            )

    def _start_stop(self, job: Job, action: str, reason: str) -> operations.OperationReport:
        t = self._schedule_trigger(job.job_code)
        if t is None or t.id is None:
            raise UnknownName(f"job {job.job_code} has no trigger")
        if t.kind is TriggerKind.NONE:
            raise JobInputError("job", f"{job.job_code} has no schedule of its own (a child job): nothing to {action}")
        word = "job stop" if action == "pause" else "job start"
        report, refused = self._act(action, [t.id], reason or word)
        if refused:
            raise PermissionError(f"job {job.job_code}: {refused}")
        self._audit(
            job.biz_code,
            word,
            reason,
            before={"job": job.job_code, "state": t.state.value},
            after={"job": job.job_code, "at": str(report.at)},
        )
        return report

    def _act(self, action: str, ids: list[TriggerId], reason: str) -> tuple[operations.OperationReport, str]:
        started = self.store.clock.now()
        report, guard = act(
            self.store,
            self.own,
            self.stops,
            SqlSupersedes(self.store),
            action,
            ids,
            actor=self.actor,
            reason=reason,
            started=started,
        )
        refused = "; ".join(f"trigger {k}: {v}" for k, v in guard.refused.items())
        return report, refused

    def _child_triggers(self, children: tuple[str, ...]) -> list[TriggerId]:
        out: list[TriggerId] = []
        for code in children:
            t = self._schedule_trigger(JobCode(code)) if self.store.get_job(JobCode(code)) else None
            if t is None or t.id is None:
                raise JobInputError("child", f"no such job: {code}")
            out.append(t.id)
        return out

    def _put_items(self, job: Job, params: tuple[str, ...]) -> None:
        from scheduler_core.model import ShardingItem

        self.store.put_sharding_items(
            job.job_code, [ShardingItem(job_code=job.job_code, index=i, param=p) for i, p in enumerate(params)]
        )

    def _audit(
        self, biz_code: str, action: str, reason: str, *, before: dict[str, Any] | None, after: dict[str, Any] | None
    ) -> None:
        self.registry.note(
            biz_code,
            actor=self.actor,
            reason=reason or action,
            detail={"action": action, "before": before, "after": after},
        )


def _live(t: Trigger, now: datetime) -> bool:
    """Whether the trigger can still fire: admitted or waiting, or a one-shot admitted
    ahead whose run waits on the bus (completed, its time still to come)."""
    if t.state in (S.WAITING, S.ACQUIRED, S.PAUSED, S.CREATED):
        return True
    return t.state is S.COMPLETED and t.kind is TriggerKind.ONCE and t.next_fire_at >= now - STOP_LEAD


__all__ = ["JobView", "Jobs", "UnknownName", "find_job"]
