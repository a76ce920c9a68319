"""The xxl-job bridge against a stand-in executor that keeps one job thread per job id
like the real one (block strategies, the GLUE kill, executorTimeout from the run's
start): GLUE edits reach the executor, bridged runs never share legacy's job thread,
the timeout means xxl-job's executor_timeout, routes go through the bridge, and the
admin-facing endpoint checks the token like the admin, never logs it, and stays quiet."""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.request
from datetime import timedelta
from typing import Any

import pytest

from scheduler_core.executor.bridges import XxlJobBridge
from tests.standins.xxl_executor import XxlExecutorStandIn
from tests.unit.test_bridges import XXL_TOKEN, Xxl, ctx, post, xxl_params
from tests.waiting import until

V1, V2 = "#!/bin/sh\necho v1\n", "#!/bin/sh\necho v2\n"
T1, T2 = 1_764_000_000_000, 1_764_000_600_000


def direct_run(executor: XxlExecutorStandIn, **over: Any) -> dict[str, Any]:
    """A trigger as the legacy admin sends it (its own auto-increment logId)."""
    body: dict[str, Any] = {
        "jobId": 7,
        "executorHandler": "",
        "executorParams": "",
        "executorBlockStrategy": "SERIAL_EXECUTION",
        "executorTimeout": 0,
        "logId": 101,
        "logDateTime": int(time.time() * 1000),
        "glueType": "GLUE_SHELL",
        "glueSource": V1,
        "glueUpdatetime": T1,
        "broadcastIndex": 0,
        "broadcastTotal": 1,
    }
    body.update(over)
    return post(executor.address + "run", body, XXL_TOKEN)


def glue_params(source: str, updatetime: int, **over: Any) -> dict[str, Any]:
    return xxl_params(
        glue_type="GLUE_SHELL", glue_source=source, glue_updatetime=updatetime, executor_handler="", **over
    )


# -- the stand-in behaves like ExecutorBizImpl / JobThread ------------------------------


def test_standin_kills_the_running_glue_thread_on_a_new_version_and_applies_block_strategies() -> None:
    gate = threading.Event()
    with XxlExecutorStandIn(handler=lambda t: gate.wait(5) and None, access_token=XXL_TOKEN) as ex:  # type: ignore[arg-type, return-value]
        assert direct_run(ex, logId=1)["code"] == 200
        assert ex.wait_started(1)  # running, so the GLUE kill below finds it running, not queued
        assert direct_run(ex, logId=2)["code"] == 200  # SERIAL_EXECUTION: queued
        assert direct_run(ex, logId=3, executorBlockStrategy="DISCARD_LATER")["msg"].startswith("block strategy")
        assert direct_run(ex, logId=4, glueUpdatetime=T2, glueSource=V2)["code"] == 200  # the GLUE kill
        assert ex.wait_result(2) == (
            500,
            "change job source or glue type, and terminate the old job thread. "
            "[job not executed, in the job queue, killed.]",
        )
        gate.set()
        assert ex.wait_result(1) == (
            500,
            "change job source or glue type, and terminate the old job thread. [job running, killed]",
        )
        assert ex.wait_result(4) == (200, "")
        gate.clear()
        assert direct_run(ex, logId=5, glueUpdatetime=T2, glueSource=V2)["code"] == 200
        assert ex.wait_started(5)  # else COVER_EARLY would find 5 still in the queue
        assert (
            direct_run(ex, logId=6, glueUpdatetime=T2, glueSource=V2, executorBlockStrategy="COVER_EARLY")["code"]
            == 200
        )
        gate.set()
        assert ex.wait_result(5) == (500, "block strategy effect：Cover Early [job running, killed]")
        assert ex.wait_result(6) == (200, "")


# -- 1. GLUE as xxl-job sends it ----------------------------------------------------------


def test_an_edited_glue_source_and_its_updatetime_reach_the_executor() -> None:
    ran: list[str] = []
    x = Xxl(handler=lambda t: ran.append(t["glueSource"]) and None)  # type: ignore[func-returns-value]
    try:
        assert x.bridge(ctx(glue_params(V1, T1))).ok
        # edited in the admin after migration; the re-migrated params carry V2 and its time
        assert x.bridge(ctx(glue_params(V2, T2))).ok
        first, second = x.executor.triggers
        assert (first["glueType"], first["glueSource"], first["glueUpdatetime"]) == ("GLUE_SHELL", V1, T1)
        assert (second["glueType"], second["glueSource"], second["glueUpdatetime"]) == ("GLUE_SHELL", V2, T2)
        assert ran == [V1, V2]
        assert len(x.executor.kills) == 1  # the executor rebuilt the job's GLUE handler for V2
    finally:
        x.close()


# -- 2. never sharing a job thread with legacy --------------------------------------------


def test_a_bridged_run_neither_kills_legacys_running_glue_thread_nor_queues_behind_it() -> None:
    gate = threading.Event()
    x = Xxl(handler=lambda t: (gate.wait(5) if t["logId"] == 101 else None) and None, beat_interval=0.2)
    try:
        assert direct_run(x.executor, logId=101)["code"] == 200  # legacy's run of job 7, V1, running
        assert x.executor.wait_started(101)
        # the new side's run of the same job, with a newer version and legacy's own block strategy
        result = x.bridge(ctx(glue_params(V2, T2, job_id="7")))
        assert result.ok, result.message  # not queued behind legacy's run (the gate is still shut)
        assert x.executor.kills == []
        gate.set()
        assert x.executor.wait_result(101) == (200, "")  # legacy's run ended as it would have alone
    finally:
        gate.set()
        x.close()


def test_the_same_runs_on_legacys_job_id_would_kill_it() -> None:
    """The stand-in reproduces what the live dual-run saw when the bridge used the legacy id."""
    gate = threading.Event()
    with XxlExecutorStandIn(handler=lambda t: gate.wait(5) and None, access_token=XXL_TOKEN) as ex:  # type: ignore[arg-type, return-value]
        assert direct_run(ex, logId=101)["code"] == 200
        assert ex.wait_started(101)  # running, not queued, when the second trigger replaces the thread
        assert direct_run(ex, logId=10**15 + 1, glueSource=V2, glueUpdatetime=T2)["code"] == 200
        gate.set()
        code, msg = ex.wait_result(101) or (0, "")
        assert code == 500 and msg.endswith("[job running, killed]")


def test_job_ids_the_bridge_cannot_mirror_are_refused_with_the_way_out() -> None:
    x = Xxl()
    try:
        result = x.bridge(ctx(xxl_params(job_id=str(2**30))))
        assert not result.ok and "--shadow" in result.message and x.executor.triggers == []
    finally:
        x.close()


# -- 3. timeout semantics ------------------------------------------------------------------


def test_executor_timeout_counts_run_time_not_the_wait_in_the_job_threads_queue() -> None:
    x = Xxl(handler=lambda t: time.sleep(1.2 if t["executorParams"] != "slow" else 4.0), beat_interval=0.2)
    try:
        params = xxl_params(executor_timeout=2)
        box: list[Any] = []
        threads = [
            threading.Thread(target=lambda: box.append(x.bridge(ctx(params, timeout=timedelta(seconds=2)))))
            for _ in range(2)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(15)
        # each ran 1.2 s of its 2 s; the second waited ~1.2 s in the queue first (2.4 s in all)
        assert len(box) == 2 and all(r.ok for r in box), [r.message for r in box]
        assert [t["executorTimeout"] for t in x.executor.triggers] == [2, 2]
        starts = sorted(x.executor.started.values())
        assert starts[1] - starts[0] >= 1.1  # the second did queue behind the first
        slow = x.bridge(ctx(xxl_params(executor_timeout=2, executor_param="slow")))
        assert slow.timed_out and not slow.ok and "502" in slow.message  # the executor's own timeout
    finally:
        x.close()


def test_the_sdk_puts_no_timeout_of_its_own_around_the_bridge() -> None:
    assert XxlJobBridge.enforces_own_timeout is True


# -- 4. a route strategy through the bridge -------------------------------------------------


def test_round_route_spreads_bridged_runs_over_the_live_executors() -> None:
    x = Xxl()
    second = x.new_executor()
    x.addresses.append(second.address)
    try:
        for _ in range(4):
            assert x.bridge(ctx(xxl_params(route_strategy="ROUND"))).ok
        assert (len(x.executor.triggers), len(second.triggers)) == (2, 2)
        assert x.bridge(ctx(xxl_params(route_strategy="LAST"))).ok and len(second.triggers) == 3
        unknown = x.bridge(ctx(xxl_params(route_strategy="NEAREST")))
        assert not unknown.ok and "NEAREST" in unknown.message
    finally:
        second.close()
        x.close()


def test_busyover_through_the_bridge_asks_about_the_bridges_own_job_thread() -> None:
    gate = threading.Event()
    x = Xxl(handler=lambda t: gate.wait(5) and None, beat_interval=0.2)
    second = x.new_executor()
    x.addresses.append(second.address)
    try:
        box: list[Any] = []
        first = threading.Thread(target=lambda: box.append(x.bridge(ctx(xxl_params(route_strategy="BUSYOVER")))))
        first.start()
        until(lambda: bool(x.executor.started), 5, every_s=0.01)
        gate.set()
        assert x.bridge(ctx(xxl_params(route_strategy="BUSYOVER"))).ok
        first.join(5)
        assert box and box[0].ok
        assert 2**31 - 1 - 7 in x.executor.idle_beats
    finally:
        gate.set()
        second.close()
        x.close()


# -- 5. the admin-facing endpoint ------------------------------------------------------------


def raw_post(url: str, data: bytes, headers: dict[str, str], method: str = "POST") -> dict[str, Any]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    req = urllib.request.Request(url, data=data if method == "POST" else None, headers=headers, method=method)
    with opener.open(req, timeout=5) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


@pytest.mark.parametrize("uri", ["api/callback", "api/registry", "api/registryRemove"])
def test_the_endpoint_refuses_a_missing_or_wrong_token_as_the_admin_does(uri: str) -> None:
    with XxlJobBridge(access_token=XXL_TOKEN) as bridge:
        body = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": "http://127.0.0.1:1/"}
        if uri == "api/callback":
            body = [{"logId": 10**15 + 5, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]  # type: ignore[assignment]
        for token in (None, "", "wrong", XXL_TOKEN + " "):
            assert post(bridge.callback_url + uri, body, token) == {"code": 500, "msg": "The access token is wrong."}
        assert bridge.registered_addresses("demo-app") == [] and bridge.late_callbacks == 0
        assert bridge.token_refusals == 4
        ok = post(bridge.callback_url + uri, body, XXL_TOKEN)
        assert ok["msg"] != "The access token is wrong."
        # the admin's other refusals, in its order: empty body before the token, GET, unknown uri
        assert raw_post(bridge.callback_url + uri, b"", {}) == {
            "code": 500,
            "msg": "invalid request, requestBody empty.",
        }
        assert (
            raw_post(bridge.callback_url + uri, b"", {}, method="GET")["msg"]
            == "invalid request, HttpMethod not support."
        )
        assert (
            post(bridge.callback_url + "api/kill", body, XXL_TOKEN)["msg"]
            == "invalid request, uri-mapping(kill) not found."
        )


def test_without_a_token_configured_the_endpoint_takes_any_like_the_admin() -> None:
    with XxlJobBridge(access_token=None) as bridge:
        late = [{"logId": 10**15 + 5, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]
        assert post(bridge.callback_url + "api/callback", late, None)["code"] == 200


def test_the_endpoint_binds_loopback_by_default() -> None:
    with XxlJobBridge(access_token=XXL_TOKEN) as bridge:
        assert bridge.callback_address[0] == "127.0.0.1"


def test_the_token_never_reaches_a_log_record_or_a_result(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    x = Xxl(executor_token="the-executor-has-another-token")
    try:
        refused = x.bridge(ctx(xxl_params()))
        assert not refused.ok and XXL_TOKEN not in refused.message
        post(x.bridge.callback_url + "api/callback", [{"logId": 1, "handleCode": 200}], "a-wrong-token")
        post(x.bridge.callback_url + "api/callback", [{"logId": 1, "handleCode": 200}], XXL_TOKEN)
        post(x.bridge.callback_url + "api/registry", {"registryKey": "k", "registryValue": "v"}, XXL_TOKEN)
    finally:
        x.close()
    text = "\n".join(r.getMessage() + repr(r.args) for r in caplog.records)
    assert caplog.records and XXL_TOKEN not in text and "a-wrong-token" not in text


def test_falling_through_to_the_legacy_admin_while_the_bridge_is_down_is_quiet(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The executor lists the bridge first, the legacy admin second. While the bridge is
    down the executor calls the legacy admin; once it is back, every legacy callback
    comes to it first and the executor's retries of the bridge's earlier results arrive:
    nothing of it is logged at WARNING or above."""
    from tests.standins.bc_callback import CallbackRecorder

    caplog.set_level(logging.DEBUG)
    with CallbackRecorder(body=b'{"code":200,"msg":null}') as admin:
        first = XxlJobBridge(access_token=XXL_TOKEN)
        port = first.callback_address[1]
        bridge_url = first.callback_url
        first.close()  # the bridge is down
        with XxlExecutorStandIn(access_token=XXL_TOKEN, admin_addresses=[bridge_url, admin.url + "/"]) as ex:
            assert direct_run(ex, logId=201, glueType="BEAN", executorHandler="demo")["code"] == 200
            assert ex.wait_callbacks(2)
            assert [a for a, _b, answer in ex.callbacks if answer and answer["code"] == 200] == [admin.url + "/"]
            with XxlJobBridge(access_token=XXL_TOKEN, callback_port=port) as back:  # up again
                legacy = [{"logId": 202, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]
                assert post(back.callback_url + "api/callback", legacy, XXL_TOKEN)["code"] == 500  # next admin
                earlier = [{"logId": 1_765_000_000_000_000, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]
                assert post(back.callback_url + "api/callback", earlier, XXL_TOKEN)["code"] == 200  # taken
                reg = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": ex.address}
                for _ in range(3):
                    post(back.callback_url + "api/registry", reg, XXL_TOKEN)
    loud = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert loud == [], [r.getMessage() for r in loud]
