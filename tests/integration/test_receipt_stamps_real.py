"""Issue 17 on the real servers (Pulsar, MariaDB): a run still executing is stamped received
on the callback topic once it outlasts the threshold, the result consumer writes the receipt
to its fired record (state received, no result yet), and the final result later moves the
record forward keeping that receipt time. A comparator reading the record in between sees an
executor has it (running), not "late, not received"."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import SystemClock
from scheduler_core.codec import command_topic, encode_commands
from scheduler_core.executor import Executor
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import CommandId, ExecutionCommand, FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage
from tests.backends import message_bus, sql_store

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]


def test_a_long_run_is_stamped_received_through_pulsar_into_mariadb(tmp_path: Path) -> None:
    clock = SystemClock()
    with sql_store("mariadb", tmp_path, clock) as store, message_bus("pulsar") as bus:
        consumer = ResultConsumer(bus, store, SchedulerMetrics())
        ex = Executor(bus, "reminder", clock=clock, concurrency=2, receipt_after=timedelta(milliseconds=300))
        release = threading.Event()
        ex.handler()(lambda ctx: release.wait(60) and None)
        at = clock.now()
        cid = CommandId(command_id(5, at, 0))
        store.put_fired(
            [
                FiredRecord(
                    command_id=cid,
                    trigger_id=TriggerId(5),
                    job_code=JobCode("j"),
                    biz_code="reminder",
                    scheduled_at=at,
                    state=FiredState.PENDING,  # as a fire leaves it (FiredState)
                )
            ]
        )
        stop = threading.Event()
        th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
        th.start()
        try:
            bus.publish(
                [
                    BusMessage(
                        command_topic("reminder"),
                        encode_commands(
                            [
                                ExecutionCommand(
                                    command_id=cid,
                                    trigger_id=TriggerId(5),
                                    job_code=JobCode("j"),
                                    biz_code="reminder",
                                    handler="h",
                                    scheduled_at=at,
                                    timeout=timedelta(seconds=60),
                                )
                            ]
                        ),
                    )
                ]
            )
            end = time.monotonic() + 60
            while time.monotonic() < end and store.get_fired([cid])[cid].received_at is None:
                consumer.poll(timeout=timedelta(milliseconds=100))
            running = store.get_fired([cid])[cid]
            assert running.state is FiredState.RECEIVED and running.received_at is not None, running
            assert running.result_at is None
            release.set()
            end = time.monotonic() + 60
            while time.monotonic() < end and store.get_fired([cid])[cid].state is not FiredState.SUCCEEDED:
                consumer.poll(timeout=timedelta(milliseconds=100))
            done = store.get_fired([cid])[cid]
        finally:
            release.set()
            stop.set()
            th.join(15)
            ex.close()
            consumer.close()
        assert done.state is FiredState.SUCCEEDED and done.received_at == running.received_at
        assert ex.receipts is not None and ex.receipts.stamped == 1
