"""Killing a running run (`switchyard run kill`, scheduler_core.kills) on the embedded
default (SQLite store, in-process bus): a handler that cooperates is recorded killed and
saw that it was cancelled; one that ignores the kill is answered still running, then
timed out by its job timeout; the xxl-job bridge calls the legacy executor's `/kill` as
the admin does; a kill stored without a bus is relayed by the process that holds it
(`serve`); unknown names exit 2."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from legacy_sim.xxl_executor import Run as SimRun
from legacy_sim.xxl_executor import XxlExecutors, handler_identity
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, EnvelopeResult, command_topic, decode_results, encode_commands
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult, sdk
from scheduler_core.executor.bridge_xxljob import XXL_JOB_HANDLER, bridge_job_id, register_xxl_job_bridge
from scheduler_core.kills import (
    Kill,
    KillAnswer,
    KillService,
    Outcome,
    decode_answer,
    decode_kill,
    encode_kill,
)
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import (
    CommandId,
    ExecutionCommand,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Trigger,
    TriggerId,
    TriggerKind,
    command_id,
)
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.settings import SchedulerSettings
from scheduler_core.store.engine import make_engine
from scheduler_core.store.kills import SqlKills, kill_relay
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms, to_ms
from switchyard.cli import cli
from switchyard.embedded import EmbeddedCenter
from switchyard.schema import init_schema
from tests.standins.xxl_executor import XxlExecutorStandIn
from tests.unit.test_bridges import XXL_TOKEN, Xxl, xxl_params
from tests.waiting import wait_for

BIZ = "billing"


def _until(cond: Callable[[], object], what: str, timeout: float = 15.0) -> None:
    wait_for(cond, what, timeout, every_s=0.02)


def _publish(
    bus: InProcessBus,
    t_ms: int,
    items: int = 1,
    *,
    timeout: timedelta = timedelta(0),
    job: str = "billing:reconcile",
    handler: str = "h",
    params: str = "",
) -> list[CommandId]:
    t = from_ms(t_ms)
    cmds = [
        ExecutionCommand(
            command_id=command_id(9, t, i),
            trigger_id=TriggerId(9),
            job_code=JobCode(job),
            biz_code=BIZ,
            handler=handler,
            scheduled_at=t,
            item_index=i,
            item_total=items,
            timeout=timeout,
            params=params,
        )
        for i in range(items)
    ]
    bus.publish([BusMessage(command_topic(BIZ), encode_commands(cmds, page_record=items > 1))])
    return [c.command_id for c in cmds]


class Answers:
    """Kill answers heard on the control channel."""

    def __init__(self, bus: InProcessBus) -> None:
        self.got: list[KillAnswer] = []
        self.feed = bus.follow_control(self._on)

    def _on(self, payload: bytes) -> None:
        a = decode_answer(payload)
        if a is not None:
            self.got.append(a)

    def outcomes(self, cid: str) -> list[Outcome]:
        return [a.outcome for a in list(self.got) if a.command_id == cid]


class Results:
    def __init__(self, bus: InProcessBus) -> None:
        self.sub = bus.subscribe(CALLBACK_TOPIC, "t")
        self.got: dict[str, FiredUpdate] = {}

    def wait(self, cids: list[CommandId], within: float = 15.0) -> dict[str, FiredUpdate]:
        end = time.monotonic() + within
        while not set(cids) <= set(self.got) and time.monotonic() < end:
            for r in self.sub.receive(100, timedelta(milliseconds=50)):
                for u in decode_results(r.message.payload):
                    if u.state is not FiredState.RECEIVED:  # a receipt stamp, not the result
                        self.got[u.command_id] = u
                self.sub.ack(r)
        return self.got


def _running(ex: Executor) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    return stop, th


def _kill(bus: InProcessBus, rid: int, *, cid: str | None = None, job: str | None = None, at_ms: int) -> None:
    bus.publish_control(BIZ, encode_kill(Kill(rid, BIZ, cid, job, at_ms, "tester")))


# --- the SDK: cooperative cancellation ------------------------------------------------------


@pytest.mark.parametrize("timeout", [timedelta(0), timedelta(seconds=20)], ids=["unwatched", "watched"])
def test_a_cooperating_handler_sees_the_kill_returns_and_is_recorded_killed(timeout: timedelta) -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    results, answers = Results(bus), Answers(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=2)
    started, saw = threading.Event(), []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> HandlerResult:
        assert not ctx.cancelled
        started.set()
        ended = ctx.cancel_event.wait(10)
        saw.append((ended, ctx.cancelled))
        return HandlerResult(ok=True, message="stopped early")

    now = clock.now_ms()
    (cid,) = _publish(bus, now, timeout=timeout)
    stop, th = _running(ex)
    try:
        assert started.wait(10)
        t0 = time.monotonic()
        _kill(bus, 1, cid=cid, at_ms=clock.now_ms())
        got = results.wait([cid])
        took = time.monotonic() - t0
        _until(lambda: answers.outcomes(cid), "the executor's answer")
    finally:
        stop.set()
        th.join(10)
        ex.close()
    assert saw == [(True, True)]
    assert got[cid].state is FiredState.KILLED, got[cid]
    assert got[cid].message.startswith("killed by an operator tester (kill request 1)")
    assert "stopped early" in got[cid].message
    assert took < 5
    assert answers.outcomes(cid) == [Outcome.KILLED]


@pytest.mark.parametrize("timeout", [timedelta(0), timedelta(seconds=20)], ids=["unwatched", "watched"])
def test_a_killed_run_is_never_run_again_by_a_copy_of_its_message(timeout: timedelta) -> None:
    """A copy of the message of a run in work waits for it (parked); the chaos soak (seed
    11) saw the copies run the handler again once the run was killed, and a copy
    redelivered after a broker restart run it again 38 s later: a kill undone. Every copy,
    parked or later, is answered killed; the handler ran once."""
    clock = SystemClock()
    bus = InProcessBus(clock)
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, BIZ, clock=clock, concurrency=4)
    started = threading.Event()
    calls: list[str] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> HandlerResult:
        calls.append(ctx.command_id)
        started.set()
        ctx.cancel_event.wait(10)
        return HandlerResult(ok=True)

    now = clock.now_ms()
    (cid,) = _publish(bus, now, timeout=timeout)
    stop, th = _running(ex)
    got: list[FiredUpdate] = []

    def answers(n: int) -> bool:
        for r in results.receive(100, timedelta(milliseconds=50)):
            got.extend(u for u in decode_results(r.message.payload) if u.state is not FiredState.RECEIVED)
            results.ack(r)
        return len(got) >= n

    try:
        assert started.wait(10)
        _publish(bus, now, timeout=timeout)  # the broker hands the message over again: parked
        _until(lambda: ex.waited >= 1, "the second copy waiting for the first")
        _kill(bus, 1, cid=cid, at_ms=clock.now_ms())
        _until(lambda: answers(2), "both copies answered")
        _publish(bus, now, timeout=timeout)  # redelivered later (a broker restart)
        _until(lambda: answers(3), "the late copy answered")
    finally:
        stop.set()
        th.join(10)
        ex.close()
    assert calls == [cid], "the handler ran again for a killed run"
    assert [u.state for u in got] == [FiredState.KILLED] * 3, got
    assert all(u.command_id == cid for u in got)


def test_a_handler_that_ignores_the_kill_is_answered_still_running_then_times_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sdk, "KILL_GRACE", timedelta(milliseconds=300))
    clock = SystemClock()
    bus = InProcessBus(clock)
    results, answers = Results(bus), Answers(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=2)
    started, release = threading.Event(), threading.Event()

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        started.set()
        release.wait(10)  # never looks at ctx.cancelled

    (cid,) = _publish(bus, clock.now_ms(), timeout=timedelta(milliseconds=1500))
    stop, th = _running(ex)
    try:
        assert started.wait(10)
        _kill(bus, 2, cid=cid, at_ms=clock.now_ms())
        _until(lambda: Outcome.STILL_RUNNING in answers.outcomes(cid), "the still-running answer", 5)
        assert cid not in results.got  # nothing recorded yet: the handler is still in work
        got = results.wait([cid])
        _until(lambda: Outcome.TIMED_OUT in answers.outcomes(cid), "the timed-out answer", 5)
    finally:
        release.set()
        stop.set()
        th.join(10)
        ex.close()
    assert got[cid].state is FiredState.TIMED_OUT
    assert "timed out after 1.5s" in got[cid].message and "ignored the killed by an operator" in got[cid].message
    assert answers.outcomes(cid) == [Outcome.STILL_RUNNING, Outcome.TIMED_OUT]
    still = next(a for a in answers.got if a.outcome is Outcome.STILL_RUNNING)
    assert "job timeout (1.5s)" in still.message


def test_a_kill_by_job_stops_the_running_item_and_the_items_not_started_are_never_invoked() -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    results, answers = Results(bus), Answers(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=1)
    started, invoked = threading.Event(), []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        invoked.append(ctx.item_index)
        started.set()
        ctx.cancel_event.wait(10)

    cids = _publish(bus, clock.now_ms(), items=3)
    stop, th = _running(ex)
    try:
        assert started.wait(10)
        _kill(bus, 3, job="billing:reconcile", at_ms=clock.now_ms())
        got = results.wait(cids)
        _until(lambda: all(answers.outcomes(c) for c in cids), "an answer per item")
    finally:
        stop.set()
        th.join(10)
        ex.close()
    assert invoked == [0]
    assert [got[c].state for c in cids] == [FiredState.KILLED] * 3
    assert "before it started" in got[cids[1]].message
    assert [answers.outcomes(c) for c in cids] == [[Outcome.KILLED], [Outcome.NOT_STARTED], [Outcome.NOT_STARTED]]


def test_a_kill_of_an_item_that_has_its_result_is_answered_finished_and_the_rest_killed() -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    results, answers = Results(bus), Answers(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=1)
    second = threading.Event()

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        if ctx.item_index == 1:
            second.set()
            ctx.cancel_event.wait(10)

    first, last = _publish(bus, clock.now_ms(), items=2)
    stop, th = _running(ex)
    try:
        assert second.wait(10)  # item 0 succeeded already; item 1 runs
        _kill(bus, 11, cid=first, at_ms=clock.now_ms())
        _until(lambda: answers.outcomes(first), "the answer for the finished item")
        _kill(bus, 12, cid=last, at_ms=clock.now_ms())
        got = results.wait([first, last])
        _until(lambda: answers.outcomes(last), "the answer for the killed item")
    finally:
        stop.set()
        th.join(10)
        ex.close()
    assert answers.outcomes(first) == [Outcome.FINISHED]
    assert (got[first].state, got[last].state) == (FiredState.SUCCEEDED, FiredState.KILLED)
    assert answers.outcomes(last) == [Outcome.KILLED]


def test_a_kill_covers_only_its_run_and_a_stale_or_repeated_request_does_nothing() -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    results = Results(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=2)
    started, release, calls = threading.Event(), threading.Event(), []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        calls.append(ctx.command_id)
        started.set()
        release.wait(3)

    now = clock.now_ms()
    (cid,) = _publish(bus, now, timeout=timedelta(seconds=10))
    stop, th = _running(ex)
    try:
        assert started.wait(10)
        _kill(bus, 4, cid=command_id(9, now, 5), at_ms=clock.now_ms())  # another item of the run
        _kill(bus, 5, cid=cid, at_ms=clock.now_ms() - 10 * 60_000)  # made 10 min ago: stale
        _kill(bus, 6, job="billing:reconcile", at_ms=now - 1)  # by job, but before this run was due
        time.sleep(0.3)
        release.set()
        got = results.wait([cid])
    finally:
        release.set()
        stop.set()
        th.join(10)
        ex.close()
    assert got[cid].state is FiredState.SUCCEEDED
    assert ex.kills.cancelled == set()


def test_kill_messages_round_trip_and_the_context_outside_an_executor_is_never_cancelled() -> None:
    kill = Kill(7, BIZ, "9-1000-2", None, 1000, "ops")
    assert decode_kill(encode_kill(kill)) == kill
    assert kill.covers("any", 9, 1000, 2) and not kill.covers("any", 9, 1000, 3)
    by_job = Kill(8, BIZ, None, "billing:reconcile", 5000)
    assert by_job.covers("billing:reconcile", 1, 5000, 0) and not by_job.covers("billing:reconcile", 1, 5001, 0)
    assert not by_job.covers("billing:other", 1, 10, 0)
    with pytest.raises(ValueError):
        decode_kill(b'{"v":1,"k":"kill","r":1,"b":"x","at":1}')  # neither a command nor a job
    from tests.unit.test_bridges import ctx

    c = ctx({})
    assert not c.cancelled and not c.cancel_event.is_set()


# --- the store: the killed state, the request table and the relay -------------------------------


def _store(tmp_path: Path) -> SqlTriggerStore:
    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    init_schema(engine, 2)
    return SqlTriggerStore(engine, SystemClock())


def test_a_killed_result_is_final_on_an_item_record_and_names_the_page_record(tmp_path: Path) -> None:
    store = _store(tmp_path)
    now = store.clock.now()
    store.put_fired(
        [
            FiredRecord(
                command_id=command_id(1, now, 0),
                trigger_id=TriggerId(1),
                job_code=JobCode("j"),
                biz_code=BIZ,
                scheduled_at=now,
            ),
            FiredRecord(
                command_id=command_id(2, now, 0),
                trigger_id=TriggerId(2),
                job_code=JobCode("j"),
                biz_code=BIZ,
                scheduled_at=now,
                item_count=3,
                item_total=3,
            ),
        ]
    )
    item = FiredUpdate(command_id=command_id(1, now, 0), state=FiredState.KILLED, at=now, attempt=0, message="k")
    page = EnvelopeResult(
        trigger_id=2,
        scheduled_ms=to_ms(now),
        page_id=command_id(2, now, 0),
        indices=[0, 1, 2],
        letters="SXX",
        received_ms=to_ms(now),
        started_ms=None,
        finished_ms=to_ms(now),
        message="killed by an operator",
    )
    store.update_fired([item, *page.updates()])
    late = FiredUpdate(command_id=command_id(1, now, 0), state=FiredState.SUCCEEDED, at=now, attempt=0)
    store.update_fired([late])  # a result after the kill's changes nothing
    recs = store.get_fired([command_id(1, now, 0), command_id(2, now, 0)])
    assert recs[command_id(1, now, 0)].state is FiredState.KILLED
    assert recs[command_id(2, now, 0)].state is FiredState.KILLED
    assert recs[command_id(2, now, 0)].message.startswith("2 of 3 item(s) killed")
    kills = SqlKills(store)
    assert kills.run_item(command_id(2, now, 1)).state is FiredState.KILLED  # type: ignore[union-attr]
    assert kills.run_item(command_id(2, now, 0)).state is FiredState.SUCCEEDED  # type: ignore[union-attr]
    assert kills.run_item(command_id(2, now, 3)) is None


def test_the_relay_broadcasts_each_fresh_stored_request_once(tmp_path: Path) -> None:
    store = _store(tmp_path)
    bus = InProcessBus(store.clock)
    heard: list[Kill] = []
    feed = bus.follow_control(lambda p: heard.append(k) if (k := decode_kill(p)) is not None else None)
    kills = SqlKills(store)
    old = kills.add_kill(BIZ, "1-1-0", None, store.clock.now_ms() - 6 * 60_000, "ops")  # past KILL_FRESH
    kill = KillService(kills, store.clock).request(BIZ, command_id="1-2-0", by="ops")  # no bus: stored only
    assert heard == []
    relay = kill_relay(store, bus)
    assert relay.relay() == 1 and relay.relay() == 0
    assert heard == [kill] and old.request_id != kill.request_id
    feed.close()


# --- the xxl-job bridge: /kill as the admin calls it --------------------------------------------


def test_the_standin_kill_interrupts_the_job_thread_and_answers_like_executor_biz_impl() -> None:
    gate = threading.Event()
    with XxlExecutorStandIn(handler=lambda t: gate.wait(10) and None, access_token=XXL_TOKEN) as ex:  # type: ignore[arg-type, return-value]
        from tests.unit.test_bridge_xxljob_threads import direct_run
        from tests.unit.test_bridges import post

        assert direct_run(ex, logId=1)["code"] == 200
        assert ex.wait_started(1)
        assert direct_run(ex, logId=2)["code"] == 200  # queued behind it
        assert post(ex.address + "kill", {"jobId": 7}, "wrong")["msg"] == "The access token is wrong."
        assert post(ex.address + "kill", {"jobId": 7}, XXL_TOKEN) == {"code": 200, "msg": None}
        # interrupted: called back before the handler returns (the gate stays closed)
        assert ex.wait_result(1, 3) == (500, "scheduling center kill job. [job running, killed]")
        assert ex.wait_result(2, 3) == (
            500,
            "scheduling center kill job. [job not executed, in the job queue, killed.]",
        )
        assert post(ex.address + "kill", {"jobId": 7}, XXL_TOKEN) == {"code": 200, "msg": "job thread already killed."}
        gate.set()


def test_a_kill_of_a_bridged_run_calls_the_legacy_executors_kill_and_is_recorded_killed() -> None:
    gate = threading.Event()
    xxl = Xxl(handler=lambda t: gate.wait(20) and None, beat_interval=0.5)
    clock = SystemClock()
    bus = InProcessBus(clock)
    results, answers = Results(bus), Answers(bus)
    ex = Executor(bus, BIZ, clock=clock, concurrency=2)
    register_xxl_job_bridge(ex, xxl.bridge)
    (cid,) = _publish(bus, clock.now_ms(), handler=XXL_JOB_HANDLER, params=json.dumps(xxl_params()))
    stop, th = _running(ex)
    try:
        _until(lambda: xxl.executor.started, "the legacy executor starting the run")
        _kill(bus, 9, cid=cid, at_ms=clock.now_ms())
        got = results.wait([cid])
        _until(lambda: answers.outcomes(cid), "the executor's answer")
    finally:
        gate.set()
        stop.set()
        th.join(10)
        ex.close()
        xxl.close()
    assert xxl.executor.kill_requests == [bridge_job_id(7)]
    assert got[cid].state is FiredState.KILLED
    assert "scheduling center kill job. [job running, killed]" in got[cid].message
    assert answers.outcomes(cid) == [Outcome.KILLED]


def test_the_simulated_legacy_executor_kills_like_executor_biz_impl() -> None:
    sims = XxlExecutors()
    ident = handler_identity("BEAN", "h", 0)
    run = SimRun(log_id=1, job_id=7, duration_ms=60_000, timeout_ms=0, code=200)
    assert sims.run("a", run, ident, None, 0).started
    code, msg, finished = sims.kill("a", 7, 5)
    assert (code, msg) == (200, None)
    assert [(f.log_id, f.at, f.code, f.msg) for f in finished] == [
        (1, 5, 500, "scheduling center kill job. [job running, killed]")
    ]
    assert sims.kill("a", 7, 6) == (200, "job thread already killed.", ())
    assert sims.end_of("a", 7, 1) is None


# --- the command: stored, relayed by `serve`, names checked ------------------------------------


def _invoke(argv: list[str]) -> Any:
    return CliRunner().invoke(cli, argv, env={"SWITCHYARD_BUS": "memory"})


def test_run_kill_without_a_bus_is_relayed_by_serve_and_recorded_killed(tmp_path: Path) -> None:
    store = _store(tmp_path)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store.put_job(Job(job_code=JobCode("billing:reconcile"), biz_code=BIZ, handler="h"))
    started, saw = threading.Event(), []

    def register(ex: Executor) -> None:
        @ex.handler()
        def handle(ctx: ExecutionContext) -> None:
            started.set()
            saw.append(ctx.cancel_event.wait(20) and ctx.cancelled)

    settings = SchedulerSettings(lookahead=timedelta(seconds=30), idle_wait=timedelta(milliseconds=200))
    center = EmbeddedCenter(store, settings, register, name="t", discover_every=0.2)
    (trig,) = store.add_triggers(
        [
            Trigger(
                job_code=JobCode("billing:reconcile"),
                biz_code=BIZ,
                kind=TriggerKind.ONCE,
                next_fire_at=store.clock.now() + timedelta(seconds=1),
            )
        ]
    )
    stop = threading.Event()
    th = threading.Thread(target=center.run, args=(stop,), daemon=True)
    th.start()
    try:
        assert started.wait(30)
        (rec,) = [r for r in store.fired_between(BIZ, store.clock.now() - timedelta(hours=1), store.clock.now())]
        result = _invoke(["run", "kill", rec.command_id, "--url", url, "--wait", "10"])
        assert result.exit_code == 0, result.output
        assert "stored; the process holding the bus" in result.output
        assert f"{rec.command_id}: killed: killed by an operator" in result.output
    finally:
        stop.set()
        th.join(30)
    assert saw == [True]
    assert store.get_fired([rec.command_id])[rec.command_id].state is FiredState.KILLED
    # the same kill again: the run has finished, nothing to kill, its final state said
    again = _invoke(["run", "kill", rec.command_id, "--url", url])
    assert again.exit_code == 0 and "already finished: killed" in again.output
    assert trig.id is not None


def test_run_kill_names_that_do_not_exist_exit_2(tmp_path: Path) -> None:
    store = _store(tmp_path)
    url = f"sqlite:///{tmp_path / 's.db'}"
    store.put_job(Job(job_code=JobCode("billing:reconcile"), biz_code=BIZ, handler="h"))
    cases = {
        "9-1796000000000-0": "no such run: 9-1796000000000-0",
        "nosuch": "no such run: 'nosuch' is not a command id",
    }
    for cid, said in cases.items():
        result = _invoke(["run", "kill", cid, "--url", url])
        assert result.exit_code == 2 and said in result.output, result.output
    result = _invoke(["run", "kill", "--job", "nosuch:job", "--url", url])
    assert result.exit_code == 2 and "no such job: nosuch:job" in result.output
    assert _invoke(["run", "kill", "--url", url]).exit_code == 2
    idle = _invoke(["run", "kill", "--job", "billing:reconcile", "--url", url])
    assert idle.exit_code == 0 and "no run of billing:reconcile is in work" in idle.output
    assert SqlKills(store).kills_since(0) == []  # nothing stored for any of these


def test_a_result_consumer_counts_a_killed_result(tmp_path: Path) -> None:
    store = _store(tmp_path)
    bus = InProcessBus(store.clock)
    metrics = SchedulerMetrics()
    consumer = ResultConsumer(bus, store, metrics)
    now = store.clock.now()
    store.put_fired(
        [
            FiredRecord(
                command_id=command_id(3, now, 0),
                trigger_id=TriggerId(3),
                job_code=JobCode("j"),
                biz_code=BIZ,
                scheduled_at=now,
            )
        ]
    )
    from scheduler_core.codec import encode_envelope_results

    ms = to_ms(now)
    result = EnvelopeResult(3, ms, None, [0], "X", ms, ms, ms, None, "killed by an operator")
    bus.publish([BusMessage(CALLBACK_TOPIC, encode_envelope_results([result]))])
    applied = 0
    end = time.monotonic() + 10
    while not applied and time.monotonic() < end:
        applied = consumer.poll(timeout=timedelta(milliseconds=100))
    assert applied == 1
    assert store.get_fired([command_id(3, now, 0)])[command_id(3, now, 0)].state is FiredState.KILLED
    consumer.close()


# --- dual-run and the reports: a killed run is its own column ------------------------------------


def test_dualrun_counts_killed_runs_in_their_own_column_neither_missing_nor_failed(tmp_path: Path) -> None:
    from dualrun.model import Verdict
    from reports.model import _ROWS
    from tests.unit.test_dualrun_support import Scenario

    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    times = s.times(d)
    killed = times[::33]
    s.new(d, [t for t in times if t not in killed])
    s.new(d, killed, state=FiredState.KILLED)
    c = s.compare()
    assert c.new.killed == len(killed)
    assert c.new.missing == 0 and c.new.failed == 0 and c.new.timed_out == 0
    assert c.new.success_rate == 1.0  # over the runs that ran to their own end
    assert c.mismatch_counts["failed_on_new"]["flagged"] == 0
    assert c.verdict is Verdict.READY, c.reasons
    row = dict((name, fmt) for name, fmt in _ROWS)["killed by an operator"]
    assert row(c.new) == str(len(killed))


class _NotBusinessWide:
    """A shard member that does not own the lowest partition."""

    def owner(self, trigger_id: int) -> Any:
        return None

    def business_wide(self) -> bool:
        return False

    def generation(self) -> int:
        return 0


def test_the_scheduler_relays_stored_kills_as_leader_and_only_the_business_wide_member_does(tmp_path: Path) -> None:
    from scheduler_core.control import EVERYTHING, relay_round
    from switchyard.cli.scheduler import _relays

    store = _store(tmp_path)
    bus = InProcessBus(store.clock)
    heard: list[Kill] = []
    feed = bus.follow_control(lambda p: heard.append(k) if (k := decode_kill(p)) is not None else None)
    kill = KillService(SqlKills(store), store.clock).request(BIZ, job_code="billing:reconcile", by="ops")
    settings, metrics = SchedulerSettings(), SchedulerMetrics()
    errors: list[int] = []
    relay_round(_relays(store, bus, settings, metrics, _NotBusinessWide(), "t"), lambda: errors.append(1))
    assert heard == []
    relay_round(_relays(store, bus, settings, metrics, EVERYTHING, "t"), lambda: errors.append(1))
    assert heard == [kill] and errors == []
    feed.close()
