"""The xxl-job bridge: a migrated xxl-job job keeps running on the business's existing
xxl-job executor, which Switchyard drives the way an xxl-job admin does
(notes/xxl-job.md §2.13).

    bridge = XxlJobBridge(access_token=..., callback_host="127.0.0.1", callback_port=9300,
                          address_provider=lambda app: registry_addresses(app))
    register_xxl_job_bridge(executor, bridge)
    ...
    bridge.close()

One handler call:

1. picks the executor: the live addresses of `app_name` from `address_provider` (or,
   without one, the executors that registered with this bridge), routed by the job's
   `route_strategy` with the admin's rules (`xxl_routes`); a SHARDING_BROADCAST item i
   goes to the i-th live address (the first past the end; the address stored in the
   item param when none is known). Like the admin, a trigger goes to that one address: a
   refusal is a failure, which the job's retries route again;
2. mints a new logId (epoch-ms * 1000: unique, increasing, far above the admin's
   auto-increment ids) and registers a waiter;
3. `POST <address>run` with a TriggerParam JSON and header `XXL-JOB-ACCESS-TOKEN`; the
   executor answers `{"code":200}` once the run is queued on the job's thread (anything
   else is a failure, e.g. "The access token is wrong.", a DISCARD_LATER rejection, an
   unknown handler);
4. blocks until the executor POSTs the result to this bridge's endpoint (`.../api/callback`,
   the admin API: a list of {logId, logDateTim, handleCode, handleMsg}; ≤2.2.x sends
   `executeResult: {code, msg}` instead). handleCode 200 -> ok, 502 -> timed out (the
   executor's executorTimeout), anything else -> failure. The bridge keeps no clock on
   the run (the SDK puts none around it either: `enforces_own_timeout`): it waits while
   `beat` answers and `idleBeat` says the job thread runs or queues, so a wait in the
   SERIAL_EXECUTION queue never counts as run time; it gives up when the executor stops
   answering (lost), when the job thread is idle a beat interval with no result, or
   after `max_wait_s` (24 h);
5. on a kill of the run (`switchyard run kill`, `ExecutionContext.on_cancel`), does what
   the admin's "terminate" does: `POST <address>kill` with `{"jobId": <the bridge's job
   id>}` and the access token header. The executor removes the job's thread, interrupts
   it and calls the run back 500 "scheduling center kill job. [job running, killed]" (a
   queued run: "... [job not executed, in the job queue, killed.]"); it answers code 200,
   also when no thread runs the job (msg "job thread already killed."). The run is then
   recorded killed. Like the admin's, the kill is per job thread: a run queued behind it
   (SERIAL_EXECUTION) is called back killed too. (A job the migrator mapped from
   SERIAL_EXECUTION is serial in the SDK too, `model.Block.SERIAL`: its later runs wait in
   this process's queue, not the executor's, so a kill of the running one leaves them;
   each is killed by its own kill.)

The job id on the executor: the executor keeps one job thread per job id, and a request
with another GLUE version or handler kills the running thread (block strategies queue,
drop or kill while it is busy). Bridged runs use `2^31-1 - legacy id`, so during a live
dual-run they never kill legacy's GLUE thread or queue behind legacy's runs (nor the
reverse). An unknown id is fine for the executor: BEAN handlers are found by name, GLUE
handlers are built per id (scripts are written as `<id>_<glueUpdatetime>.<ext>`). Legacy
ids of 2^30 and up cannot be mirrored: such a run fails saying to dual-run with --shadow.

The executor reports results and registrations to the admin addresses in its
`xxl.job.admin.addresses`, trying them in order and stopping at the first that answers
code 200. So this bridge's `callback_url` must be listed there *first*. The endpoint
checks `XXL-JOB-ACCESS-TOKEN` exactly as the admin's OpenApiController (POST, a body,
then the token). Callbacks for logIds the bridge did not mint, and registrations (noted
for `registered_addresses`), are relayed to `forward_to` (the legacy admins); without
`forward_to` they are answered code 500 so the executor hands them to the next admin in
its list itself, and the legacy admin keeps hearing its executors. A result for a logId
of the bridge's range that has no waiter (late, or minted before a restart and retried
by the executor) is taken and dropped. Per-request logging is at DEBUG only.

The job's run fields as the admin reads them at trigger time: an operator's edit in the
admin (GLUE source, param, handler, block strategy, timeout, route) takes effect at its
next trigger there, while the commands the scheduler has already published (its
lookahead, 30 min by default) carry the params of when they were fired. With
`current_params` (the legacy `xxl_job_info` row, `readers.xxljob.live_rows.XxlCurrentRunFields`)
each run takes those fields from the row as it is now, as the admin does; a row that is
gone, of another GLUE type (the migration decides that change) or unreadable leaves the
command's params as they are. Seen on a real 3.4.2 admin: a GLUE edit during a live
dual-run reached legacy's next run, and the bridged runs only half an hour later.

TriggerParam (`POST <address>run`), the same names in 2.x and 3.x (TriggerParam /
TriggerRequest): jobId (the bridge's), executorHandler, executorParams,
executorBlockStrategy, executorTimeout (s; from the params' `executor_timeout` if
present, else the job's timeout rounded up, 0 for none), logId, logDateTime (epoch ms),
glueType, glueSource, glueUpdatetime (epoch ms of the job's glue_updatetime, from the
params), broadcastIndex, broadcastTotal (the item's index and total).
"""

from __future__ import annotations

import hmac
import json
import logging
import math
import threading
import time
import urllib.error
import urllib.request
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from scheduler_core.executor.sdk import ExecutionContext, Executor, HandlerResult
from scheduler_core.executor.xxl_routes import XxlRouter, broadcast_address

log = logging.getLogger(__name__)

XXL_JOB_HANDLER = "xxl-job-bridge"
ACCESS_TOKEN_HEADER = "XXL-JOB-ACCESS-TOKEN"
JAVA_INT_MAX = 2**31 - 1
JAVA_LONG_MAX = 2**63 - 1
SUCCESS_CODE = 200
FAIL_CODE = 500
TIMEOUT_CODE = 502
REGISTRY_DEAD_S = 90.0  # xxl-job: an executor not heard from for 3 beats is dead
MAX_CALLBACK_BYTES = 5 * 1024 * 1024  # the executor's own request limit
MAX_MESSAGE = 1000
REMEMBER_MINTED = 100_000  # logIds this bridge minted, to tell a late result from a foreign one
# Bridged runs use their own job id on the executor, so they never share a job thread
# with legacy's runs of the job: the mirror of the legacy id from the top of the Java int
# range. Legacy ids (auto-increment) below 2^30 and bridge ids above never meet.
BRIDGE_JOB_ID_LIMIT = 2**30
# A logId this process family mints is epoch-ms * 1000 (LogIdAllocator): anything at or
# above this (2001-09-09 in ms * 1000) is a bridge's, e.g. from before a restart, never
# the admin's auto-increment xxl_job_log.id.
OWN_LOG_ID_FLOOR = 10**15
# the run fields the admin reads from xxl_job_info at each trigger (XxlJobTrigger)
RUN_FIELDS = (
    "executor_handler",
    "executor_param",
    "block_strategy",
    "executor_timeout",
    "route_strategy",
    "glue_source",
    "glue_updatetime",
)
# a run-once command's overrides in a bridged job's params: {"executor_param": ..., "addresses": [...]}
RUN_ONCE = "run_once"
MAX_WAIT_S = 24 * 3600.0  # a run that never reports is given up after this, as the migrator's NO_TIMEOUT


# -- log ids -----------------------------------------------------------------------------


class LogIdAllocator:
    """epoch-ms * 1000 + a counter: strictly increasing within the process, and across
    restarts as long as the wall clock does not step back and fewer than 1000 ids per ms
    are minted on average. About 1.8e15 today, far above any legacy auto-increment
    `xxl_job_log.id`, so a relayed callback can never be mistaken for a legacy row; the
    Java long lasts until the year 2262."""

    def __init__(self, now_ms: Callable[[], int] | None = None) -> None:
        self._now_ms = now_ms or (lambda: time.time_ns() // 1_000_000)
        self._last = 0
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            self._last = max(self._last + 1, self._now_ms() * 1000)
            return self._last


_PROCESS_LOG_IDS = LogIdAllocator()  # shared by every bridge of the process


# -- wire helpers ------------------------------------------------------------------------


def bridge_job_id(legacy_job_id: int) -> int:
    """The job id a bridged run of legacy job `legacy_job_id` uses on the executor."""
    if not 0 < legacy_job_id < BRIDGE_JOB_ID_LIMIT:
        raise ValueError(
            f"job_id {legacy_job_id} is outside 1..{BRIDGE_JOB_ID_LIMIT - 1}: the bridge cannot give "
            "its runs a job thread of their own on the executor (use dual-run --shadow)"
        )
    return JAVA_INT_MAX - legacy_job_id


def _glue_updatetime(value: Any) -> int:
    """The params' glue_updatetime (epoch ms, as the admin sends jobInfo.glueUpdatetime)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value.strip())
    return 0


def _answer_ok(answer: Any) -> tuple[bool, str]:
    if isinstance(answer, dict):
        return answer.get("code") == SUCCESS_CODE, str(answer.get("msg") or "")
    return False, _one_line(str(answer), 200)


def run_once_params(job_params: str, executor_param: str | None, addresses: Sequence[str]) -> str:
    """A bridged job's params for one run now: its own, with the run's executor parameter
    and chosen executor addresses (the admin's "run once" dialog) laid over them. A
    parameter replaces the job's JSON for a native job; here the JSON is the bridge's,
    so the parameter goes inside it. ValueError on an address that is not one."""
    try:
        params = json.loads(job_params) if job_params else {}
    except ValueError as exc:
        raise ValueError(f"the job's bridge params are not JSON: {exc}") from None
    if not isinstance(params, dict):
        raise ValueError("the job's bridge params are not a JSON object")
    bad = [a for a in addresses if not looks_like_address(a)]
    if bad:
        raise ValueError(f"not an executor address: {bad[0]!r} (e.g. http://10.0.0.7:9999/)")
    once: dict[str, Any] = {}
    if executor_param is not None:
        once["executor_param"] = executor_param
    if addresses:
        once["addresses"] = [_base(a) for a in addresses]
    return json.dumps({**params, RUN_ONCE: once}, ensure_ascii=False)


def looks_like_address(value: str) -> bool:
    v = value.strip().lower()
    return (v.startswith("http://") or v.startswith("https://")) and len(v) > len("https://")


def _base(address: str) -> str:
    address = address.strip()
    return address if address.endswith("/") else address + "/"


def _one_line(text: str, limit: int = MAX_MESSAGE) -> str:
    return " ".join(str(text).split())[:limit]


@dataclass(frozen=True, slots=True)
class CallbackResult:
    log_id: int
    code: int
    message: str


def parse_callbacks(body: Any) -> list[CallbackResult]:
    """The admin's `api/callback` body, any version: handleCode/handleMsg (2.3+),
    executeResult {code, msg} (≤2.2); logDateTim (≤3.4.2) or logDateTime (master) ignored."""
    items = body if isinstance(body, list) else [body]
    out: list[CallbackResult] = []
    for item in items:
        if not isinstance(item, dict) or "logId" not in item:
            raise ValueError("a callback item needs a logId")
        if "handleCode" in item:
            code, msg = item.get("handleCode"), item.get("handleMsg")
        elif isinstance(item.get("executeResult"), dict):
            code, msg = item["executeResult"].get("code"), item["executeResult"].get("msg")
        else:
            raise ValueError("a callback item needs handleCode or executeResult")
        out.append(CallbackResult(int(item["logId"]), int(code if code is not None else 0), str(msg or "")))
    return out


def result_of(cb: CallbackResult, address: str) -> HandlerResult:
    msg = _one_line(cb.message)
    if cb.code == SUCCESS_CODE:
        return HandlerResult(ok=True, message=msg)
    if cb.code == TIMEOUT_CODE:
        return HandlerResult(
            ok=False,
            message=f"xxl-job executor {address} timed out (handleCode 502): {msg}"[:MAX_MESSAGE],
            timed_out=True,
        )
    return HandlerResult(ok=False, message=f"xxl-job handleCode {cb.code}: {msg}"[:MAX_MESSAGE])


# -- the bridge --------------------------------------------------------------------------


@dataclass
class _Pending:
    address: str
    event: threading.Event = field(default_factory=threading.Event)
    result: HandlerResult | None = None


class _RunRefused(Exception):
    pass


class _Unreachable(Exception):
    pass


class XxlJobBridge:
    def __init__(
        self,
        *,
        access_token: str | None,
        callback_host: str = "127.0.0.1",
        callback_port: int = 0,
        address_provider: Callable[[str], list[str]] | None = None,
        log_ids: Callable[[], int] | None = None,
        forward_to: Sequence[str] = (),
        run_timeout: float = 3.0,
        beat_interval: float = 30.0,
        lost_after_beats: int = 3,
        advertise_host: str | None = None,
        router: XxlRouter | None = None,
        max_wait_s: float = MAX_WAIT_S,
        current_params: Callable[[int], Mapping[str, Any] | None] | None = None,
    ) -> None:
        self.access_token = access_token or None
        self.current_params = current_params
        self.max_wait_s = max_wait_s
        self.router = router or XxlRouter(beat=self._probe_beat, idle_beat=self._probe_idle)
        self.address_provider = address_provider
        self._log_ids = log_ids or _PROCESS_LOG_IDS
        self.forward_to = tuple(_base(a) for a in forward_to)
        self.run_timeout = run_timeout
        self.beat_interval = beat_interval
        self.lost_after_beats = lost_after_beats
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._lock = threading.Lock()
        self._pending: dict[int, _Pending] = {}
        self._registry: dict[str, dict[str, float]] = {}  # app -> address -> last seen (monotonic)
        self._minted: OrderedDict[int, None] = OrderedDict()
        self._closed = False
        self.callbacks_received = 0
        self.unknown_callbacks = 0
        self.late_callbacks = 0
        self.token_refusals = 0
        self._server = _CallbackServer((callback_host, callback_port), _CallbackHandler, self)
        host, port = self._server.server_address[:2]
        self.callback_address = (str(host), int(port))
        shown = advertise_host or (str(host) if host not in ("0.0.0.0", "::", "") else "127.0.0.1")
        self.callback_url = f"http://{shown}:{port}/"  # put first in the executor's xxl.job.admin.addresses
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.1},
            name=f"xxl-bridge-callback-{port}",
            daemon=True,
        )
        self._thread.start()

    # -- the handler -----------------------------------------------------------------

    # the executor SDK puts no job timeout of its own around this handler: the xxl-job
    # executor enforces executor_timeout on the run itself (see _wait)
    enforces_own_timeout = True

    def __call__(self, ctx: ExecutionContext) -> HandlerResult:
        try:
            return self._run(ctx)
        except Exception as exc:
            log.exception("xxl-job bridge failed for %s", ctx.command_id)
            return HandlerResult(ok=False, message=_one_line(f"xxl-job bridge: {type(exc).__name__}: {exc}"))

    def _run(self, ctx: ExecutionContext) -> HandlerResult:
        if self._closed:
            return HandlerResult(ok=False, message="xxl-job bridge is closed")
        try:
            params = json.loads(ctx.params) if ctx.params else {}
        except ValueError as exc:
            return HandlerResult(ok=False, message=f"xxl-job bridge: params are not JSON: {exc}")
        if not isinstance(params, dict):
            return HandlerResult(ok=False, message="xxl-job bridge: params are not a JSON object")
        if params.get("bridge") not in (None, "xxl-job"):
            return HandlerResult(
                ok=False, message=f"xxl-job bridge: params are for the {params.get('bridge')!r} bridge"
            )
        try:
            job_id = int(params.get("job_id"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return HandlerResult(ok=False, message=f"xxl-job bridge: job_id {params.get('job_id')!r} is not an integer")
        if not 0 < job_id <= JAVA_INT_MAX:
            return HandlerResult(ok=False, message=f"xxl-job bridge: job_id {job_id} is outside the Java int range")
        params = self._current(job_id, params)
        # an operator's "run once" (the admin's executorParam and addressList): laid over
        # the current row, since the run's own parameter is what was asked for
        once = params.get(RUN_ONCE)
        if once is not None and not isinstance(once, dict):
            return HandlerResult(ok=False, message=f"xxl-job bridge: {RUN_ONCE} is not a JSON object")
        once = once or {}
        if "executor_param" in once:
            params = {**params, "executor_param": once["executor_param"]}
        chosen = once.get("addresses") or []
        if not isinstance(chosen, list) or not all(isinstance(a, str) and looks_like_address(a) for a in chosen):
            return HandlerResult(ok=False, message=f"xxl-job bridge: {RUN_ONCE}.addresses is not a list of addresses")
        glue_type = str(params.get("glue_type") or "BEAN").upper()
        glue_source = params.get("glue_source")
        if glue_type != "BEAN" and not glue_source:
            # the executor would build the GLUE handler from an empty source (an empty
            # script "succeeds"): refuse rather than pretend
            return HandlerResult(
                ok=False,
                message=f"xxl-job bridge: {glue_type} job {job_id} needs glue_source "
                "in its params to run through the bridge",
            )
        try:
            run_job_id = bridge_job_id(job_id)
        except ValueError as exc:
            return HandlerResult(ok=False, message=f"xxl-job bridge: {exc}")
        app = str(params.get("app_name") or "")
        strategy = params.get("route_strategy") or "FIRST"
        # chosen addresses replace the app's registered ones; the route strategy picks
        # among them, as the admin's trigger with an addressList does
        addresses = [a.strip() for a in chosen] if chosen else self._addresses(app)
        if strategy == "SHARDING_BROADCAST" or looks_like_address(ctx.item_param):
            # item i goes to the i-th live executor (list[0] past the end), as the admin's
            # broadcast; the address the migrator stored is used when none is known
            if addresses:
                address: str | None = broadcast_address(ctx.item_index, addresses)
            else:
                address = ctx.item_param.strip() if looks_like_address(ctx.item_param) else None
            route_msg = "executor address list is empty"
        else:
            route = self.router.route(str(strategy), job_id, addresses, idle_job_id=run_job_id)
            address, route_msg = route.address, route.message
        if not address:
            return HandlerResult(
                ok=False,
                message=_one_line(f"xxl-job bridge: no executor address for app {app!r} ({strategy}: {route_msg})"),
            )
        log_id = int(self._log_ids())
        if not 0 < log_id <= JAVA_LONG_MAX:
            return HandlerResult(ok=False, message=f"xxl-job bridge: log id {log_id} does not fit a Java long")
        timeout_s = ctx.timeout.total_seconds()
        executor_timeout = params.get("executor_timeout")
        if not isinstance(executor_timeout, int) or isinstance(executor_timeout, bool) or executor_timeout < 0:
            executor_timeout = math.ceil(timeout_s) if timeout_s > 0 else 0
        executor_timeout = min(int(executor_timeout), JAVA_INT_MAX)
        now_ms = time.time_ns() // 1_000_000
        trigger = {
            "jobId": run_job_id,
            "executorHandler": params.get("executor_handler") or "",
            "executorParams": params.get("executor_param") or "",
            "executorBlockStrategy": params.get("block_strategy") or "SERIAL_EXECUTION",
            "executorTimeout": executor_timeout,
            "logId": log_id,
            "logDateTime": now_ms,
            "glueType": glue_type,
            "glueSource": glue_source or "",
            "glueUpdatetime": _glue_updatetime(params.get("glue_updatetime")),
            "broadcastIndex": ctx.item_index,
            "broadcastTotal": ctx.item_total,
        }
        pending = _Pending(address=address)
        with self._lock:
            self._pending[log_id] = pending
            self._minted[log_id] = None
            while len(self._minted) > REMEMBER_MINTED:
                self._minted.popitem(last=False)
        try:
            self._trigger(address, trigger)
            log.info(
                "xxl-job run %s job %d (executor job %d) logId %d -> %s queued",
                ctx.command_id,
                job_id,
                run_job_id,
                log_id,
                address,
            )
            ctx.on_cancel(lambda: self._kill_soon(address, run_job_id, log_id))
            return self._wait(pending, log_id, address, run_job_id)
        except (_RunRefused, _Unreachable) as exc:
            return HandlerResult(ok=False, message=_one_line(str(exc)))
        finally:
            with self._lock:
                self._pending.pop(log_id, None)

    def _current(self, job_id: int, params: dict[str, Any]) -> dict[str, Any]:
        """The command's params with the run fields the legacy row has now (see the module
        doc); the params as they are when there is no such row or it cannot be read."""
        if self.current_params is None:
            return params
        try:
            row = self.current_params(job_id)
        except Exception as exc:  # the legacy database is down: run what the command carries
            log.warning(
                "xxl-job bridge: job %d's current definition unreadable (%s: %s); running the command's params",
                job_id,
                type(exc).__name__,
                _one_line(str(exc), 200),
            )
            return params
        if not row:
            return params
        if str(row.get("glue_type") or "BEAN").upper() != str(params.get("glue_type") or "BEAN").upper():
            return params  # a change of GLUE type is the migration's to take (or quarantine)
        fresh = {k: row[k] for k in RUN_FIELDS if k in row and row[k] is not None}
        if str(row.get("glue_type") or "BEAN").upper() != "BEAN":
            fresh.pop("executor_handler", None)  # GLUE runs by source; the params name it glue:<type>:<id>
        return {**params, **fresh}

    def _addresses(self, app: str) -> list[str]:
        if self.address_provider is not None:
            return [a.strip() for a in (self.address_provider(app) or []) if a and a.strip()]
        return self.registered_addresses(app)

    def _trigger(self, address: str, trigger: dict[str, Any]) -> None:
        """One `run`, to the routed address only: like the admin, a refused or failed
        trigger is a failure (the job's retries try again, routed again)."""
        answer = self._post(address, "run", trigger)
        code = answer.get("code") if isinstance(answer, dict) else None
        if code != SUCCESS_CODE:
            msg = answer.get("msg") if isinstance(answer, dict) else answer
            raise _RunRefused(f"xxl-job executor {address} refused logId {trigger['logId']}: code {code}: {msg}")

    def _post(self, address: str, path: str, body: Any, timeout: float | None = None) -> Any:
        """POST JSON the way the admin does; raises _Unreachable (not sent) or _RunRefused."""
        url = _base(address) + path
        data = b"" if body is None else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json;charset=UTF-8", "Accept-Charset": "application/json;charset=UTF-8"}
        if self.access_token:
            headers[ACCESS_TOKEN_HEADER] = self.access_token
        req = urllib.request.Request(url, data=data, headers=headers, method="POST")
        try:
            with self._opener.open(req, timeout=timeout or self.run_timeout) as resp:
                raw = resp.read(MAX_CALLBACK_BYTES)
        except urllib.error.HTTPError as exc:
            exc.close()
            raise _RunRefused(f"xxl-job executor {address} answered HTTP {exc.code} to {path}") from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ConnectionRefusedError):
                raise _Unreachable(f"xxl-job executor {address} refused the connection") from None
            raise _RunRefused(f"xxl-job {path} to {address} failed: {_one_line(str(reason), 300)}") from None
        except (TimeoutError, OSError) as exc:
            # sent, but no answer: it may or may not be queued; like the admin, a failure
            raise _RunRefused(f"xxl-job {path} to {address} failed: {type(exc).__name__}: {exc}") from None
        try:
            return json.loads(raw.decode("utf-8")) if raw.strip() else {}
        except ValueError:
            raise _RunRefused(
                f"xxl-job executor {address} answered {path} with non-JSON "
                f"{_one_line(raw.decode('utf-8', 'replace'), 100)!r}"
            ) from None

    def _wait(self, pending: _Pending, log_id: int, address: str, run_job_id: int) -> HandlerResult:
        """Until the executor calls the result back. No clock of our own on the run: the
        executor enforces executorTimeout from the run's start on its job thread, and a
        run may first wait in that thread's queue (SERIAL_EXECUTION). So the bridge waits
        while the executor answers `beat` and `idleBeat` says the job thread is running or
        has a queue; it gives up when the executor stops answering (lost), when the job
        thread has been idle for a beat interval with no result (the callback went
        elsewhere), or after `max_wait_s`."""
        hard = time.monotonic() + self.max_wait_s
        failed_beats = 0
        idle_since: float | None = None
        while True:
            remaining = hard - time.monotonic()
            if remaining <= 0:
                return HandlerResult(
                    ok=False,
                    timed_out=True,
                    message=f"xxl-job executor {address}: no result for logId {log_id} within {self.max_wait_s:g}s",
                )
            if pending.event.wait(min(self.beat_interval, remaining)):
                assert pending.result is not None
                return pending.result
            if not self._beat(address):
                failed_beats += 1
                idle_since = None
                if failed_beats >= self.lost_after_beats:
                    return HandlerResult(
                        ok=False,
                        message=f"xxl-job executor {address} lost: no result for logId "
                        f"{log_id} and {failed_beats} beats unanswered",
                    )
                continue
            failed_beats = 0
            if not self._idle(address, run_job_id):
                idle_since = None  # queued or running there: the executor's timeout applies
                continue
            now = time.monotonic()
            if idle_since is None:
                idle_since = now  # finished: the callback may still be on its way
            elif now - idle_since >= self.beat_interval and not pending.event.is_set():
                return HandlerResult(
                    ok=False,
                    message=f"xxl-job executor {address}: job {run_job_id} is idle there "
                    f"but no result for logId {log_id} reached the bridge (is the "
                    "bridge first in the executor's admin addresses?)",
                )

    def _kill_soon(self, address: str, job_id: int, log_id: int) -> None:
        """On the thread delivering the kill (the executor's control follower, which must
        not wait on a legacy executor): the `kill` call on a thread of its own."""
        threading.Thread(
            target=self._kill, args=(address, job_id, log_id), name=f"xxl-bridge-kill-{job_id}", daemon=True
        ).start()

    def _kill(self, address: str, job_id: int, log_id: int) -> None:
        """`POST <address>kill {"jobId"}` as the admin's JobLogController.logKill: its answer
        is logged; the run's own result still comes by the callback."""
        try:
            answer = self._post(address, "kill", {"jobId": job_id})
        except (_RunRefused, _Unreachable) as exc:
            log.warning("xxl-job kill of job %d (logId %d) at %s failed: %s", job_id, log_id, address, exc)
            return
        ok, msg = _answer_ok(answer)
        log.info(
            "xxl-job kill of job %d (logId %d) at %s: %s%s",
            job_id,
            log_id,
            address,
            "accepted" if ok else "refused",
            f" ({msg})" if msg else "",
        )

    def _beat(self, address: str) -> bool:
        return self._probe_beat(address)[0]

    def _probe_beat(self, address: str) -> tuple[bool, str]:
        try:
            answer = self._post(address, "beat", None, timeout=self._probe_timeout())
        except (_Unreachable, _RunRefused) as exc:
            return False, str(exc)
        return _answer_ok(answer)

    def _probe_idle(self, address: str, job_id: int) -> tuple[bool, str]:
        try:
            answer = self._post(address, "idleBeat", {"jobId": job_id}, timeout=self._probe_timeout())
        except (_Unreachable, _RunRefused) as exc:
            return False, str(exc)
        return _answer_ok(answer)

    def _idle(self, address: str, job_id: int) -> bool:
        return self._probe_idle(address, job_id)[0]

    def _probe_timeout(self) -> float:
        return min(self.run_timeout, max(self.beat_interval, 0.5))

    # -- the admin side (callback server) --------------------------------------------

    def token_ok(self, presented: str | None) -> bool:
        if not self.access_token:
            return True
        return presented is not None and hmac.compare_digest(presented.encode(), self.access_token.encode())

    def handle_callback(self, raw: bytes, token: str | None) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8"))
            results = parse_callbacks(body)
        except (ValueError, TypeError, UnicodeDecodeError) as exc:
            return {"code": FAIL_CODE, "msg": f"invalid callback: {_one_line(str(exc), 200)}"}
        late: list[int] = []
        foreign: list[Any] = []
        items = body if isinstance(body, list) else [body]
        for cb, item in zip(results, items, strict=True):
            with self._lock:
                pending = self._pending.get(cb.log_id)
                if pending is not None:
                    if pending.result is None:
                        pending.result = result_of(cb, pending.address)
                        self.callbacks_received += 1
                        pending.event.set()
                    continue  # else a repeated callback: ignored, like the admin
                minted = cb.log_id in self._minted or cb.log_id >= OWN_LOG_ID_FLOOR
            if minted:
                late.append(cb.log_id)
            else:
                foreign.append(item)
        with self._lock:
            self.late_callbacks += len(late)
            self.unknown_callbacks += len(foreign)
        if late:
            # ours, after the handler gave up (timed out, lost, closed), or minted before a
            # restart and retried by the executor from its callback file: taken and dropped,
            # or the executor would keep retrying it
            log.debug("xxl-job bridge: late result(s) for logId %s dropped", late[:10])
        if not foreign:
            return {"code": SUCCESS_CODE, "msg": None}
        if self.forward_to:
            return self._forward("api/callback", foreign, token)
        # not ours and nowhere to relay: refuse, so the executor hands the list to the
        # next admin in its xxl.job.admin.addresses (the legacy admin)
        # (every legacy run's result comes here first: logged at debug, never per request above)
        ids = [i.get("logId") for i in foreign if isinstance(i, dict)][:10]
        log.debug("xxl-job bridge: %d callback(s) for logIds it never minted %s, refused", len(foreign), ids)
        return {"code": FAIL_CODE, "msg": f"logId(s) {ids} unknown to the Switchyard bridge"}

    def handle_registry(self, raw: bytes, token: str | None, remove: bool) -> dict[str, Any]:
        try:
            body = json.loads(raw.decode("utf-8"))
            group, key, value = body.get("registryGroup"), body.get("registryKey"), body.get("registryValue")
        except (ValueError, AttributeError, UnicodeDecodeError):
            return {"code": FAIL_CODE, "msg": "Illegal Argument."}
        if not key or not value:
            return {"code": FAIL_CODE, "msg": "Illegal Argument."}
        if group in (None, "EXECUTOR"):
            with self._lock:
                apps = self._registry.setdefault(str(key), {})
                if remove:
                    apps.pop(str(value), None)
                else:
                    apps[str(value)] = time.monotonic()
        if self.forward_to:
            return self._forward("api/registryRemove" if remove else "api/registry", body, token)
        # noted here, but refused: the executor stops at the first admin that takes a
        # registration, and the legacy admin must keep hearing it (or legacy's own runs
        # find no executor)
        return {"code": FAIL_CODE, "msg": "noted by the Switchyard bridge; register with the next admin"}

    def registered_addresses(self, app: str) -> list[str]:
        """Live executors of an app that registered here, sorted like the admin sorts them."""
        cutoff = time.monotonic() - REGISTRY_DEAD_S
        with self._lock:
            return sorted(a for a, seen in self._registry.get(app, {}).items() if seen >= cutoff)

    def _forward(self, path: str, body: Any, token: str | None) -> dict[str, Any]:
        data = json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        headers = {"Content-Type": "application/json;charset=UTF-8"}
        if token:
            headers[ACCESS_TOKEN_HEADER] = token
        last = "no admin answered"
        for admin in self.forward_to:
            req = urllib.request.Request(admin + path, data=data, headers=headers, method="POST")
            try:
                with self._opener.open(req, timeout=self.run_timeout) as resp:
                    answer = json.loads(resp.read(MAX_CALLBACK_BYTES).decode("utf-8") or "{}")
            except (OSError, ValueError, urllib.error.URLError) as exc:
                last = f"{admin}: {type(exc).__name__}"
                continue
            if isinstance(answer, dict) and answer.get("code") == SUCCESS_CODE:
                return answer
            last = f"{admin}: {answer!r}"[:200]
        log.warning("xxl-job bridge: relaying %s to the legacy admin failed: %s", path, last)
        return {"code": FAIL_CODE, "msg": f"relay to the legacy admin failed: {last}"}

    # -- lifecycle -------------------------------------------------------------------

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def close(self) -> None:
        """Stop the callback server; every waiting call returns a failure at once."""
        if self._closed:
            return
        self._closed = True
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
        with self._lock:
            for p in self._pending.values():
                if p.result is None:
                    p.result = HandlerResult(ok=False, message="xxl-job bridge closed before the result arrived")
                    p.event.set()

    def __enter__(self) -> XxlJobBridge:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _CallbackServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], bridge: XxlJobBridge) -> None:
        self.bridge = bridge
        super().__init__(address, handler)


class _CallbackHandler(BaseHTTPRequestHandler):
    server: _CallbackServer
    protocol_version = "HTTP/1.1"
    timeout = 60  # an idle keep-alive connection is dropped

    def do_POST(self) -> None:  # noqa: N802
        """The admin's OpenApiController (3.4.2): POST only, a body, then the token
        (`XXL-JOB-ACCESS-TOKEN` equal to the admin's accessToken when one is set), then
        the uri. Every refusal is a ReturnT {"code":500,"msg":...} with HTTP 200."""
        bridge = self.server.bridge
        if bridge._closed:
            self._answer({"code": FAIL_CODE, "msg": "the Switchyard bridge is closed"}, close=True)
            return
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_CALLBACK_BYTES:
            self._answer({"code": FAIL_CODE, "msg": "request too large"}, status=413, close=True)
            return
        raw = self.rfile.read(length) if length > 0 else b""
        token = self.headers.get(ACCESS_TOKEN_HEADER)
        path = self.path.split("?", 1)[0].rstrip("/")
        if not raw.strip():
            answer: dict[str, Any] = {"code": FAIL_CODE, "msg": "invalid request, requestBody empty."}
        elif not bridge.token_ok(token):
            bridge.token_refusals += 1
            answer = {"code": FAIL_CODE, "msg": "The access token is wrong."}
        elif path.endswith("/api/callback"):
            answer = bridge.handle_callback(raw, token)
        elif path.endswith("/api/registry"):
            answer = bridge.handle_registry(raw, token, remove=False)
        elif path.endswith("/api/registryRemove"):
            answer = bridge.handle_registry(raw, token, remove=True)
        else:
            answer = {
                "code": FAIL_CODE,
                "msg": f"invalid request, uri-mapping({path.rsplit('/', 1)[-1][:100]}) not found.",
            }
        self._answer(answer)

    def do_GET(self) -> None:  # noqa: N802
        self._answer({"code": FAIL_CODE, "msg": "invalid request, HttpMethod not support."})

    def _answer(self, body: dict[str, Any], status: int = 200, close: bool = False) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json;charset=UTF-8")
        self.send_header("Content-Length", str(len(data)))
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        log.debug("xxl-job bridge callback server: " + format, *args)


def register_xxl_job_bridge(executor: Executor, bridge: XxlJobBridge) -> XxlJobBridge:
    executor.handler(XXL_JOB_HANDLER)(bridge)
    return bridge
