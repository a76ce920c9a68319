"""Block strategy serial (`model.Block.SERIAL`, xxl-job's SERIAL_EXECUTION): while an
earlier run of a job is in work in an executor process, a later one waits in that
process's queue for the job (per sharding item) and runs after it, in arrival order,
holding no worker and no quota step meanwhile; a stop or a kill answers a queued run at
once, never invoked; a full queue answers the run failed; a stopping executor hands its
queued runs back to the bus."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from migrator.mapping import Mapped, map_definition
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_message, encode_packed, envelope_body
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.jobspec import JobInputError, parse_block
from scheduler_core.kills import Kill, encode_kill
from scheduler_core.model import Block, CommandId, Epoch, ExecutionCommand, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage
from scheduler_core.stops import MESSAGE_PREFIX, Cause, Scope, SkipWindow, Stop, encode_stop
from scheduler_core.times import from_ms
from switchyard import exitcodes
from switchyard.cli import cli
from tests.legacy_rows import xxl_bean_row
from tests.unit.test_executor_packs import _collect, _Running
from tests.waiting import until

T1 = 1_700_000_000_000
STEP = 60_000
WAIT_S = 10.0


def _publish(
    bus: InProcessBus, scheduled_ms: int, *, job: str = "j", block: Block = Block.SERIAL, item0: int = 0, items: int = 1
) -> list[CommandId]:
    t = from_ms(scheduled_ms)
    tid = 1 if job == "j" else 2
    run = ExecutionCommand(
        command_id=command_id(tid, t, item0),
        trigger_id=TriggerId(tid),
        job_code=JobCode(job),
        biz_code="d",
        handler="h",
        scheduled_at=t,
        item_total=2,
        epoch=Epoch(1),
        timeout=timedelta(0),
        block=block,
    )
    idx = [(i, "") for i in range(item0, item0 + items)]
    bus.publish([BusMessage(command_topic("d"), encode_packed([envelope_body(run, idx)]), key=str(scheduled_ms))])
    return [command_id(tid, t, i) for i, _p in idx]


class _Job:
    """Job j's handler: its run at T1 (item 0) holds until let go; records the order runs
    started in and the most of j's handlers ever in work at once (per item)."""

    def __init__(self, ex: Executor) -> None:
        self.first_in = threading.Event()
        self.release = threading.Event()
        self.started: list[tuple[int, int]] = []  # (T ms, item) in start order
        self.others: list[int] = []  # runs of the other job
        self.in_work: dict[int, int] = {}
        self.most: dict[int, int] = {}
        self._lock = threading.Lock()
        ex.handler()(self.handle)

    def handle(self, ctx: ExecutionContext) -> None:
        ms = int(ctx.scheduled_at.timestamp() * 1000)
        if ctx.job_code != "j":
            with self._lock:
                self.others.append(ms)
            return
        item = ctx.item_index
        with self._lock:
            self.started.append((ms, item))
            self.in_work[item] = self.in_work.get(item, 0) + 1
            self.most[item] = max(self.most.get(item, 0), self.in_work[item])
        try:
            if ms == T1 and item == 0:
                self.first_in.set()
                assert self.release.wait(WAIT_S)
            else:
                time.sleep(0.02)  # long enough that a run beside it would be seen
        finally:
            with self._lock:
                self.in_work[item] -= 1


def _executor(**kw: object) -> tuple[InProcessBus, Executor, object]:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", concurrency=2, **{"receipt_after": None, **kw})  # type: ignore[arg-type]
    return bus, ex, results


def test_serial_runs_a_jobs_runs_one_after_another_in_arrival_order_without_holding_the_quota() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        later = [_publish(bus, T1 + k * STEP)[0] for k in (3, 1, 2)]  # arrival order, not fire-time order
        # 3 runs wait, in no worker and no quota step: the business's other job still runs
        # (concurrency 2: one step is the first run's)
        (other,) = _publish(bus, T1, job="k", block=Block.CONCURRENT)
        got_other = _collect(results, 1)
        assert ex.queued == 3
        assert job.started == [(T1, 0)]  # none of them started beside the first
        job.release.set()
        got = _collect(results, 4)
    ex.close()
    assert got_other[other].state is FiredState.SUCCEEDED
    assert {got[c].state for c in [a, *later]} == {FiredState.SUCCEEDED}
    assert job.started == [(T1, 0), (T1 + 3 * STEP, 0), (T1 + STEP, 0), (T1 + 2 * STEP, 0)]
    assert job.most == {0: 1}
    # a queued run's start is when it left the queue: after the first run's result
    first_done = got[a].at
    assert all((s := got[c].started_at) is not None and s >= first_done for c in later)


def test_copies_of_queued_runs_hold_no_quota_step_while_they_wait() -> None:
    """A broker's redelivery after a restart hands over a copy of every run taken here and
    not yet answered: the run in work and every run queued behind it. Each copy waits for
    its first copy (answered from memory, never invoked twice) holding no quota step, so
    the business's other jobs still run. Parked in their steps, two such copies stopped
    the executor taking anything for minutes (the chaos soak, seed 23: a whole business
    pending behind one slow serial job's 75 queued runs after a Pulsar restart)."""
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        queued = [_publish(bus, T1 + k * STEP)[0] for k in (1, 2, 3)]
        assert until(lambda: ex.queued == 3, WAIT_S, 0.01)
        for k in (0, 1, 2, 3):  # the same messages again: the broker's redelivery
            _publish(bus, T1 + k * STEP)
        assert until(lambda: ex.waited == 4, WAIT_S, 0.01)
        (other,) = _publish(bus, T1, job="k", block=Block.CONCURRENT)
        got_other = _collect(results, 1)
        assert other in got_other, "the copies held every quota step: the business's other job did not run"
        assert job.started == [(T1, 0)]
        job.release.set()
        got = _collect(results, 4)
    ex.close()
    assert got_other[other].state is FiredState.SUCCEEDED
    assert {got[c].state for c in [a, *queued]} == {FiredState.SUCCEEDED}
    assert job.started == [(T1 + k * STEP, 0) for k in (0, 1, 2, 3)]  # each once, in order
    assert ex.duplicates == 4  # the copies, answered from memory


def test_serial_is_per_sharding_item() -> None:
    """A later run's item 1 runs beside the earlier run's item 0; its item 0 waits."""
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1)  # item 0 of T1, holding
        assert job.first_in.wait(WAIT_S)
        (b1,) = _publish(bus, T1 + STEP, item0=1)
        got_b1 = _collect(results, 1)
        (b0,) = _publish(bus, T1 + STEP, item0=0)
        assert not _collect(results, 1, within_s=0.3)  # it waits
        job.release.set()
        got = _collect(results, 2)
    ex.close()
    assert got_b1[b1].state is FiredState.SUCCEEDED
    assert got[a].state is got[b0].state is FiredState.SUCCEEDED
    assert job.started == [(T1, 0), (T1 + STEP, 1), (T1 + STEP, 0)]


def test_a_full_queue_answers_the_run_failed_never_invoked() -> None:
    bus, ex, results = _executor(serial_queue=2)
    job = _Job(ex)
    with _Running(ex):
        _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        queued = [_publish(bus, T1 + k * STEP)[0] for k in (1, 2)]
        (refused,) = _publish(bus, T1 + 3 * STEP)
        got_refused = _collect(results, 1)
        job.release.set()
        got = _collect(results, 3)
    ex.close()
    assert got_refused[refused].state is FiredState.FAILED
    message = got_refused[refused].message
    assert "block strategy serial: not run, 2 run(s) of j already wait" in message and "holds 2" in message
    assert {got[c].state for c in queued} == {FiredState.SUCCEEDED}
    assert [ms for ms, _i in job.started] == [T1, T1 + STEP, T1 + 2 * STEP]  # the refused one never ran
    assert ex.queue_full == 1


def test_a_stop_skips_the_queued_runs_at_once() -> None:
    """A stop of the job from the second run on: the queued runs are answered skipped, with
    the stop's message, while the first still runs; it then finishes as usual."""
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        queued = [_publish(bus, T1 + k * STEP)[0] for k in (1, 2)]
        assert until(lambda: ex.queued == 2, WAIT_S, 0.01)  # the stop comes while they wait
        stop = Stop(Scope.JOB, "j", (SkipWindow(T1 + STEP, None, Cause.PAUSE, actor="ops"),), epoch=1)
        bus.publish_control("d", encode_stop(stop))
        skipped = _collect(results, 2)  # while the first still holds: not at their turn
        job.release.set()
        got_a = _collect(results, 1)
    ex.close()
    assert {skipped[c].state for c in queued} == {FiredState.SKIPPED}
    assert all(skipped[c].message.startswith(MESSAGE_PREFIX) for c in queued)
    assert got_a[a].state is FiredState.SUCCEEDED
    assert job.started == [(T1, 0)]


def test_a_kill_of_a_queued_run_answers_it_killed_before_it_started() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    with _Running(ex):
        (a,) = _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        (b,) = _publish(bus, T1 + STEP)
        (c,) = _publish(bus, T1 + 2 * STEP)
        assert until(lambda: ex.queued == 2, WAIT_S, 0.01)  # a kill covers the runs taken here
        kill = Kill(1, "d", b, None, SystemClock().now_ms(), "ops")
        bus.publish_control("d", encode_kill(kill))
        got_b = _collect(results, 1)
        job.release.set()
        got = _collect(results, 2)
    ex.close()
    assert got_b[b].state is FiredState.KILLED and "before it started" in got_b[b].message
    assert got[a].state is got[c].state is FiredState.SUCCEEDED
    assert job.started == [(T1, 0), (T1 + 2 * STEP, 0)]


def test_a_stopping_executor_hands_its_queued_runs_back_to_the_bus() -> None:
    bus, ex, results = _executor()
    job = _Job(ex)
    running = _Running(ex).__enter__()
    (a,) = _publish(bus, T1)
    assert job.first_in.wait(WAIT_S)
    (b,) = _publish(bus, T1 + STEP)
    assert until(lambda: ex.queued == 1, WAIT_S, 0.01)  # taken and queued
    running.stop.set()
    assert until(lambda: not ex._waiting, WAIT_S, 0.01)  # handed back while the first still runs
    job.release.set()
    running.thread.join(WAIT_S)
    assert not running.thread.is_alive()
    got = _collect(results, 2, within_s=1.0)
    ex.close()
    assert set(got) == {a}, "a queued run was answered instead of handed back"
    # redelivered: the next executor runs it
    nxt = Executor(bus, "d", concurrency=2, receipt_after=None)
    done = threading.Event()
    nxt.handler()(lambda ctx: done.set())
    with _Running(nxt):
        again = _collect(results, 1)
    nxt.close()
    assert again[b].state is FiredState.SUCCEEDED and done.is_set()


def test_serial_is_a_strategy_by_name_and_travels_in_the_envelope() -> None:
    assert parse_block(" Serial ") is Block.SERIAL
    try:
        parse_block("serial_execution")
    except JobInputError as exc:
        assert exc.field == "block" and "serial" in str(exc)
    else:
        raise AssertionError("an unknown strategy was accepted")
    t = from_ms(T1)
    run = ExecutionCommand(
        command_id=command_id(1, t, 0),
        trigger_id=TriggerId(1),
        job_code=JobCode("j"),
        biz_code="d",
        handler="h",
        scheduled_at=t,
        block=Block.SERIAL,
    )
    assert decode_message(encode_packed([envelope_body(run, [(0, "")])]))[0].block is Block.SERIAL


@pytest.mark.parametrize(
    ("legacy", "block"),
    [
        ("SERIAL_EXECUTION", Block.SERIAL),
        (None, Block.SERIAL),  # xxl-job's default for none (and an unknown one)
        ("serial_execution ", Block.SERIAL),
        ("DISCARD_LATER", Block.CONCURRENT),  # left to the legacy executor, as before
        ("COVER_EARLY", Block.CONCURRENT),
    ],
)
def test_the_migrator_maps_xxl_jobs_serial_execution_to_serial(legacy: str | None, block: Block) -> None:
    defn = xxl_bean_row("0 0 12 * * ?", raw={"executor_block_strategy": legacy, "glue_type": "BEAN"})
    mapped = map_definition(defn, None, datetime(2026, 12, 2, 6, 0, tzinfo=UTC), active=True)
    assert isinstance(mapped, Mapped), mapped
    assert mapped.job.block is block
    assert json.loads(mapped.job.params)["block_strategy"] == legacy  # still sent to the legacy executor


def test_job_add_and_edit_take_serial_and_name_the_field_on_a_bad_one(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["db", "init", "--url", url]).exit_code == 0

    def sy(*args: str) -> tuple[int, str]:
        res = runner.invoke(cli, [*args, "--url", url, "--json"])
        return res.exit_code, res.output

    code, out = sy("job", "add", "billing:slow", "--handler", "h", "--every", "1m", "--block", "serial")
    assert code == 0 and json.loads(out)["block"] == "serial", out
    code, out = sy("job", "edit", "billing:slow", "--block", "cover_early")
    assert code == 0 and json.loads(out)["block"] == "cover_early", out
    code, out = sy("job", "edit", "billing:slow", "--block", "serial_execution")
    assert code == exitcodes.USAGE and "block: unknown block strategy 'serial_execution'" in out, out
    assert "serial" in out.split("one of", 1)[1]
    code, out = sy("job", "show", "billing:slow")
    assert json.loads(out)["block"] == "cover_early"  # nothing half-written


def test_a_handler_past_its_timeout_holds_the_next_run_until_it_returns() -> None:
    """The overrunning run is recorded timed out at its timeout; the job's next run still
    waits for its handler to return (it cannot be stopped), never two at once."""
    bus, ex, results = _executor()
    returned = threading.Event()
    let_go = threading.Event()
    started: list[int] = []

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        started.append(int(ctx.scheduled_at.timestamp() * 1000))
        if len(started) == 1:
            let_go.wait(WAIT_S)  # ignores its timeout
            returned.set()

    for ms in (T1, T1 + STEP):
        t = from_ms(ms)
        run = ExecutionCommand(
            command_id=command_id(1, t, 0),
            trigger_id=TriggerId(1),
            job_code=JobCode("j"),
            biz_code="d",
            handler="h",
            scheduled_at=t,
            epoch=Epoch(1),
            timeout=timedelta(milliseconds=200),
            block=Block.SERIAL,
        )
        bus.publish([BusMessage(command_topic("d"), encode_packed([envelope_body(run, [(0, "")])]), key=str(ms))])
    a, b = command_id(1, from_ms(T1), 0), command_id(1, from_ms(T1 + STEP), 0)
    with _Running(ex):
        got_a = _collect(results, 1)
        assert got_a[a].state is FiredState.TIMED_OUT
        assert not _collect(results, 1, within_s=0.5)  # b waits for a's handler
        assert started == [T1]
        let_go.set()
        got_b = _collect(results, 1)
    ex.close()
    assert returned.is_set() and started == [T1, T1 + STEP]
    assert got_b[b].state is FiredState.SUCCEEDED


def test_a_queued_run_is_stamped_received_not_started() -> None:
    bus, ex, results = _executor(receipt_after=timedelta(milliseconds=100))
    job = _Job(ex)
    with _Running(ex):
        _publish(bus, T1)
        assert job.first_in.wait(WAIT_S)
        (b,) = _publish(bus, T1 + STEP)
        stamp = _collect(results, 2)  # both stamped: the first started, the queued one not
        job.release.set()
        done = _collect(results, 2)
    ex.close()
    assert stamp[b].state is FiredState.RECEIVED and stamp[b].received_at is not None
    assert stamp[b].started_at is None
    assert done[b].state is FiredState.SUCCEEDED and done[b].started_at is not None
