"""Packed command messages on the executor's threaded path: the runs of one message are
worked one after another on one worker (one quota step), each with its own result,
retries and timeout; the message is acked once all their results are published."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_results, encode_packed, envelope_body
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.model import CommandId, Epoch, ExecutionCommand, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.times import from_ms
from tests.waiting import stays

T_MS = 1_796_000_000_000


def _pack(
    bus: InProcessBus,
    first_trigger: int,
    runs: int,
    *,
    timeout: timedelta = timedelta(0),
    max_retry: int = 0,
    items: int = 1,
) -> list[CommandId]:
    """One packed message of `runs` runs of `items` items each (triggers first_trigger..
    onwards): their command ids."""
    t = from_ms(T_MS)
    bodies, ids = [], []
    for tid in range(first_trigger, first_trigger + runs):
        run = ExecutionCommand(
            command_id=command_id(tid, t, 0),
            trigger_id=TriggerId(tid),
            job_code=JobCode("j"),
            biz_code="d",
            handler="h",
            scheduled_at=t,
            epoch=Epoch(1),
            timeout=timeout,
            max_retry=max_retry,
        )
        bodies.append(envelope_body(run, [(i, f"p{i}") for i in range(items)], page_record=True))
        ids += [command_id(tid, t, i) for i in range(items)]
    bus.publish([BusMessage(command_topic("d"), encode_packed(bodies), key=str(first_trigger))])
    return ids


def _collect(sub, want: int, within_s: float = 10.0) -> dict[CommandId, FiredUpdate]:  # type: ignore[no-untyped-def]
    got: dict[CommandId, FiredUpdate] = {}
    end = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < end:
        for r in sub.receive(100, timedelta(milliseconds=50)):
            for u in decode_results(r.message.payload):
                got[u.command_id] = u
            sub.ack(r)
    return got


class _Running:
    def __init__(self, ex: Executor) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=ex.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> _Running:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(10)
        assert not self.thread.is_alive()


def test_the_runs_of_a_packed_message_run_on_one_worker_with_their_own_results() -> None:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=4, retry_backoff=timedelta(milliseconds=1))
    threads: dict[int, set[int]] = {}  # message (first trigger) -> worker threads that ran its runs
    attempts: dict[int, list[int]] = {}

    @ex.handler()
    def handle(ctx: ExecutionContext) -> HandlerResult | None:
        threads.setdefault((ctx.trigger_id - 1) // 50, set()).add(threading.get_ident())
        attempts.setdefault(ctx.trigger_id, []).append(ctx.attempt)
        if ctx.trigger_id % 17 == 0 and ctx.attempt == 0:
            raise RuntimeError("first attempt fails")  # retried with back-off, inside the pack
        if ctx.trigger_id == 33:
            return HandlerResult(ok=False, message="thirty-three never works")
        return None

    ids = [cid for m in range(4) for cid in _pack(bus, 1 + 50 * m, 50, max_retry=1)]
    with _Running(ex):
        got = _collect(results, len(ids))
    assert set(got) == set(ids)
    assert all(len(ts) == 1 for ts in threads.values()), "a packed message's runs were spread over workers"
    states = {cid: got[cid].state for cid in ids}
    assert states[command_id(33, T_MS, 0)] is FiredState.FAILED
    assert got[command_id(33, T_MS, 0)].message == "thirty-three never works"
    for tid in (17, 34, 51, 68):
        assert attempts[tid] == [0, 1] and got[command_id(tid, T_MS, 0)].attempt == 1
        assert states[command_id(tid, T_MS, 0)] is FiredState.SUCCEEDED
    assert sum(s is FiredState.SUCCEEDED for s in states.values()) == 199
    assert ex.processed == 200 and bus.backlog(command_topic("d"), "executor") == (0, 0)  # all acked
    ex.close()


def test_runs_of_several_items_in_a_pack_keep_their_results_per_item_failures_and_retries_included() -> None:
    # the quick path of runs of several items: a run whose items all succeed at once is
    # remembered with its pack; one with a failure, a retry or an exception goes on the
    # ordinary way from that item on, with the same results as before
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=2, retry_backoff=timedelta(milliseconds=1))
    calls: list[tuple[int, int, int, str]] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> HandlerResult | bool | None:
        calls.append((ctx.trigger_id, ctx.item_index, ctx.attempt, ctx.item_param))
        if ctx.trigger_id == 2 and ctx.item_index == 1 and ctx.attempt == 0:
            raise RuntimeError("first attempt fails")
        if ctx.trigger_id == 3 and ctx.item_index == 2:
            return HandlerResult(ok=False, message="never works")
        if ctx.trigger_id == 4 and ctx.item_index == 0:
            return False
        return True if ctx.item_index == 3 else None

    ids = _pack(bus, 1, 5, items=4, max_retry=1)
    with _Running(ex):
        got = _collect(results, len(ids))
        assert set(got) == set(ids)
        _pack(bus, 1, 5, items=4, max_retry=1)  # a copy of the message: answered from memory
        again = _collect(results, len(ids))
    state = {cid: u.state for cid, u in got.items()}
    bad = {command_id(3, T_MS, 2), command_id(4, T_MS, 0)}
    assert {cid for cid, s in state.items() if s is FiredState.FAILED} == bad
    assert got[command_id(3, T_MS, 2)].message == "never works" and got[command_id(3, T_MS, 2)].attempt == 1
    assert got[command_id(4, T_MS, 0)].message == "handler returned False"
    assert got[command_id(2, T_MS, 1)].state is FiredState.SUCCEEDED and got[command_id(2, T_MS, 1)].attempt == 1
    assert all(s is FiredState.SUCCEEDED for cid, s in state.items() if cid not in bad)
    # every item ran in order, the items after a failure too, each with its own param
    assert [(t, i) for t, i, a, _p in calls if a == 0] == [(t, i) for t in range(1, 6) for i in range(4)]
    assert all(p == f"p{i}" for _t, i, _a, p in calls)
    assert sorted((t, i) for t, i, a, _p in calls if a) == [(2, 1), (3, 2), (4, 0)]
    assert {got[cid].page_id for cid in ids} == {command_id(t, T_MS, 0) for t in range(1, 6)}
    # the copy: what succeeded is answered from memory, what failed with how it ended
    assert {cid: u.state for cid, u in again.items()} == state
    assert len(calls) == 23 and ex.processed == 20 and ex.duplicates == 12  # (the failed runs: from `_ended`)
    ex.close()


def test_a_redelivered_packed_message_is_answered_from_memory_not_run_again() -> None:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=2)
    ran: list[int] = []
    ex.handler()(lambda ctx: ran.append(ctx.trigger_id))
    with _Running(ex):
        ids = _pack(bus, 1, 20)
        first = _collect(results, 20)
        _pack(bus, 1, 20)  # the broker redelivers the same message (same command ids)
        again = _collect(results, 20)
    assert set(first) == set(again) == set(ids)
    assert sorted(ran) == list(range(1, 21)), "a run that had succeeded here ran again"
    assert all(u.state is FiredState.SUCCEEDED for u in again.values())
    assert ex.duplicates == 20
    ex.close()


def test_a_run_overrunning_its_timeout_inside_a_pack_is_timed_out_and_the_rest_of_the_pack_goes_on() -> None:
    # concurrency 2: the overrunning handler still holds one slot (it cannot be killed),
    # the rest of the pack runs in the other
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=2)
    release = threading.Event()

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        if ctx.trigger_id == 2:
            release.wait(10)

    ids = _pack(bus, 1, 5, timeout=timedelta(milliseconds=100))
    with _Running(ex):
        started = time.monotonic()
        got = _collect(results, 5)
        took = time.monotonic() - started
        release.set()
        more = _pack(bus, 10, 2)  # the only worker's successor still serves the inbox
        got.update(_collect(results, 2))
    assert took < 5, f"the pack waited for the stuck handler ({took:.1f}s)"
    assert [got[c].state for c in ids] == [FiredState.SUCCEEDED, FiredState.TIMED_OUT] + [FiredState.SUCCEEDED] * 3
    assert all(got[c].state is FiredState.SUCCEEDED for c in more)
    assert bus.backlog(command_topic("d"), "executor") == (0, 0)
    ex.close()


def test_with_concurrency_1_the_rest_of_the_pack_waits_for_the_overrunning_handler_to_return() -> None:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=1, receipt_after=None)  # final results only
    release = threading.Event()
    entered = threading.Event()
    later_ran_while_stuck: list[int] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        if ctx.trigger_id == 2:
            entered.set()
            release.wait(10)
        elif not release.is_set():
            later_ran_while_stuck.append(ctx.trigger_id)

    ids = _pack(bus, 1, 4, timeout=timedelta(milliseconds=100))
    with _Running(ex):
        assert entered.wait(10)
        # past the 100 ms timeout: a successor has had time to run on, were it allowed to (the
        # watch ends at a successor's run, which the assertion below names)
        stays(lambda: later_ran_while_stuck == [1], 0.5)
        stuck = list(later_ran_while_stuck)
        release.set()
        got = _collect(results, 4)
    assert stuck == [1], f"a handler ran beside the overrunning one with concurrency 1: {stuck}"
    assert [got[c].state for c in ids] == [FiredState.SUCCEEDED, FiredState.TIMED_OUT] + [FiredState.SUCCEEDED] * 2
    ex.close()
