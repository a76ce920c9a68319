"""The executor SDK and the results path, on the in-process bus with a driven clock."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from scheduler_core.clock import ManualClock
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.model import FiredState, command_id
from tests.harness import make_harness, stored_id


def _run(h, ex: Executor, core) -> None:  # type: ignore[no-untyped-def]
    consumer = h.results(core)
    while ex.poll_once(timeout=timedelta(0)):
        pass
    while consumer.poll(timeout=timedelta(0)):
        pass


def test_results_of_an_envelope_fold_into_its_page_record(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("fan", shard_total=250, envelope_size=100)
    t = h.once(job, 0)
    ex = Executor(h.bus, "biz-a", clock=clock)
    seen: list[int] = []

    @ex.handler("fan")
    def handle(ctx: ExecutionContext) -> HandlerResult:
        seen.append(ctx.item_index)
        return HandlerResult(ok=ctx.item_index != 7, message="item 7 is broken")

    core = h.core()
    consumer = h.results(core)
    core.tick_all()
    _run(h, ex, core)
    consumer.poll(timeout=timedelta(0))
    assert sorted(seen) == list(range(250))
    records = h.store.fired_between("biz-a", t.next_fire_at, t.next_fire_at + timedelta(seconds=1))
    assert [(r.item_index, r.item_count) for r in records] == [(0, 100), (100, 100), (200, 50)]
    first, second, third = records
    assert first.state is FiredState.FAILED and first.failed_items == 1 and first.succeeded_items == 99
    assert first.item_states[7] == "F" and first.item_states.count("S") == 99 and "item 7 is broken" in first.message
    assert second.state is FiredState.SUCCEEDED and second.item_states == "S" * 100
    assert third.state is FiredState.SUCCEEDED and third.succeeded_items == 50
    assert first.command_id == command_id(stored_id(t), t.next_fire_at, 0)


def test_retries_with_backoff_then_success(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("flaky", max_retry=2)
    t = h.once(job, 0)
    ex = Executor(h.bus, "biz-a", clock=clock, retry_backoff=timedelta(milliseconds=1))
    calls: list[int] = []

    @ex.handler("flaky")
    def handle(ctx: ExecutionContext) -> None:
        calls.append(ctx.attempt)
        if ctx.attempt < 2:
            raise RuntimeError("try again")

    core = h.core()
    core.tick_all()
    _run(h, ex, core)
    rec = h.store.get_fired([command_id(stored_id(t), t.next_fire_at, 0)])
    (r,) = rec.values()
    assert calls == [0, 1, 2]
    assert r.state is FiredState.SUCCEEDED and r.attempt == 2 and r.received_at is not None


def test_failure_after_retries_and_timeout(tmp_path: Path, clock: ManualClock) -> None:
    import threading

    h = make_harness(tmp_path, clock)
    bad = h.job("bad", max_retry=1)
    slow = h.job("slow", timeout=timedelta(milliseconds=100))
    tb, ts = h.once(bad, 0), h.once(slow, 0)
    ex = Executor(h.bus, "biz-a", clock=clock, retry_backoff=timedelta(milliseconds=1))
    release = threading.Event()
    ex.handler("bad")(lambda ctx: False)
    ex.handler("slow")(lambda ctx: release.wait(5))
    core = h.core()
    core.tick_all()
    try:
        _run(h, ex, core)
    finally:
        release.set()
    got = h.store.get_fired(
        [command_id(stored_id(tb), tb.next_fire_at, 0), command_id(stored_id(ts), ts.next_fire_at, 0)]
    )
    states = {r.trigger_id: (r.state, r.attempt, r.message) for r in got.values()}
    assert states[stored_id(tb)][0] is FiredState.FAILED and states[stored_id(tb)][1] == 1
    assert states[stored_id(ts)][0] is FiredState.TIMED_OUT and "timed out" in states[stored_id(ts)][2]


def test_shadow_mode_records_without_invoking(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("j")
    t = h.once(job, 0)
    ex = Executor(h.bus, "biz-a", clock=clock, shadow=True)
    called: list[str] = []
    ex.handler("j")(lambda ctx: called.append(ctx.command_id))
    core = h.core()
    core.tick_all()
    _run(h, ex, core)
    (r,) = h.store.get_fired([command_id(stored_id(t), t.next_fire_at, 0)]).values()
    assert called == []
    assert r.state is FiredState.RECEIVED and r.received_at is not None and "shadow" in r.message


def test_a_redelivered_command_that_succeeded_is_not_run_twice(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("once")
    t = h.once(job, 0)
    ex = Executor(h.bus, "biz-a", clock=clock)
    calls: list[str] = []
    ex.handler("once")(lambda ctx: calls.append(ctx.command_id))
    core = h.core()
    core.tick_all()
    _run(h, ex, core)
    # the leader dies after publishing: a new epoch re-fires the same occurrence
    core.pipeline.fire([t], core.epoch)  # same occurrence, published again
    _run(h, ex, core)
    assert calls == [command_id(stored_id(t), t.next_fire_at, 0)]
    assert ex.duplicates == 1


def test_unknown_handler_is_a_failure_not_a_crash(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    job = h.job("nobody")
    t = h.once(job, 0)
    ex = Executor(h.bus, "biz-a", clock=clock)
    core = h.core()
    core.tick_all()
    _run(h, ex, core)
    (r,) = h.store.get_fired([command_id(stored_id(t), t.next_fire_at, 0)]).values()
    assert r.state is FiredState.FAILED and "no handler registered" in r.message


def test_runs_of_one_job_due_together_share_messages_and_keep_their_own_results(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock, partitions=1)  # packing is per fire chunk: one partition, one chunk
    job = h.job("hot", shard_total=1, envelope_size=3)
    triggers = [h.once(job, 0) for _ in range(5)]
    ex = Executor(h.bus, "biz-a", clock=clock)
    ran: list[int] = []

    @ex.handler("hot")
    def handle(ctx: ExecutionContext) -> HandlerResult:
        ran.append(ctx.trigger_id)
        return HandlerResult(ok=ctx.trigger_id != triggers[1].id, message="this one fails")

    core = h.core()
    core.tick_all()
    assert core.stats.messages == 2  # 5 one-item runs, up to 3 per message
    _run(h, ex, core)
    assert sorted(ran) == sorted(stored_id(t) for t in triggers)
    t0 = triggers[0].next_fire_at
    records = {r.trigger_id: r for r in h.store.fired_between("biz-a", t0, t0 + timedelta(seconds=1))}
    assert len(records) == 5
    assert records[stored_id(triggers[1])].state is FiredState.FAILED
    assert all(records[stored_id(t)].state is FiredState.SUCCEEDED for t in triggers if t is not triggers[1])
    # every message acked: nothing comes back
    clock.advance(timedelta(minutes=5))
    assert ex.poll_once(timeout=timedelta(0)) == 0


def test_packed_runs_span_at_most_the_pack_window_and_none_is_delivered_before_its_T(
    tmp_path: Path, clock: ManualClock
) -> None:
    from scheduler_core.codec import decode_message

    h = make_harness(tmp_path, clock, partitions=1, pack_window=timedelta(milliseconds=100))
    job = h.job("hot", shard_total=1, envelope_size=10)
    offsets_ms = [0, 50, 100, 150, 300]
    triggers = [h.once(job, 1 + ms / 1000) for ms in offsets_ms]
    sub = h.listen("biz-a")
    core = h.core()
    core.tick_all()
    assert core.stats.messages == 3  # [0, 50, 100] [150] [300]: each within 100 ms of its first run
    t0 = triggers[0].next_fire_at
    seen: dict[int, list[int]] = {}
    for step_ms in range(0, 400, 10):
        now = t0 + timedelta(milliseconds=step_ms)
        clock.advance(now - clock.now())
        for r in sub.receive(10, timedelta(0)):
            runs = decode_message(r.message.payload)
            seen[step_ms] = sorted(int((run.scheduled_at - t0).total_seconds() * 1000) for run in runs)
            for run in runs:
                assert run.scheduled_at <= now, "a packed run was delivered before its T"
            sub.ack(r)
    assert seen == {100: [0, 50, 100], 150: [150], 300: [300]}
