"""`switchyard executor run --bridge xxl-job --bridge batch-center` on the real Pulsar: a
business dual-runs with zero code of its own. Commands published on the bus reach the
stand-in xxl-job executor (on the bridge's own job id) and the business's HTTP callback;
the executor's results come back through the bridge's admin-facing endpoint and go out
as results; the endpoint refuses a request without the token; the token is never logged."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.codec import CALLBACK_TOPIC, EXECUTOR_SUBSCRIPTION, command_topic, decode_results, encode_commands
from scheduler_core.model import FiredState
from scheduler_core.ports import BusMessage
from tests.integration.procs import stop_process
from tests.servers import REPO, server_url
from tests.standins.bc_callback import CallbackRecorder
from tests.standins.xxl_executor import XxlExecutorStandIn
from tests.unit.test_bridges import bc_params, post, xxl_params

pytestmark = pytest.mark.pulsar

XXL_SECRET = "xxl-cli-secret-7d1e"
BC_SECRET = "bc-cli-secret-33a0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _command(trigger: int, handler: str, params: dict[str, object]):  # type: ignore[no-untyped-def]
    from scheduler_core.model import ExecutionCommand, JobCode, TriggerId, command_id
    from tests.unit.test_bridges import T0

    cid = command_id(trigger, T0, 0)
    return cid, ExecutionCommand(
        command_id=cid,
        trigger_id=TriggerId(trigger),
        job_code=JobCode(f"demo.job{trigger}"),
        biz_code="demo",
        handler=handler,
        scheduled_at=T0,
        params=json.dumps(params),
        timeout=timedelta(seconds=5),
    )


def test_executor_run_with_bridges_needs_no_user_code(tmp_path: Path) -> None:
    pulsar = server_url("pulsar")
    prefix = f"bridgecli{uuid.uuid4().hex[:6]}"
    port = _free_port()
    endpoint = f"http://127.0.0.1:{port}/"
    bus = PulsarBus(pulsar, admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"), topic_prefix=prefix)
    results = bus.subscribe(CALLBACK_TOPIC, "test")
    bus.ensure_subscription(command_topic("demo"), EXECUTOR_SUBSCRIPTION)  # commands wait for the executor
    log = tmp_path / "executor.log"
    with XxlExecutorStandIn(access_token=XXL_SECRET, admin_addresses=[endpoint]) as xxl, CallbackRecorder() as business:
        env = {**os.environ, "PYTHONPATH": str(REPO), "XXL_TEST_TOKEN": XXL_SECRET, "BC_TEST_TOKEN": BC_SECRET}
        args = [
            sys.executable,
            "-m",
            "switchyard",
            "executor",
            "run",
            "--bridge",
            "xxl-job",
            "--bridge",
            "batch-center",
            "--business",
            "demo",
            "--bus",
            pulsar,
            "--topic-prefix",
            prefix,
            "--concurrency",
            "4",
            "--executor-address",
            xxl.address,
            "--access-token-env",
            "XXL_TEST_TOKEN",
            "--listen",
            f"127.0.0.1:{port}",
            "--bc-token-env",
            "BC_TEST_TOKEN",
            "--log-level",
            "DEBUG",
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=REPO, env=env
            )
        try:
            commands = [
                _command(1, "xxl-job-bridge", xxl_params(job_id="7")),
                _command(2, "xxl-job-bridge", xxl_params(job_id="8", executor_param="second")),
                _command(3, "batch-center-bridge", bc_params(callback_url=business.url + "/cb")),
            ]
            bus.publish([BusMessage(command_topic("demo"), encode_commands([cmd]), key=cid) for cid, cmd in commands])
            updates: dict[Any, Any] = {}
            deadline = time.monotonic() + 60
            while len(updates) < 3 and time.monotonic() < deadline and proc.poll() is None:
                for r in results.receive(10, timedelta(milliseconds=300)):
                    for u in decode_results(r.message.payload):
                        updates[u.command_id] = u
                    results.ack(r)
            assert len(updates) == 3, log.read_text(errors="replace")[-3000:]
            assert all(u.state is FiredState.SUCCEEDED for u in updates.values()), {
                c: (u.state, u.message) for c, u in updates.items()
            }
            assert sorted(t["jobId"] for t in xxl.triggers) == [2**31 - 1 - 8, 2**31 - 1 - 7]
            assert all(answer == {"code": 200, "msg": None} for _a, _b, answer in xxl.callbacks)  # taken by the bridge
            assert business.last.headers["x-bc-token"] == BC_SECRET
            # the admin-facing endpoint refuses what the admin refuses
            late = [{"logId": 10**15 + 1, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]
            assert post(endpoint + "api/callback", late, None) == {"code": 500, "msg": "The access token is wrong."}
            assert post(endpoint + "api/callback", late, XXL_SECRET)["code"] == 200
        finally:
            stop_process(proc)
            bus.close()
    text = log.read_text(errors="replace")
    assert "xxl-job bridge: endpoint " + endpoint in text
    assert XXL_SECRET not in text and BC_SECRET not in text
    assert proc.returncode == 0, text[-2000:]
