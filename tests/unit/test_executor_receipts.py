"""Issue 17: a run still executing is stamped received when it outlasts a short threshold,
so its fired record says an executor has it (the dual-run comparator had called such a run
"late, not received by an executor"); the final result still moves the record forward and
keeps the receipt time. A quick run costs no extra message."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import SystemClock
from scheduler_core.codec import EnvelopeResult, command_topic, encode_commands
from scheduler_core.executor import Executor
from scheduler_core.executor.outbox import result_messages
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, ExecutionCommand, FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.waiting import stays

UTC = timezone.utc


def _store(tmp_path: Path, clock: SystemClock) -> SqlTriggerStore:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    init_schema(engine, 4)
    return SqlTriggerStore(engine, clock)


def _fire(bus: InProcessBus, store: SqlTriggerStore, at: datetime, items: int = 1) -> list[CommandId]:
    """Published commands of one fire (records first, as the scheduler does)."""
    cmds = [
        ExecutionCommand(
            command_id=CommandId(command_id(9, at, i)),
            trigger_id=TriggerId(9),
            job_code=JobCode("j"),
            biz_code="d",
            handler="h",
            scheduled_at=at,
            item_index=i,
            item_total=items,
            timeout=timedelta(seconds=30),
        )
        for i in range(items)
    ]
    store.put_fired(
        [
            FiredRecord(
                command_id=c.command_id,
                trigger_id=c.trigger_id,
                job_code=c.job_code,
                biz_code="d",
                scheduled_at=at,
                item_index=c.item_index,
                item_total=items,
                state=FiredState.PENDING,  # as a fire leaves it (FiredState)
            )
            for c in cmds
        ]
    )
    bus.publish([BusMessage(command_topic("d"), encode_commands(cmds))])
    return [c.command_id for c in cmds]


def _until(
    consumer: ResultConsumer,
    store: SqlTriggerStore,
    cid: CommandId,
    ok: Callable[[FiredRecord], bool],
    within_s: float = 20.0,
) -> FiredRecord:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        consumer.poll(timeout=timedelta(milliseconds=50))
        rec = store.get_fired([cid])[cid]
        if ok(rec):
            return rec
    raise AssertionError(f"record {cid} never reached the state: {store.get_fired([cid])[cid]}")


def test_a_run_still_executing_is_stamped_received_and_then_finishes(tmp_path: Path) -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    store = _store(tmp_path, clock)
    metrics = SchedulerMetrics()
    consumer = ResultConsumer(bus, store, metrics)
    ex = Executor(bus, "d", clock=clock, concurrency=2, receipt_after=timedelta(milliseconds=100))
    release = threading.Event()
    ex.handler()(lambda ctx: release.wait(20) and None)
    (cid,) = _fire(bus, store, clock.now())
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    try:
        running = _until(consumer, store, cid, lambda r: r.received_at is not None)
        # still running: received, no result yet
        assert running.state is FiredState.RECEIVED and running.result_at is None
        assert running.started_at == running.received_at
        assert ex.receipts is not None and ex.receipts.stamped == 1
        release.set()
        done = _until(consumer, store, cid, lambda r: r.state is FiredState.SUCCEEDED)
    finally:
        release.set()
        stop.set()
        th.join(10)
        ex.close()
    assert done.received_at == running.received_at and done.result_at is not None
    assert ex.receipts.stamped == 1  # once per run
    # the run's receipt lag is observed once, with its result, not again for its stamp
    lag = metrics.registry.get_sample_value("switchyard_fire_lag_seconds_count", {"biz_code": "", "stage": "received"})
    assert lag == 1


def test_a_quick_run_sends_no_stamp(tmp_path: Path) -> None:
    clock = SystemClock()
    bus = InProcessBus(clock)
    store = _store(tmp_path, clock)
    consumer = ResultConsumer(bus, store, SchedulerMetrics())
    ex = Executor(bus, "d", clock=clock, concurrency=2, receipt_after=timedelta(milliseconds=500))
    ex.handler()(lambda ctx: None)
    ids = _fire(bus, store, clock.now(), items=3)
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    try:
        for cid in ids:
            _until(consumer, store, cid, lambda r: r.state is FiredState.SUCCEEDED)
        # past the threshold (500 ms): a finished run is no longer open, nothing to stamp
        assert ex.receipts is not None
        assert stays(lambda: ex.receipts is not None and ex.receipts.stamped == 0, 0.6)
    finally:
        stop.set()
        th.join(10)
        ex.close()


def test_a_stamp_after_the_final_result_changes_nothing(tmp_path: Path) -> None:
    """Forward-only by command id: a receipt stamp replayed after the result (a redelivery)
    neither moves the state back nor the receipt time."""
    clock = SystemClock()
    bus = InProcessBus(clock)
    store = _store(tmp_path, clock)
    consumer = ResultConsumer(bus, store, SchedulerMetrics())
    ex = Executor(bus, "d", clock=clock, concurrency=1, receipt_after=timedelta(milliseconds=100))
    gate = threading.Event()
    ex.handler()(lambda ctx: gate.wait(20) and None)
    (cid,) = _fire(bus, store, clock.now())
    stop = threading.Event()
    th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    th.start()
    try:
        first = _until(consumer, store, cid, lambda r: r.received_at is not None)
        gate.set()
        done = _until(consumer, store, cid, lambda r: r.state is FiredState.SUCCEEDED)
        assert ex.receipts is not None
        env_stamp = ex.receipts  # replay: the stamp once more after the result, as a redelivery would
        assert first.received_at is not None
        bus.publish(
            result_messages(
                [
                    EnvelopeResult(
                        trigger_id=9,
                        scheduled_ms=round(done.scheduled_at.timestamp() * 1000),
                        page_id=None,
                        indices=[0],
                        letters="R",
                        received_ms=round(first.received_at.timestamp() * 1000) + 5000,
                        started_ms=None,
                        finished_ms=0,
                    )
                ],
                True,
            )
        )
        consumer.poll(timeout=timedelta(milliseconds=200))
        after = store.get_fired([cid])[cid]
        assert env_stamp.stamped == 1
        assert after.state is FiredState.SUCCEEDED and after.received_at == first.received_at
    finally:
        gate.set()
        stop.set()
        th.join(10)
        ex.close()
