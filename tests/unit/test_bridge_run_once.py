"""An operator's "run once" of a bridged xxl-job job (issue 28): the run's own parameter
goes in as the admin's executorParam, and chosen executor addresses replace the app's
registered ones for that run (the admin's trigger dialog with an address list), laid over
the legacy row's current fields, which otherwise win (test_bridge_current_definition)."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.codec import EXECUTOR_SUBSCRIPTION, command_topic, decode_message
from scheduler_core.executor.bridge_xxljob import RUN_ONCE, run_once_params
from scheduler_core.jobspec import JobInputError, JobSpec, Schedule
from scheduler_core.model import JobCode, TriggerKind
from scheduler_core.stops import StopService
from scheduler_core.store.stops import SqlStops
from switchyard.cli import cli
from switchyard.jobs import Jobs
from switchyard.wiring import migrator_store, open_existing_store
from tests.unit.test_bridges import Xxl, ctx, xxl_params


def test_the_runs_parameter_wins_over_the_rows_current_one() -> None:
    x = Xxl(handler=lambda t: None, current_params=lambda _id: {"glue_type": "BEAN", "executor_param": "from-row"})
    try:
        once = json.loads(run_once_params(json.dumps(xxl_params()), "asked=1", ()))
        assert x.bridge(ctx(once)).ok
        assert x.bridge(ctx(xxl_params())).ok  # a scheduled run: the row's
        asked, scheduled = x.executor.triggers
        assert asked["executorParams"] == "asked=1"
        assert scheduled["executorParams"] == "from-row"
    finally:
        x.close()


def test_chosen_addresses_replace_the_apps_registered_executors() -> None:
    x = Xxl(handler=lambda t: None)
    second = x.new_executor(handler=lambda t: None)
    try:
        # registered: only the first; chosen: the second, which is not registered at all
        once = json.loads(run_once_params(json.dumps(xxl_params()), None, (second.address,)))
        assert once[RUN_ONCE] == {"addresses": [second.address]}
        result = x.bridge(ctx(once))
        assert result.ok, result.message
        assert x.executor.triggers == [] and len(second.triggers) == 1
        assert second.triggers[0]["executorParams"] == "p=1"  # no parameter asked: the job's
        # the route strategy picks among the chosen ones (LAST of two: the second)
        both = json.loads(
            run_once_params(json.dumps(xxl_params(route_strategy="LAST")), None, (x.executor.address, second.address))
        )
        assert x.bridge(ctx(both)).ok
        assert len(second.triggers) == 2 and x.executor.triggers == []
    finally:
        second.close()
        x.close()


@pytest.mark.parametrize(
    ("once", "said"),
    [("not an object", "run_once is not a JSON object"), ({"addresses": ["ftp://x"]}, "not a list of addresses")],
)
def test_a_malformed_run_once_is_a_clear_failure_and_nothing_is_triggered(once: Any, said: str) -> None:
    x = Xxl(handler=lambda t: None)
    try:
        result = x.bridge(ctx(xxl_params(**{RUN_ONCE: once})))
        assert not result.ok and said in result.message
        assert x.executor.triggers == []
    finally:
        x.close()


def test_run_once_params_refuses_what_is_not_an_address_or_not_bridge_json() -> None:
    with pytest.raises(ValueError, match=r"not an executor address: '10\.0\.0\.7:9999'"):
        run_once_params(json.dumps(xxl_params()), None, ("10.0.0.7:9999",))
    with pytest.raises(ValueError, match="not JSON"):
        run_once_params("p=1", "x", ())


def test_job_run_takes_addresses_only_for_a_bridged_job(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    url = f"sqlite:///{tmp_path / 'center.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    monkeypatch.setenv("SWITCHYARD_URL", url)
    add = ["job", "add", "billing:native", "--handler", "h", "--cron", "0 0 * * * ?"]
    assert CliRunner().invoke(cli, add).exit_code == 0
    res = CliRunner().invoke(cli, ["job", "run", "native", "--address", "http://127.0.0.1:9999/"])
    assert res.exit_code == 2, res.output
    assert "only a bridged xxl-job job runs on chosen executor addresses" in res.output
    # a bridged job's run with a parameter and an address: both inside its bridge params
    store = open_existing_store(url)
    try:
        bus = InProcessBus(store.clock)
        bus.ensure_subscription(command_topic("billing"), EXECUTOR_SUBSCRIPTION)
        sub = bus.subscribe(command_topic("billing"), EXECUTOR_SUBSCRIPTION)
        jobs = Jobs(store, migrator_store(store), StopService(SqlStops(store), bus), "tester")
        bridged = JobSpec(
            job_code="xxl.7",
            biz_code="billing",
            handler="xxl-job-bridge",
            params=json.dumps(xxl_params()),
            schedule=Schedule(kind=TriggerKind.CRON, cron="0 0 * * * ?"),
        )
        jobs.add(bridged)
        job = store.get_job(JobCode("xxl.7"))
        assert job is not None
        with pytest.raises(JobInputError, match="not an executor address"):
            jobs.run(job, addresses=("nowhere",), bus=bus)
        jobs.run(job, params="asked=1", addresses=("http://127.0.0.1:9999",), bus=bus)
        got = sub.receive(10, timedelta(seconds=2))
        envs = [e for r in got for e in decode_message(r.message.payload)]
        assert len(envs) == 1
        params = json.loads(envs[0].params)
        assert params[RUN_ONCE] == {"executor_param": "asked=1", "addresses": ["http://127.0.0.1:9999/"]}
        assert params["executor_handler"] == "demoJobHandler"  # the rest of the bridge's params kept
        assert store.get_job(JobCode("xxl.7")).params == json.dumps(xxl_params())  # type: ignore[union-attr]
    finally:
        store.engine.dispose()
