"""Operators' stops on the embedded default (SQLite store, in-process bus, the real
executor SDK): pause, cancel, resume under each misfire policy, freeze and unfreeze of a
business and of everything. The promise checked exactly: no handler is invoked for an
occurrence at or after S, every occurrence from R on runs exactly once, and every
command a stop covered is recorded skipped with the operator's message."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from migrator.cutover import BusinessSwitch
from migrator.ports import GateDecision
from scheduler_core import operations
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import ManualClock
from scheduler_core.executor import Executor
from scheduler_core.executor.fences import FenceView
from scheduler_core.model import (
    CommandId,
    Epoch,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    MisfirePolicy,
    TriggerId,
    TriggerKind,
    TriggerState,
)
from scheduler_core.stops import (
    ALL_KEY,
    Cause,
    Scope,
    SkipWindow,
    Stop,
    StopRelay,
    StopService,
    decode_stop,
    encode_stop,
    is_stop_skip,
)
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes, supersede_relay
from scheduler_core.times import to_ms
from switchyard.embedded import without_stopped
from tests.harness import Harness, make_harness, state_of, stored_id, trigger_of
from tests.migration_env import FixedGate, MigrationEnv, migrated_xxljob

EVERY = timedelta(seconds=10)


def _drain(ex: Executor, consumer: ResultConsumer) -> None:
    while ex.poll_once(timeout=timedelta(0)):
        pass
    while consumer.poll(timeout=timedelta(0)):
        pass


class Rig:
    """A business `biz-a` with one fixed-rate job every 10 s, admitted a lookahead ahead,
    an executor that notes each invocation's fire time, and the result consumer."""

    def __init__(self, h: Harness, policy: MisfirePolicy = MisfirePolicy.SKIP, biz: str = "biz-a") -> None:
        self.h = h
        job = h.job("rate", biz=biz)
        (self.trigger,) = h.store.add_triggers(
            [
                trigger_of(
                    job,
                    TriggerKind.FIXED_RATE,
                    h.clock.now() + EVERY,
                    interval=EVERY,
                    misfire_policy=policy,
                )
            ]
        )
        self.tid = stored_id(self.trigger)
        self.core = h.core(lookahead=timedelta(minutes=5))
        self.consumer = h.results(self.core)
        self.ex = Executor(h.bus, biz, clock=h.clock)
        self.ran: Counter[datetime] = Counter()
        self.ex.handler("rate")(lambda ctx: self.ran.update([ctx.scheduled_at]))
        self.stops = StopService(SqlStops(h.store), h.bus)
        self.edits = supersede_relay(h.store, h.bus, h.settings, self.core.metrics)

    def prime(self) -> None:
        """Admit the lookahead (a tick admits a trigger's next occurrence once)."""
        for _ in range(100):
            self.core.tick_all()

    def run_until(self, until: datetime) -> None:
        """Admit, deliver and run everything due, second by second, up to `until`."""
        while self.h.clock.now() < until:
            self.core.tick_all()
            self.edits.relay()
            self.h.clock.advance(timedelta(seconds=1))
            _drain(self.ex, self.consumer)

    def records(self) -> dict[datetime, FiredRecord]:
        now = self.h.clock.now()
        recs = self.h.store.fired_between("biz-a", now - timedelta(days=1), now + timedelta(days=1))
        return {r.scheduled_at: r for r in recs if r.trigger_id == self.tid}


def test_pause_stops_every_run_at_or_after_s_then_resume_runs_each_from_r_exactly_once(
    tmp_path: Path, clock: ManualClock
) -> None:
    rig = Rig(make_harness(tmp_path, clock))
    rig.prime()  # a lookahead of commands on the bus, deliver-at = their fire time
    start = clock.now()
    assert len(rig.records()) >= 20, "the lookahead published the commands the pause must stop"
    s = start + timedelta(seconds=35)
    report = operations.pause(rig.h.store, rig.stops, [rig.tid], s, actor="ops", reason="downstream down")
    assert report.changed == [rig.tid] and report.records >= 20
    assert state_of(rig.h.store, rig.trigger) is TriggerState.PAUSED
    rig.run_until(start + timedelta(seconds=120))

    assert rig.ran, "the runs before S ran"
    assert max(rig.ran) < s, "no handler was invoked for an occurrence at or after S"
    assert all(n == 1 for n in rig.ran.values())
    for at, rec in rig.records().items():
        if at >= s:
            assert rec.state is FiredState.SKIPPED and is_stop_skip(rec.state, rec.message), at
            assert "by ops: downstream down" in rec.message and rec.started_at is None
    assert rig.ex.stopped >= 1

    r = clock.now() + timedelta(seconds=2)
    report = operations.resume(rig.h.store, rig.stops, SqlSupersedes(rig.h.store), [rig.tid], r)
    assert report.changed == [rig.tid] and report.run_once == [], "SKIP: the paused window stays skipped"
    before = set(rig.ran)
    rig.run_until(clock.now() + timedelta(seconds=120))
    after = [at for at in rig.ran if at not in before]
    assert after and min(after) >= r, "nothing of the paused window ran at the resume"
    first = rig.trigger.next_fire_at + ((r - rig.trigger.next_fire_at) // EVERY + 1) * EVERY
    expected = [first + i * EVERY for i in range(10)]
    assert sorted(after)[:10] == expected, "every occurrence from R ran"
    assert all(rig.ran[at] == 1 for at in after), "each exactly once"
    recs = rig.records()
    assert all(recs[at].state is FiredState.SKIPPED for at in recs if s <= at < r)


def test_resume_under_fire_once_now_runs_once_at_r_and_a_pause_past_the_lookahead_moves_on(
    tmp_path: Path, clock: ManualClock
) -> None:
    rig = Rig(make_harness(tmp_path, clock), policy=MisfirePolicy.FIRE_ONCE_NOW)
    rig.prime()
    s = clock.now() + timedelta(seconds=5)
    operations.pause(rig.h.store, rig.stops, [rig.tid], s)
    # paused for longer than the lookahead: the trigger's next occurrence falls in the pause
    rig.run_until(clock.now() + timedelta(minutes=8))
    assert not rig.ran, "the first occurrence was after S: nothing ran"
    r = clock.now() + timedelta(seconds=2)
    report = operations.resume(rig.h.store, rig.stops, SqlSupersedes(rig.h.store), [rig.tid], r)
    assert report.run_once == [rig.tid]
    nxt = rig.h.store.get_trigger(rig.tid)
    assert nxt is not None and nxt.next_fire_at >= r, "moved to its first occurrence at or after R"
    before = Counter(rig.ran)
    rig.run_until(clock.now() + timedelta(seconds=60))
    new = {at: n for at, n in rig.ran.items() if at not in before}
    assert r in new and new[r] == 1, "one run at R for the occurrences the pause skipped"
    assert all(at >= r for at in new) and all(n == 1 for n in new.values())
    assert not any(s <= at < r for at in new)


def test_cancel_stops_what_was_published_and_a_one_shot_never_runs(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    rig = Rig(h)
    one = h.once(h.job("one"), 30)
    ran_one: list[datetime] = []
    rig.ex.handler("one")(lambda ctx: ran_one.append(ctx.scheduled_at))
    rig.prime()
    s = clock.now() + timedelta(seconds=1)
    rep = operations.cancel(h.store, rig.stops, [rig.tid, stored_id(one)], s, actor="ops", reason="bad data")
    assert sorted(rep.changed) == sorted([rig.tid, stored_id(one)])
    rig.run_until(clock.now() + timedelta(seconds=90))
    assert ran_one == [] and not rig.ran
    assert all(r.state is FiredState.SKIPPED for r in rig.records().values())
    # a cancel is final: a resume has nothing to resume
    rep = operations.resume(h.store, rig.stops, SqlSupersedes(h.store), [rig.tid], clock.now())
    assert rep.unchanged == {rig.tid: "is cancelled: not paused"}


@pytest.mark.parametrize("scope", [Scope.BUSINESS, Scope.ALL])
def test_freeze_and_unfreeze_of_a_business_or_of_everything(tmp_path: Path, clock: ManualClock, scope: Scope) -> None:
    h = make_harness(tmp_path, clock)
    rig = Rig(h)
    other = Executor(h.bus, "biz-b", clock=clock)
    ran_b: list[datetime] = []
    jb = h.job("b-rate", biz="biz-b")
    h.store.add_triggers([trigger_of(jb, TriggerKind.FIXED_RATE, clock.now() + EVERY, interval=EVERY)])
    other.handler("b-rate")(lambda ctx: ran_b.append(ctx.scheduled_at))
    rig.prime()
    key = "biz-a" if scope is Scope.BUSINESS else ALL_KEY
    s = clock.now() + timedelta(seconds=25)
    applied = rig.stops.stop(scope, key, s, Cause.FREEZE, "ops", "incident 42")
    assert applied.changed and applied.records > 0
    assert not rig.stops.stop(scope, key, s, Cause.FREEZE, "ops", "again").changed, "a second freeze is a no-op"
    for _ in range(60):
        rig.run_until(clock.now() + timedelta(seconds=1))
        while other.poll_once(timeout=timedelta(0)):
            pass
    assert max(rig.ran) < s
    if scope is Scope.ALL:
        assert max(ran_b) < s, "everything: the other business too"
    else:
        assert max(ran_b) >= s, "a business freeze stops that business only"
    r = clock.now() + timedelta(seconds=2)
    assert rig.stops.lift(scope, key, r, (Cause.FREEZE,)) is not None
    before = set(rig.ran)
    rig.run_until(clock.now() + timedelta(seconds=60))
    after = sorted(at for at in rig.ran if at not in before)
    assert after and after[0] >= r and all(rig.ran[at] == 1 for at in after)
    # states were never touched by the freeze: the triggers kept waiting
    assert state_of(h.store, rig.trigger) in (TriggerState.WAITING, TriggerState.ACQUIRED)


def test_an_executor_started_after_the_stop_knows_it_before_running_anything(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("rate")
    (t,) = h.store.add_triggers([trigger_of(job, TriggerKind.FIXED_RATE, clock.now() + EVERY, interval=EVERY)])
    core = h.core(lookahead=timedelta(minutes=5))
    for _ in range(30):
        core.tick_all()
    stops = StopService(SqlStops(h.store), h.bus)
    operations.pause(h.store, stops, [stored_id(t)], clock.now())
    ex = Executor(h.bus, "biz-a", clock=clock)  # joins late
    ran: list[datetime] = []
    ex.handler("rate")(lambda ctx: ran.append(ctx.scheduled_at))
    clock.advance(timedelta(minutes=3))
    _drain(ex, h.results(core))
    assert ran == []


def test_a_stop_written_without_a_bus_reaches_executors_through_the_relay(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    rig = Rig(h)
    rig.prime()
    store_only = StopService(SqlStops(h.store))  # a CLI command run without --bus
    s = clock.now() + timedelta(seconds=1)
    operations.pause(h.store, store_only, [rig.tid], s)
    assert rig.ex.fences.stops.by_scope == {}, "nobody told the executor yet"
    relay = StopRelay(SqlStops(h.store), h.bus, name="leader-1")
    assert relay.relay() == 1 and relay.relay() == 0, "each epoch once"
    stop = SqlStops(h.store).stop_of(Scope.TRIGGER, str(rig.tid))
    assert stop is not None and stop.relayed_epoch == stop.epoch and stop.relayed_by == "leader-1"
    rig.run_until(clock.now() + timedelta(seconds=60))
    assert not rig.ran or max(rig.ran) < s


def test_a_restart_withholds_a_cancelled_command_and_one_due_before_any_lift(
    tmp_path: Path, clock: ManualClock
) -> None:
    """What a restarted serve publishes again: a cancelled run never (recorded skipped), a
    paused run due before any resume written from now on could take effect neither; a
    paused run further ahead is published again (the executors skip it while the pause
    stands; withheld, a resume before its time would lose it)."""
    h = make_harness(tmp_path, clock)
    a, b, c = h.job("a"), h.job("b"), h.job("c")
    ta, tb, tc = h.once(a, 60), h.once(b, 60), h.once(c, 60)
    stops = StopService(SqlStops(h.store))
    stops.stop(Scope.JOB, "a", clock.now(), Cause.CANCEL)
    stops.stop(Scope.JOB, "c", clock.now(), Cause.PAUSE)

    def pending(cid: str, t: TriggerId, job: str, in_s: float) -> FiredRecord:
        return FiredRecord(
            command_id=CommandId(cid),
            trigger_id=t,
            job_code=JobCode(job),
            biz_code="biz-a",
            scheduled_at=clock.now() + timedelta(seconds=in_s),
            state=FiredState.PENDING,
            epoch=Epoch(1),
        )

    # records written pending after the stops (admitted since): what a restart finds untaken
    recs = [
        pending("a-far", stored_id(ta), "a", 90),
        pending("b-far", stored_id(tb), "b", 90),
        pending("c-soon", stored_id(tc), "c", 1),
        pending("c-far", stored_id(tc), "c", 90),
    ]
    h.store.put_fired(recs)
    keep, covered = without_stopped(h.store, recs)
    assert sorted(r.command_id for r in keep) == ["b-far", "c-far"] and covered == 2
    got = h.store.get_fired([CommandId("a-far"), CommandId("c-soon"), CommandId("c-far")])
    assert got[CommandId("a-far")].state is FiredState.SKIPPED and "cancel" in got[CommandId("a-far")].message
    assert got[CommandId("c-soon")].state is FiredState.SKIPPED
    assert got[CommandId("c-far")].state is FiredState.PENDING


def test_a_restart_publishes_again_what_a_standing_pause_marked_ahead_and_nothing_final(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A pause marks the records published ahead skipped; a resume revives those at or
    after R. Under serve, a restart between the two lost their messages with its in-process
    bus: the restarted process publishes again what a standing pause or freeze marked due
    past the resume lead (a resume then revives them and they run), never what a cancel, an
    edit or a lifted window marked, nor what is due before a lift could take effect."""
    from switchyard.embedded import marked_liftable

    h = make_harness(tmp_path, clock)
    jobs = {code: h.job(code) for code in ("paused", "cancelled", "lifted", "free")}
    trig = {code: h.once(job, 60) for code, job in jobs.items()}

    def pending(code: str, in_s: float) -> FiredRecord:
        return FiredRecord(
            command_id=CommandId(f"{code}-{in_s}"),
            trigger_id=stored_id(trig[code]),
            job_code=JobCode(code),
            biz_code="biz-a",
            scheduled_at=clock.now() + timedelta(seconds=in_s),
            state=FiredState.PENDING,
            epoch=Epoch(1),
        )

    # published ahead before the stops (the pause marks them)
    h.store.put_fired([pending(code, s) for code in jobs for s in (1, 30, 90)])
    stops = StopService(SqlStops(h.store))
    stops.stop(Scope.JOB, "paused", clock.now(), Cause.PAUSE)
    stops.stop(Scope.JOB, "cancelled", clock.now(), Cause.CANCEL)
    stops.stop(Scope.JOB, "lifted", clock.now(), Cause.PAUSE)
    stops.lift(Scope.JOB, "lifted", clock.now() + timedelta(seconds=60), (Cause.PAUSE,))
    again = sorted(r.command_id for r in marked_liftable(h.store))
    assert again == ["paused-30", "paused-90"]
    # a resume now revives them: with their messages on the bus again, they run
    _applied, revived = SqlStops(h.store).close_windows(
        Scope.JOB, ["paused"], to_ms(clock.now() + timedelta(seconds=10)), (Cause.PAUSE,)
    )
    assert revived == 2 and marked_liftable(h.store) == []


def test_windows_add_up_and_a_later_epoch_wins_in_any_order(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    stops = StopService(SqlStops(h.store), h.bus)
    view = FenceView(h.bus)
    t0 = to_ms(clock.now())
    stops.stop(Scope.TRIGGER, "7", t0, Cause.PAUSE)
    stops.lift(Scope.TRIGGER, "7", t0 + 1_000, (Cause.PAUSE,))
    applied = stops.stop(Scope.TRIGGER, "7", t0 + 5_000, Cause.PAUSE)
    stop = applied.stop
    assert [(w.from_ms, w.until_ms) for w in stop.windows] == [(t0, t0 + 1_000), (t0 + 5_000, None)]
    assert stop.epoch == 3
    # the first window stands beside the second (no "a later raise replaces the window")
    assert view.stopping(7, "j", "biz", t0 + 500) is not None
    assert view.stopping(7, "j", "biz", t0 + 1_000) is None
    assert view.stopping(7, "j", "biz", t0 + 5_000) is not None
    old = Stop(Scope.TRIGGER, "7", (SkipWindow(t0, None, Cause.PAUSE),), 1)
    h.bus.publish_control("7", encode_stop(old))  # older, late: ignored
    assert view.stopping(7, "j", "biz", t0 + 2_000) is None
    assert decode_stop(encode_stop(stop)) == Stop(stop.scope, stop.key, stop.windows, stop.epoch)
    assert decode_stop(b'{"v":1,"k":"fence"}') is None
    with pytest.raises(ValueError):
        decode_stop(b'{"v":1,"k":"stop","s":"nope"}')


def test_the_stop_commands_refuse_names_that_do_not_exist(tmp_path: Path) -> None:
    from switchyard.cli import cli

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    for args, named in (
        (["trigger", "pause", "--job", "nosuch:job"], "no such job: nosuch:job"),
        (["trigger", "cancel", "--business", "nosuch"], "no such business: nosuch"),
        (["trigger", "resume", "4242"], "no such trigger: 4242"),
        (["freeze", "--business", "nosuch", "--reason", "x"], "no such business: nosuch"),
        (["unfreeze", "--business", "nosuch"], "no such business: nosuch"),
    ):
        res = runner.invoke(cli, [*args, "--url", url])
        assert res.exit_code == 2, (args, res.output)
        assert named in res.output, (args, res.output)


def _cli_store(tmp_path: Path) -> tuple[str, Any, Any]:
    """A store made by `db init` with one job `billing:reconcile` firing every 10 s: its URL,
    the store and the trigger."""
    from switchyard.cli import cli
    from switchyard.wiring import open_store

    url = f"sqlite:///{tmp_path / 'cli.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    store = open_store(url)
    job = store.put_job(Job(job_code=JobCode("billing:reconcile"), biz_code="billing", handler="h"))
    (t,) = store.add_triggers([trigger_of(job, TriggerKind.FIXED_RATE, store.clock.now() + EVERY, interval=EVERY)])
    return url, store, t


def test_trigger_pause_on_the_cli_stores_the_stop_and_warns_when_nobody_relays_it(tmp_path: Path) -> None:
    from switchyard.cli import cli

    url, store, t = _cli_store(tmp_path)
    runner = CliRunner()
    res = runner.invoke(cli, ["trigger", "pause", "--job", "billing:reconcile", "--url", url, "--reason", "incident"])
    assert res.exit_code == 0, res.output
    assert "pause: 1 changed" in res.output and "no process holding the bus" in res.output
    stop = SqlStops(store).stop_of(Scope.TRIGGER, str(stored_id(t)))
    assert stop is not None and stop.standing and stop.windows[0].reason == "incident"
    assert state_of(store, t) is TriggerState.PAUSED
    res = runner.invoke(cli, ["trigger", "resume", "--job", "billing:reconcile", "--url", url])
    assert res.exit_code == 0, res.output
    stop = SqlStops(store).stop_of(Scope.TRIGGER, str(stored_id(t)))
    assert stop is not None and not stop.standing
    store.engine.dispose()


def _cut_over(tmp_path: Path) -> tuple[MigrationEnv, str, BusinessSwitch]:
    """A migrated xxl-job business of two jobs, dual-run then cut over by the real switch."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    clock = env.migrator.clock
    sw = env.xxl_switch(
        FixedGate(GateDecision(ready=True, comparison_id=1, computed_at=clock.now())),
        max_verdict_age=timedelta(days=9999),
    )
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops")
    return env, biz, sw


def test_a_freeze_is_audited_shown_by_status_and_deliberate_for_its_check(tmp_path: Path) -> None:
    import json

    from migrator.business import BusinessRegistry
    from switchyard.cli import cli
    from switchyard.wiring import migrator_store

    env, biz, _sw = _cut_over(tmp_path)
    url = str(env.store.engine.url)
    runner = CliRunner()
    res = runner.invoke(cli, ["freeze", "--business", biz, "--reason", "incident 7", "--actor", "ana", "--url", url])
    assert res.exit_code == 0, res.output
    assert f"froze business {biz}" in res.output
    res = runner.invoke(cli, ["status", "--url", url, "--check"])
    assert res.exit_code == 0, res.output  # deliberate: not orphaned
    assert "FROZEN" in res.output and "incident 7" in res.output
    (row,) = json.loads(runner.invoke(cli, ["status", "--url", url, "--json"]).output)
    assert "freeze" in row["frozen"] and "by ana: incident 7" in row["frozen"]
    notes = [n for n in BusinessRegistry(migrator_store(env.store)).audit(biz) if n.reason == "incident 7"]
    assert notes, "the freeze is audited"
    res = runner.invoke(cli, ["unfreeze", "--business", biz, "--url", url])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(runner.invoke(cli, ["status", "--url", url, "--json"]).output)
    assert row["frozen"] is None
    res = runner.invoke(cli, ["unfreeze", "--business", biz, "--url", url])
    assert res.exit_code == 1 and "is not frozen" in res.output


def test_a_rollback_without_a_bus_says_how_its_fence_reaches_the_executors(tmp_path: Path) -> None:
    """Issue 27: a rollback run without --bus raised its fence in the store only and said
    nothing; it now waits for a relay's record and warns when nobody holding the bus
    relayed it, or names who did."""
    import threading

    from switchyard.cli import cli

    env, biz, sw = _cut_over(tmp_path)
    clock = env.migrator.clock
    url, legacy = str(env.store.engine.url), str(env.legacy.url)
    res = CliRunner().invoke(
        cli, ["rollback", "--business", biz, "--url", url, "--legacy-url", legacy, "--reason", "x"]
    )
    assert res.exit_code == 0, res.output
    assert "no process holding the bus" in res.output, res.output
    # with a process relaying (a scheduler leader or serve on the same store): named
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops")
    from scheduler_core.bus.memory import InProcessBus

    relay = StopRelay(SqlStops(env.store), InProcessBus(clock), name="leader-7")
    done = threading.Event()

    def relaying() -> None:
        while not done.wait(0.1):
            relay.relay()

    th = threading.Thread(target=relaying, daemon=True)
    th.start()
    try:
        res = CliRunner().invoke(
            cli, ["rollback", "--business", biz, "--url", url, "--legacy-url", legacy, "--reason", "y"]
        )
    finally:
        done.set()
        th.join(timeout=5)
    assert res.exit_code == 0, res.output
    assert "relayed by leader-7" in res.output, res.output


def test_a_relay_reads_the_store_whole_once_then_only_what_changed_lately(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    stops = StopService(SqlStops(h.store))
    for tid in range(1, 6):
        stops.stop(Scope.TRIGGER, str(tid), clock.now(), Cause.PAUSE)
    clock.advance(timedelta(minutes=10))
    reads: list[timedelta | None] = []

    class Counting(SqlStops):
        def stops(self, changed_within: timedelta | None = None) -> list[Stop]:
            reads.append(changed_within)
            return super().stops(changed_within)

    relay = StopRelay(Counting(h.store), h.bus, name="r")
    assert relay.relay() == 5, "a new relay carries every stored stop"
    stops.stop(Scope.TRIGGER, "9", clock.now(), Cause.PAUSE)
    assert relay.relay() == 1, "then what changed lately"
    assert reads[0] is None and reads[1] is not None
    view = FenceView(h.bus)
    assert len(view.stops.by_scope) == 6


def test_a_pause_given_while_the_trigger_is_being_fired_is_settled_by_the_relay(
    tmp_path: Path, clock: ManualClock
) -> None:
    """A leader died holding the trigger acquired when the pause came: the pause's state
    change could not win; once the trigger waits again (reclaimed and fired), the relay
    of whoever holds the bus pauses it, so it is not admitted again forever into skipped
    records."""
    from scheduler_core.model import Epoch as Ep
    from scheduler_core.ports import Transition

    h = make_harness(tmp_path, clock)
    job = h.job("rate")
    (t,) = h.store.add_triggers([trigger_of(job, TriggerKind.FIXED_RATE, clock.now() + EVERY, interval=EVERY)])
    tid = stored_id(t)
    h.store.cas(
        Transition(
            ids=[tid],
            from_state=TriggerState.WAITING,
            to_state=TriggerState.ACQUIRED,
            epoch=Ep(1),
            deadline=clock.now(),
        )
    )
    stops = StopService(SqlStops(h.store))
    rep = operations.pause(h.store, stops, [tid], clock.now(), reason="x")
    assert rep.still_acquired == [tid] and state_of(h.store, t) is TriggerState.ACQUIRED
    relay = StopRelay(
        SqlStops(h.store), h.bus, name="r", settle=lambda s: operations.settle(h.store, SqlStops(h.store), s)
    )
    relay.relay()
    assert state_of(h.store, t) is TriggerState.ACQUIRED, "still being fired: left alone"
    # its fire ends (reclaimed by a new leader, fired, waiting again)
    h.store.cas(
        Transition(ids=[tid], from_state=TriggerState.ACQUIRED, to_state=TriggerState.WAITING, clear_epoch=True)
    )
    clock.advance(timedelta(minutes=5))  # long after the stop changed: the relay still remembers it
    relay.relay()
    assert state_of(h.store, t) is TriggerState.PAUSED
    # and a resume is not undone by a later round
    operations.resume(h.store, stops, SqlSupersedes(h.store), [tid], clock.now())
    relay.relay()
    assert state_of(h.store, t) is TriggerState.WAITING


def test_a_settling_round_with_a_stale_read_never_pauses_a_resumed_trigger_again(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The relay read the stops while the pause stood; a resume then lifted it and woke the
    trigger; the round's settle, working from that read, must leave the trigger waiting
    (found by the CI run: the next round's pause said "already paused")."""
    h = make_harness(tmp_path, clock)
    job = h.job("rate")
    (t,) = h.store.add_triggers([trigger_of(job, TriggerKind.FIXED_RATE, clock.now() + EVERY, interval=EVERY)])
    tid = stored_id(t)
    stop_store = SqlStops(h.store)
    stops = StopService(stop_store)
    operations.pause(h.store, stops, [tid], clock.now())
    stale = stop_store.stops()  # what the relay's round read
    operations.resume(h.store, stops, SqlSupersedes(h.store), [tid], clock.now() + timedelta(seconds=2))
    assert state_of(h.store, t) is TriggerState.WAITING
    assert operations.settle(h.store, stop_store, stale) == []
    assert state_of(h.store, t) is TriggerState.WAITING, "re-paused from a stale read of its stop"


def test_a_stop_whose_broadcast_fails_is_stored_and_left_to_the_relay(tmp_path: Path, clock: ManualClock) -> None:
    """The broker down when an operator pauses: the stop is stored (it takes effect from
    S; the relay carries it once the broker answers) and the failure is counted, not
    raised. Raised, the pause command exited 3 "cannot reach" with the job paused all
    the same (the relay settles its state): the soak's operator took it for not paused."""
    from scheduler_core.errors import BusError

    h = make_harness(tmp_path, clock)
    rig = Rig(h)

    def down(*_a: object) -> None:
        raise BusError("cannot create the retaining subscription: ConnectError")

    h.bus.publish_control = down  # type: ignore[method-assign, assignment]
    report = operations.pause(h.store, rig.stops, [rig.tid], clock.now(), "ops", "incident")
    assert report.changed == [rig.tid] and rig.stops.unsent == 1
    assert state_of(h.store, rig.trigger) is TriggerState.PAUSED
    stop = SqlStops(h.store).stop_of(Scope.TRIGGER, str(rig.tid))
    assert stop is not None and stop.standing


def _cut_short_once(monkeypatch: pytest.MonkeyPatch, module: object, name: str) -> None:
    """`module.name` does its work, then its first call fails as a database restart does
    after a commit (the lost connection of the next statement)."""
    from dbkit.errors import StoreUnavailable

    real = getattr(module, name)
    calls = {"n": 0}

    def once(*a: object, **kw: object) -> object:
        out = real(*a, **kw)
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailable("cannot reach the database", "(2013, 'Lost connection to MySQL server')")
        return out

    monkeypatch.setattr(module, name, once)


def test_a_pause_cut_short_by_a_database_restart_is_run_again_and_exits_0(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The soak: a pause met a MariaDB restart after its stop was stored; it exited 3 and
    the operator took the job for running, while it was paused. Run again it finds the
    pause done (and says so), exit 0."""
    from switchyard.cli import cli
    from switchyard.cli import trigger as trigger_cli

    url, store, t = _cli_store(tmp_path)
    runner = CliRunner()
    _cut_short_once(monkeypatch, trigger_cli, "act")
    res = runner.invoke(cli, ["trigger", "pause", "--job", "billing:reconcile", "--url", url, "--reason", "x"])
    assert res.exit_code == 0, res.output
    assert "pause cut short" in res.stderr and "already paused" in res.output
    assert state_of(store, t) is TriggerState.PAUSED
    store.engine.dispose()


def test_an_unfreeze_cut_short_after_its_lift_is_done_not_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run again after the lift was stored, an unfreeze found the business not frozen and
    exited 1: the soak's operator kept it for frozen and was refused for the rest of the
    hour. It says the cut-short attempt did it, exit 0."""
    from switchyard.cli import cli

    env, biz, _sw = _cut_over(tmp_path)
    url = str(env.store.engine.url)
    runner = CliRunner()
    assert runner.invoke(cli, ["freeze", "--business", biz, "--reason", "r", "--url", url]).exit_code == 0
    _cut_short_once(monkeypatch, StopService, "lift")
    res = runner.invoke(cli, ["unfreeze", "--business", biz, "--url", url])
    assert res.exit_code == 0, res.output
    assert "done by the attempt the database cut short" in res.output
    stop = SqlStops(env.store).stop_of(Scope.BUSINESS, biz)
    assert stop is not None and not stop.standing
