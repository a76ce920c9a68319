"""`switchyard run kill` on the real servers: MariaDB store, Pulsar bus, a real
`switchyard scheduler run` process (it fires, consumes the results and relays the stored
kill requests on the control channel) and a real executor process
(`switchyard executor run --handlers tests.integration.kill_handlers`).

- a kill without `--bus` is stored only; the scheduler relays it, the cooperating
  handler sees it and returns, the run is recorded killed;
- with `--bus` the command publishes it itself and prints the executor's answer: a
  handler that ignores the kill is reported still running, then timed out by its job
  timeout;
- the xxl-job bridge, on Pulsar, calls the legacy executor's `/kill` (the stand-in) as
  the admin does, and the run is recorded killed;
- a command id or job that does not exist exits 2 naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_results, encode_commands
from scheduler_core.executor import Executor
from scheduler_core.executor.bridge_xxljob import XXL_JOB_HANDLER, XxlJobBridge, bridge_job_id, register_xxl_job_bridge
from scheduler_core.kills import KillService
from scheduler_core.model import (
    CommandId,
    ExecutionCommand,
    FiredRecord,
    FiredState,
    Job,
    JobCode,
    Trigger,
    TriggerId,
    TriggerKind,
    command_id,
)
from scheduler_core.ports import BusMessage, FiredUpdate
from scheduler_core.store.engine import make_engine
from scheduler_core.store.kills import SqlKills
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, executor_args, start_cli, start_scheduler, stop_process
from tests.servers import REPO, server_url
from tests.standins.xxl_executor import XxlExecutorStandIn
from tests.unit.test_bridges import XXL_TOKEN, xxl_params
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar]

BIZ = "killreal"


@dataclass
class Center:
    store: SqlTriggerStore
    url: str
    pulsar: str
    prefix: str
    events: Path
    scheduler: SchedulerProc
    executor: subprocess.Popen[bytes]
    executor_log: Path

    def events_of(self, cid: str) -> list[str]:
        return [line.split(" ", 1)[1] for line in self.events.read_text().splitlines() if line.startswith(cid + " ")]

    def logs(self) -> str:
        return (
            f"--- scheduler\n{self.scheduler.log_text()[-3000:]}\n"
            f"--- executor\n{self.executor_log.read_text(errors='replace')[-3000:]}"
        )

    def fire(self, job: str, in_s: float = 2.0) -> str:
        """A one-shot of `job` due in `in_s`; the command id of its run, once it started."""
        (t,) = self.store.add_triggers(
            [
                Trigger(
                    job_code=JobCode(job),
                    biz_code=BIZ,
                    kind=TriggerKind.ONCE,
                    next_fire_at=self.store.clock.now() + timedelta(seconds=in_s),
                )
            ]
        )
        assert t.id is not None
        got: list[FiredRecord] = []

        def fired() -> bool:
            got[:] = [r for r in self.store.fired_between(BIZ, t.next_fire_at, t.next_fire_at + timedelta(seconds=1))]
            got[:] = [r for r in got if r.trigger_id == t.id]
            return bool(got)

        assert until(fired, 30), self.logs()
        cid = got[0].command_id
        assert until(lambda: "started" in self.events_of(cid), 30), self.logs()
        return cid

    def state(self, cid: str) -> FiredRecord:
        return self.store.get_fired([CommandId(cid)])[CommandId(cid)]


@pytest.fixture(scope="module")
def center(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Center]:
    tmp = tmp_path_factory.mktemp("kill")
    pulsar = server_url("pulsar")
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, SystemClock())
        store.put_job(Job(job_code=JobCode("kill:cooperating"), biz_code=BIZ, handler="h"))
        # the kill must reach the run before its timeout: `run kill` is a process of its own
        # (the CLI's imports, a Pulsar connection), which took over 10 s with the suite's
        # workers sharing 2 cores; 25 s leaves it room
        store.put_job(Job(job_code=JobCode("kill:stubborn"), biz_code=BIZ, handler="h", timeout=timedelta(seconds=25)))
        prefix = f"kill{uuid.uuid4().hex[:6]}"
        events = tmp / "events.txt"
        events.touch()
        scheduler = start_scheduler("s0", tmp, url=url, bus=pulsar, etcd="local", key="/k", prefix=prefix)
        log = tmp / "executor.log"
        env = {**os.environ, "KILL_EVENTS": str(events), "PYTHONPATH": str(REPO)}
        args = executor_args(BIZ, pulsar, prefix, 4, "--handlers", "tests.integration.kill_handlers")
        with log.open("wb") as out:
            executor = start_cli(args, out, cwd=REPO, env=env)
        try:
            yield Center(store, url, pulsar, prefix, events, scheduler, executor, log)
        finally:
            stop_process(executor)
            scheduler.stop()
            engine.dispose()


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    argv, env = urls_in_env(args, {**os.environ, "PYTHONPATH": str(REPO), "SWITCHYARD_BUS": "memory"})
    return subprocess.run(
        [sys.executable, "-m", "switchyard", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_a_kill_without_the_bus_is_relayed_by_the_scheduler_and_the_cooperating_run_is_recorded_killed(
    center: Center,
) -> None:
    cid = center.fire("kill:cooperating")
    done = _cli("run", "kill", cid, "--url", center.url, "--wait", "20")
    assert done.returncode == 0, done.stdout + done.stderr + center.logs()
    assert "stored; the process holding the bus" in done.stdout
    assert f"{cid}: killed: killed by an operator" in done.stdout, done.stdout + center.logs()
    rec = center.state(cid)
    assert rec.state is FiredState.KILLED and "stopped early" in rec.message
    assert center.events_of(cid) == ["started", "returned heard=True cancelled=True"]


def test_a_kill_with_the_bus_answers_still_running_for_a_handler_that_ignores_it_then_it_times_out(
    center: Center,
) -> None:
    cid = center.fire("kill:stubborn")
    done = _cli(
        "run", "kill", cid, "--url", center.url, "--bus", center.pulsar, "--topic-prefix", center.prefix, "--wait", "10"
    )
    assert done.returncode == 0, done.stdout + done.stderr + center.logs()
    assert "published on the bus" in done.stdout
    assert f"{cid}: still_running: the handler has not returned" in done.stdout, done.stdout + center.logs()
    assert "job timeout (25s)" in done.stdout
    assert until(lambda: center.state(cid).state.is_final, 30), center.logs()
    rec = center.state(cid)
    assert rec.state is FiredState.TIMED_OUT and "ignored the killed by an operator" in rec.message, rec


def test_names_that_do_not_exist_exit_2(center: Center) -> None:
    missing = command_id(999_999, center.store.clock.now(), 0)
    done = _cli("run", "kill", missing, "--url", center.url)
    assert done.returncode == 2 and f"no such run: {missing}" in done.stderr, done.stdout + done.stderr
    done = _cli("run", "kill", "--job", "kill:nosuch", "--url", center.url)
    assert done.returncode == 2 and "no such job: kill:nosuch" in done.stderr, done.stdout + done.stderr


def test_a_kill_of_a_bridged_run_on_pulsar_calls_the_legacy_executors_kill(tmp_path: Path) -> None:
    pulsar = server_url("pulsar")
    prefix = f"killx{uuid.uuid4().hex[:6]}"
    gate = threading.Event()
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, SystemClock())
        bus = PulsarBus(pulsar, admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"), topic_prefix=prefix)
        results = bus.subscribe(CALLBACK_TOPIC, "test")
        bridge = XxlJobBridge(access_token=XXL_TOKEN, beat_interval=0.5)
        standin = XxlExecutorStandIn(
            handler=lambda t: gate.wait(30) and None,  # type: ignore[arg-type, return-value]
            access_token=XXL_TOKEN,
            admin_addresses=[bridge.callback_url],
        )
        bridge.address_provider = lambda app: [standin.address]
        ex = Executor(bus, BIZ, concurrency=2)
        register_xxl_job_bridge(ex, bridge)
        stop = threading.Event()
        th = threading.Thread(target=ex.run, args=(stop,), daemon=True)
        th.start()
        try:
            now = store.clock.now_ms()
            cid = command_id(5, now, 0)
            cmd = ExecutionCommand(
                command_id=cid,
                trigger_id=TriggerId(5),
                job_code=JobCode("kill:bridged"),
                biz_code=BIZ,
                handler=XXL_JOB_HANDLER,
                scheduled_at=from_ms(now),
                params=json.dumps(xxl_params()),
                timeout=timedelta(0),
            )
            bus.publish([BusMessage(command_topic(BIZ), encode_commands([cmd]), key=cid)])
            assert until(lambda: bool(standin.started), 30)
            KillService(SqlKills(store), store.clock, bus).request(BIZ, command_id=cid, by="it")
            got: dict[str, FiredUpdate] = {}

            def result() -> bool:
                for r in results.receive(10, timedelta(milliseconds=200)):
                    for u in decode_results(r.message.payload):
                        if u.state is not FiredState.RECEIVED:
                            got[u.command_id] = u
                    results.ack(r)
                return cid in got

            assert until(result, 30)
        finally:
            gate.set()
            stop.set()
            th.join(15)
            ex.close()
            standin.close()
            bridge.close()
            bus.close()
            engine.dispose()
    assert standin.kill_requests == [bridge_job_id(7)]
    assert got[cid].state is FiredState.KILLED
    assert "scheduling center kill job. [job running, killed]" in got[cid].message
