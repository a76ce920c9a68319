"""A job's block strategy (`model.Block`), applied by the executor SDK per process: while
an earlier run of the job is in work here, a later one beside it (concurrent, the
default), not run and recorded failed (discard_later), or run after the earlier one is
killed and recorded covered (cover_early). Also: how the envelope carries it."""

from __future__ import annotations

import threading
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_message, encode_packed, envelope_body
from scheduler_core.errors import SchemaError
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import (
    Block,
    CommandId,
    Epoch,
    ExecutionCommand,
    FiredState,
    Job,
    JobCode,
    TriggerId,
    command_id,
)
from scheduler_core.ports import BusMessage
from scheduler_core.store.admin import tables_for
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms
from switchyard.schema import init_schema
from tests.harness import make_harness
from tests.unit.test_executor_packs import _collect, _Running

T1 = 1_700_000_000_000
T2 = T1 + 60_000
WAIT_S = 10.0


def _publish(bus: InProcessBus, scheduled_ms: int, block: Block, *, items: int = 1, item0: int = 0) -> list[CommandId]:
    """One run of job j (trigger 1) at `scheduled_ms`: items item0.. in one envelope."""
    t = from_ms(scheduled_ms)
    run = ExecutionCommand(
        command_id=command_id(1, t, item0),
        trigger_id=TriggerId(1),
        job_code=JobCode("j"),
        biz_code="d",
        handler="h",
        scheduled_at=t,
        item_total=item0 + items,
        epoch=Epoch(1),
        timeout=timedelta(0),
        block=block,
    )
    idx = [(i, "") for i in range(item0, item0 + items)]
    bus.publish([BusMessage(command_topic("d"), encode_packed([envelope_body(run, idx)]), key=str(scheduled_ms))])
    return [command_id(1, t, i) for i, _p in idx]


class _Job:
    """A handler whose run at T1 holds until released or cancelled, and records which runs
    started while that one was still in its handler."""

    def __init__(self, ex: Executor) -> None:
        self.first_in = threading.Event()
        self.release = threading.Event()
        self.wake = threading.Event()  # the T1 run's handler returns when set
        self.ran: list[int] = []
        self.beside_first: list[int] = []  # runs that started while the T1 run was in its handler
        self.first_saw_cancel = False
        self._lock = threading.Lock()
        ex.handler()(self.handle)

    def handle(self, ctx: ExecutionContext) -> None:
        ms = int(ctx.scheduled_at.timestamp() * 1000)
        with self._lock:
            self.ran.append(ms)
            if ms != T1 and self.first_in.is_set() and not self.release.is_set():
                self.beside_first.append(ms)
        if ms == T1 and ctx.item_index == 0:
            self.first_in.set()
            # ends when released, or when cancelled (a cover): a bounded wait either way
            ctx.on_cancel(self.wake.set)
            self.wake.wait(WAIT_S)
            self.first_saw_cancel = ctx.cancelled

    def let_go(self) -> None:
        self.release.set()
        self.wake.set()


def _executor() -> tuple[InProcessBus, Executor, object]:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=4, receipt_after=None)
    return bus, ex, results


def test_concurrent_the_default_runs_a_later_run_beside_the_earlier() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1, Block.CONCURRENT)
        assert job.first_in.wait(WAIT_S)
        (b,) = _publish(bus, T2, Block.CONCURRENT)
        got_b = _collect(results, 1)  # it finishes while the first still holds
        job.let_go()
        got_a = _collect(results, 1)
    ex.close()
    assert got_b[b].state is FiredState.SUCCEEDED
    assert got_a[a].state is FiredState.SUCCEEDED
    assert job.beside_first == [T2]


def test_discard_later_fails_the_later_run_without_invoking_it() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1, Block.DISCARD_LATER)
        assert job.first_in.wait(WAIT_S)
        (b,) = _publish(bus, T2, Block.DISCARD_LATER)
        got_b = _collect(results, 1)
        job.let_go()
        got_a = _collect(results, 1)
        # once the first is out of work, a later run runs again
        (c,) = _publish(bus, T2 + 60_000, Block.DISCARD_LATER)
        got_c = _collect(results, 1)
    ex.close()
    assert got_b[b].state is FiredState.FAILED
    assert "block strategy discard_later" in got_b[b].message and "still in work" in got_b[b].message
    assert got_a[a].state is FiredState.SUCCEEDED
    assert got_c[c].state is FiredState.SUCCEEDED
    assert job.ran == [T1, T2 + 60_000]  # the discarded run never reached its handler
    assert ex.discarded == 1


def test_cover_early_kills_the_earlier_run_and_runs_the_later() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        a, a2 = _publish(bus, T1, Block.COVER_EARLY, items=2)
        assert job.first_in.wait(WAIT_S)
        (b,) = _publish(bus, T2, Block.COVER_EARLY)
        got = _collect(results, 3)
    ex.close()
    assert job.first_saw_cancel, "the earlier run's handler was not asked to stop"
    assert got[a].state is FiredState.KILLED
    assert "covered by the run of j at" in got[a].message and "cover_early" in got[a].message
    # its second item had not started: killed before it started, never invoked
    assert got[a2].state is FiredState.KILLED and "before it started" in got[a2].message
    assert got[b].state is FiredState.SUCCEEDED
    assert sorted(job.ran) == [T1, T2]
    assert ex.covered == 1


@pytest.mark.parametrize("block", [Block.DISCARD_LATER, Block.COVER_EARLY])
def test_pages_of_one_run_never_block_each_other(block: Block) -> None:
    """Two envelopes of the same run (a fan-out's pages) are one run, not a later one."""
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1, block)
        assert job.first_in.wait(WAIT_S)
        (p,) = _publish(bus, T1, block, item0=1)
        got_p = _collect(results, 1)
        job.let_go()
        got_a = _collect(results, 1)
    ex.close()
    assert got_p[p].state is FiredState.SUCCEEDED
    assert got_a[a].state is FiredState.SUCCEEDED


def test_the_envelope_carries_the_strategy_only_when_not_concurrent() -> None:
    t = from_ms(T1)
    run = ExecutionCommand(
        command_id=command_id(1, t, 0),
        trigger_id=TriggerId(1),
        job_code=JobCode("j"),
        biz_code="d",
        handler="h",
        scheduled_at=t,
    )
    plain = encode_packed([envelope_body(run, [(0, "")])])
    assert b'"bk"' not in plain  # what an older scheduler sent, byte for byte
    assert decode_message(plain)[0].block is Block.CONCURRENT
    for block in (Block.DISCARD_LATER, Block.COVER_EARLY):
        body = envelope_body(replace(run, block=block), [(0, "")])
        assert decode_message(encode_packed([body]))[0].block is block
    # a strategy this executor does not know (a newer sender's): concurrent, not dropped
    odd = envelope_body(run, [(0, "")])
    odd["bk"] = "serial_someday"
    assert decode_message(encode_packed([odd]))[0].block is Block.CONCURRENT


def test_db_init_adds_the_block_column_and_a_job_keeps_its_strategy(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    init_schema(engine, 1)
    with engine.begin() as conn:  # a store as schema version 4 left it, one job in it
        conn.execute(text("ALTER TABLE dus_job DROP COLUMN block"))
        conn.execute(text("UPDATE dus_meta SET value = '4' WHERE name = 'schema_version'"))
        conn.execute(
            text(
                "INSERT INTO dus_job (job_code, biz_code, handler, params, shard_total, timeout_ms, max_retry,"
                " priority, envelope_size, explicit_items, shadow, lane, created_at, updated_at)"
                " VALUES ('old', 'b', 'h', '', 1, 30000, 0, 5, 1, 0, 0, 'default', 0, 0)"
            )
        )
    with pytest.raises(SchemaError, match=r"version 4.*db init"):
        tables_for(engine)
    assert "dus_job.block" in init_schema(engine).upgraded
    store = SqlTriggerStore(engine, SystemClock())
    old = store.get_job(JobCode("old"))
    assert old is not None and old.block is Block.CONCURRENT
    saved = store.put_job(Job(job_code=JobCode("new"), biz_code="b", handler="h", block=Block.COVER_EARLY))
    assert saved.block is Block.COVER_EARLY
    assert store.put_job(replace(saved, block=Block.CONCURRENT)).block is Block.CONCURRENT
    with engine.connect() as conn:  # the default is stored as every row of before the column
        assert conn.execute(text("SELECT block FROM dus_job WHERE job_code = 'new'")).scalar() is None
    engine.dispose()


def test_the_fire_path_carries_each_jobs_strategy(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1, hold_within=timedelta(0))
    for code, block in (("plain", Block.CONCURRENT), ("drop", Block.DISCARD_LATER), ("cover", Block.COVER_EARLY)):
        h.once(h.job(code, biz="d", block=block), 1)
    sub = h.bus.subscribe(command_topic("d"), "test-executor")
    core = h.core()
    core.tick_all()
    core.drain()
    clock.set(clock.now() + timedelta(seconds=2))
    got = {env.job_code: env.block for r in sub.receive(100, timedelta(0)) for env in decode_message(r.message.payload)}
    assert got == {"plain": Block.CONCURRENT, "drop": Block.DISCARD_LATER, "cover": Block.COVER_EARLY}
