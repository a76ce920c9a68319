"""Issue 29, lanes: a job's lane (a per-business default, a per-job override, migrated jobs
in their business's default), the lane budgets in admission (a lane at its budget does not
delay another lane's due triggers in the same tick), a command topic per lane and business,
and `db init` upgrading a lane-less store (SQLite here; MariaDB: test_lanes_real.py)."""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import inspect, text

from legacy_sim.seed import seed_batchcenter
from migrator.business import BusinessRegistry
from migrator.mapping import Mapped, with_lane
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import command_topic, decode_commands
from scheduler_core.errors import SchemaError
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.firepool import FirePool
from scheduler_core.lookahead import AdaptiveLookahead, lane_window
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import ExecutionCommand, Job, JobCode, Lane, TriggerKind, TriggerState
from scheduler_core.settings import LaneBudget, SchedulerSettings
from scheduler_core.store.admin import tables_for
from scheduler_core.store.engine import make_engine
from scheduler_core.store.job_admin import SqlJobAdmin
from scheduler_core.store.schema import SCHEMA_VERSION
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from switchyard.cli import cli
from switchyard.embedded import EmbeddedCenter
from switchyard.schema import check_schema, init_schema
from switchyard.wiring import migrator_store
from tests.harness import Harness, harness_on, make_harness, state_of, trigger_of
from tests.migration_env import make_env
from tests.waiting import until

W, A, C = TriggerState.WAITING, TriggerState.ACQUIRED, TriggerState.COMPLETED


def _delivered(h: Harness, topic: str) -> list[ExecutionCommand]:
    sub = h.bus.subscribe(topic, "test-executor")
    out: list[ExecutionCommand] = []
    while got := sub.receive(1000, timedelta(0)):
        for r in got:
            out += decode_commands(r.message.payload)
            sub.ack(r)
    return out


def _burst_then_default(h: Harness) -> tuple[list[Any], list[Any]]:
    """30 `burst` one-shots due at +60 s, then 3 `default` ones due 1 ms after them: by fire
    time every burst row comes first, so one read of 10 holds burst rows only."""
    sop = h.job("sop-fanout", biz="sop", lane=Lane.BURST)
    small = h.job("small", biz="small")
    burst = [h.once(sop, 60, lane=Lane.BURST) for _ in range(30)]
    quiet = [h.once(small, 60.001) for _ in range(3)]
    for topic in (command_topic("sop", Lane.BURST), command_topic("small")):
        h.bus.ensure_subscription(topic, "test-executor")
    return burst, quiet


def test_a_lane_at_its_tick_budget_does_not_delay_another_lanes_due_triggers(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock, partitions=1, batch_size=10, hold_within=timedelta(0))
    burst, quiet = _burst_then_default(h)
    core = h.core()
    core.tick_all()  # one tick
    core.drain()
    # burst's tick budget is half the batch (5): the rest of the tick went to the default lane
    assert [state_of(h.store, t) for t in quiet] == [C, C, C]
    assert sum(state_of(h.store, t) is C for t in burst) == 5
    clock.set(clock.now() + timedelta(seconds=61))  # delivered at their T
    assert len(_delivered(h, command_topic("small"))) == 3
    # the burst lane's commands went to its own topic, none to the default one of its business
    assert len(_delivered(h, command_topic("sop", Lane.BURST))) == 5
    assert _delivered(h, command_topic("sop")) == []
    core.shutdown()


def test_without_a_burst_budget_the_same_tick_admits_burst_rows_only(tmp_path: Path, clock: ManualClock) -> None:
    """The control of the test above: the burst lane allowed the whole tick (as one global
    queue was before lanes), the default lane's due triggers wait behind it."""
    h = make_harness(
        tmp_path,
        clock,
        partitions=1,
        batch_size=10,
        hold_within=timedelta(0),
        lane_budgets={Lane.BURST: LaneBudget(1.0, 1.0), Lane.DEFAULT: LaneBudget(1.0, 1.0)},
    )
    burst, quiet = _burst_then_default(h)
    core = h.core()
    core.tick_all()
    core.drain()
    assert [state_of(h.store, t) for t in quiet] == [W, W, W]
    assert sum(state_of(h.store, t) is C for t in burst) == 10
    core.shutdown()


def test_a_lane_whose_pool_share_is_spent_is_left_out_and_the_others_admitted(
    tmp_path: Path, clock: ManualClock
) -> None:
    h = make_harness(tmp_path, clock, partitions=1, batch_size=10, hold_within=timedelta(0))
    burst, quiet = _burst_then_default(h)
    core = h.core()
    reads: list[Lane | None] = []
    real = h.store.select_due

    def spy(*args: Any, **kwargs: Any) -> Any:
        reads.append(args[5] if len(args) > 5 else kwargs.get("lane"))
        return real(*args, **kwargs)

    h.store.select_due = spy  # type: ignore[method-assign]
    core.pool.saturated_lanes = lambda: {Lane.BURST}  # type: ignore[method-assign]
    core.tick_all()
    core.drain()
    assert Lane.BURST not in reads and Lane.DEFAULT in reads
    assert [state_of(h.store, t) for t in quiet] == [C, C, C]
    assert all(state_of(h.store, t) is W for t in burst)
    core.shutdown()


def test_one_lane_is_one_read_as_before_lanes(tmp_path: Path, clock: ManualClock) -> None:
    h = make_harness(tmp_path, clock, partitions=1, batch_size=10, hold_within=timedelta(0))
    job = h.job("j")
    triggers = [h.once(job, 60) for _ in range(25)]
    core = h.core()
    reads: list[Any] = []
    real = h.store.select_due

    def spy(*args: Any, **kwargs: Any) -> Any:
        reads.append(args)
        return real(*args, **kwargs)

    h.store.select_due = spy  # type: ignore[method-assign]
    core.tick_all()
    core.drain()
    assert len(reads) == 1 and len(reads[0]) == 5  # no lane named: the read of before lanes
    assert sum(state_of(h.store, t) is C for t in triggers) == 10
    core.shutdown()


def test_the_fire_pool_holds_a_lane_to_its_share() -> None:
    budgets = {Lane.BURST: 4, Lane.DEFAULT: 10, Lane.BULK: 2}
    pool = FirePool(10, 2, lambda _b: 10, lane_budget_of=budgets.__getitem__)
    release = threading.Event()
    try:
        assert pool.try_submit("sop", 4, lambda: release.wait(10), Lane.BURST)
        assert pool.saturated_lanes() == {Lane.BURST}
        assert not pool.try_submit("sop", 1, lambda: None, Lane.BURST)
        assert pool.try_submit("small", 3, lambda: release.wait(10), Lane.DEFAULT)
        assert pool.in_flight_lane(Lane.BURST) == 4 and pool.in_flight_lane(Lane.DEFAULT) == 3
    finally:
        release.set()
        assert pool.wait_idle(10)
        pool.shutdown()
    assert pool.saturated_lanes() == set()


def test_command_topics_per_lane_keep_the_default_lanes_name() -> None:
    assert command_topic("billing") == command_topic("billing", Lane.DEFAULT) == "cmd.billing"
    assert command_topic("billing", Lane.BURST) == "cmd.billing:burst"
    assert command_topic("billing", Lane.BULK) == "cmd.billing:bulk"
    # a business code has no ':' (jobspec): no business's default topic is another's lane's
    assert len({command_topic(b, lane) for b in ("a", "a.burst", "a_burst") for lane in Lane}) == 9


def test_stored_lane_values_and_null() -> None:
    assert Lane.of(None) is Lane.DEFAULT and Lane.of("burst") is Lane.BURST
    with pytest.raises(ValueError, match="fast"):
        Lane.of("fast")


def test_a_migrated_job_gets_its_business_default_lane(clock: ManualClock) -> None:
    job = Job(job_code=JobCode("xxl:sop:1"), biz_code="sop", handler="h")
    trig = trigger_of(job, TriggerKind.CRON, clock.now().replace(second=0, microsecond=0), cron="0 * * * * ?")
    moved = with_lane(Mapped(job, trig, (), "h"), Lane.BURST)
    assert moved.job.lane is Lane.BURST and moved.trigger is not None and moved.trigger.lane is Lane.BURST
    assert moved.content_hash == "h"  # the lane is the target's choice, not legacy content


# --- the job path: per-business default, per-job override ----------------------------


@pytest.fixture
def url(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    u = f"sqlite:///{tmp_path / 'center.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", u]).exit_code == 0
    monkeypatch.setenv("SWITCHYARD_URL", u)
    return u


def sy(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(cli, list(args))
    return res.exit_code, res.output


def sy_json(*args: str) -> Any:
    code, out = sy(*args, "--json")
    assert code == 0, out
    return json.loads(out)


def _trigger_lanes(u: str, job_code: str) -> list[str | None]:
    engine = make_engine(u)
    try:
        with engine.connect() as conn:
            return [
                r
                for (r,) in conn.execute(text("SELECT lane FROM dus_job_trigger WHERE job_code = :j"), {"j": job_code})
            ]
    finally:
        engine.dispose()


def test_a_jobs_lane_is_its_business_default_unless_it_names_one(url: str) -> None:
    assert sy_json("job", "add", "sop:first", "--handler", "h", "--every", "1m")["lane"] == "default"
    assert sy_json("job", "default-lane", "sop") == {"business": "sop", "default_lane": "default"}
    assert sy_json("job", "default-lane", "sop", "burst", "--reason", "on-the-hour fan-out")["default_lane"] == "burst"
    assert sy_json("job", "add", "sop:fanout", "--handler", "h", "--every", "1m")["lane"] == "burst"
    assert sy_json("job", "add", "sop:report", "--handler", "h", "--every", "1m", "--lane", "bulk")["lane"] == "bulk"
    # a job keeps the lane it has when its business's default changes
    assert sy_json("job", "show", "sop:first")["lane"] == "default"
    assert _trigger_lanes(url, "fanout") == ["burst"] and _trigger_lanes(url, "report") == ["bulk"]
    code, out = sy("job", "show", "sop:report")
    assert code == 0 and "lane bulk" in out
    code, out = sy("job", "list")
    assert code == 0 and " bulk " in out and " burst " in out


def test_editing_a_jobs_lane_moves_its_trigger(url: str) -> None:
    sy_json("job", "add", "billing:invoice", "--handler", "h", "--every", "1m")
    after = sy_json("job", "edit", "billing:invoice", "--lane", "burst")
    assert after["lane"] == "burst" and _trigger_lanes(url, "invoice") == ["burst"]
    # the edit left the schedule as it was
    assert after["schedule"]["every_s"] == 60 and after["state"] == "running"


def test_a_bad_lane_is_a_usage_error_naming_it(url: str) -> None:
    code, out = sy("job", "add", "b:j", "--handler", "h", "--every", "1m", "--lane", "fast")
    assert code == 2 and "fast" in out and "--lane" in out
    code, out = sy("job", "default-lane", "nobody", "burst")
    assert code == 2 and "nobody" in out


# --- db init upgrades a store of before lanes ----------------------------------------


def lane_less_store(url: str, at_ms: int) -> None:
    """A store as schema version 2 left it: no lane columns (job, trigger, business), the
    due index without the lane; one job with a waiting trigger due in a minute."""
    engine = make_engine(url)
    mysql = engine.dialect.name in ("mysql", "mariadb")
    try:
        init_schema(engine, 1)
        with engine.begin() as conn:
            if mysql:
                conn.execute(text("ALTER TABLE dus_job_trigger DROP INDEX idx_state_fire_lane"))
                conn.execute(text("CREATE INDEX idx_state_fire ON dus_job_trigger (state, next_fire_at, priority)"))
            else:
                conn.execute(text("DROP INDEX idx_part_state_fire_lane"))
                conn.execute(
                    text("CREATE INDEX idx_part_state_fire ON dus_job_trigger (part, state, next_fire_at, priority)")
                )
            for table in ("dus_job_trigger", "dus_job"):
                conn.execute(text(f"ALTER TABLE {table} DROP COLUMN lane"))
            conn.execute(text("ALTER TABLE dus_business DROP COLUMN default_lane"))
            conn.execute(text("UPDATE dus_meta SET value = '2' WHERE name = 'schema_version'"))
            conn.execute(
                text(
                    "INSERT INTO dus_job (job_code, biz_code, handler, params, shard_total, timeout_ms, max_retry,"
                    " priority, envelope_size, explicit_items, shadow, created_at, updated_at)"
                    " VALUES ('old', 'biz-a', 'h', '', 1, 30000, 0, 5, 1, 0, 0, 0, 0)"
                )
            )
            conn.execute(
                text(
                    "INSERT INTO dus_business (biz_code, source_system, state, shadow, version, updated_at)"
                    " VALUES ('biz-a', 'native', 'cutover', 0, 0, 0)"
                )
            )
            for _ in range(3):
                conn.execute(
                    text(
                        "INSERT INTO dus_job_trigger (job_id, job_code, biz_code, kind, time_zone, next_fire_at,"
                        " state, priority, misfire_policy, version, created_at, updated_at)"
                        " VALUES (1, 'old', 'biz-a', 'once', 'UTC', :at, 'waiting', 5, 'skip', 0, 0, 0)"
                    ),
                    {"at": at_ms},
                )
    finally:
        engine.dispose()


def upgrade_lands_every_trigger_in_default(url: str, clock: ManualClock) -> None:
    lane_less_store(url, to_ms(clock.now() + timedelta(minutes=1)))
    engine = make_engine(url)
    try:
        with pytest.raises(SchemaError, match=r"version 2.*db init"):
            tables_for(engine)
        before = check_schema(engine)
        assert {"dus_job.lane", "dus_job_trigger.lane", "dus_business.default_lane"} <= set(before.missing)
        report = init_schema(engine)
        assert report.ok and report.schema_version == SCHEMA_VERSION >= 3
        for part in (
            "dus_job.lane",
            "dus_job_trigger.lane",
            "dus_business.default_lane",
            "dus_job.lane (1 row(s) -> default)",
            "dus_job_trigger.lane (3 row(s) -> default)",
            "-dus_job_trigger.idx_",
        ):
            assert any(u.startswith(part) for u in report.upgraded), (part, report.upgraded)
        assert init_schema(engine).upgraded == []  # idempotent
        indexes = {i["name"] for i in inspect(engine).get_indexes("dus_job_trigger")}
        assert indexes & {"idx_state_fire_lane", "idx_part_state_fire_lane"}
        assert not indexes & {"idx_state_fire", "idx_part_state_fire"}
        store = SqlTriggerStore(engine, clock)
        olds = store.triggers_of(biz_code="biz-a")
        assert [t.lane for t in olds] == [Lane.DEFAULT] * 3
        job = store.get_job(JobCode("old"))
        assert job is not None and job.lane is Lane.DEFAULT
        (p,) = store.partitions()
        end = clock.now() + timedelta(minutes=5)
        assert len(store.select_due(p, clock.now(), end, 10, (), Lane.DEFAULT)) == 3
        assert store.select_due(p, clock.now(), end, 10, (), Lane.BURST) == []
        # today's behaviour: fired on the business's topic of before lanes
        h = harness_on(store, clock, hold_within=timedelta(0))
        h.bus.ensure_subscription(command_topic("biz-a"), "test-executor")
        core = h.core()
        core.tick_all()
        core.drain()
        clock.set(clock.now() + timedelta(minutes=2))
        assert len(_delivered(h, "cmd.biz-a")) == 3
        core.shutdown()
    finally:
        engine.dispose()


def test_db_init_upgrades_a_lane_less_store_on_sqlite(tmp_path: Path, clock: ManualClock) -> None:
    upgrade_lands_every_trigger_in_default(f"sqlite:///{tmp_path / 'v2.db'}", clock)


# --- the adaptive lookahead -----------------------------------------------------------


def test_a_quiet_lane_keeps_its_minimum_window_and_a_burst_reaches_it_early_enough() -> None:
    lo, hi = 120_000, 1_800_000
    assert lane_window({}, 0, lo, hi, 10.0, 1.0) == lo
    assert lane_window({60_000 * k: 5 for k in range(30)}, 0, lo, hi, 10.0, 1.0) == lo  # a steady trickle
    burst = {600_000: 3_000}  # minute 10: 3,000 triggers, 5 minutes of admission at 10/s
    assert lane_window(burst, 0, lo, hi, 10.0, 1.0) == lo  # 11 min - 5 min > 2 min: not yet
    assert lane_window(burst, 240_000, lo, hi, 10.0, 1.0) == 420_000  # from 4 min on: up to its minute's end
    assert lane_window({1_200_000: 10**6}, 0, lo, hi, 10.0, 1.0) == 1_260_000
    assert lane_window({3_600_000: 10**9}, 0, lo, hi, 10.0, 1.0) == lo  # past lookahead_max: not in reach


def test_the_forecast_is_read_beside_the_ticks_not_in_them(tmp_path: Path, clock: ManualClock) -> None:
    """Ticks are serialized across partitions: a forecast read inside one (a grouped count
    over a waiting burst, tens to hundreds of ms) held every lane's admission every
    `forecast_every`. With the maintenance loop reading it, a tick never does, unless
    that loop has left it three periods stale."""
    h = make_harness(tmp_path, clock)
    reads: list[int] = []

    class Counted(SqlTriggerStore):
        def due_forecast_by_lane(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[Lane, int, int]]:
            reads.append(start_ms)
            return super().due_forecast_by_lane(start_ms, end_ms, bucket_ms)

    store = Counted(h.store.engine, clock)
    settings = SchedulerSettings(adaptive_lookahead=True)
    every = settings.forecast_every
    ahead = AdaptiveLookahead(store, clock, settings, SchedulerMetrics())
    ahead.windows(clock.now())  # no loop yet: the tick reads it
    assert len(reads) == 1
    ahead.refresh_if_due(clock.now())  # fresh: nothing read
    assert len(reads) == 1
    for _ in range(2):
        clock.advance(every)
        ahead.windows(clock.now())  # stale, but the loop reads it: not the tick
        assert len(reads) == 1
    ahead.refresh_if_due(clock.now())
    assert len(reads) == 2
    clock.advance(3 * every)  # the loop stalled
    ahead.windows(clock.now())
    assert len(reads) == 3


def test_the_windows_read_the_lanes_every_period_the_businesses_less_often(tmp_path: Path, clock: ManualClock) -> None:
    """The windows need the count per lane only, which the due index answers alone; the
    per-business count (a row read per waiting trigger) feeds gauges and is read every
    `forecast_business_every`. Both agree on what is due."""
    h = make_harness(tmp_path, clock)
    job = h.store.put_job(Job(job_code=JobCode("sop"), biz_code="sop", handler="h", lane=Lane.BURST))
    due = clock.now() + timedelta(minutes=5)
    h.store.add_triggers([trigger_of(job, TriggerKind.ONCE, due, lane=Lane.BURST) for _ in range(7)])
    calls: list[str] = []

    class Counted(SqlTriggerStore):
        def due_forecast(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[str, Lane, int, int]]:
            calls.append("business")
            return super().due_forecast(start_ms, end_ms, bucket_ms)

        def due_forecast_by_lane(self, start_ms: int, end_ms: int, bucket_ms: int) -> list[tuple[Lane, int, int]]:
            calls.append("lane")
            return super().due_forecast_by_lane(start_ms, end_ms, bucket_ms)

    store = Counted(h.store.engine, clock)
    settings = SchedulerSettings(adaptive_lookahead=True)
    metrics = SchedulerMetrics()
    ahead = AdaptiveLookahead(store, clock, settings, metrics)
    periods = int(settings.forecast_business_every / settings.forecast_every)
    for _ in range(periods):
        ahead.refresh_if_due(clock.now())
        clock.advance(settings.forecast_every)
    assert calls.count("lane") == periods and calls.count("business") == 1
    ahead.refresh_if_due(clock.now())
    assert calls.count("business") == 2
    assert ahead.forecast is not None and sum(ahead.forecast.buckets[Lane.BURST].values()) == 7
    by_business = store.due_forecast(to_ms(clock.now()) - to_ms(clock.now()) % 60_000, to_ms(due) + 1, 60_000)
    assert [(biz, lane, n) for biz, lane, _b, n in by_business] == [("sop", Lane.BURST, 7)]
    assert metrics.lane_forecast.labels(lane="burst", biz_code="sop")._value.get() == 7


def _run_to(h: Harness, core: Any, until: Any, step: timedelta = timedelta(seconds=1)) -> None:
    """One tick per simulated second (what the loop's max_wait allows) up to `until`."""
    while h.clock.now() < until:
        h.clock.advance(step)
        core.tick_all()
        core.drain()


def _burst_ten_minutes_out(tmp_path: Path, clock: ManualClock, adaptive: bool) -> tuple[int, Any]:
    """3,000 `burst` one-shots due 10 minutes out, admitted 10 per tick (burst's half of a
    batch of 20) at one tick a simulated second: 5 minutes of admission. Returns how many
    were fired by T, and the scheduler core."""
    h = make_harness(
        tmp_path,
        clock,
        partitions=1,
        batch_size=20,
        hold_within=timedelta(0),
        lookahead=timedelta(minutes=2),  # the fixed window, when not adaptive
        adaptive_lookahead=adaptive,
        admit_rate=10.0,
    )
    sop = h.job("sop-fanout", biz="sop", lane=Lane.BURST)
    t_burst = clock.now() + timedelta(minutes=10)
    h.store.add_triggers([trigger_of(sop, TriggerKind.ONCE, t_burst, lane=Lane.BURST) for _ in range(3_000)])
    core = h.core()
    _run_to(h, core, t_burst - timedelta(seconds=1))
    engine = h.store.engine
    with engine.connect() as conn:
        fired = conn.execute(text("SELECT COUNT(*) FROM dus_job_trigger WHERE state = 'completed'")).scalar_one()
    return int(fired), core


def test_a_burst_ten_minutes_out_is_admitted_by_its_minute_with_a_two_minute_quiet_window(
    tmp_path: Path, clock: ManualClock
) -> None:
    fired, core = _burst_ten_minutes_out(tmp_path, clock, adaptive=True)
    assert fired == 3_000, f"{fired} of 3,000 admitted before their T"
    la = core.lookahead
    assert la is not None and la.window_of(Lane.DEFAULT) == timedelta(minutes=2)  # quiet: its minimum
    lag = core.metrics.registry.get_sample_value("switchyard_lane_lookahead_lag_seconds", {"lane": "burst"})
    assert lag is not None and lag >= 0, f"lookahead lag {lag}"
    ahead = core.metrics.registry.get_sample_value(
        "switchyard_lane_published_not_due", {"lane": "burst", "biz_code": "sop"}
    )
    assert ahead is not None and ahead > 0  # published, T still ahead
    core.shutdown()


def test_with_the_fixed_two_minute_window_the_same_burst_is_late(tmp_path: Path, clock: ManualClock) -> None:
    """The control of the test above: 2 minutes of admission at 10 a second is 1,200."""
    fired, core = _burst_ten_minutes_out(tmp_path, clock, adaptive=False)
    assert fired < 1_500, fired
    core.shutdown()


def test_a_migration_puts_a_businesss_jobs_in_its_default_lane(tmp_path: Path) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=3, tasks_per_business=15, rng_seed=9)
    sop = "sop-audience"  # a business of this seed with good rows
    registry = BusinessRegistry(migrator_store(env.store))
    registry.ensure(sop, "batch-center")
    registry.set_default_lane(sop, Lane.BURST, actor="test", reason="on-the-hour SOP")
    env.migrator.run()
    jobs = SqlJobAdmin(env.store).jobs()
    assert {j.biz_code for j in jobs} > {sop}, "jobs of other businesses too"
    assert all(j.lane is (Lane.BURST if j.biz_code == sop else Lane.DEFAULT) for j in jobs)
    triggers = env.store.triggers_of()
    assert any(t.biz_code == sop for t in triggers)
    assert all(t.lane is (Lane.BURST if t.biz_code == sop else Lane.DEFAULT) for t in triggers)


def test_the_embedded_center_runs_every_lane_of_a_business(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'serve.db'}")
    init_schema(engine, 2)
    store = SqlTriggerStore(engine, SystemClock())
    seen: list[str] = []
    lock = threading.Lock()

    def register(ex: Executor) -> None:
        @ex.handler()
        def run(ctx: ExecutionContext) -> None:
            with lock:
                seen.append(ctx.job_code)

    jobs = {
        lane: store.put_job(Job(job_code=JobCode(f"j-{lane.value}"), biz_code="b", handler="h", lane=lane))
        for lane in Lane
    }
    due = store.clock.now() + timedelta(seconds=1)
    store.add_triggers([trigger_of(j, TriggerKind.ONCE, due, lane=lane) for lane, j in jobs.items()])
    settings = SchedulerSettings(lookahead=timedelta(seconds=60), idle_wait=timedelta(milliseconds=300))
    center = EmbeddedCenter(store, settings, register, name="t", discover_every=0.2)
    stop = threading.Event()
    th = threading.Thread(target=center.run, args=(stop,), daemon=True)
    th.start()
    try:
        assert until(lambda: len(seen) >= 3, 20), seen
        assert sorted(seen) == sorted(f"j-{lane.value}" for lane in Lane)
    finally:
        stop.set()
        th.join(timeout=60)
        engine.dispose()
