"""Issue 28, jobs as first-class: what a job's writes do to what runs, on the embedded
default (SQLite, the in-process bus, a manual clock): the first fire is computed, never
taken; a schedule edit takes effect at E through the supersede path; a stop and a delete
leave no run at or after S; a run-now runs once; every write is audited."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from migrator.business import BusinessRegistry
from scheduler_core.clock import ManualClock
from scheduler_core.executor import Executor
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Job, JobCode, Trigger, TriggerKind, TriggerState
from scheduler_core.scheduler import SchedulerCore
from scheduler_core.stops import StopRelay, StopService
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import supersede_relay
from scheduler_core.supersede import MARGIN
from switchyard.jobs import Jobs
from switchyard.wiring import migrator_store
from tests.harness import Harness, make_harness

START = datetime(2026, 12, 2, 6, 0, 0, 500_000, tzinfo=UTC)
EVERY_10S = "0/10 * * * * ?"
EVERY_7S = "0/7 * * * * ?"  # seconds 0, 7, .. 56: only :00 is in both


class _Center:
    """A scheduler with a 60 s lookahead, one executor of biz-a, the result consumer and
    the relays of stops and schedule edits, stepped second by second."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.core: SchedulerCore = h.core(lookahead=timedelta(seconds=60))
        self.consumer = h.results(self.core)
        self.ex = Executor(h.bus, "biz-a", clock=h.clock)
        self.ran: list[tuple[str, datetime]] = []
        self.ex.handler()(lambda ctx: self.ran.append((ctx.job_code, ctx.scheduled_at)))
        self.edits = supersede_relay(h.store, h.bus, self.core.settings, SchedulerMetrics())
        self.stops = StopRelay(SqlStops(h.store), h.bus)
        self.jobs = Jobs(h.store, migrator_store(h.store), StopService(SqlStops(h.store), h.bus), "tester")

    def step(self, seconds: int) -> None:
        until = self.h.clock.now() + timedelta(seconds=seconds)
        while self.h.clock.now() < until:
            self.h.clock.advance(timedelta(seconds=1))
            self.edits.relay()
            self.stops.relay()
            for _ in range(100):
                if not any(r.acquired for r in self.core.tick_all()):
                    break
            while self.ex.poll_once(timeout=timedelta(0)):
                pass
            while self.consumer.poll(timeout=timedelta(0)):
                pass

    def runs_of(self, code: str) -> list[datetime]:
        return [at for c, at in self.ran if c == code]


def _center(tmp_path: Path) -> _Center:
    return _Center(make_harness(tmp_path, ManualClock(START)))


def _cron_job(code: str, cron: str = EVERY_10S) -> JobSpec:
    return JobSpec(job_code=code, biz_code="biz-a", handler="h", schedule=Schedule(kind=TriggerKind.CRON, cron=cron))


def _job(c: _Center, code: str) -> Job:
    found = c.h.store.get_job(JobCode(code))
    assert found is not None
    return found


def test_the_first_fire_is_computed_from_the_schedule(tmp_path: Path) -> None:
    c = _center(tmp_path)
    view = c.jobs.add(_cron_job("j1", "0 0/5 * * * ?"))
    assert view.trigger is not None and view.trigger.next_fire_at == datetime(2026, 12, 2, 6, 5, tzinfo=UTC)
    every = c.jobs.add(
        JobSpec(
            job_code="rate",
            biz_code="biz-a",
            handler="h",
            schedule=Schedule(kind=TriggerKind.FIXED_RATE, interval=timedelta(minutes=1)),
        )
    )
    assert every.trigger is not None and every.trigger.next_fire_at == START + timedelta(minutes=1)
    child = c.jobs.add(
        JobSpec(job_code="child", biz_code="biz-a", handler="h", schedule=Schedule(kind=TriggerKind.NONE))
    )
    assert child.trigger is not None and child.trigger.state is TriggerState.COMPLETED  # never due by itself
    with pytest.raises(JobInputError, match=r"^at: .* is in the past"):
        c.jobs.add(
            JobSpec(
                job_code="late",
                biz_code="biz-a",
                handler="h",
                schedule=Schedule(kind=TriggerKind.ONCE, at=START - timedelta(seconds=1)),
            )
        )


def test_add_triggers_refuses_a_cron_trigger_at_a_time_its_cron_never_produces(tmp_path: Path) -> None:
    """The issue's finding: such a trigger was stored and fired at that time all the same."""
    c = _center(tmp_path)
    c.h.store.put_job(Job(job_code=JobCode("j1"), biz_code="biz-a", handler="h"))
    off_grid = Trigger(
        job_code=JobCode("j1"),
        biz_code="biz-a",
        kind=TriggerKind.CRON,
        cron="0 0 * * * ?",  # on the hour
        next_fire_at=START + timedelta(seconds=3),
    )
    with pytest.raises(
        ValueError, match=r"is no fire time of cron '0 0 \* \* \* \?'.*its next one is 2026-12-02T07:00"
    ):
        c.h.store.add_triggers([off_grid])
    assert c.h.store.triggers_of(job_code=JobCode("j1")) == []
    c.step(10)
    assert c.ran == []
    on_grid = Trigger(
        job_code=JobCode("j1"),
        biz_code="biz-a",
        kind=TriggerKind.CRON,
        cron="0 0 * * * ?",
        next_fire_at=datetime(2026, 12, 2, 7, tzinfo=UTC),
    )
    assert len(c.h.store.add_triggers([on_grid])) == 1


def test_a_schedule_edit_takes_effect_at_e_through_the_supersede_path(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1", EVERY_10S))
    c.step(12)  # ran at :10; the old schedule is published a lookahead ahead
    assert c.runs_of("j1") == [datetime(2026, 12, 2, 6, 0, 10, tzinfo=UTC)]
    view, note = c.jobs.edit(_job(c, "j1"), {"schedule": Schedule(kind=TriggerKind.CRON, cron=EVERY_7S)})
    effective = c.h.clock.now() + MARGIN
    assert "superseded" in note and view.trigger is not None and view.trigger.cron == EVERY_7S
    c.step(60)
    after = [at for at in c.runs_of("j1") if at >= effective]
    before = [at for at in c.runs_of("j1") if at < effective]
    assert after and all(at.second % 7 == 0 for at in after), after  # only the new schedule from E on
    assert all(at.second % 10 == 0 for at in before), before
    # every occurrence of the new schedule from E to the end ran, none twice
    expected = []
    at = effective.replace(microsecond=0) + timedelta(seconds=1)
    while at <= c.h.clock.now():
        if at.second % 7 == 0:
            expected.append(at)
        at += timedelta(seconds=1)
    assert sorted(after) == [t for t in expected if t <= max(after)]
    audit = [e for e in BusinessRegistry(migrator_store(c.h.store)).audit("biz-a") if e.reason == "job edit"]
    assert len(audit) == 1 and audit[0].actor == "tester"


def test_a_stop_leaves_no_run_at_or_after_it_and_a_start_runs_again(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1", EVERY_10S))
    c.step(12)
    report = c.jobs.stop(_job(c, "j1"))
    stopped_at = report.at
    assert stopped_at is not None
    c.step(40)
    assert c.runs_of("j1") and all(at < stopped_at for at in c.runs_of("j1")), c.runs_of("j1")
    view = c.jobs.view(_job(c, "j1"))
    assert view.state == "stopped"
    resumed = c.jobs.start(_job(c, "j1"))
    assert resumed.at is not None
    c.step(30)
    again = [at for at in c.runs_of("j1") if at >= resumed.at]
    assert again, "runs again after the start"
    assert not [at for at in c.runs_of("j1") if stopped_at <= at < resumed.at]
    actions = [e.reason for e in BusinessRegistry(migrator_store(c.h.store)).audit("biz-a")]
    assert "job stop" in actions and "job start" in actions


def test_a_delete_stops_the_job_first_and_is_audited(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1", EVERY_10S))
    c.step(12)  # published 60 s ahead: those runs must not happen after the delete
    report = c.jobs.delete(_job(c, "j1"))
    assert report is not None and report.at is not None
    c.step(60)
    assert all(at < report.at for at in c.runs_of("j1")), c.runs_of("j1")
    assert c.h.store.get_job(JobCode("j1")) is None
    assert {t.state for t in c.h.store.triggers_of(job_code=JobCode("j1"))} == {TriggerState.CANCELLED}
    entries = [e for e in BusinessRegistry(migrator_store(c.h.store)).audit("biz-a") if e.reason == "job delete"]
    assert entries and entries[-1].actor == "tester"


def test_run_now_runs_once_outside_the_schedule(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1", "0 0 0 * * ?"))  # midnight: nothing due in this test
    added = c.jobs.run(_job(c, "j1"))
    c.step(5)
    assert c.runs_of("j1") == [added.next_fire_at]
    view = c.jobs.view(_job(c, "j1"))
    assert view.trigger is not None and view.trigger.kind is TriggerKind.CRON  # the schedule is untouched


def test_a_child_runs_after_its_parent(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(JobSpec(job_code="child", biz_code="biz-a", handler="h", schedule=Schedule(kind=TriggerKind.NONE)))
    spec = _cron_job("parent", EVERY_10S).with_changes(children=("child",))
    assert c.jobs.add(spec).children == ("child",)
    c.step(12)
    assert c.runs_of("parent") and len(c.runs_of("child")) == len(c.runs_of("parent"))


def test_run_now_with_its_own_parameter_is_published_with_it(tmp_path: Path) -> None:
    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1", "0 0 0 * * ?").with_changes(params="the job's"))
    seen: list[str] = []
    c.ex.handler("h")(lambda ctx: seen.append(ctx.params))
    with pytest.raises(JobInputError, match=r"^param: .*give --bus"):
        c.jobs.run(_job(c, "j1"), params="x")  # nobody here to publish it
    added = c.jobs.run(_job(c, "j1"), params="this run's", bus=c.h.bus)
    assert added.state is TriggerState.COMPLETED  # the scheduler never fires it again
    c.step(3)
    assert seen == ["this run's"]
    c.jobs.run(_job(c, "j1"))  # without one: the job's, fired by the scheduler
    c.step(3)
    assert seen == ["this run's", "the job's"]


def test_an_edit_keeps_what_it_does_not_set(tmp_path: Path) -> None:
    """An envelope size (a migrated fan-out's) and the shadow flag (a dual-run's) are no
    options of an edit: an edit of another field keeps them."""
    from dataclasses import replace

    c = _center(tmp_path)
    c.jobs.add(_cron_job("j1").with_changes(shard_total=30, items=tuple(f"p{i}" for i in range(30))))
    c.h.store.put_job(replace(_job(c, "j1"), envelope_size=4, shadow=True))
    view, _note = c.jobs.edit(_job(c, "j1"), {"max_retry": 2})
    after = _job(c, "j1")
    assert (after.max_retry, after.envelope_size, after.shadow, after.explicit_items) == (2, 4, True, True)
    assert len(view.as_dict()["items"]) == 20 and view.as_dict()["items_total"] == 30  # shown, not all
    assert [i.param for i in c.h.store.sharding_page(JobCode("j1"), 0, 100)] == [f"p{i}" for i in range(30)]


def test_an_edit_of_a_trigger_being_fired_tries_again_then_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from scheduler_core.model import Epoch
    from scheduler_core.ports import Transition
    from scheduler_core.store.job_admin import TriggerBusy
    from switchyard import jobs as jobs_module

    monkeypatch.setattr(jobs_module, "BUSY_WAIT", timedelta(milliseconds=200))
    c = _center(tmp_path)
    view = c.jobs.add(_cron_job("j1", EVERY_10S))
    assert view.trigger is not None and view.trigger.id is not None
    c.h.store.cas(
        Transition(
            ids=[view.trigger.id],
            from_state=TriggerState.WAITING,
            to_state=TriggerState.ACQUIRED,
            epoch=Epoch(1),
            deadline=START + timedelta(minutes=1),
        )
    )
    with pytest.raises(TriggerBusy, match="being fired"):
        c.jobs.edit(_job(c, "j1"), {"schedule": Schedule(kind=TriggerKind.CRON, cron=EVERY_7S), "max_retry": 4})
    assert _job(c, "j1").max_retry == 0  # nothing written
    assert c.h.store.triggers_of(job_code=JobCode("j1"))[0].cron == EVERY_10S
