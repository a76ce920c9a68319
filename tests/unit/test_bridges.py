"""The legacy bridges against loopback stand-ins: a business callback server for the
batch center, and an xxl-job executor speaking the executor side of its protocol."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, command_topic, decode_results, encode_commands
from scheduler_core.executor.bridges import (
    BatchCenterBridge,
    LogIdAllocator,
    XxlJobBridge,
    parse_callbacks,
    register_batch_center_bridge,
    register_xxl_job_bridge,
)
from scheduler_core.executor.sdk import ExecutionContext, Executor
from scheduler_core.model import CommandId, ExecutionCommand, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import BusMessage
from tests.standins.bc_callback import CallbackRecorder
from tests.standins.xxl_executor import XxlExecutorStandIn
from tests.waiting import until

TOKEN = "s3cr3t-bc-token-9f2c"
XXL_TOKEN = "xxl-default-token"
T0 = datetime(2026, 12, 2, 6, 0, 0, tzinfo=timezone.utc)


def ctx(
    params: dict[str, Any] | str,
    *,
    item_index: int = 0,
    item_total: int = 1,
    item_param: str = "",
    timeout: timedelta = timedelta(seconds=5),
) -> ExecutionContext:
    return ExecutionContext(
        command_id=CommandId(f"1-0-{item_index}"),
        trigger_id=TriggerId(1),
        job_code=JobCode("demo.job"),
        biz_code="demo",
        scheduled_at=T0,
        item_index=item_index,
        item_total=item_total,
        item_param=item_param,
        params=params if isinstance(params, str) else json.dumps(params),
        attempt=0,
        timeout=timeout,
    )


def bc_params(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bridge": "batch-center",
        "task_id": "17",
        "callback_url": "/jobs/run",
        "callback_base_url": None,
        "http_method": "POST",
        "callback_timeout_ms": 2000,
        "payload": '{"campaign":"spring","n":3}',
        "token_ref": "bc_biz:demo",
    }
    base.update(over)
    return base


def tokens(ref: str) -> str | None:
    return TOKEN if ref == "bc_biz:demo" else None


def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = int(s.getsockname()[1])
    s.close()
    return port


@pytest.fixture
def business() -> Iterator[CallbackRecorder]:
    with CallbackRecorder() as rec:
        yield rec


# -- batch center ------------------------------------------------------------------------


def test_bc_relative_url_post_carries_payload_shard_fields_and_token(business: CallbackRecorder) -> None:
    bridge = BatchCenterBridge(tokens)
    result = bridge(ctx(bc_params(callback_base_url=business.url + "/biz/"), item_index=1, item_total=3))
    assert result.ok and not result.timed_out, result.message
    req = business.last
    assert (req.method, req.path) == ("POST", "/biz/jobs/run")
    assert req.query == {"shardIndex": ["1"], "shardTotal": ["3"]}
    assert json.loads(req.body) == {"campaign": "spring", "n": 3, "shardIndex": 1, "shardTotal": 3}
    assert req.headers["x-bc-token"] == TOKEN
    assert req.headers["content-type"].startswith("application/json")


def test_bc_absolute_url_get_sends_shards_as_query_and_no_body(business: CallbackRecorder) -> None:
    bridge = BatchCenterBridge(tokens)
    params = bc_params(
        callback_url=business.url + "/cb?biz=demo", callback_base_url="http://elsewhere.invalid", http_method="get"
    )
    result = bridge(ctx(params, item_index=0, item_total=2))
    assert result.ok, result.message
    req = business.last
    assert (req.method, req.path, req.body) == ("GET", "/cb", b"")
    assert req.query == {"biz": ["demo"], "shardIndex": ["0"], "shardTotal": ["2"]}
    assert req.headers["x-bc-token"] == TOKEN


def test_bc_explicit_shard_param_is_passed_in_query_and_body(business: CallbackRecorder) -> None:
    bridge = BatchCenterBridge(tokens)
    bridge(
        ctx(
            bc_params(callback_url=business.url + "/cb", payload=None),
            item_index=2,
            item_total=4,
            item_param='{"page":2}',
        )
    )
    req = business.last
    assert req.query["shardParam"] == ['{"page":2}']
    assert json.loads(req.body) == {"shardIndex": 2, "shardTotal": 4, "shardParam": '{"page":2}'}


def test_bc_business_without_token_gets_no_header(business: CallbackRecorder) -> None:
    result = BatchCenterBridge(lambda ref: None)(ctx(bc_params(callback_url=business.url + "/cb")))
    assert result.ok
    assert "x-bc-token" not in business.last.headers


def test_bc_http_500_is_a_failure(business: CallbackRecorder) -> None:
    business.status, business.body = 500, b'{"error":"db down"}'
    result = BatchCenterBridge(tokens)(ctx(bc_params(callback_url=business.url + "/cb")))
    assert not result.ok and not result.timed_out
    assert result.message.startswith("HTTP 500")
    assert "db down" in result.message


def test_bc_redirect_is_not_followed(business: CallbackRecorder) -> None:
    business.status = 302
    result = BatchCenterBridge(tokens)(ctx(bc_params(callback_url=business.url + "/cb")))
    assert not result.ok and result.message.startswith("HTTP 302")
    assert len(business.requests) == 1


def test_bc_slower_than_callback_timeout_is_timed_out(business: CallbackRecorder) -> None:
    business.delay = 3.0
    started = time.monotonic()
    result = BatchCenterBridge(tokens)(ctx(bc_params(callback_url=business.url + "/cb", callback_timeout_ms=300)))
    assert result.timed_out and not result.ok, result.message
    assert time.monotonic() - started < 2.0


def test_bc_without_callback_timeout_uses_the_job_timeout(business: CallbackRecorder) -> None:
    business.delay = 3.0
    params = bc_params(callback_url=business.url + "/cb", callback_timeout_ms=None)
    result = BatchCenterBridge(tokens)(ctx(params, timeout=timedelta(milliseconds=300)))
    assert result.timed_out


def test_bc_connection_refused_is_a_one_line_failure() -> None:
    url = f"http://127.0.0.1:{free_port()}/cb"
    result = BatchCenterBridge(tokens)(ctx(bc_params(callback_url=url)))
    assert not result.ok and not result.timed_out
    assert "\n" not in result.message and "refused" in result.message.lower()
    assert result.message.startswith("POST http://127.0.0.1:")


@pytest.mark.parametrize(
    "params, expected",
    [
        ({"callback_url": "file:///etc/passwd"}, "not an http(s) URL"),
        ({"callback_url": "ftp://host/x"}, "not an http(s) URL"),
        ({"callback_url": "/relative", "callback_base_url": None}, "no callback_base_url"),
        ({"callback_url": ""}, "no callback_url"),
        ({"http_method": "DELETE"}, "unsupported http_method"),
        ({"payload": "[1,2]"}, "not an object"),
        ({"payload": "{oops"}, "not valid JSON"),
    ],
)
def test_bc_refuses_params_it_cannot_call(business: CallbackRecorder, params: dict[str, Any], expected: str) -> None:
    result = BatchCenterBridge(tokens)(ctx(bc_params(**{"callback_base_url": business.url, **params})))
    assert not result.ok and expected in result.message
    assert business.requests == []


def test_bc_token_never_reaches_messages_or_logs(business: CallbackRecorder, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    bridge = BatchCenterBridge(tokens)
    results = [bridge(ctx(bc_params(callback_url=business.url + "/cb")))]
    business.status, business.body = 401, f'{{"error":"bad token {TOKEN}"}}'.encode()  # a server echoing it
    results.append(bridge(ctx(bc_params(callback_url=business.url + "/cb"))))
    business.status, business.delay = 200, 2.0
    results.append(bridge(ctx(bc_params(callback_url=business.url + "/cb", callback_timeout_ms=200))))
    results.append(bridge(ctx(bc_params(callback_url=f"http://127.0.0.1:{free_port()}/cb"))))
    results.append(BatchCenterBridge(lambda ref: 1 / 0)(ctx(bc_params(callback_url=business.url + "/cb"))))  # type: ignore
    assert [r.ok for r in results] == [True, False, False, False, False]
    assert all(r.headers.get("x-bc-token") == TOKEN for r in business.requests)  # it was sent...
    for r in results:
        assert TOKEN not in r.message  # ...and never told
    assert caplog.records, "the bridge logs its calls"
    assert all(TOKEN not in rec.getMessage() for rec in caplog.records)
    assert TOKEN not in caplog.text


def test_register_batch_center_bridge(business: CallbackRecorder) -> None:
    executor = Executor(InProcessBus(SystemClock()), "demo")
    bridge = register_batch_center_bridge(executor, tokens)
    assert executor._handlers["batch-center-bridge"] is bridge
    executor.close()


# -- xxl-job -----------------------------------------------------------------------------


def xxl_params(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "bridge": "xxl-job",
        "job_id": "7",
        "executor_handler": "demoJobHandler",
        "executor_param": "p=1",
        "glue_type": "BEAN",
        "route_strategy": "FIRST",
        "block_strategy": "SERIAL_EXECUTION",
        "child_jobs": "",
        "app_name": "demo-app",
    }
    base.update(over)
    return base


class Xxl:
    """A bridge and a stand-in executor wired to each other."""

    def __init__(
        self,
        *,
        handler: Any = None,
        executor_token: str | None = XXL_TOKEN,
        callback_style: str = "2.3",
        **bridge_kw: Any,
    ) -> None:
        self.addresses: list[str] = []
        bridge_kw.setdefault("address_provider", lambda app: list(self.addresses) if app == "demo-app" else [])
        self.bridge = XxlJobBridge(access_token=XXL_TOKEN, **bridge_kw)
        self.executor = self.new_executor(handler=handler, access_token=executor_token, callback_style=callback_style)
        self.addresses.append(self.executor.address)

    def new_executor(self, **kw: Any) -> XxlExecutorStandIn:
        kw = {k: v for k, v in kw.items() if v is not None}
        kw.setdefault("access_token", XXL_TOKEN)
        return XxlExecutorStandIn(admin_addresses=[self.bridge.callback_url], **kw)

    def close(self) -> None:
        self.executor.close()
        self.bridge.close()


@pytest.fixture
def xxl() -> Iterator[Xxl]:
    x = Xxl()
    yield x
    x.close()


def test_xxl_run_through_the_executor_ends_ok(xxl: Xxl) -> None:
    result = xxl.bridge(ctx(xxl_params()))
    assert result.ok and not result.timed_out, result.message
    [trigger] = xxl.executor.triggers
    log_id = trigger.pop("logId")
    assert isinstance(log_id, int) and 0 < log_id < 2**63
    assert abs(trigger.pop("logDateTime") - time.time() * 1000) < 60_000
    assert trigger == {
        "jobId": 2**31 - 1 - 7,
        "executorHandler": "demoJobHandler",
        "executorParams": "p=1",
        "executorBlockStrategy": "SERIAL_EXECUTION",
        "executorTimeout": 5,
        "glueType": "BEAN",
        "glueSource": "",
        "glueUpdatetime": 0,
        "broadcastIndex": 0,
        "broadcastTotal": 1,
    }
    assert xxl.executor.wait_callbacks(1)
    assert xxl.executor.callbacks[0][2] == {"code": 200, "msg": None}  # the bridge took the callback
    assert xxl.bridge.pending == 0


@pytest.mark.parametrize("style", ["2.2", "master"])
def test_xxl_callback_field_names_of_other_versions(style: str) -> None:
    def fail(trigger: dict[str, Any]) -> tuple[int, str]:
        return (500, "nope") if trigger["executorParams"] == "fail" else (200, "fine")

    x = Xxl(handler=fail, callback_style=style)
    try:
        assert x.bridge(ctx(xxl_params())).ok
        bad = x.bridge(ctx(xxl_params(executor_param="fail")))
        assert not bad.ok and "nope" in bad.message
    finally:
        x.close()


def test_xxl_failing_handler_is_a_failure_with_its_message() -> None:
    def boom(trigger: dict[str, Any]) -> None:
        raise ValueError("order table locked")

    x = Xxl(handler=boom)
    try:
        result = x.bridge(ctx(xxl_params()))
        assert not result.ok and not result.timed_out
        assert "handleCode 500" in result.message and "order table locked" in result.message
    finally:
        x.close()


def test_xxl_handler_slower_than_timeout_is_timed_out() -> None:
    release = threading.Event()
    x = Xxl(handler=lambda t: release.wait(5) and None)
    try:
        started = time.monotonic()
        result = x.bridge(ctx(xxl_params(), timeout=timedelta(seconds=1)))
        assert result.timed_out and not result.ok, result.message
        assert time.monotonic() - started < 3
        assert x.executor.triggers[0]["executorTimeout"] == 1
    finally:
        release.set()
        x.close()


def test_xxl_bridge_gives_up_after_max_wait_when_the_executor_never_reports() -> None:
    release = threading.Event()
    x = Xxl(handler=lambda t: release.wait(5) and None, max_wait_s=0.5, beat_interval=0.1)
    try:
        started = time.monotonic()
        result = x.bridge(ctx(xxl_params(executor_timeout=0), timeout=timedelta(milliseconds=100)))
        assert result.timed_out and "no result for logId" in result.message and "0.5s" in result.message
        assert time.monotonic() - started < 3
        assert x.executor.triggers[0]["executorTimeout"] == 0
        assert x.bridge.pending == 0
    finally:
        release.set()
        x.close()


def test_xxl_wrong_access_token_is_a_failure() -> None:
    x = Xxl(executor_token="another-token")
    try:
        result = x.bridge(ctx(xxl_params()))
        assert not result.ok and "The access token is wrong." in result.message
        assert len(x.executor.triggers) == 1  # it arrived, and was refused
    finally:
        x.close()


def test_xxl_broadcast_item_goes_to_the_live_executor_at_its_index(xxl: Xxl) -> None:
    second = xxl.new_executor()
    xxl.addresses.append(second.address)
    try:
        result = xxl.bridge(
            ctx(
                xxl_params(route_strategy="SHARDING_BROADCAST"),
                item_index=1,
                item_total=2,
                item_param=xxl.executor.address,
            )
        )  # the address stored at migration is stale
        assert result.ok, result.message
        assert xxl.executor.triggers == []
        [trigger] = second.triggers
        assert (trigger["broadcastIndex"], trigger["broadcastTotal"]) == (1, 2)
        # past the end of the live list: the first executor, as the admin does
        assert xxl.bridge(ctx(xxl_params(route_strategy="SHARDING_BROADCAST"), item_index=2, item_total=3)).ok
        assert [t["broadcastIndex"] for t in xxl.executor.triggers] == [2]
    finally:
        second.close()


def test_xxl_broadcast_item_param_is_used_when_no_executor_is_known(xxl: Xxl) -> None:
    second = xxl.new_executor()
    xxl.addresses.clear()
    try:
        assert xxl.bridge(
            ctx(xxl_params(route_strategy="SHARDING_BROADCAST"), item_index=1, item_total=2, item_param=second.address)
        ).ok
        assert len(second.triggers) == 1 and xxl.executor.triggers == []
    finally:
        second.close()


def test_xxl_no_address_is_a_clear_failure(xxl: Xxl) -> None:
    result = xxl.bridge(ctx(xxl_params(app_name="unknown-app")))
    assert not result.ok and "no executor address for app 'unknown-app'" in result.message


def test_xxl_failover_beats_each_address_and_runs_on_the_first_alive(xxl: Xxl) -> None:
    xxl.addresses.insert(0, f"http://127.0.0.1:{free_port()}/")
    assert xxl.bridge(ctx(xxl_params(route_strategy="FAILOVER"))).ok
    assert len(xxl.executor.triggers) == 1 and xxl.executor.beats >= 1


def test_xxl_first_route_to_a_dead_executor_is_a_failure_like_the_admin(xxl: Xxl) -> None:
    xxl.addresses.insert(0, f"http://127.0.0.1:{free_port()}/")
    result = xxl.bridge(ctx(xxl_params(route_strategy="FIRST")))
    assert not result.ok and "refused the connection" in result.message
    assert xxl.executor.triggers == []


def test_xxl_unreachable_executor_is_a_one_line_failure(xxl: Xxl) -> None:
    xxl.addresses[:] = [f"http://127.0.0.1:{free_port()}/"]
    result = xxl.bridge(ctx(xxl_params()))
    assert not result.ok and "refused the connection" in result.message and "\n" not in result.message


def test_xxl_glue_job_without_source_is_refused(xxl: Xxl) -> None:
    result = xxl.bridge(ctx(xxl_params(glue_type="GLUE_SHELL")))
    assert not result.ok and "needs glue_source" in result.message
    assert xxl.executor.triggers == []


def test_xxl_log_ids_are_unique_and_increasing_across_bridge_instances() -> None:
    seen: list[int] = []
    for _ in range(2):
        x = Xxl()
        try:
            for _ in range(3):
                assert x.bridge(ctx(xxl_params())).ok
            seen += [t["logId"] for t in x.executor.triggers]
        finally:
            x.close()
    assert len(seen) == 6 and seen == sorted(set(seen))
    assert all(0 < i < 2**63 for i in seen)


def test_log_id_allocator_is_monotonic_through_bursts_clock_steps_and_restarts() -> None:
    now = [1_765_000_000_000]
    alloc = LogIdAllocator(lambda: now[0])
    burst = [alloc() for _ in range(2500)]  # more than 1000 in one ms
    now[0] -= 5_000  # the clock steps back
    burst.append(alloc())
    assert burst == sorted(set(burst))
    now[0] += 10_000
    restarted = LogIdAllocator(lambda: now[0])
    assert restarted() > burst[-1]
    assert burst[-1] < 2**63 and LogIdAllocator()() > 1_700_000_000_000_000


def test_xxl_lost_executor_is_reported_without_waiting_for_the_timeout() -> None:
    release = threading.Event()
    x = Xxl(handler=lambda t: release.wait(5) and None, beat_interval=0.2, lost_after_beats=2)
    try:
        x.executor.send_callbacks = False
        threading.Timer(0.3, x.executor.close).start()
        started = time.monotonic()
        result = x.bridge(ctx(xxl_params(executor_timeout=0), timeout=timedelta(seconds=30)))
        assert not result.ok and not result.timed_out and "lost" in result.message
        assert time.monotonic() - started < 5
    finally:
        release.set()
        x.bridge.close()


def post(url: str, body: Any, token: str | None) -> dict[str, Any]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["XXL-JOB-ACCESS-TOKEN"] = token
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=5) as resp:
        return json.loads(resp.read())  # type: ignore[no-any-return]


def test_xxl_callback_endpoint_checks_the_access_token(xxl: Xxl) -> None:
    assert xxl.bridge(ctx(xxl_params())).ok
    log_id = xxl.executor.triggers[0]["logId"]
    late = [{"logId": log_id, "logDateTim": 0, "handleCode": 200, "handleMsg": ""}]
    assert post(xxl.bridge.callback_url + "api/callback", late, "wrong")["code"] == 500
    assert post(xxl.bridge.callback_url + "api/callback", late, None)["code"] == 500
    # a repeat of a result it minted the logId for: taken (else the executor retries forever)
    assert post(xxl.bridge.callback_url + "xxl-job-admin/api/callback", late, XXL_TOKEN)["code"] == 200
    assert xxl.bridge.late_callbacks == 1


def test_xxl_foreign_callback_without_relay_is_refused_so_the_executor_tries_its_next_admin(xxl: Xxl) -> None:
    legacy = [{"logId": 4711, "logDateTim": 0, "handleCode": 200, "handleMsg": "legacy run"}]
    answer = post(xxl.bridge.callback_url + "api/callback", legacy, XXL_TOKEN)
    assert answer["code"] == 500 and "4711" in answer["msg"]
    assert xxl.bridge.unknown_callbacks == 1


def test_xxl_foreign_callbacks_and_registrations_are_relayed_to_the_legacy_admin() -> None:
    with CallbackRecorder(body=b'{"code":200,"msg":null}') as admin:
        x = Xxl(forward_to=[admin.url + "/xxl-job-admin"])
        try:
            assert x.bridge(ctx(xxl_params())).ok  # ours: kept
            assert admin.requests == []
            legacy = [{"logId": 4711, "logDateTim": 0, "handleCode": 200, "handleMsg": "legacy run"}]
            assert post(x.bridge.callback_url + "api/callback", legacy, XXL_TOKEN)["code"] == 200
            reg = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": x.executor.address}
            assert post(x.bridge.callback_url + "api/registry", reg, XXL_TOKEN)["code"] == 200
            assert [(r.path, json.loads(r.body)) for r in admin.requests] == [
                ("/xxl-job-admin/api/callback", legacy),
                ("/xxl-job-admin/api/registry", reg),
            ]
            assert admin.requests[0].headers["xxl-job-access-token"] == XXL_TOKEN
            admin.status = 503  # the legacy admin is down: the executor must try its next admin itself
            assert post(x.bridge.callback_url + "api/callback", legacy, XXL_TOKEN)["code"] == 500
        finally:
            x.close()


def test_xxl_without_address_provider_uses_executors_registered_with_the_bridge() -> None:
    x = Xxl(address_provider=None)
    try:
        assert not x.bridge(ctx(xxl_params())).ok
        reg = {"registryGroup": "EXECUTOR", "registryKey": "demo-app", "registryValue": x.executor.address}
        # noted, but refused: the executor goes on to register with the legacy admin too
        assert post(x.bridge.callback_url + "api/registry", reg, XXL_TOKEN)["code"] == 500
        assert x.bridge.registered_addresses("demo-app") == [x.executor.address]
        assert x.bridge(ctx(xxl_params())).ok
        assert post(x.bridge.callback_url + "api/registryRemove", reg, XXL_TOKEN)["code"] == 500
        assert x.bridge.registered_addresses("demo-app") == []
    finally:
        x.close()


def test_xxl_close_stops_the_callback_server_and_releases_waiters() -> None:
    release = threading.Event()
    x = Xxl(handler=lambda t: release.wait(5) and None)
    try:
        box: list[Any] = []
        t = threading.Thread(target=lambda: box.append(x.bridge(ctx(xxl_params(), timeout=timedelta(seconds=20)))))
        t.start()
        until(lambda: bool(x.executor.triggers), 5, every_s=0.01)
        host, port = x.bridge.callback_address
        x.bridge.close()
        t.join(5)
        assert box and not box[0].ok and "closed" in box[0].message
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((host, port), timeout=2).close()
        assert not x.bridge(ctx(xxl_params())).ok
    finally:
        release.set()
        x.executor.close()


def test_parse_callbacks_reads_every_version() -> None:
    got = parse_callbacks(
        [
            {"logId": 1, "logDateTim": 5, "handleCode": 200, "handleMsg": None},
            {"logId": 2, "logDateTime": 5, "handleCode": 502, "handleMsg": "job execute timeout"},
            {"logId": 3, "logDateTim": 5, "executeResult": {"code": 500, "msg": "x"}},
        ]
    )
    assert [(c.log_id, c.code, c.message) for c in got] == [
        (1, 200, ""),
        (2, 502, "job execute timeout"),
        (3, 500, "x"),
    ]
    with pytest.raises(ValueError):
        parse_callbacks([{"handleCode": 200}])


# -- end to end through the SDK on the in-process bus ------------------------------------


def demo_command(trigger: int, handler: str, params: dict[str, Any], **kw: Any) -> tuple[CommandId, ExecutionCommand]:
    """A command of business "demo" for `handler`, scheduled at T0 (`kw`: more of its fields)."""
    cid = command_id(trigger, T0, kw.get("item_index", 0))
    return cid, ExecutionCommand(
        command_id=cid,
        trigger_id=TriggerId(trigger),
        job_code=JobCode(f"demo.job{trigger}"),
        biz_code="demo",
        handler=handler,
        scheduled_at=T0,
        params=json.dumps(params),
        timeout=timedelta(seconds=5),
        **kw,
    )


def publish(bus: InProcessBus, trigger: int, handler: str, params: dict[str, Any], **kw: Any) -> CommandId:
    cid, cmd = demo_command(trigger, handler, params, **kw)
    bus.publish([BusMessage(command_topic("demo"), encode_commands([cmd]), key=cid)])
    return cid


def test_end_to_end_through_the_sdk(business: CallbackRecorder) -> None:
    bus = InProcessBus(SystemClock())
    executor = Executor(bus, "demo")
    register_batch_center_bridge(executor, tokens)
    x = Xxl()
    register_xxl_job_bridge(executor, x.bridge)
    results_sub = bus.subscribe(CALLBACK_TOPIC, "test")
    try:
        bc_ok = publish(
            bus, 1, "batch-center-bridge", bc_params(callback_url=business.url + "/cb"), item_total=2, item_index=1
        )
        xxl_ok = publish(bus, 2, "xxl-job-bridge", xxl_params())
        bc_fail = publish(bus, 3, "batch-center-bridge", bc_params(callback_url=f"http://127.0.0.1:{free_port()}/"))
        handled = 0
        deadline = time.monotonic() + 10
        while handled < 3 and time.monotonic() < deadline:
            handled += executor.poll_once(timeout=timedelta(milliseconds=200))
        assert handled == 3
        updates: dict[Any, Any] = {}
        while len(updates) < 3 and time.monotonic() < deadline:
            for r in results_sub.receive(10, timedelta(milliseconds=200)):
                for u in decode_results(r.message.payload):
                    updates[u.command_id] = u
                results_sub.ack(r)
        assert updates[bc_ok].state is FiredState.SUCCEEDED, updates[bc_ok].message
        assert updates[xxl_ok].state is FiredState.SUCCEEDED, updates[xxl_ok].message
        assert updates[bc_fail].state is FiredState.FAILED and "refused" in updates[bc_fail].message.lower()
        assert business.last.query["shardIndex"] == ["1"] and json.loads(business.last.body)["shardTotal"] == 2
        assert x.executor.triggers[0]["jobId"] == 2**31 - 1 - 7  # its own job thread, not legacy job 7's
    finally:
        executor.close()
        x.close()
