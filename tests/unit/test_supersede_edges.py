"""The schedule edit's own lines (scheduler_core/supersede.py, migrator/schedule_edits.py),
one behaviour per test, on fakes of the store, the triggers and the fire pipeline: what a
supersede says of itself, a relay round over a trigger or job deleted since the edit,
the epoch and the deliver-at of the pending runs, a claim lost to a later edit, and the
plan of an edit at its edges (the mutation job's survivors of the supersede group,
docs/mutation.md)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import pytest

from migrator import schedule_edits
from migrator.schedule_edits import ScheduleEdit, plan_edit
from scheduler_core.control import EVERYTHING, Owned, RelayScope
from scheduler_core.model import (
    DEFAULT_CRON_DIALECT,
    CommandId,
    Epoch,
    FiredRecord,
    Job,
    JobCode,
    Trigger,
    TriggerId,
    TriggerKind,
)
from scheduler_core.ports import BusMessage
from scheduler_core.supersede import Supersede, SupersedeRelay
from scheduler_core.times import from_ms, to_ms
from tests.harness import trigger_of

E = to_ms(datetime.fromisoformat("2026-12-02T06:00:05+00:00"))
JOB = Job(job_code=JobCode("j1"), biz_code="biz-a", handler="j1")


def _supersede(pending: tuple[int, ...] = (E, E + 7000), epoch: int = 3) -> Supersede:
    return Supersede(7, "biz-a", E, frozenset({E + 5000}), pending, epoch)


@dataclass
class _Store:
    """The supersede rows (one per trigger) and what the relay wrote."""

    rows: list[Supersede]
    claim_ok: bool = True
    reads: list[timedelta | None] = field(default_factory=list)
    claimed: list[tuple[Supersede, list[FiredRecord], Owned | None]] = field(default_factory=list)
    emptied: list[tuple[Supersede, list[CommandId]]] = field(default_factory=list)

    def supersedes(self, changed_within: timedelta | None = None) -> list[Supersede]:
        self.reads.append(changed_within)
        return list(self.rows)

    def claim_pending(self, s: Supersede, records: list[FiredRecord], owned: Owned | None = None) -> bool:
        self.claimed.append((s, records, owned))
        return self.claim_ok

    def pending_published(self, s: Supersede, command_ids: list[CommandId]) -> None:
        self.emptied.append((s, command_ids))


@dataclass
class _Triggers:
    trigger: Trigger | None
    jobs: dict[JobCode, Job]

    def get_trigger(self, trigger_id: TriggerId) -> Trigger | None:
        return self.trigger if trigger_id == 7 else None

    def get_jobs(self, codes: list[JobCode]) -> dict[JobCode, Job]:
        return {c: self.jobs[c] for c in codes if c in self.jobs}

    def current_epoch(self, fence: str | None = None) -> Epoch:
        return Epoch(11)  # the leader's epoch in the store


@dataclass
class _Runs:
    """run_now as the fire pipeline: one record and one message per run, delivered now,
    with its fire time in the message's `scheduled_at` property."""

    made: list[tuple[datetime, Epoch]] = field(default_factory=list)
    published: list[BusMessage] = field(default_factory=list)

    def run_now(
        self, trigger: Trigger, job: Job, occurrence: datetime, epoch: Epoch, note: str = ""
    ) -> tuple[list[FiredRecord], list[BusMessage]]:
        self.made.append((occurrence, epoch))
        at = to_ms(occurrence)
        cid = CommandId(f"7-{at}-0")
        rec = FiredRecord(
            command_id=cid,
            trigger_id=TriggerId(7),
            job_code=job.job_code,
            biz_code=job.biz_code,
            scheduled_at=occurrence,
            item_index=0,
            item_total=1,
            fired_at=occurrence,
        )
        msg = BusMessage("cmd.biz-a", cid.encode(), E - 5000, {"scheduled_at": str(at)}, key=cid)
        return [rec], [msg]

    def publish(self, messages: list[BusMessage]) -> None:
        self.published += messages


def _trigger() -> Trigger:
    return trigger_of(JOB, TriggerKind.FIXED_RATE, from_ms(E), interval=timedelta(seconds=7), id=TriggerId(7))


def test_a_supersede_says_its_trigger_business_instant_and_counts() -> None:
    assert str(_supersede()) == (
        "schedule edit of trigger 7 (biz-a) effective 2026-12-02T06:00:05+00:00: 1 superseded, 2 pending, epoch 3"
    )


def test_pending_runs_of_a_deleted_trigger_are_dropped_not_published() -> None:
    s = _supersede()
    store, runs = _Store([s]), _Runs()
    relay = SupersedeRelay(store, _Triggers(None, {JOB.job_code: JOB}), runs)
    assert relay.relay() == 1
    assert store.emptied == [(s, [])] and store.claimed == [] and runs.published == []


def test_pending_runs_of_a_trigger_whose_job_was_deleted_are_dropped_not_published() -> None:
    s = _supersede()
    store, runs = _Store([s]), _Runs()
    relay = SupersedeRelay(store, _Triggers(_trigger(), {}), runs)
    relay.relay()
    assert store.emptied == [(s, [])] and store.claimed == [] and runs.published == [] and runs.made == []


def _relay(store: _Store, runs: _Runs, scope: RelayScope = EVERYTHING) -> SupersedeRelay:
    return SupersedeRelay(store, _Triggers(_trigger(), {JOB.job_code: JOB}), runs, scope)


def test_pending_runs_are_published_as_built_but_delivered_at_their_own_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """run_now delivers at once; the relay changes only the deliver-at, to each run's fire
    time (topic, payload, properties and key as built), under the store's current epoch
    (the leader's case), records the published command ids, and says so in its log."""
    s = _supersede()
    store, runs = _Store([s]), _Runs()
    with caplog.at_level(logging.INFO, logger="scheduler_core.supersede"):
        assert _relay(store, runs).relay() == 1
    assert [r.getMessage() for r in caplog.records if r.name == "scheduler_core.supersede"] == [
        "published 2 run(s) of the new schedule of trigger 7"
    ]
    assert runs.made == [(from_ms(E), Epoch(11)), (from_ms(E + 7000), Epoch(11))]
    assert runs.published == [
        BusMessage("cmd.biz-a", f"7-{t}-0".encode(), t, {"scheduled_at": str(t)}, key=f"7-{t}-0") for t in (E, E + 7000)
    ]
    (claimed,) = store.claimed
    assert claimed[0] == s and [r.command_id for r in claimed[1]] == [f"7-{E}-0", f"7-{E + 7000}-0"]
    assert claimed[2] == Owned()
    assert store.emptied == [(s, [f"7-{E}-0", f"7-{E + 7000}-0"])]


class _Partition:
    """A shard member owning trigger 7 under its partition's epoch 5 and no other."""

    def owner(self, trigger_id: int) -> Owned | None:
        return Owned(Epoch(5), "p1") if trigger_id == 7 else None

    def business_wide(self) -> bool:
        return False

    def generation(self) -> int:
        return 1


def test_a_shard_owner_writes_under_its_partitions_epoch_and_leaves_others_triggers() -> None:
    mine, theirs = _supersede(), Supersede(8, "biz-a", E, frozenset(), (E,), 1)
    store, runs = _Store([theirs, mine]), _Runs()
    assert _relay(store, runs, _Partition()).relay() == 1
    assert {epoch for _t, epoch in runs.made} == {Epoch(5)}
    assert [(c[0].trigger_id, c[2]) for c in store.claimed] == [(7, Owned(Epoch(5), "p1"))]


def test_a_claim_lost_to_a_later_edit_publishes_nothing_and_leaves_the_list() -> None:
    store, runs = _Store([_supersede()], claim_ok=False), _Runs()
    _relay(store, runs).relay()
    assert len(store.claimed) == 1 and runs.published == [] and store.emptied == []


def test_a_relay_reads_every_row_once_then_only_what_changed_lately_and_counts_only_pending_ones() -> None:
    done = Supersede(9, "biz-a", E, frozenset({E}), (), 2)  # published already: nothing to do
    gone = Supersede(8, "biz-a", E, frozenset(), (E,), 1)  # its trigger deleted since: dropped
    store, runs = _Store([done, gone, _supersede()]), _Runs()
    relay = _relay(store, runs)
    assert relay.relay() == 2
    assert relay.relay() == 2  # the fake still has them pending
    assert store.reads == [None, timedelta(minutes=2)]


# --- plan_edit: which edit supersedes, from when, and the new schedule's runs to publish ----------

NOW = datetime.fromisoformat("2026-12-02T06:00:00+00:00")
MARGIN = timedelta(seconds=5)
EVERY_10S = "0/10 * * * * ?"
# the row before the edit: next_fire_at, kind, cron_expr, interval_ms, time_zone, cron dialect
OLD = (to_ms(NOW) + 60_000, "cron", EVERY_10S, None, "UTC", DEFAULT_CRON_DIALECT)


def _cron(expr: str, **kw: Any) -> Trigger:
    return trigger_of(JOB, TriggerKind.CRON, NOW, cron=expr, **kw)  # the default dialect


def _plan(new: Trigger, schedule: tuple[Any, ...] = OLD, state: str = "waiting", next_ms: int | None = None) -> Any:
    nxt = to_ms(NOW) + 60_000 if next_ms is None else next_ms
    return plan_edit(new, 7, state, schedule, nxt, to_ms(NOW), MARGIN)


def test_an_edit_plans_the_new_schedules_runs_from_e_inclusive_to_its_next_fire_exclusive() -> None:
    plan = _plan(_cron("0/5 * * * * ?"))
    assert plan == ScheduleEdit(7, "biz-a", to_ms(NOW) + 5000, tuple(to_ms(NOW) + k * 5000 for k in range(1, 12)))


def test_an_edit_of_a_fixed_rate_counts_its_interval_in_ms() -> None:
    old = (to_ms(NOW) + 60_000, "fixed_rate", None, 10_000, "UTC")
    rate = trigger_of(JOB, TriggerKind.FIXED_RATE, NOW, interval=timedelta(seconds=10))
    assert _plan(rate, old) is None, "the same interval: no edit"
    faster = trigger_of(JOB, TriggerKind.FIXED_RATE, NOW, interval=timedelta(seconds=20))
    plan = _plan(faster, old)
    assert plan is not None and plan.new_times == tuple(to_ms(NOW) + k * 20_000 for k in (1, 2))


def test_no_edit_when_nothing_of_the_schedule_changed_or_nothing_was_published_ahead() -> None:
    assert _plan(_cron(EVERY_10S)) is None, "the same schedule (a replayed event)"
    assert _plan(_cron(EVERY_10S), (*OLD[:5], None)) is None, "a dialect stored NULL is the default one"
    assert _plan(_cron(EVERY_10S), OLD[:5]) is None, "a row from before there was a dialect column"
    assert _plan(_cron(EVERY_10S, time_zone="Asia/Shanghai")) is not None, "the zone is the schedule's"
    assert _plan(_cron(EVERY_10S), (*OLD[:5], "2.3")) is not None, "so is the cron's dialect"
    assert _plan(_cron("0/5 * * * * ?"), state="paused") is None
    assert _plan(_cron("0/5 * * * * ?"), (None, *OLD[1:])) is None, "no next fire before the edit"
    assert _plan(_cron("0/5 * * * * ?"), (to_ms(NOW) + 5000, *OLD[1:])) is None, "nothing published at or after E"
    assert _plan(_cron("0/5 * * * * ?"), (to_ms(NOW) + 5001, *OLD[1:])) is not None
    assert plan_edit(_cron("0/5 * * * * ?"), 7, "waiting", OLD, None, to_ms(NOW), MARGIN) is None


def test_no_edit_into_or_out_of_a_schedule_that_fires_by_itself_no_more() -> None:
    once = trigger_of(JOB, TriggerKind.ONCE, NOW + timedelta(seconds=30))
    none = trigger_of(JOB, TriggerKind.NONE, NOW)
    assert _plan(once) is None and _plan(none) is None
    assert _plan(_cron("0/5 * * * * ?"), (OLD[0], "none", None, None, "UTC")) is None


def test_a_schedule_denser_than_the_guard_is_cut_and_said(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(schedule_edits, "MAX_OCCURRENCES", 3)
    with caplog.at_level(logging.WARNING, logger="migrator.schedule_edits"):
        plan = _plan(_cron("* * * * * ?"))
    assert plan is not None and plan.new_times == tuple(to_ms(NOW) + k * 1000 for k in (5, 6, 7))
    assert [r.getMessage() for r in caplog.records] == [
        "trigger 7: more than 3 occurrences of its new schedule before its next fire; the rest are not published"
    ]
    monkeypatch.setattr(schedule_edits, "MAX_OCCURRENCES", 11)
    plan = _plan(_cron("0/5 * * * * ?"))  # exactly as many as the guard: all, nothing said
    assert plan is not None and len(plan.new_times) == 11


def test_an_occurrence_a_millisecond_before_e_is_the_old_schedules() -> None:
    """A fixed rate anchored 1 ms before E: that occurrence lies before E, so the plan's
    first run is the next one, a whole interval later."""
    old = (to_ms(NOW) + 60_000, "fixed_rate", None, 10_000, "UTC")
    rate = trigger_of(
        JOB, TriggerKind.FIXED_RATE, NOW + MARGIN - timedelta(milliseconds=1), interval=timedelta(seconds=7)
    )
    plan = _plan(rate, old)
    assert plan is not None and plan.new_times[0] == to_ms(NOW) + 5000 - 1 + 7000
