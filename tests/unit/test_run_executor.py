"""The run log's executor (issue 28): an executor's results name the process that ran
them (the instance id it heartbeats with into the executor registry), the store keeps it
on the fired record (items and pages, forward-only like the rest of a result), `runs`
shows it with its registry name; a result of an executor older than the field is
accepted and leaves the column empty; `db init` adds the column to an older store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock, SystemClock
from scheduler_core.codec import (
    CALLBACK_TOPIC,
    EnvelopeResult,
    command_topic,
    decode_results,
    encode_envelope_results,
    encode_packed,
    encode_results,
    envelope_body,
)
from scheduler_core.errors import SchemaError
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.executor.heartbeat import Heartbeat
from scheduler_core.model import CommandId, Epoch, ExecutionCommand, FiredRecord, FiredState, JobCode, TriggerId
from scheduler_core.model import command_id as cid_of
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.store import run_log
from scheduler_core.store.admin import tables_for
from scheduler_core.store.executors import SqlExecutorRegistry
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.backends import sql_store
from tests.unit.test_executor_packs import _collect

KINDS = [pytest.param("sqlite"), pytest.param("mariadb", marks=pytest.mark.mariadb)]
NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
T1 = 1_700_000_000_000


def _publish(bus: InProcessBus, scheduled_ms: int, items: int = 1) -> list[CommandId]:
    t = from_ms(scheduled_ms)
    run = ExecutionCommand(
        command_id=cid_of(1, t, 0),
        trigger_id=TriggerId(1),
        job_code=JobCode("j"),
        biz_code="d",
        handler="h",
        scheduled_at=t,
        item_total=items,
        epoch=Epoch(1),
        timeout=timedelta(0),
    )
    idx = [(i, "") for i in range(items)]
    bus.publish([BusMessage(command_topic("d"), encode_packed([envelope_body(run, idx)]), key=str(scheduled_ms))])
    return [cid_of(1, t, i) for i, _p in idx]


@pytest.mark.parametrize("fails", [False, True], ids=["quick-path", "ordinary-path"])
def test_a_result_names_the_executor_process_that_ran_it(fails: bool) -> None:
    bus = InProcessBus(SystemClock())
    results = bus.subscribe(CALLBACK_TOPIC, "t")
    ex = Executor(bus, "d", receipt_after=None, instance_id="exec-a1")

    @ex.handler()
    def handle(ctx: ExecutionContext) -> None:
        if fails:
            raise RuntimeError("no")

    ids = _publish(bus, T1, items=1 if not fails else 2)
    assert ex.poll_once() == 1
    got = _collect(results, len(ids))
    ex.close()
    assert set(got) == set(ids)
    assert {u.executor for u in got.values()} == {"exec-a1"}
    assert {u.state for u in got.values()} == {FiredState.FAILED if fails else FiredState.SUCCEEDED}


def test_an_executor_and_its_heartbeat_share_one_id() -> None:
    bus = InProcessBus(SystemClock())
    ex = Executor(bus, "d", receipt_after=None)
    other = Executor(bus, "e", receipt_after=None)
    try:
        assert len(ex.instance_id) == 32 and ex.instance_id != other.instance_id  # one per process start
        beat = Heartbeat(_NoWriter(), lambda: [ex], name="x", instance_id=ex.instance_id)
        assert beat.snapshot().instance_id == ex.instance_id
        assert Heartbeat(_NoWriter(), lambda: [ex], name="x").instance_id not in (ex.instance_id, "")
    finally:
        ex.close()
        other.close()


class _NoWriter:
    def beat(self, beat: object) -> None: ...

    def goodbye(self, instance_id: str) -> None: ...

    def prune(self) -> int:
        return 0


def test_a_result_without_the_field_decodes_as_not_named() -> None:
    """What an executor of before the field sends (both wire forms): accepted, executor None."""
    r = EnvelopeResult(
        trigger_id=1,
        scheduled_ms=T1,
        page_id=None,
        indices=[0],
        letters="S",
        received_ms=T1,
        started_ms=T1,
        finished_ms=T1,
    )
    compact = encode_envelope_results([r])
    assert b'"ex"' not in compact
    (u,) = decode_results(compact)
    assert u.state is FiredState.SUCCEEDED and u.executor is None
    per_item = encode_results([u])
    assert b'"ex"' not in per_item
    assert decode_results(per_item)[0].executor is None
    r.executor = "exec-b2"
    assert decode_results(encode_envelope_results([r]))[0].executor == "exec-b2"
    assert decode_results(encode_results(r.updates()))[0].executor == "exec-b2"


def _record(tid: int, count: int = 1) -> FiredRecord:
    at = NOW - timedelta(minutes=tid)
    return FiredRecord(
        command_id=cid_of(tid, at, 0),
        trigger_id=TriggerId(tid),
        job_code=JobCode(f"job{tid}"),
        biz_code="billing",
        scheduled_at=at,
        item_total=count,
        item_count=count,
        state=FiredState.PENDING,
    )


def _executors(store: SqlTriggerStore) -> dict[str, str | None]:
    with store.engine.connect() as conn:
        return {str(c): e for c, e in conn.execute(text("SELECT command_id, executor FROM dus_fired_record"))}


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_keeps_the_executor_of_the_result_that_moved_the_record(kind: str, tmp_path: Path) -> None:
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        item, old, page = _record(1), _record(2), _record(3, count=2)
        store.put_fired([item, old, page])
        at = NOW + timedelta(seconds=1)
        store.update_fired(
            [
                # a receipt stamp from A, then the final result from A
                FiredUpdate(item.command_id, FiredState.RECEIVED, at, received_at=at, executor="exec-a"),
                # an executor of before the field
                FiredUpdate(old.command_id, FiredState.SUCCEEDED, at, received_at=at, started_at=at),
            ]
        )
        store.update_fired([FiredUpdate(item.command_id, FiredState.SUCCEEDED, at, executor="exec-a")])
        page_ids = [cid_of(3, page.scheduled_at, i) for i in range(2)]
        store.update_fired(
            [
                FiredUpdate(c, FiredState.SUCCEEDED, at, received_at=at, page_id=page.command_id, executor="exec-p")
                for c in page_ids
            ]
        )
        # a late duplicate from another executor moves nothing, so names nothing
        store.update_fired([FiredUpdate(item.command_id, FiredState.SUCCEEDED, at, executor="exec-late")])
        assert _executors(store) == {item.command_id: "exec-a", old.command_id: None, page.command_id: "exec-p"}
        assert store.get_fired([old.command_id])[old.command_id].state is FiredState.SUCCEEDED
        rows, _nxt = run_log.page(store, run_log.RunFilter())
        assert {r["command_id"]: r["executor"] for r in rows} == _executors(store)


@pytest.mark.parametrize("kind", KINDS)
def test_db_init_adds_the_executor_column_to_a_version_5_store(kind: str, tmp_path: Path) -> None:
    with sql_store(kind, tmp_path, ManualClock(NOW)) as store:
        rec = _record(1)
        store.put_fired([rec])
        engine = store.engine
        with engine.begin() as conn:
            conn.execute(text("ALTER TABLE dus_fired_record DROP COLUMN executor"))
            conn.execute(text("UPDATE dus_meta SET value = '5' WHERE name = 'schema_version'"))
        with pytest.raises(SchemaError, match=r"version 5.*db init"):
            tables_for(engine)
        report = init_schema(engine)
        assert report.ok and "dus_fired_record.executor" in report.upgraded, report
        store.update_fired([FiredUpdate(rec.command_id, FiredState.SUCCEEDED, NOW, received_at=NOW, executor="exec-x")])
        assert _executors(store) == {rec.command_id: "exec-x"}


def test_runs_shows_the_executor_with_its_registry_name(tmp_path: Path) -> None:
    from scheduler_core.store.executors import ExecutorBeat

    recent = datetime.now(UTC) - timedelta(minutes=5)  # the CLI reads on the real clock
    with sql_store("sqlite", tmp_path, ManualClock(recent)) as store:
        named, bare, none = (
            FiredRecord(
                command_id=cid_of(tid, recent, 0),
                trigger_id=TriggerId(tid),
                job_code=JobCode(f"job{tid}"),
                biz_code="billing",
                scheduled_at=recent,
                state=FiredState.PENDING,
            )
            for tid in (1, 2, 3)
        )
        store.put_fired([named, bare, none])
        store.update_fired(
            [
                FiredUpdate(named.command_id, FiredState.SUCCEEDED, recent, received_at=recent, executor="a" * 32),
                FiredUpdate(bare.command_id, FiredState.FAILED, recent, received_at=recent, executor="b" * 32),
                FiredUpdate(none.command_id, FiredState.SUCCEEDED, recent, received_at=recent),
            ]
        )
        SqlExecutorRegistry(store.engine).beat(
            ExecutorBeat(
                instance_id="a" * 32,
                name="host-1-billing",
                biz_codes=("billing",),
                host="host",
                pid=1,
                version="1",
                concurrency=4,
                in_flight=0,
                interval=timedelta(seconds=5),
            )
        )
        url = str(store.engine.url)
    runner = CliRunner()
    got = runner.invoke(cli, ["runs", "--url", url, "--json"])
    assert got.exit_code == 0, got.output
    rows = {r["command_id"]: r for r in json.loads(got.stdout)}
    assert (rows[named.command_id]["executor"], rows[named.command_id]["executor_name"]) == ("a" * 32, "host-1-billing")
    assert (rows[bare.command_id]["executor"], rows[bare.command_id]["executor_name"]) == ("b" * 32, None)
    assert (rows[none.command_id]["executor"], rows[none.command_id]["executor_name"]) == (None, None)
    text_out = runner.invoke(cli, ["runs", "--url", url]).stdout.splitlines()
    line = {c: next(x for x in text_out if f":job{t}" in x) for c, t in ((named, 1), (bare, 2), (none, 3))}
    assert "executor host-1-billing" in line[named]
    assert f"executor {'b' * 32}" in line[bare]
    assert "executor" not in line[none]
    one = runner.invoke(cli, ["runs", "log", named.command_id, "--url", url, "--json"])
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["run"]["executor_name"] == "host-1-billing"
    assert (
        "run by executor host-1-billing" in runner.invoke(cli, ["runs", "log", named.command_id, "--url", url]).stdout
    )


def test_the_consoles_runs_page_and_api_show_the_executor(tmp_path: Path) -> None:
    from starlette.testclient import TestClient

    from scheduler_core.store.executors import ExecutorBeat
    from switchyard.console.app import make_app
    from switchyard.console.data import Sources

    with sql_store("sqlite", tmp_path, ManualClock(NOW)) as store:
        named, bare = _record(1), _record(2)
        store.put_fired([named, bare])
        store.update_fired(
            [
                FiredUpdate(named.command_id, FiredState.SUCCEEDED, NOW, received_at=NOW, executor="c" * 32),
                FiredUpdate(bare.command_id, FiredState.SUCCEEDED, NOW, received_at=NOW),
            ]
        )
        beat = dict(biz_codes=("billing",), host="h", pid=1, version="1", concurrency=1, in_flight=0)
        SqlExecutorRegistry(store.engine).beat(
            ExecutorBeat(instance_id="c" * 32, name="box-7-billing", interval=timedelta(seconds=5), **beat)  # type: ignore[arg-type]
        )
        client = TestClient(make_app(Sources(store)))
        api = {r["id"]: r for r in client.get("/api/runs").json()["runs"]}
        assert (api[named.command_id]["executor"], api[named.command_id]["executor_name"]) == (
            "c" * 32,
            "box-7-billing",
        )
        assert (api[bare.command_id]["executor"], api[bare.command_id]["executor_name"]) == (None, None)
        page = client.get("/runs").text
        assert "<th>executor</th>" in page
        assert f'data-instance="{"c" * 32}">box-7-billing</td>' in page
        detail = client.get(f"/api/runs/{named.command_id}").json()["run"]
        assert detail["executor_name"] == "box-7-billing"
        assert "box-7-billing" in client.get(f"/runs/{named.command_id}").text
