"""The rollback fence on the embedded default (SQLite store, in-process bus): commands of
a fenced business scheduled in [from, until) are never invoked, they are recorded as
skipped by the fence, and an executor that cannot know the fences holds its commands
instead of running or dropping them."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.callbacks import ResultConsumer
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import EnvelopeResult, decode_results, encode_envelope_results
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.executor.fences import FenceView
from scheduler_core.fence import Fence, FenceService, decode_fence, encode_fence, is_fence_skip
from scheduler_core.model import CommandId, Epoch, FiredRecord, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import ControlFeed, FiredUpdate
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.schema import init_schema
from tests.harness import Harness, make_harness, stored_id
from tests.waiting import until


def _drain(h: Harness, ex: Executor, consumer: ResultConsumer) -> None:
    while ex.poll_once(timeout=timedelta(0)):
        pass
    while consumer.poll(timeout=timedelta(0)):
        pass


def _records(h: Harness, biz: str = "biz-a") -> dict[int, FiredRecord]:
    """Fired records of the business by fire time offset (s) from the harness start."""
    recs = h.store.fired_between(biz, h.clock.now() - timedelta(days=1), h.clock.now() + timedelta(days=1))
    return {r.trigger_id: r for r in recs}


# --- the store and the service --------------------------------------------------------------


def _record(cid: str, biz: str, at: datetime, state: FiredState, trigger: int = 1) -> FiredRecord:
    return FiredRecord(
        command_id=CommandId(cid),
        trigger_id=TriggerId(trigger),
        job_code=JobCode("j"),
        biz_code=biz,
        scheduled_at=at,
        state=state,
        epoch=Epoch(1),
        published_at=at if state != FiredState.PENDING else None,
    )


def test_raising_marks_only_the_unfinished_records_at_or_after_f_of_that_business(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock)
    t0 = clock.now()
    f = t0 + timedelta(seconds=10)
    states = [
        FiredState.PENDING,
        FiredState.PUBLISHED,
        FiredState.RECEIVED,
        FiredState.SUCCEEDED,
        FiredState.FAILED,
        FiredState.TIMED_OUT,
        FiredState.SKIPPED,
    ]
    recs = []
    for i, st in enumerate(states):
        recs.append(_record(f"before-{i}", "biz-a", f - timedelta(seconds=1), st, trigger=100 + i))
        recs.append(_record(f"at-{i}", "biz-a", f, st, trigger=200 + i))
        recs.append(_record(f"other-{i}", "biz-b", f + timedelta(seconds=1), st, trigger=300 + i))
    h.store.put_fired(recs)
    service = FenceService(h.store, h.bus)

    marked = service.raise_fence("biz-a", f)

    assert marked == 3  # pending, published, received at F
    got = h.store.get_fired([r.command_id for r in recs])
    for i, st in enumerate(states):
        assert got[CommandId(f"before-{i}")].state is st, "before F: untouched"
        assert got[CommandId(f"other-{i}")].state is st, "another business: untouched"
        at = got[CommandId(f"at-{i}")]
        if st.is_final:
            assert at.state is st and not at.message, "a final record is never touched"
        else:
            assert at.state is FiredState.SKIPPED and at.message == f"rollback fence at {f.isoformat()}"
            assert is_fence_skip(at.state, at.message)
    fence = service.fence_of("biz-a")
    assert fence == Fence("biz-a", to_ms(f), None, 1)
    assert service.fence_of("biz-b") is None


def test_lifting_closes_the_fence_and_records_after_it_wait_for_their_result_again(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock)
    f, lift = clock.now(), clock.now() + timedelta(seconds=30)
    h.store.put_fired(
        [
            _record("in", "biz-a", f + timedelta(seconds=10), FiredState.PUBLISHED, 1),
            _record("after", "biz-a", lift + timedelta(seconds=10), FiredState.PUBLISHED, 2),
            _record("after-pending", "biz-a", lift, FiredState.PENDING, 3),
        ]
    )
    service = FenceService(h.store, h.bus)
    assert service.raise_fence("biz-a", f) == 3
    service.lift_fence("biz-a", lift)

    assert service.fence_of("biz-a") == Fence("biz-a", to_ms(f), to_ms(lift), 2)
    got = h.store.get_fired([CommandId("in"), CommandId("after"), CommandId("after-pending")])
    assert got[CommandId("in")].state is FiredState.SKIPPED
    assert got[CommandId("after")].state is FiredState.PUBLISHED and not got[CommandId("after")].message
    assert got[CommandId("after-pending")].state is FiredState.PENDING
    service.lift_fence("never-fenced", lift)  # nothing to lift: no row, no message
    assert service.fence_of("never-fenced") is None
    # raising again opens it from the new F, with a later epoch; the first window stands
    # beside it (a fence is a stop: its windows add up, none replaces another)
    view = FenceView(h.bus)
    service.raise_fence("biz-a", lift + timedelta(seconds=60))
    assert service.fence_of("biz-a") == Fence("biz-a", to_ms(lift + timedelta(seconds=60)), None, 3)
    assert view.covering("biz-a", to_ms(f + timedelta(seconds=10))) is not None, "the first window still holds"
    assert view.covering("biz-a", to_ms(lift + timedelta(seconds=10))) is None, "between the windows: runs"


def test_a_provisional_skip_gives_way_to_what_really_ran_but_a_final_skip_stays(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock)
    at = clock.now()
    h.store.put_fired(
        [
            _record(command_id(1, at, 0), "biz-a", at, FiredState.PUBLISHED, 1),
            _record(command_id(2, at, 0), "biz-a", at, FiredState.PUBLISHED, 2),
        ]
    )
    FenceService(h.store, h.bus).raise_fence("biz-a", at)
    # trigger 1 ran before the fence reached its executor; trigger 2 was answered skipped
    h.store.update_fired(
        [
            FiredUpdate(CommandId(command_id(1, at, 0)), FiredState.SUCCEEDED, at),
            FiredUpdate(
                CommandId(command_id(2, at, 0)), FiredState.SKIPPED, at, message=f"rollback fence at {at.isoformat()}"
            ),
        ]
    )
    h.store.update_fired([FiredUpdate(CommandId(command_id(2, at, 0)), FiredState.SUCCEEDED, at)])
    got = h.store.get_fired([CommandId(command_id(1, at, 0)), CommandId(command_id(2, at, 0))])
    assert got[CommandId(command_id(1, at, 0))].state is FiredState.SUCCEEDED
    assert got[CommandId(command_id(2, at, 0))].state is FiredState.SKIPPED


def test_a_store_from_before_the_stops_gains_dus_stop_and_keeps_its_fences(tmp_path: Path) -> None:
    """A store of the previous version kept each business's fence in dus_business_fence;
    `db init` creates dus_stop and carries every fence over as a rollback window."""
    engine = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    init_schema(engine, 4)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE dus_stop"))  # a store from before the stops
        conn.execute(
            text(
                "CREATE TABLE dus_business_fence (biz_code VARCHAR(64) PRIMARY KEY, from_at BIGINT NOT NULL, "
                "until_at BIGINT, epoch BIGINT NOT NULL, updated_at BIGINT NOT NULL)"
            )
        )
        conn.execute(text("INSERT INTO dus_business_fence VALUES ('biz-a', 1000, NULL, 4, 5), ('biz-b', 10, 20, 2, 5)"))
    report = init_schema(engine)
    assert report.created == ["dus_stop"] and report.ok
    assert report.upgraded == ["dus_business_fence -> dus_stop (2 fence(s))"]
    store = SqlTriggerStore(engine, SystemClock())
    assert store.business_fence("biz-a") == Fence("biz-a", 1000, None, 4)
    assert store.business_fence("biz-b") == Fence("biz-b", 10, 20, 2)
    assert init_schema(engine).upgraded == [], "carried once"


def test_fence_messages_round_trip_and_a_later_epoch_wins(clock: ManualClock) -> None:
    fence = Fence("biz-a", 1_000, 2_000, 7)
    assert decode_fence(encode_fence(fence)) == fence
    assert decode_fence(b'{"v":1,"k":"something-else"}') is None
    with pytest.raises(ValueError):
        decode_fence(b"not json")
    bus = InProcessBus(clock)
    view = FenceView(bus)
    bus.publish_control("biz-a", encode_fence(Fence("biz-a", 5_000, None, 3)))
    bus.publish_control("biz-a", encode_fence(Fence("biz-a", 1_000, 2_000, 2)))  # older, late: ignored
    bus.publish_control("biz-a", b"garbage")  # logged, ignored
    assert view.by_business["biz-a"] == Fence("biz-a", 5_000, None, 3)
    assert view.covering("biz-a", 5_000) is not None and view.covering("biz-a", 4_999) is None
    assert view.covering("biz-b", 5_000) is None


def test_compact_results_carry_the_skipped_letter() -> None:
    res = EnvelopeResult(
        trigger_id=1,
        scheduled_ms=1_000,
        page_id=None,
        indices=[0, 1],
        letters="KS",
        received_ms=1_000,
        started_ms=None,
        finished_ms=1_001,
        message="rollback fence at x",
    )
    (k, s) = decode_results(encode_envelope_results([res]))
    assert k.state is FiredState.SKIPPED and s.state is FiredState.SUCCEEDED and k.message == "rollback fence at x"


# --- the executor ------------------------------------------------------------------------------


def _fire(h: Harness, offsets_s: list[float], **job: Any) -> dict[float, TriggerId]:
    j = h.job("j", **job)
    return {s: h.once(j, s).id for s in offsets_s}  # type: ignore[misc]


def test_commands_at_or_after_f_are_skipped_and_recorded_never_invoked(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    triggers = _fire(h, [1, 2, 3, 4, 5, 6])
    core = h.core()
    core.tick_all()  # everything published (deliver-at = its fire time): the lookahead
    consumer = h.results(core)
    ex = Executor(h.bus, "biz-a", clock=clock)
    ran: list[int] = []
    ex.handler("j")(lambda ctx: ran.append(ctx.trigger_id))
    f = clock.now() + timedelta(seconds=4)

    marked = FenceService(h.store, h.bus).raise_fence("biz-a", f)
    clock.advance(timedelta(seconds=10))
    _drain(h, ex, consumer)

    assert marked == 3
    assert sorted(ran) == sorted(triggers[s] for s in (1, 2, 3)), "only the commands before F ran"
    recs = _records(h)
    for s, tid in triggers.items():
        r = recs[tid]
        if s < 4:
            assert r.state is FiredState.SUCCEEDED
        else:
            assert r.state is FiredState.SKIPPED and r.message == f"rollback fence at {f.isoformat()}"
            assert r.result_at is not None and r.started_at is None
    assert ex.fenced == 3


def test_a_later_started_executor_learns_an_earlier_fence(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    triggers = _fire(h, [1, 2])
    core = h.core()
    core.tick_all()
    FenceService(h.store, h.bus).raise_fence("biz-a", clock.now())
    ex = Executor(h.bus, "biz-a", clock=clock)  # started after the fence was raised
    ran: list[int] = []
    ex.handler("j")(lambda ctx: ran.append(ctx.trigger_id))
    clock.advance(timedelta(seconds=5))
    _drain(h, ex, h.results(core))
    assert ran == []
    assert all(_records(h)[t].state is FiredState.SKIPPED for t in triggers.values())


def test_lifting_lets_the_commands_after_it_run_again(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock)
    triggers = _fire(h, [1, 2, 3, 4, 5, 6])
    core = h.core()
    core.tick_all()
    consumer = h.results(core)
    ex = Executor(h.bus, "biz-a", clock=clock)
    ran: list[int] = []
    ex.handler("j")(lambda ctx: ran.append(ctx.trigger_id))
    service = FenceService(h.store, h.bus)
    service.raise_fence("biz-a", clock.now() + timedelta(seconds=2))
    service.lift_fence("biz-a", clock.now() + timedelta(seconds=5))
    clock.advance(timedelta(seconds=10))
    _drain(h, ex, consumer)

    assert sorted(ran) == sorted(triggers[s] for s in (1, 5, 6))
    recs = _records(h)
    assert [recs[triggers[s]].state for s in (1, 2, 3, 4, 5, 6)] == [
        FiredState.SUCCEEDED,
        FiredState.SKIPPED,
        FiredState.SKIPPED,
        FiredState.SKIPPED,
        FiredState.SUCCEEDED,
        FiredState.SUCCEEDED,
    ]


def _running(ex: Executor) -> tuple[threading.Event, threading.Thread]:
    stop = threading.Event()
    thread = threading.Thread(target=ex.run, args=(stop,), daemon=True)
    thread.start()
    return stop, thread


def _until(check: Callable[[], bool], within_s: float = 10.0) -> bool:
    return until(check, within_s, every_s=0.02)


@pytest.mark.parametrize(
    "job",
    [
        pytest.param({"timeout": timedelta(0)}, id="quick-path"),
        pytest.param({"timeout": timedelta(0), "envelope_size": 10}, id="packed"),
        pytest.param({"timeout": timedelta(seconds=5)}, id="watched"),
        pytest.param({"shard_total": 5, "envelope_size": 5, "timeout": timedelta(0)}, id="page-record"),
    ],
)
def test_the_threaded_path_skips_fenced_runs_of_every_kind(tmp_path: Path, job: dict[str, object]) -> None:
    clock = SystemClock()  # run() waits on the bus in real time
    h = make_harness(tmp_path, clock)  # type: ignore[arg-type]
    j = h.job("j", **job)  # type: ignore[arg-type]
    before = [h.once(j, -5) for _ in range(20)]
    fenced = [h.once(j, -1) for _ in range(20)]
    # due after the lift (created later than `fenced`, so at least 0.3 s past it): they run
    after = [h.once(j, -0.2) for _ in range(20)]
    core = h.core()
    core.tick_all()
    consumer = h.results(core)
    service = FenceService(h.store, h.bus)
    # the fence spans the fenced triggers' own fire times: taken from clock.now() here, after
    # the ticks above, it missed them whenever those took over a second on a loaded machine
    service.raise_fence("biz-a", min(t.next_fire_at for t in fenced) - timedelta(seconds=1))
    lift = max(t.next_fire_at for t in fenced) + timedelta(milliseconds=100)
    assert min(t.next_fire_at for t in after) >= lift
    service.lift_fence("biz-a", lift)
    ex = Executor(h.bus, "biz-a", clock=clock)
    ran: list[tuple[int, int]] = []
    lock = threading.Lock()

    @ex.handler("j")
    def handle(ctx: ExecutionContext) -> None:
        with lock:
            ran.append((ctx.trigger_id, ctx.item_index))

    items = int(job.get("shard_total", 1))  # type: ignore[call-overload]
    stop, thread = _running(ex)
    try:

        def settled() -> bool:
            consumer.poll(timeout=timedelta(milliseconds=20))
            recs = _records(h)
            return len(recs) == 60 and all(r.state.is_final for r in recs.values())

        assert _until(settled), "every record reached a final state"
    finally:
        stop.set()
        thread.join(10)
        ex.close()
    # every run before the fence and after its lift, each item exactly once; none inside it
    unfenced = [stored_id(t) for t in before + after]
    assert len(unfenced) == 40
    assert sorted(ran) == sorted((t, i) for t in unfenced for i in range(items)), "no fenced run was invoked"
    recs = _records(h)
    assert {recs[t].state for t in unfenced} == {FiredState.SUCCEEDED}
    for t in fenced:
        r = recs[t.id]  # type: ignore[index]
        assert r.state is FiredState.SKIPPED and is_fence_skip(r.state, r.message), r
    assert ex.fenced == 20 * items


class _GatedBus(InProcessBus):
    """An in-process bus whose control channel is out of sync until `gate` is set: what
    an executor sees before its control reader has caught up, or while it cannot reach
    the broker."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock)
        self.gate = threading.Event()

    def follow_control(self, on_message: Callable[[bytes], None]) -> ControlFeed:
        inner = super().follow_control(on_message)
        gate = self.gate

        class Feed(ControlFeed):
            def synced(self) -> bool:
                return gate.is_set() and inner.synced()

            def wait_synced(self, timeout: timedelta) -> bool:
                return gate.wait(timeout.total_seconds()) and inner.synced()

            def close(self) -> None:
                inner.close()

        return Feed()


def test_commands_whose_fence_cannot_be_known_are_held_not_run_nor_dropped(
    tmp_path: Path, clock: ManualClock, caplog: pytest.LogCaptureFixture
) -> None:
    h = make_harness(tmp_path, clock)
    h.bus = _GatedBus(clock)
    triggers = _fire(h, [1, 2])
    core = h.core()
    core.tick_all()
    consumer = h.results(core)
    ex = Executor(h.bus, "biz-a", clock=clock, fences=FenceView(h.bus, initial_sync=timedelta(milliseconds=10)))
    ran: list[int] = []
    ex.handler("j")(lambda ctx: ran.append(ctx.trigger_id))
    clock.advance(timedelta(seconds=5))

    with caplog.at_level(logging.WARNING, logger="scheduler_core.executor.sdk"):
        assert ex.poll_once(timeout=timedelta(0)) == 0
    assert ran == [] and ex.held == 2
    assert "not known yet" in caplog.text
    assert {r.state for r in _records(h).values()} == {FiredState.PENDING}, "not dropped, not answered"

    FenceService(h.store, h.bus).raise_fence("biz-a", clock.now() - timedelta(seconds=3))  # covers trigger 2 only
    h.bus.gate.set()  # caught up: it now knows the fence
    clock.advance(timedelta(seconds=2))  # the nack delay: redelivered
    _drain(h, ex, consumer)
    assert ran == [triggers[1]]
    recs = _records(h)
    assert recs[triggers[1]].state is FiredState.SUCCEEDED and recs[triggers[2]].state is FiredState.SKIPPED
