"""A handler's own log lines (issue 28, xxl-job's rolling log): what it logs through
`ctx.log` or its own loggers while it runs is kept per item and attempt, capped at 64 KiB
with a marker, and travels with the result in both wire forms; the SDK's own records,
records of other threads and lines logged after the run are not the run's."""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_results, encode_commands
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.executor.run_logs import MAX_RUN_BYTES
from scheduler_core.model import CommandId, ExecutionCommand, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.times import from_ms

T_MS = 1_796_000_000_000


def _publish(bus: InProcessBus, n: int, *, max_retry: int = 0) -> list[CommandId]:
    t = from_ms(T_MS)
    cmds = [
        ExecutionCommand(
            command_id=command_id(4, t, i),
            trigger_id=TriggerId(4),
            job_code=JobCode("nightly"),
            biz_code="d",
            handler="h",
            scheduled_at=t,
            item_index=i,
            item_total=n,
            max_retry=max_retry,
        )
        for i in range(n)
    ]
    bus.publish([BusMessage(command_topic("d"), encode_commands(cmds, page_record=n > 1))])
    return [c.command_id for c in cmds]


def _results(bus: InProcessBus, ex: Executor, sub: object) -> dict[CommandId, FiredUpdate]:
    ex.poll_once(timeout=timedelta(0))
    got: dict[CommandId, FiredUpdate] = {}
    for r in sub.receive(100, timedelta(0)):  # type: ignore[attr-defined]
        for u in decode_results(r.message.payload):
            got[u.command_id] = u
    return got


def test_lines_of_each_item_and_attempt_travel_with_the_result(clock: ManualClock) -> None:
    bus = InProcessBus(clock)
    sub = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock, retry_backoff=timedelta(milliseconds=1))
    own = logging.getLogger("myapp.billing")
    own.setLevel(logging.INFO)
    sdk_own = logging.getLogger("scheduler_core.executor.test")

    def handler(ctx: ExecutionContext) -> None:
        ctx.log.info("item %s attempt %s starts", ctx.item_index, ctx.attempt)
        own.warning("own logger says %s", ctx.item_param or "hi")
        sdk_own.warning("the SDK's own line")
        if ctx.item_index == 1 and ctx.attempt == 0:
            raise RuntimeError("first try fails")

    ex.handler()(handler)
    ids = _publish(bus, 3, max_retry=1)
    got = _results(bus, ex, sub)
    assert set(got) == set(ids)
    by_item = {u.command_id: u.logs for u in got.values()}
    first = by_item[ids[0]]
    assert [(a, cut) for a, _text, cut in first] == [(0, False)]
    text = first[0][1]
    assert "INFO handler.nightly" in text and "item 0 attempt 0 starts" in text
    assert "WARNING myapp.billing" in text and "own logger says hi" in text
    assert "the SDK's own line" not in text
    # item 1 ran twice: each attempt's lines kept apart
    assert [a for a, _t, _c in by_item[ids[1]]] == [0, 1]
    assert "attempt 1 starts" in by_item[ids[1]][1][1] and "attempt 1" not in by_item[ids[1]][0][1]
    ex.close()


def test_a_run_logging_past_the_cap_is_truncated_with_a_marker(clock: ManualClock) -> None:
    bus = InProcessBus(clock)
    sub = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock, compact_results=False)  # the per-item wire form too

    def chatty(ctx: ExecutionContext) -> None:
        for i in range(2000):
            ctx.log.info("line %05d %s", i, "x" * 60)

    ex.handler()(chatty)
    (cid,) = _publish(bus, 1)
    ((attempt, text, cut),) = _results(bus, ex, sub)[cid].logs
    assert attempt == 0 and cut
    kept, marker = text.rsplit("\n", 1)
    assert len(kept.encode()) <= MAX_RUN_BYTES < len(kept.encode()) + 200
    assert marker.startswith("... [truncated: ") and "dropped" in marker
    assert "line 00000" in kept and "line 01999" not in kept
    ex.close()


def test_lines_of_other_threads_and_after_the_run_are_not_the_runs(clock: ManualClock) -> None:
    bus = InProcessBus(clock)
    sub = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", clock=clock)
    elsewhere = logging.getLogger("myapp.other")

    def handler(ctx: ExecutionContext) -> None:
        th = threading.Thread(target=lambda: elsewhere.warning("from another thread"))
        th.start()
        th.join()
        ctx.log.info("mine")

    ex.handler()(handler)
    (cid,) = _publish(bus, 1)
    ((_a, text, _c),) = _results(bus, ex, sub)[cid].logs
    assert "mine" in text and "another thread" not in text
    elsewhere.warning("after the run, on the same thread")  # not kept for anyone
    (cid2,) = [c for c in _publish(bus, 1)]
    assert cid2 == cid  # the same command again: answered from memory, no handler call, no lines
    assert _results(bus, ex, sub)[cid].logs == ()
    ex.close()
