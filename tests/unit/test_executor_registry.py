"""The executor registry on the embedded default (SQLite): the live / lost / stopped rule,
the heartbeat's upsert (one row per process, the database's clock), the clean stop, the
pruning past the retention, a heartbeat that cannot be written (warned, retried, never
fatal), `db init` adding the table to an older store, `switchyard executors` (text, JSON,
--business, --all) and the console's page and API."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import Engine, text
from starlette.testclient import TestClient

from readers.legacy_ddl import create_legacy_schema
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.executor.heartbeat import Heartbeat
from scheduler_core.store.engine import make_engine
from scheduler_core.store.executors import (
    ExecutorBeat,
    ExecutorState,
    SqlExecutorRegistry,
    compute_state,
)
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.cli import cli
from switchyard.console.app import make_app
from switchyard.console.data import Sources
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.unit.test_executor_packs import _pack, _Running
from tests.waiting import until

LIVE, LOST, STOPPED = ExecutorState.LIVE, ExecutorState.LOST, ExecutorState.STOPPED


@pytest.mark.parametrize(
    ("since_beat_ms", "interval_ms", "stopped", "expected"),
    [
        (0, 5000, False, LIVE),
        (14_999, 5000, False, LIVE),
        (15_000, 5000, False, LIVE),  # exactly 3 intervals: not lost yet
        (15_001, 5000, False, LOST),
        (900, 300, False, LIVE),
        (901, 300, False, LOST),
        (3_600_000, 5000, False, LOST),
        (0, 5000, True, STOPPED),
        (3_600_000, 5000, True, STOPPED),  # a goodbye stays stopped, however old
    ],
)
def test_live_lost_stopped_follows_three_missed_heartbeats_of_the_process_own_interval(
    since_beat_ms: int, interval_ms: int, stopped: bool, expected: ExecutorState
) -> None:
    now = 1_796_169_600_000
    last = now - since_beat_ms
    state = compute_state(
        last_seen_ms=last, interval_ms=interval_ms, stopped_at_ms=last if stopped else None, now_ms=now
    )
    assert state is expected


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    """The store on the embedded default and on the real MariaDB (the database's clock,
    the upsert's matched-row count and the prune differ by dialect)."""
    if request.param == "sqlite":
        e = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        init_schema(e, 2)
        yield e
        e.dispose()
        return
    with mariadb_database("exreg") as url:
        e = make_engine(url)
        init_schema(e, 2)
        try:
            yield e
        finally:  # a pooled connection would hold the DROP DATABASE back
            e.dispose()


def _beat(instance_id: str = "a1", **over: object) -> ExecutorBeat:
    fields: dict[str, object] = {
        "instance_id": instance_id,
        "name": f"host-{instance_id}",
        "biz_codes": ("billing",),
        "host": "host-a",
        "pid": 4242,
        "version": "1.2.3",
        "concurrency": 8,
        "in_flight": 1,
        "interval": timedelta(seconds=5),
    }
    return ExecutorBeat(**(fields | over))  # type: ignore[arg-type]


def _rows(engine: Engine) -> list[dict[str, object]]:
    with engine.connect() as conn:
        return [dict(r) for r in conn.execute(text("SELECT * FROM dus_executor ORDER BY instance_id")).mappings()]


def _age_row(engine: Engine, instance_id: str, by_ms: int) -> None:
    """The process's last beat `by_ms` further back (as if it had beaten no more)."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE dus_executor SET last_seen_at = last_seen_at - :d WHERE instance_id = :i"),
            {"d": by_ms, "i": instance_id},
        )


def test_a_beat_upserts_one_row_per_process_stamped_with_the_database_clock(engine: Engine) -> None:
    reg = SqlExecutorRegistry(engine)
    before_ms = int(datetime.now(timezone.utc).timestamp() * 1000)
    reg.beat(_beat(in_flight=1))
    first = _rows(engine)
    assert len(first) == 1
    assert abs(int(first[0]["last_seen_at"]) - before_ms) < 5_000  # type: ignore[call-overload]
    _age_row(engine, "a1", 2_000)  # so that the next beat's stamp is later whatever the clock's grain
    reg.beat(_beat(in_flight=3, biz_codes=("billing", "alerts", "billing")))
    reg.beat(_beat("b2", host="host-b", pid=7))
    rows = _rows(engine)
    assert [r["instance_id"] for r in rows] == ["a1", "b2"]
    a = rows[0]
    assert a["started_at"] == first[0]["started_at"]  # the insert's, kept by every update
    assert int(a["last_seen_at"]) >= int(first[0]["last_seen_at"])  # type: ignore[call-overload]
    assert (a["in_flight"], a["biz_codes"], a["interval_ms"], a["stopped_at"]) == (3, "alerts,billing", 5000, None)
    entries = {e.instance_id: e for e in reg.entries()}
    assert entries["a1"].biz_codes == ("alerts", "billing") and entries["a1"].state is LIVE
    assert entries["b2"].pid == 7 and entries["b2"].version == "1.2.3" and entries["b2"].concurrency == 8


def test_a_process_that_stops_beating_goes_lost_and_a_goodbye_says_stopped(engine: Engine) -> None:
    reg = SqlExecutorRegistry(engine)
    for i in ("killed", "clean", "running"):
        reg.beat(_beat(i, interval=timedelta(milliseconds=300)))
    _age_row(engine, "killed", 1_000)  # more than 3 x 300 ms without a beat
    reg.goodbye("clean")
    states = {e.instance_id: e.state for e in reg.entries()}
    assert states == {"killed": LOST, "running": LIVE}  # stopped ones only on demand
    every = {e.instance_id: e for e in reg.entries(include_stopped=True)}
    assert every["clean"].state is STOPPED and every["clean"].stopped_at is not None
    assert every["clean"].in_flight == 0
    assert every["killed"].age >= timedelta(milliseconds=1_000)


def test_rows_past_the_retention_are_pruned_in_bounded_batches(engine: Engine) -> None:
    reg = SqlExecutorRegistry(engine)
    for i in range(5):
        reg.beat(_beat(f"old{i}"))
        _age_row(engine, f"old{i}", 8 * 86_400_000)  # last heard of 8 days ago
    reg.beat(_beat("fresh"))
    assert {e.instance_id for e in reg.entries()} == {"fresh"}  # past the retention: not shown
    assert reg.prune(limit=3) == 3
    assert reg.prune(limit=3) == 2
    assert reg.prune(limit=3) == 0
    assert [r["instance_id"] for r in _rows(engine)] == ["fresh"]


def test_entries_of_one_business(engine: Engine) -> None:
    reg = SqlExecutorRegistry(engine)
    reg.beat(_beat("a", biz_codes=("billing", "alerts")))
    reg.beat(_beat("b", biz_codes=("alerts",)))
    reg.beat(_beat("c", biz_codes=("billing-eu",)))
    assert sorted(e.instance_id for e in reg.entries(biz_code="billing")) == ["a"]
    assert sorted(e.instance_id for e in reg.entries(biz_code="alerts")) == ["a", "b"]


def test_the_heartbeat_thread_reports_the_executors_and_says_goodbye_on_a_clean_stop(engine: Engine) -> None:
    bus = InProcessBus(SystemClock())
    executors = [Executor(bus, "billing", concurrency=3), Executor(bus, "alerts", concurrency=2)]
    reg = SqlExecutorRegistry(engine)
    beat = Heartbeat(reg, lambda: executors, name="serve-1", interval=timedelta(milliseconds=50))
    try:
        with beat:
            assert until(lambda: beat.beats >= 3, 10)
            # live as long as it beats (read again if this thread was descheduled past 3 beats)
            assert until(lambda: [e.state for e in reg.entries()] == [LIVE], 10)
            (live,) = reg.entries()
            assert (live.instance_id, live.name) == (beat.instance_id, "serve-1")
            assert (live.biz_codes, live.concurrency, live.in_flight) == (("alerts", "billing"), 5, 0)
            assert live.interval == timedelta(milliseconds=50)
        assert reg.entries() == []
        (gone,) = reg.entries(include_stopped=True)
        assert gone.state is STOPPED
    finally:
        for ex in executors:
            ex.close()
        bus.close()


def test_a_heartbeat_that_cannot_be_written_warns_and_is_retried_never_stopping_the_beat(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a store without the registry's table (made before it existed)
    e = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    init_schema(e, 2)
    with e.begin() as conn:
        conn.execute(text("DROP TABLE dus_executor"))
    reg = SqlExecutorRegistry(e)

    class One:
        biz_code, concurrency = "billing", 1

        def in_flight(self) -> int:
            return 0

    beat = Heartbeat(reg, lambda: [One()], name="x", interval=timedelta(milliseconds=50))
    try:
        with caplog.at_level(logging.WARNING, logger="scheduler_core.executor.heartbeat"):
            beat.start()
            # When its beats fail for a while
            assert until(lambda: beat.failures >= 3, 10)
            assert any("heartbeat" in r.getMessage() and "not written" in r.getMessage() for r in caplog.records)
            assert beat._thread is not None and beat._thread.is_alive()
            # Then once the table is there (db init), the next beats are written
            init_schema(e, 2)
            assert until(lambda: beat.beats >= 2, 10)
            assert beat.failures == 0
            assert until(lambda: [x.state for x in reg.entries()] == [LIVE], 10)
    finally:
        beat.close()
        e.dispose()


def test_db_init_adds_the_registry_to_a_store_made_before_it(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    e = make_engine(url)
    init_schema(e, 2)
    with e.begin() as conn:
        conn.execute(text("DROP TABLE dus_executor"))
    e.dispose()
    runner = CliRunner()
    res = runner.invoke(cli, ["executors", "--url", url])
    assert res.exit_code == 4, res.output
    assert "dus_executor" in res.output and "switchyard db init" in res.output
    res = runner.invoke(cli, ["db", "init", "--url", url])
    assert res.exit_code == 0, res.output
    assert "dus_executor" in res.output
    res = runner.invoke(cli, ["executors", "--url", url])
    assert (res.exit_code, res.output.strip()) == (0, "no executors in the registry")


def _legacy_db(path: Path, rows: list[tuple[str, str, str, datetime | None]], lineage: str = "3.4") -> str:
    """An xxl-job admin database (`lineage`'s tables) whose registry holds `rows` (wall times)."""
    url = f"sqlite:///{path}"
    e = make_engine(url)
    create_legacy_schema(e, "xxl-job", lineage)
    with e.begin() as conn:
        for g, k, v, t in rows:
            conn.execute(
                text(
                    "INSERT INTO xxl_job_registry (registry_group, registry_key, registry_value, update_time) "
                    "VALUES (:g, :k, :v, :t)"
                ),
                {"g": g, "k": k, "v": v, "t": None if t is None else t.strftime("%Y-%m-%d %H:%M:%S")},
            )
    e.dispose()
    return url


def _utc_wall(ago_s: float) -> datetime:
    return (datetime.now(timezone.utc) - timedelta(seconds=ago_s)).replace(tzinfo=None)


@pytest.fixture
def registry_store(tmp_path: Path, engine: Engine) -> tuple[str, str]:
    """A store with a live, a lost and a stopped executor, and a legacy admin database with
    a live and a dead registration of billing's app (plus an admin row and another app)."""
    reg = SqlExecutorRegistry(engine)
    reg.beat(_beat("live1", host="h-live", pid=101, in_flight=2))
    reg.beat(_beat("lost1", host="h-lost", pid=102, interval=timedelta(seconds=1)))
    _age_row(engine, "lost1", 10_000)
    reg.beat(_beat("stop1", host="h-stop", pid=103, biz_codes=("alerts",)))
    reg.goodbye("stop1")
    legacy = _legacy_db(
        tmp_path / "xxl.db",
        [
            ("EXECUTOR", "billing", "http://10.0.0.1:9999/", _utc_wall(10)),
            ("EXECUTOR", "billing", "http://10.0.0.2:9999/", _utc_wall(200)),
            ("EXECUTOR", "other", "http://10.0.0.3:9999/", _utc_wall(5)),
            ("ADMIN", "billing", "http://admin:8080/", _utc_wall(5)),
        ],
    )
    return engine.url.render_as_string(hide_password=False), legacy


def test_executors_text_table_shows_each_state_and_legacy_rows_marked(registry_store: tuple[str, str]) -> None:
    url, legacy = registry_store
    res = CliRunner().invoke(
        cli, ["executors", "--url", url, "--legacy-url", legacy, "--legacy-db-tz", "UTC", "--business", "billing"]
    )
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[0].split() == [
        "BUSINESS",
        "HOST",
        "PID",
        "VERSION",
        "CONCURRENCY",
        "IN",
        "FLIGHT",
        "LAST",
        "SEEN",
        "STATE",
    ]
    body = [line.split() for line in lines[1:]]
    assert [(b[1], b[-1]) for b in body[:2]] == [("h-live", "live"), ("h-lost", "lost")]
    assert body[0][:6] == ["billing", "h-live", "101", "1.2.3", "8", "2"]
    legacy_lines = lines[3:]
    assert len(legacy_lines) == 2 and all("(legacy xxl-job)" in line for line in legacy_lines)
    assert "http://10.0.0.1:9999/" in legacy_lines[0] and " live " in legacy_lines[0]
    assert "http://10.0.0.2:9999/" in legacy_lines[1] and " lost " in legacy_lines[1]
    assert "h-stop" not in res.output and "admin" not in res.output and "10.0.0.3" not in res.output


def test_executors_json_with_all_includes_the_stopped(registry_store: tuple[str, str]) -> None:
    url, _legacy = registry_store
    res = CliRunner().invoke(cli, ["executors", "--url", url, "--all", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [(r["host"], r["state"], r["legacy"]) for r in rows] == [
        ("h-live", "live", False),
        ("h-lost", "lost", False),
        ("h-stop", "stopped", False),
    ]
    assert rows[2]["businesses"] == ["alerts"] and rows[2]["stopped_at"] is not None
    assert rows[1]["age_s"] >= 10 and rows[0]["in_flight"] == 2


def test_the_console_lists_the_registry_beside_the_legacy_registrations(
    registry_store: tuple[str, str], tmp_path: Path
) -> None:
    url, legacy = registry_store
    store = SqlTriggerStore(make_engine(url), SystemClock())
    not_xxl = f"sqlite:///{tmp_path / 'other.db'}"  # a batch center's: skipped, not an error
    other = make_engine(not_xxl)
    with other.begin() as conn:
        conn.execute(text("CREATE TABLE bc_task (id INTEGER PRIMARY KEY)"))
    other.dispose()
    try:
        client = TestClient(make_app(Sources(store, legacy_urls=(legacy, not_xxl), legacy_db_tz="UTC")))
        body = client.get("/api/executors", params={"business": "billing"}).json()
        assert body["notes"] == []
        assert [(r["host"], r["state"], r["legacy"]) for r in body["executors"]] == [
            ("h-live", "live", False),
            ("h-lost", "lost", False),
            ("http://10.0.0.1:9999/", "live", True),
            ("http://10.0.0.2:9999/", "lost", True),
        ]
        page = client.get("/executors?all=1")
        assert page.status_code == 200
        assert page.text.count('class="executor') == 6 and "legacy xxl-job" in page.text
        assert 'data-state="stopped"' in page.text and 'href="/executors"' in page.text
        assert 'href="/executors"' in client.get("/").text  # in the nav
    finally:
        store.engine.dispose()


def test_the_console_says_503_when_the_store_has_no_registry(tmp_path: Path) -> None:
    e = make_engine(f"sqlite:///{tmp_path / 'old.db'}")
    init_schema(e, 2)
    with e.begin() as conn:
        conn.execute(text("DROP TABLE dus_executor"))
    store = SqlTriggerStore(e, SystemClock())
    try:
        res = TestClient(make_app(Sources(store))).get("/api/executors")
        assert res.status_code == 503 and "switchyard db init" in res.json()["message"]
    finally:
        e.dispose()


def test_the_in_flight_gauge_counts_the_runs_in_work(engine: Engine) -> None:
    # Given an executor whose handler holds two runs (two messages) until released
    bus = InProcessBus(SystemClock())
    ex = Executor(bus, "d", concurrency=4, receipt_after=None)
    release = threading.Event()

    @ex.handler()
    def hold(ctx: ExecutionContext) -> None:
        release.wait(20)

    reg = SqlExecutorRegistry(engine)
    beat = Heartbeat(reg, lambda: [ex], name="x", interval=timedelta(seconds=60))
    try:
        with _Running(ex):
            _pack(bus, 1, 1)
            _pack(bus, 2, 1)
            # Then the beat reports them in flight, and none once they are done
            assert until(lambda: ex.in_flight() == 2, 10)
            assert beat.beat_once()
            assert [e.in_flight for e in reg.entries()] == [2]
            release.set()
            assert until(lambda: ex.in_flight() == 0, 10)
            assert beat.beat_once()
            assert [e.in_flight for e in reg.entries()] == [0]
    finally:
        release.set()
        ex.close()
        bus.close()


def test_legacy_registrations_follow_the_admin_rule_dead_90_s_after_the_last(tmp_path: Path) -> None:
    from readers.xxljob import XxlJobReader

    # Given registrations around 08:00 Shanghai (the admin's JDBC zone), judged at 08:01:00
    now = datetime(2026, 12, 2, 0, 1, tzinfo=timezone.utc)
    url = _legacy_db(
        tmp_path / "xxl.db",
        [
            ("EXECUTOR", "app", "http://a:9999/", datetime(2026, 12, 2, 8, 0, 0)),
            ("EXECUTOR", "app", "http://a:9999/", datetime(2026, 12, 2, 7, 50, 0)),  # a pre-2.5 duplicate
            ("EXECUTOR", "app", "http://b:9999/", datetime(2026, 12, 2, 7, 59, 31)),  # 89 s: alive
            ("EXECUTOR", "app", "http://c:9999/", datetime(2026, 12, 2, 7, 59, 30)),  # 90 s: dead
            ("EXECUTOR", "app", "http://d:9999/", None),
            ("ADMIN", "app", "http://admin:8080/", datetime(2026, 12, 2, 8, 0, 0)),
        ],
        lineage="2.4",  # no unique key on the registry before 2.5: duplicates happen
    )
    e = make_engine(url)
    try:
        found = XxlJobReader(e, db_tz="Asia/Shanghai").registered_executors(as_of=now)
    finally:
        e.dispose()
    assert [(r.app, r.address, r.alive) for r in found] == [
        ("app", "http://a:9999/", True),
        ("app", "http://b:9999/", True),
        ("app", "http://c:9999/", False),
        ("app", "http://d:9999/", False),
    ]
    assert found[0].age == timedelta(seconds=60) and found[0].updated_at == datetime(
        2026, 12, 2, 0, 0, tzinfo=timezone.utc
    )
    assert found[3].updated_at is None and found[3].age is None
