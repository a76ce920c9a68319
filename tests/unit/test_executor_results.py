"""The compact per-envelope result form, the executor's threaded path (workers, outbox,
watchdog), and the callback consumer applying compact results idempotently."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import (
    CALLBACK_TOPIC,
    CodecError,
    EnvelopeResult,
    command_topic,
    decode_commands,
    decode_envelope,
    decode_message,
    decode_results,
    encode_commands,
    encode_envelope_results,
    encode_packed,
    encode_results,
    envelope_body,
)
from scheduler_core.errors import StoreUnavailable
from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.model import CommandId, Epoch, ExecutionCommand, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.stops import Cause, Scope, SkipWindow
from scheduler_core.store.stops import SqlStops
from scheduler_core.times import from_ms, to_ms
from tests.harness import make_harness, stored_id
from tests.waiting import until

T_MS = 1_796_000_000_000


def _result(**over: object) -> EnvelopeResult:
    base: dict[str, object] = dict(
        trigger_id=7,
        scheduled_ms=T_MS,
        page_id=CommandId(f"7-{T_MS}-100"),
        indices=range(100, 104),
        letters="SFTS",
        received_ms=T_MS + 5,
        started_ms=T_MS + 6,
        finished_ms=T_MS + 40,
        start_offsets_ms=[0, 1, 3, 30],
        message="",
        exceptions=[(1, 2, "boom"), (2, 0, "timed out after 1s")],
    )
    base.update(over)
    return EnvelopeResult(**base)  # type: ignore[arg-type]


# --- codec ----------------------------------------------------------------------------


def test_compact_results_expand_to_per_item_updates() -> None:
    ups = decode_results(encode_envelope_results([_result()]))
    assert [u.command_id for u in ups] == [command_id(7, T_MS, i) for i in range(100, 104)]
    assert [u.state for u in ups] == [
        FiredState.SUCCEEDED,
        FiredState.FAILED,
        FiredState.TIMED_OUT,
        FiredState.SUCCEEDED,
    ]
    assert [(u.attempt, u.message) for u in ups] == [(0, ""), (2, "boom"), (0, "timed out after 1s"), (0, "")]
    assert [u.started_at for u in ups] == [from_ms(T_MS + 6 + o) for o in (0, 1, 3, 30)]
    # an item's result time is the next item's start; the last one's is the envelope's end
    assert [u.at for u in ups] == [from_ms(T_MS + 7), from_ms(T_MS + 9), from_ms(T_MS + 36), from_ms(T_MS + 40)]
    assert {u.received_at for u in ups} == {from_ms(T_MS + 5)}
    assert {u.page_id for u in ups} == {CommandId(f"7-{T_MS}-100")}


def test_compact_results_keep_gaps_and_defaults() -> None:
    r = _result(
        indices=[3, 9],
        letters="RR",
        started_ms=None,
        start_offsets_ms=None,
        message="shadow",
        exceptions=[],
        page_id=None,
    )
    body = json.loads(encode_envelope_results([r]))
    assert body["e"][0]["ix"] == [3, 9] and "i0" not in body["e"][0]
    ups = decode_results(encode_envelope_results([r]))
    assert [(u.command_id, u.state, u.message, u.started_at, u.page_id) for u in ups] == [
        (command_id(7, T_MS, 3), FiredState.RECEIVED, "shadow", None, None),
        (command_id(7, T_MS, 9), FiredState.RECEIVED, "shadow", None, None),
    ]
    # offsets all zero are left off the wire; every item then started at started_ms
    zero = json.loads(encode_envelope_results([_result(start_offsets_ms=[0, 0, 0, 0])]))["e"][0]
    assert "so" not in zero and zero["i0"] == 100


def test_one_message_mixes_both_forms_and_several_envelopes() -> None:
    old = FiredUpdate(CommandId("1-2-3"), FiredState.SUCCEEDED, from_ms(T_MS), 1, "ok")
    body = json.loads(encode_results([old]))
    body["e"] = json.loads(encode_envelope_results([_result(), _result(trigger_id=8, page_id=None)]))["e"]
    ups = decode_results(json.dumps(body).encode())
    assert len(ups) == 9 and ups[0] == old and ups[-1].command_id == command_id(8, T_MS, 103)


@pytest.mark.parametrize(
    "payload",
    [
        b'{"v":1}',
        b'{"v":1,"e":[{"t":1,"T":2,"s":"SZ","i0":0,"rc":1,"at":2}]}',  # an unknown state letter
        b'{"v":1,"e":[{"t":1,"T":2,"s":"SS","i0":0,"rc":1,"at":2,"so":[0]}]}',  # offsets do not match
        b'{"v":1,"e":[{"t":1,"T":2,"s":"S","rc":1,"at":2}]}',  # no indices
    ],
)
def test_malformed_compact_results_are_codec_errors(payload: bytes) -> None:
    with pytest.raises(CodecError):
        decode_results(payload)


def test_decode_envelope_agrees_with_decode_commands() -> None:
    t = from_ms(T_MS)
    cmds = [
        ExecutionCommand(
            command_id=command_id(5, t, i),
            trigger_id=TriggerId(5),
            job_code=JobCode("j"),
            biz_code="b",
            handler="h",
            scheduled_at=t,
            item_index=i,
            item_total=10,
            item_param=f"p{i}",
            params="{}",
            timeout=timedelta(seconds=3),
            max_retry=2,
            epoch=Epoch(4),
        )
        for i in range(4, 7)
    ]
    payload = encode_commands(cmds, page_record=True)
    env = decode_envelope(payload)
    assert env.items == [(4, "p4"), (5, "p5"), (6, "p6")] and env.page_id == command_id(5, t, 4)
    assert decode_commands(payload) == [cmd.__class__(**{**_fields(cmd), "page_id": env.page_id}) for cmd in cmds]
    with pytest.raises(CodecError):
        decode_envelope(payload.replace(b'[4,"p4"]', b"[4]"))


def test_a_packed_message_decodes_to_its_runs_and_a_malformed_one_is_refused() -> None:
    t = from_ms(T_MS)
    runs = [
        ExecutionCommand(
            command_id=command_id(tid, t, 0),
            trigger_id=TriggerId(tid),
            job_code=JobCode("j"),
            biz_code="b",
            handler="h",
            scheduled_at=t,
            item_index=0,
            item_total=1,
            epoch=Epoch(1),
        )
        for tid in (11, 12, 13)
    ]
    payload = encode_packed([envelope_body(r, [(0, "")]) for r in runs])
    assert [e.trigger_id for e in decode_message(payload)] == [11, 12, 13]
    assert [c.trigger_id for c in decode_commands(payload)] == [11, 12, 13]
    with pytest.raises(CodecError, match="decode_message"):
        decode_envelope(payload)  # one envelope expected: a packed message is refused
    for bad in (b'{"v":1,"m":[]}', b'{"v":1,"m":[1,2]}', b'{"v":1,"m":{"t":1}}'):
        with pytest.raises(CodecError):
            decode_message(bad)
    single = encode_packed([envelope_body(runs[0], [(0, "")])])
    assert "m" not in json.loads(single)  # a pack of one is a plain envelope


def _fields(cmd: ExecutionCommand) -> dict[str, Any]:
    return {f: getattr(cmd, f) for f in cmd.__dataclass_fields__}


def test_the_public_context_constructor_still_works() -> None:
    t = from_ms(T_MS)
    ctx = ExecutionContext(
        command_id=CommandId("x-1"),
        trigger_id=TriggerId(1),
        job_code=JobCode("j"),
        biz_code="b",
        scheduled_at=t,
        item_index=2,
        item_total=3,
        item_param="p",
        params="{}",
        attempt=1,
        timeout=timedelta(seconds=1),
    )
    assert (ctx.command_id, ctx.item_index, ctx.item_param, ctx.attempt, ctx.scheduled_at) == ("x-1", 2, "p", 1, t)
    with pytest.raises(AttributeError):
        ctx.attempt = 5  # type: ignore[misc]


# --- the executor's threaded path -------------------------------------------------------


def _publish_envelope(
    bus: InProcessBus,
    n: int,
    *,
    timeout: timedelta = timedelta(0),
    max_retry: int = 0,
    start: int = 0,
    page: bool = True,
) -> list[CommandId]:
    t = from_ms(T_MS)
    cmds = [
        ExecutionCommand(
            command_id=command_id(9, t, i),
            trigger_id=TriggerId(9),
            job_code=JobCode("j"),
            biz_code="d",
            handler="h",
            scheduled_at=t,
            item_index=i,
            item_total=1000,
            timeout=timeout,
            max_retry=max_retry,
        )
        for i in range(start, start + n)
    ]
    bus.publish([BusMessage(command_topic("d"), encode_commands(cmds, page_record=page))])
    return [c.command_id for c in cmds]


def _collect(sub, want: int, within_s: float = 10.0) -> tuple[dict[CommandId, FiredUpdate], int]:  # type: ignore[no-untyped-def]
    got: dict[CommandId, FiredUpdate] = {}
    messages = 0
    end = time.monotonic() + within_s
    while len(got) < want and time.monotonic() < end:
        for r in sub.receive(100, timedelta(milliseconds=50)):
            messages += 1
            for u in decode_results(r.message.payload):
                got[u.command_id] = u
            sub.ack(r)
    return got, messages


def _running(ex: Executor) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    return stop, th


def test_run_publishes_per_item_results_through_the_outbox_and_acks() -> None:
    clock = SystemClock()  # run() waits on the bus in real time
    bus = InProcessBus(clock)
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock, concurrency=4)
    ex.handler()(lambda ctx: HandlerResult(ok=ctx.item_index % 10 != 3, message="no threes"))
    ids = _publish_envelope(bus, 250) + _publish_envelope(bus, 250, start=250)
    stop, th = _running(ex)
    try:
        got, _messages = _collect(results, 500)
    finally:
        stop.set()
        th.join(10)
    assert not th.is_alive()
    assert set(got) == set(ids)
    bad = {cid for cid, u in got.items() if u.state is FiredState.FAILED}
    assert bad == {command_id(9, T_MS, i) for i in range(500) if i % 10 == 3}
    assert all(got[c].message == "no threes" for c in bad)
    assert ex.processed == 500 and bus.backlog(command_topic("d"), "executor") == (0, 0)
    ex.close()


def test_a_job_timeout_is_reported_at_its_deadline_without_a_thread_per_item() -> None:
    clock = SystemClock()  # run() waits on the bus in real time
    bus = InProcessBus(clock)
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock, concurrency=2)
    release = threading.Event()
    late: list[int] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        if ctx.item_index == 1:
            release.wait(10)
            late.append(ctx.item_index)

    ids = _publish_envelope(bus, 3, timeout=timedelta(milliseconds=100))
    threads_before = threading.active_count()
    stop, th = _running(ex)
    try:
        started = time.monotonic()
        got, _ = _collect(results, 3)
        took = time.monotonic() - started
        # 2 workers + outbox + watchdog + the one successor after the timeout; no thread per item
        assert threading.active_count() <= threads_before + 6
    finally:
        release.set()
        stop.set()
        th.join(10)
    assert took < 5, f"the envelope waited for the stuck handler ({took:.1f}s)"
    assert [got[c].state for c in ids] == [FiredState.SUCCEEDED, FiredState.TIMED_OUT, FiredState.SUCCEEDED]
    assert "timed out after 0.1s" in got[ids[1]].message
    # the stuck handler's late return changes nothing: exactly three results went out. Its
    # thread is not joined by the stop, so the return is waited for, not slept for
    until(lambda: bool(late), 10, every_s=0.01)
    assert late == [1] and results.receive(10, timedelta(milliseconds=50)) == []
    ex.close()


def test_a_timed_out_item_is_retried_with_backoff() -> None:
    clock = SystemClock()  # run() waits on the bus in real time
    bus = InProcessBus(clock)
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    # concurrency 2: the overrun first attempt still holds one place (it cannot be
    # killed), the retry runs in the other (with 1 it waits for the first to return)
    ex = Executor(bus, "d", clock=clock, concurrency=2, retry_backoff=timedelta(milliseconds=5))
    release = threading.Event()
    attempts: list[int] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        attempts.append(ctx.attempt)
        if ctx.attempt == 0:
            release.wait(10)

    (cid,) = _publish_envelope(bus, 1, timeout=timedelta(milliseconds=50), max_retry=1)
    stop, th = _running(ex)
    try:
        got, _ = _collect(results, 1)
    finally:
        release.set()
        stop.set()
        th.join(10)
    assert got[cid].state is FiredState.SUCCEEDED and got[cid].attempt == 1
    assert attempts[:2] == [0, 1]
    ex.close()


def test_compact_results_off_writes_the_per_item_form(clock: ManualClock) -> None:
    bus = InProcessBus(clock)
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock, compact_results=False)
    ex.handler()(lambda ctx: None)
    _publish_envelope(bus, 3)
    ex.poll_once(timeout=timedelta(0))
    (r,) = results.receive(10, timedelta(0))
    body = json.loads(r.message.payload)
    assert "e" not in body and len(body["r"]) == 3


# --- the callback consumer -------------------------------------------------------------


def _page_setup(tmp_path: Path, clock: ManualClock):  # type: ignore[no-untyped-def]
    h = make_harness(tmp_path, clock)
    job = h.job("fan", shard_total=4, envelope_size=4)
    t = h.once(job, 0)
    core = h.core(page_records=True)
    consumer = h.results(core)
    core.tick_all()
    h.delivered("biz-a")  # the command itself is not needed: results are crafted below
    ms = round(t.next_fire_at.timestamp() * 1000)
    page = command_id(stored_id(t), ms, 0)

    def send(letters: str, exceptions: list[tuple[int, int, str]] | None = None, n: int = 4) -> int:
        res = EnvelopeResult(
            trigger_id=stored_id(t),
            scheduled_ms=ms,
            page_id=page,
            indices=range(n),
            letters=letters,
            received_ms=ms + 1,
            started_ms=ms + 2,
            finished_ms=ms + 3,
            exceptions=exceptions or [],
        )
        h.bus.publish([BusMessage(CALLBACK_TOPIC, encode_envelope_results([res]))])
        return consumer.poll(timeout=timedelta(0))

    def record():  # type: ignore[no-untyped-def]
        return h.store.get_fired([page])[page]

    return send, record


def test_a_duplicate_page_result_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    send, record = _page_setup(tmp_path, clock)
    assert send("SSFS", [(2, 0, "bad item")]) == 1
    first = record()
    assert first.state is FiredState.FAILED and first.item_states == "SSFS" and first.failed_items == 1
    assert send("SSFS", [(2, 0, "bad item")]) == 0
    assert record() == first


def test_a_partial_page_result_leaves_the_record_open_until_the_rest(tmp_path: Path, clock: ManualClock) -> None:
    send, record = _page_setup(tmp_path, clock)
    assert send("SS", n=2) == 1  # half the items (e.g. a re-fire cut differently): not final
    partial = record()
    assert partial.state is FiredState.RECEIVED and partial.result_at is None and partial.item_states == "SS"
    assert send("SS", n=2) == 0  # the same partial again
    assert send("SSSS") == 1
    assert record().state is FiredState.SUCCEEDED and record().succeeded_items == 4


def test_a_late_older_page_result_does_not_undo_a_later_attempt(tmp_path: Path, clock: ManualClock) -> None:
    send, record = _page_setup(tmp_path, clock)
    assert send("SSSS", [(k, 1, "") for k in range(4)]) == 1  # the retried run, attempt 1
    final = record()
    assert final.state is FiredState.SUCCEEDED and final.attempt == 1
    assert send("FFFF", [(k, 0, "first try failed") for k in range(4)]) == 0  # the late first run
    assert record() == final


def test_results_the_store_could_not_apply_come_back_to_the_consumer(tmp_path: Path, clock: ManualClock) -> None:
    """The store down while a batch of results is applied: the batch is handed back to the
    bus, and the same consumer applies it once the store answers. Left unacked and not
    nacked, the messages stayed with this consumer until its process ended (Pulsar has no
    ack timeout here): the run had happened, its record stayed pending (soak, seed 23)."""
    h = make_harness(tmp_path, clock)
    job = h.job("fan", shard_total=1)
    t = h.once(job, 0)
    core = h.core()
    consumer = h.results(core)
    h.listen(job.biz_code)
    core.tick_all()
    clock.advance(timedelta(seconds=1))  # to its fire time: its command is delivered
    (cmd,) = h.delivered(job.biz_code)
    real = h.store.update_fired
    calls = {"n": 0}

    def down_once(updates):  # type: ignore[no-untyped-def]
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailable("the database restarts")
        return real(updates)

    h.store.update_fired = down_once  # type: ignore[method-assign]
    done = FiredUpdate(cmd.command_id, FiredState.SUCCEEDED, at=clock.now())
    h.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([done]))])
    with pytest.raises(StoreUnavailable):
        consumer.poll(timeout=timedelta(0))
    clock.advance(timedelta(seconds=5))  # past the bus's redelivery delay
    assert consumer.poll(timeout=timedelta(0)) == 1
    assert h.store.get_fired([cmd.command_id])[cmd.command_id].state is FiredState.SUCCEEDED
    assert cmd.trigger_id == stored_id(t)


@pytest.mark.parametrize("lifted", [True, False], ids=["lifted", "standing"])
def test_a_skip_under_a_stop_the_store_has_lifted_is_published_again_not_recorded(
    tmp_path: Path, clock: ManualClock, lifted: bool
) -> None:
    """An executor skips a run under a freeze whose lift it has not heard (the lift's
    message and the commands travel on different topics: after a broker restart the
    commands came first, and three runs after an unfreeze were recorded skipped as frozen
    in the chaos soak, seed 23). The store no longer covers the run: the skip is not
    recorded and the command is published again, same command id. Under a standing stop
    the skip is the stop's: recorded, nothing published."""
    h = make_harness(tmp_path, clock)
    job = h.job("fan", shard_total=1)
    h.once(job, 0)
    core = h.core()
    stops = SqlStops(h.store)
    consumer = ResultConsumer(h.bus, h.store, core.metrics, clock=clock, settings=core.settings, stops=stops)
    h.listen(job.biz_code)
    core.tick_all()
    clock.advance(timedelta(seconds=1))  # to its fire time: its command is delivered
    (cmd,) = h.delivered(job.biz_code)
    at = to_ms(cmd.scheduled_at)
    window = SkipWindow(at - 60_000, None, Cause.FREEZE, actor="ops")
    stops.open_window(Scope.BUSINESS, job.biz_code, window)
    if lifted:  # unfrozen before the run's time: the run is due again
        stops.close_window(Scope.BUSINESS, job.biz_code, at - 1_000, (Cause.FREEZE,))
    skipped = FiredUpdate(cmd.command_id, FiredState.SKIPPED, at=clock.now(), message=window.message)
    h.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results([skipped]))])
    consumer.poll(timeout=timedelta(0))
    record = h.store.get_fired([cmd.command_id])[cmd.command_id]
    assert h.delivered(job.biz_code) == []  # a second later: time for the lift to reach the executor
    clock.advance(timedelta(seconds=1))
    again = h.delivered(job.biz_code)
    if lifted:
        assert record.state is not FiredState.SKIPPED, "a skip the store's stops do not back was recorded"
        assert [c.command_id for c in again] == [cmd.command_id] and consumer.republished == 1
    else:
        assert record.state is FiredState.SKIPPED and record.message == window.message
        assert again == [] and consumer.republished == 0
