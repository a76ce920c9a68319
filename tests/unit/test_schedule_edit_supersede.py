"""A live trigger's schedule edit takes effect from E = now + margin on the new side
(scheduler_core.supersede), on the embedded default: SQLite, the in-process bus."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from pathlib import Path

from migrator.model import Action
from migrator.target import TargetWriter, Write
from scheduler_core.clock import ManualClock
from scheduler_core.executor import Executor
from scheduler_core.executor.fences import FenceView
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import FiredState
from scheduler_core.scheduler import SchedulerCore
from scheduler_core.stops import Cause, Scope, SkipWindow, Stop, StopRelay, decode_stop, encode_stop
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes, supersede_relay
from scheduler_core.supersede import SupersedeRelay
from scheduler_core.times import from_ms, to_ms
from switchyard.wiring import migrator_store
from tests.cron_writes import cron_write
from tests.harness import Harness, make_harness
from tests.waiting import wait_for

EVERY_10S = "0/10 * * * * ?"
EVERY_7S = "0/7 * * * * ?"  # seconds 0, 7, .. 56 of each minute: only :00 is in both


def _write(h: Harness, cron: str, action: Action) -> Write:
    first = h.clock.now().replace(microsecond=0) + timedelta(seconds=10 - h.clock.now().second % 10)
    return cron_write(cron, action, first)


class _Run:
    """A scheduler with a 60 s lookahead, one executor, the result consumer and the relay."""

    def __init__(self, h: Harness) -> None:
        self.h = h
        self.core: SchedulerCore = h.core(lookahead=timedelta(seconds=60))
        self.consumer = h.results(self.core)
        self.ex = Executor(h.bus, "biz-a", clock=h.clock)
        self.ran: list[datetime] = []
        self.ex.handler("j1")(lambda ctx: self.ran.append(ctx.scheduled_at))
        self.relay: SupersedeRelay = supersede_relay(h.store, h.bus, self.core.settings, SchedulerMetrics())
        # the superseded times reach the executor as the trigger's stop (scheduler_core.stops)
        self.stops = StopRelay(SqlStops(h.store), h.bus)

    def step(self, until: datetime, relay: bool = True) -> None:
        """Second by second to `until`: the relay, the scheduler, the executor, the results."""
        while self.h.clock.now() < until:
            self.h.clock.advance(timedelta(seconds=1))
            if relay:
                self.relay.relay()
                self.stops.relay()
            for _ in range(100):
                if not any(r.acquired for r in self.core.tick_all()):
                    break
            while self.ex.poll_once(timeout=timedelta(0)):
                pass
            while self.consumer.poll(timeout=timedelta(0)):
                pass


def _trigger_id(h: Harness) -> int:
    (t,) = h.store.triggers_of(biz_code="biz-a")
    assert t.id is not None
    return int(t.id)


def _records(h: Harness) -> dict[datetime, tuple[FiredState, str]]:
    recs = h.store.fired_between("biz-a", h.clock.now() - timedelta(days=1), h.clock.now() + timedelta(days=1))
    return {r.scheduled_at: (r.state, r.message) for r in recs}


def _edited(tmp_path: Path, clock: ManualClock) -> tuple[Harness, _Run, TargetWriter, datetime]:
    """Every 10 s, published 60 s ahead, run until 06:00:12; then edited to every 7 s."""
    h = make_harness(tmp_path, clock)
    writer = TargetWriter(h.store, migrator_store(h.store))
    writer.apply([_write(h, EVERY_10S, Action.CREATE)])
    run = _Run(h)
    run.step(clock.now() + timedelta(seconds=12))
    assert run.ran == [datetime(2026, 12, 2, 6, 0, 10, tzinfo=clock.now().tzinfo)]
    recs = h.store.fired_between("biz-a", clock.now() - timedelta(days=1), clock.now() + timedelta(days=1))
    published = h.store.outcome_recorded(recs)  # pending records its trigger's outcome confirms
    assert len(published) >= 5, "the old schedule is published a lookahead ahead"
    writer.apply([_write(h, EVERY_7S, Action.UPDATE)])
    return h, run, writer, clock.now() + writer.supersede_margin


def test_an_edit_fires_only_the_new_schedule_from_e_and_skips_the_superseded(
    tmp_path: Path, clock: ManualClock
) -> None:
    h, run, _writer, e = _edited(tmp_path, clock)
    old_ahead = {t for t, (s, _m) in _records(h).items() if t >= e}
    run.step(clock.now() + timedelta(minutes=3))

    after = [t for t in run.ran if t >= e]
    assert after, "the new schedule fired"
    assert all(t.second % 7 == 0 for t in after), f"an old-schedule command ran after E: {after}"
    counts = Counter(run.ran)
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"
    assert run.ex.duplicates == 0, "a command published twice"
    expected = []  # every occurrence of the new schedule from E to now
    t = e.replace(microsecond=0)
    while t <= clock.now() - timedelta(seconds=1):
        if t >= e and t.second % 7 == 0:
            expected.append(t)
        t += timedelta(seconds=1)
    assert after == expected
    minute = datetime(2026, 12, 2, 6, 1, 0, tzinfo=e.tzinfo)
    assert minute in old_ahead and counts[minute] == 1, "the occurrence both schedules have ran once"
    recs = _records(h)
    superseded = sorted(t for t in old_ahead if t.second % 7 != 0)
    assert superseded and all(t.second % 10 == 0 for t in superseded)
    for t in superseded:
        state, message = recs[t]
        assert state is FiredState.SKIPPED and message == f"superseded by a schedule edit at {e.isoformat()}", t
        assert t not in counts
    assert run.ex.superseded == len(superseded)


def test_a_replayed_edit_changes_nothing(tmp_path: Path, clock: ManualClock) -> None:
    h, run, writer, _e = _edited(tmp_path, clock)
    (first,) = SqlSupersedes(h.store).supersedes()
    writer.apply([_write(h, EVERY_7S, Action.UPDATE)])  # the same stream event again
    (again,) = SqlSupersedes(h.store).supersedes()
    assert again == first
    run.step(clock.now() + timedelta(minutes=2))
    assert all(n == 1 for n in Counter(run.ran).values()) and run.ex.duplicates == 0


def test_a_relay_that_died_before_broadcasting_is_made_good_by_the_next(tmp_path: Path, clock: ManualClock) -> None:
    """The store has the edit; nothing reached the bus. A new relay (the next leader)
    publishes the pending runs and broadcasts; an executor started afterwards learns it."""
    h, run, _writer, e = _edited(tmp_path, clock)
    tid = _trigger_id(h)
    (stored,) = SqlSupersedes(h.store).supersedes()
    assert stored.trigger_id == tid and stored.pending_ms and stored.skipped_ms
    fresh = FenceView(h.bus)
    assert fresh.superseded_ms(tid) == set(), "nothing broadcast before a relay ran"
    run.step(e - timedelta(seconds=2), relay=False)
    run.relay = supersede_relay(h.store, h.bus, run.core.settings, SchedulerMetrics())  # the next leader
    run.stops = StopRelay(SqlStops(h.store), h.bus)
    run.step(clock.now() + timedelta(minutes=2))
    assert fresh.superseded_ms(tid) == stored.skipped_ms
    assert all(t.second % 7 == 0 for t in run.ran if t >= e)
    assert SqlSupersedes(h.store).supersedes()[0].pending_ms == ()
    late = FenceView(h.bus)  # started after the broadcast: reads the channel's history
    assert late.superseding(tid, min(stored.skipped_ms)) is not None


def test_an_edit_back_revives_what_the_first_edit_superseded(tmp_path: Path, clock: ManualClock) -> None:
    h, run, writer, _e = _edited(tmp_path, clock)
    run.step(clock.now() + timedelta(seconds=1))
    writer.apply([_write(h, EVERY_10S, Action.UPDATE)])  # the operator changes it back
    e2 = clock.now() + writer.supersede_margin
    run.step(clock.now() + timedelta(minutes=2))
    after = [t for t in run.ran if t >= e2]
    assert after and all(t.second % 10 == 0 for t in after), after
    assert all(n == 1 for n in Counter(run.ran).values()) and run.ex.duplicates == 0
    recs = {t: s for t, (s, _m) in _records(h).items() if t >= e2}
    revived = [t for t in recs if t.second % 10 == 0]
    assert revived and all(recs[t] is FiredState.SUCCEEDED for t in revived if t < clock.now()), recs
    # the every-7-s runs the relay published for the first edit are superseded by the second
    assert [t for t in recs if t.second % 10 != 0 and t < e2 + timedelta(seconds=40)]
    assert all(recs[t] is FiredState.SKIPPED for t in recs if t.second % 10 != 0)


def test_an_edits_windows_reach_followers_as_the_triggers_stop_and_a_later_epoch_wins(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock)
    view = FenceView(h.bus)
    e = to_ms(clock.now())
    one = Stop(Scope.TRIGGER, "7", tuple(SkipWindow(t, t + 1, Cause.EDIT, effective_ms=e) for t in (1000, 2000)), 2)
    assert decode_stop(encode_stop(one)) == one
    h.bus.publish_control("biz-a", encode_stop(one))
    h.bus.publish_control("biz-a", encode_stop(Stop(Scope.TRIGGER, "7", (SkipWindow(3000, 3001, Cause.EDIT),), 1)))
    assert view.superseding(7, 1000) is not None and view.superseding(7, 3000) is None
    assert view.superseding(7, 1001) is None, "a point window: that occurrence only"
    assert view.superseding(8, 1000) is None
    w = view.superseding(7, 2000)
    assert w is not None and w.message == f"superseded by a schedule edit at {from_ms(e).isoformat()}"


def test_serve_relays_an_edit_a_stream_beside_it_wrote(tmp_path: Path) -> None:
    """`switchyard serve` (the embedded center, real clock) and a `migrate stream` beside it
    on the same SQLite store, without a bus: the edit from every 2 s to every 3 s reaches
    serve's executors through the store; from E on only every-3-s runs happen, each once."""
    import threading
    import time

    from scheduler_core.clock import SystemClock
    from scheduler_core.executor import ExecutionContext, HandlerResult
    from scheduler_core.settings import SchedulerSettings
    from scheduler_core.store.engine import make_engine
    from scheduler_core.store.sql import SqlTriggerStore
    from switchyard.embedded import EmbeddedCenter
    from switchyard.schema import init_schema

    engine = make_engine(f"sqlite:///{tmp_path / 's.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    beside = SqlTriggerStore(make_engine(f"sqlite:///{tmp_path / 's.db'}"), SystemClock())  # the stream's own
    writer = TargetWriter(beside, migrator_store(beside))
    now = store.clock.now()
    first = now.replace(microsecond=0) + timedelta(seconds=2 - now.second % 2 + 2)

    def write(cron: str, action: Action) -> Write:
        return cron_write(cron, action, first)

    writer.apply([write("0/2 * * * * ?", Action.CREATE)])
    ran: list[tuple[str, datetime]] = []
    lock = threading.Lock()

    def register(ex: Executor) -> None:
        @ex.handler()
        def run(ctx: ExecutionContext) -> HandlerResult:
            with lock:
                ran.append((ctx.command_id, ctx.scheduled_at))
            return HandlerResult(ok=True)

    settings = SchedulerSettings(lookahead=timedelta(seconds=30), idle_wait=timedelta(milliseconds=300))
    center = EmbeddedCenter(store, settings, register, name="t", discover_every=0.2)
    stop = threading.Event()
    th = threading.Thread(target=center.run, args=(stop,), daemon=True)
    th.start()
    try:
        h_records: list[object] = []

        def published_ahead() -> bool:
            h_records[:] = store.fired_between("biz-a", now, now + timedelta(minutes=5))
            return len(h_records) >= 8

        wait_for(published_ahead, "the old schedule published ahead", 60, every_s=0.1)
        (tid,) = [t.id for t in store.triggers_of(biz_code="biz-a")]
        for _ in range(100):
            # a trigger being fired right now keeps its row and the ledger its old hash:
            # the next run (here: the next apply) applies the edit
            writer.apply([write("0/3 * * * * ?", Action.UPDATE)])
            if getattr(store.get_trigger(tid), "cron", None) == "0/3 * * * * ?":  # type: ignore[arg-type]
                break
            time.sleep(0.05)
        (edit,) = SqlSupersedes(store).supersedes()
        e = from_ms(edit.effective_ms)
        old_ahead = {r.scheduled_at for r in store.fired_between("biz-a", e, e + timedelta(minutes=5))}
        end = e + timedelta(seconds=15)
        wait_for(
            lambda: (
                store.clock.now() >= end
                and not any(
                    r.state in (FiredState.PENDING, FiredState.PUBLISHED) for r in store.fired_between("biz-a", e, end)
                )
            ),
            "the runs up to E + 15 s to finish",
            90,
            every_s=0.2,
        )
    finally:
        stop.set()
        th.join(timeout=60)
        beside.engine.dispose()
    assert h_records and not th.is_alive()
    after = sorted(t for _c, t in ran if e <= t < end)
    assert after and all(t.second % 3 == 0 for t in after), f"an old-schedule command ran after E: {after}"
    assert all(n == 1 for n in Counter(c for c, _t in ran).values())
    recs = {r.scheduled_at: r for r in store.fired_between("biz-a", e, end)}
    whole = e.replace(microsecond=0) + (timedelta(seconds=1) if e.microsecond else timedelta(0))
    expected = [whole + timedelta(seconds=k) for k in range(int((end - whole).total_seconds()) + 1)]
    assert after == [t for t in expected if t < end and t.second % 3 == 0], "a new-schedule run is missing"
    assert all(recs[t].state is FiredState.SUCCEEDED for t in after)
    superseded = [t for t in old_ahead if t < end and t.second % 3 != 0]
    assert superseded and all(
        recs[t].state is FiredState.SKIPPED and recs[t].message.startswith("superseded by a schedule edit at ")
        for t in superseded
    )


# --- the edges: the span [edit, E) and an occurrence exactly at E ------------------------------

EVERY_3S = "0/3 * * * * ?"


def _edited_at(tmp_path: Path, clock: ManualClock, edit_s: int) -> tuple[Harness, _Run, datetime, datetime]:
    """Every 10 s from 06:00:10, published 60 s ahead, run to 06:00:`edit_s`; then edited to
    every 3 s. Returns the edit's instant and E (= edit + the writer's margin, 5 s)."""
    h = make_harness(tmp_path, clock)
    writer = TargetWriter(h.store, migrator_store(h.store))
    writer.apply([_write(h, EVERY_10S, Action.CREATE)])
    run = _Run(h)
    edited = clock.now().replace(second=edit_s)
    run.step(edited)
    assert clock.now() == edited
    writer.apply([_write(h, EVERY_3S, Action.UPDATE)])
    e = edited + writer.supersede_margin
    (s,) = SqlSupersedes(h.store).supersedes()
    assert from_ms(s.effective_ms) == e, "E is the edit's instant plus the margin, exactly"
    return h, run, edited, e


def _at(clock: ManualClock, second: int) -> datetime:
    return datetime(2026, 12, 2, 6, 0, 0, tzinfo=clock.now().tzinfo) + timedelta(seconds=second)


def _new_schedule_from(e: datetime, end: datetime) -> list[datetime]:
    return [e + timedelta(seconds=k) for k in range(int((end - e).total_seconds())) if (e.second + k) % 3 == 0]


def test_the_old_schedule_rules_strictly_before_e_and_the_new_from_e_on_an_occurrence_at_e_once(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Edit at 06:00:16, E = 06:00:21: in [edit, E) the old schedule's 06:00:20 fires and the
    new schedule's 06:00:18 does not; the new schedule's 06:00:21, exactly at E (the old one
    has no occurrence there), fires once; from E on only the new schedule fires, each once
    (06:00:30, which both have, once)."""
    h, run, edited, e = _edited_at(tmp_path, clock, 16)
    assert e == _at(clock, 21)
    end = _at(clock, 50)
    run.step(end + timedelta(seconds=2))

    counts = Counter(run.ran)
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"
    assert run.ex.duplicates == 0
    span = sorted(t for t in counts if edited <= t < e)
    assert span == [_at(clock, 20)], f"[edit, E) must run the old schedule, only: {span}"
    assert _at(clock, 18) not in counts, "a new-schedule occurrence before E ran"
    assert counts[e] == 1, "the new schedule's occurrence exactly at E"
    from_e = sorted(t for t in counts if e <= t < end)
    assert from_e == _new_schedule_from(e, end), from_e
    recs = _records(h)
    assert recs[e][0] is FiredState.SUCCEEDED and recs[_at(clock, 20)][0] is FiredState.SUCCEEDED
    assert _at(clock, 18) not in recs, "no record of the new schedule before E"
    for t in (_at(clock, 40),):  # an old-only occurrence after E
        state, message = recs[t]
        assert state is FiredState.SKIPPED and message == f"superseded by a schedule edit at {e.isoformat()}"


def test_an_old_schedule_occurrence_exactly_at_e_is_superseded(tmp_path: Path, clock: ManualClock) -> None:
    """Edit at 06:00:15, E = 06:00:20: the old schedule's 06:00:20 lies at E, which the new
    schedule (every 3 s) lacks: it is skipped, never invoked; 06:00:18 (new, before E) does
    not run; 06:00:21 (new, after E) runs once."""
    h, run, edited, e = _edited_at(tmp_path, clock, 15)
    assert e == _at(clock, 20)
    end = _at(clock, 40)
    run.step(end + timedelta(seconds=2))

    counts = Counter(run.ran)
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"
    assert e not in counts, "the old schedule's occurrence at E ran"
    assert not [t for t in counts if edited <= t < e], "nothing of either schedule is due in [edit, E) but 18"
    assert sorted(t for t in counts if e <= t < end) == _new_schedule_from(e, end)
    state, message = _records(h)[e]
    assert state is FiredState.SKIPPED and message == f"superseded by a schedule edit at {e.isoformat()}"


def test_an_occurrence_both_schedules_have_exactly_at_e_fires_once(tmp_path: Path, clock: ManualClock) -> None:
    """Edit at 06:00:25, E = 06:00:30, an occurrence of both schedules: its published command
    is kept and runs once; 06:00:27 (new, before E) does not run; 06:00:20 (old, before the
    edit) ran."""
    h, run, edited, e = _edited_at(tmp_path, clock, 25)
    assert e == _at(clock, 30)
    end = _at(clock, 50)
    run.step(end + timedelta(seconds=2))

    counts = Counter(run.ran)
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"
    assert run.ex.duplicates == 0
    assert counts[_at(clock, 20)] == 1 and counts[e] == 1
    assert not [t for t in counts if edited <= t < e], "a run in [edit, E), where neither schedule's is due"
    assert sorted(t for t in counts if e <= t < end) == _new_schedule_from(e, end)
    (s,) = SqlSupersedes(h.store).supersedes()
    assert to_ms(e) not in s.skipped_ms, "the kept command is not superseded"
    assert _records(h)[e][0] is FiredState.SUCCEEDED


def _created_and_behind(h: Harness) -> tuple[TargetWriter, list[datetime]]:
    """A trigger every 10 s created, then 35 s with nothing ticking: its due occurrences."""
    writer = TargetWriter(h.store, migrator_store(h.store))
    writer.apply([_write(h, EVERY_10S, Action.CREATE)])
    (t,) = h.store.triggers_of(biz_code="biz-a")
    h.clock.advance(timedelta(seconds=35))
    due, at = [], t.next_fire_at
    while at < h.clock.now():
        due.append(at)
        at += timedelta(seconds=10)
    return writer, due


def test_an_edit_of_a_trigger_the_scheduler_is_behind_on_runs_the_old_schedules_due_occurrences(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The scheduler is behind (down, stalled, failing over) when a schedule edit lands:
    the occurrences the old schedule made due before the edit and nobody published are
    run (the edit's pending runs), each once; the new schedule fires from its next time.
    The chaos soak saw an edit that moved next_fire_at to the new schedule's first future
    time drop them: four jobs fired by legacy alone for 42 s of a live dual-run."""
    h = make_harness(tmp_path, clock)
    writer, due = _created_and_behind(h)
    edited_at = clock.now()
    assert len(due) >= 3
    edit = _write(h, EVERY_7S, Action.UPDATE)
    writer.apply([edit])
    (t,) = h.store.triggers_of(biz_code="biz-a")
    new_first = t.next_fire_at  # the new schedule's, as the write gave it
    run = _Run(h)
    run.step(clock.now() + timedelta(seconds=30))
    counts = Counter(run.ran)
    assert all(counts[d] == 1 for d in due), f"the old schedule's due occurrences did not run once each: {counts}"
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"
    later = sorted(x for x in run.ran if x >= edited_at)
    assert later and later[0] == new_first and all(x.second % 7 == 0 for x in later[1:]), later


def test_a_second_edit_before_the_relay_ran_keeps_the_first_edits_pending_runs(
    tmp_path: Path, clock: ManualClock
) -> None:
    """An edit's pending runs (here: the old schedule's occurrences due while the scheduler
    was behind) wait for the relay. A second edit landing first wrote its own pending list
    over them: due occurrences that nobody then ran."""
    h = make_harness(tmp_path, clock)
    writer, due = _created_and_behind(h)
    writer.apply([_write(h, EVERY_7S, Action.UPDATE)])
    clock.advance(timedelta(seconds=1))
    writer.apply([_write(h, EVERY_10S, Action.UPDATE)])  # and back, before anything ran
    run = _Run(h)
    run.step(clock.now() + timedelta(seconds=30))
    counts = Counter(run.ran)
    assert all(counts[d] == 1 for d in due), f"the first edit's pending runs were lost: {sorted(counts)} vs {due}"
    assert all(n == 1 for n in counts.values()), f"a run invoked twice: {counts}"


def test_an_edit_before_the_relay_ran_keeps_a_resumes_pending_runs(tmp_path: Path, clock: ManualClock) -> None:
    """Runs queued for the relay outside any edit (a resume's backlog, a rollback's runs
    before its fence: `SqlSupersedes.add_pending`) are owed: a schedule edit landing before
    the relay published them must not drop them."""
    h = make_harness(tmp_path, clock)
    writer = TargetWriter(h.store, migrator_store(h.store))
    writer.apply([_write(h, EVERY_10S, Action.CREATE)])
    (t,) = h.store.triggers_of(biz_code="biz-a")
    owed = [to_ms(t.next_fire_at - timedelta(seconds=20)), to_ms(t.next_fire_at - timedelta(seconds=10))]
    SqlSupersedes(h.store).add_pending(t, owed)
    writer.apply([_write(h, EVERY_7S, Action.UPDATE)])
    run = _Run(h)
    run.step(clock.now() + timedelta(seconds=30))
    counts = Counter(to_ms(x) for x in run.ran)
    assert all(counts[o] == 1 for o in owed), f"the queued runs were dropped by the edit: {sorted(counts)}"
