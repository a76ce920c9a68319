"""The executor SDK.

    executor = Executor(bus, domain="reminder")

    @executor.handler("send-reminder")
    def send(ctx: ExecutionContext) -> None:
        ...  # raise to fail; return HandlerResult(ok=False, message=...) to fail quietly

    executor.run(stop_event)

Commands arrive on the domain's topic (Shared subscription, so executors scale out);
envelopes are unpacked into items; each item runs with the job's timeout and retries
with back-off; results are published per item to the callback topic; a message is
acked only after all of its items' results are published. Delivery is at-least-once:
a command id that already succeeded here is answered from memory, not run again.

Shadow mode (for handlers that are not idempotent during dual-run): commands are
received and recorded, the handler is never called.
"""
from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_core.clock import SystemClock
from scheduler_core.codec import CALLBACK_TOPIC, CodecError, command_topic, decode_commands, encode_results
from scheduler_core.model import CommandId, ExecutionCommand, FiredState, JobCode, TriggerId
from scheduler_core.ports import BusMessage, Clock, FiredUpdate, MessageBus, Received

log = logging.getLogger(__name__)
SUBSCRIPTION = "executor"


@dataclass(frozen=True, slots=True)
class ExecutionContext:
    command_id: CommandId
    trigger_id: TriggerId
    job_code: JobCode
    biz_code: str
    scheduled_at: datetime
    item_index: int
    item_total: int
    item_param: str
    params: str
    attempt: int
    timeout: timedelta


@dataclass(frozen=True, slots=True)
class HandlerResult:
    ok: bool = True
    message: str = ""
    timed_out: bool = False


Handler = Callable[[ExecutionContext], "HandlerResult | bool | None"]


class Executor:
    def __init__(
        self,
        bus: MessageBus,
        domain: str,
        *,
        clock: Clock | None = None,
        concurrency: int = 16,
        shadow: bool = False,
        retry_backoff: timedelta = timedelta(milliseconds=200),
        max_backoff: timedelta = timedelta(seconds=30),
        remember: int = 100_000,
    ) -> None:
        self.bus = bus
        self.domain = domain
        self.clock = clock or SystemClock()
        self.shadow = shadow
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        self._handlers: dict[str, Handler] = {}
        self._default: Handler | None = None
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix=f"exec-{domain}")
        self._quota = threading.BoundedSemaphore(concurrency)  # per-business concurrency quota
        self._done: OrderedDict[str, FiredUpdate] = OrderedDict()
        self._remember = remember
        self._lock = threading.Lock()
        self.sub = bus.subscribe(command_topic(domain), SUBSCRIPTION)
        self.processed = 0
        self.duplicates = 0

    # -- registration ----------------------------------------------------------------

    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]:
        """Register for a job code, or a handler name; with no name, the domain default."""

        def register(fn: Handler) -> Handler:
            if name is None:
                self._default = fn
            else:
                self._handlers[name] = fn
            return fn

        return register

    def _lookup(self, cmd: ExecutionCommand) -> Handler | None:
        return self._handlers.get(cmd.job_code) or self._handlers.get(cmd.handler) or self._default

    # -- the loop --------------------------------------------------------------------

    def run(self, stop: threading.Event, batch: int = 100) -> None:
        inflight: list[Future[None]] = []
        while not stop.is_set():
            inflight = [f for f in inflight if not f.done()]
            got = self.sub.receive(batch, timedelta(milliseconds=200))
            for r in got:
                self._quota.acquire()
                fut = self._pool.submit(self._process_guarded, r)
                fut.add_done_callback(lambda _f: self._quota.release())
                inflight.append(fut)
        for f in inflight:
            f.result()

    def poll_once(self, batch: int = 100, timeout: timedelta = timedelta(milliseconds=50)) -> int:
        """Receive and process one batch on the caller's thread (tests, demos)."""
        got = self.sub.receive(batch, timeout)
        for r in got:
            self._process_guarded(r)
        return len(got)

    def _process_guarded(self, received: Received) -> None:
        try:
            self._process(received)
        except Exception:
            # not acked: the bus redelivers it; the same command ids make that safe
            log.exception("processing a command message failed; it will be redelivered")
            self.sub.nack(received)

    def _process(self, received: Received) -> None:
        received_at = self.clock.now()
        try:
            commands = decode_commands(received.message.payload)
        except CodecError as exc:
            log.error("dropping a malformed command message: %s", exc)
            self.sub.ack(received)
            return
        results = [self._run_item(cmd, received_at) for cmd in commands]
        self.bus.publish([BusMessage(CALLBACK_TOPIC, encode_results(results), key=results[0].command_id)])
        self.sub.ack(received)

    def _run_item(self, cmd: ExecutionCommand, received_at: datetime) -> FiredUpdate:
        with self._lock:
            seen = self._done.get(cmd.command_id)
        if seen is not None and seen.state is FiredState.SUCCEEDED:
            self.duplicates += 1
            return seen  # idempotent: a redelivered command that already succeeded is not run again
        if self.shadow or cmd.shadow:
            return FiredUpdate(cmd.command_id, FiredState.RECEIVED, received_at, 0, "shadow: recorded, not invoked",
                               received_at=received_at, page_id=cmd.page_id)
        fn = self._lookup(cmd)
        if fn is None:
            return FiredUpdate(cmd.command_id, FiredState.FAILED, self.clock.now(), 0,
                               f"no handler registered for job {cmd.job_code!r} (handler {cmd.handler!r})",
                               received_at=received_at, page_id=cmd.page_id)
        started_at = self.clock.now()
        attempt = 0
        while True:
            ctx = ExecutionContext(
                command_id=cmd.command_id, trigger_id=cmd.trigger_id, job_code=cmd.job_code, biz_code=cmd.biz_code,
                scheduled_at=cmd.scheduled_at, item_index=cmd.item_index, item_total=cmd.item_total,
                item_param=cmd.item_param, params=cmd.params, attempt=attempt, timeout=cmd.timeout,
            )
            outcome = self._call(fn, ctx)
            if outcome.ok or attempt >= cmd.max_retry:
                break
            attempt += 1
            delay = min(self.retry_backoff.total_seconds() * (2 ** (attempt - 1)), self.max_backoff.total_seconds())
            time.sleep(delay)
        state = FiredState.SUCCEEDED if outcome.ok else (FiredState.TIMED_OUT if outcome.timed_out else FiredState.FAILED)
        update = FiredUpdate(cmd.command_id, state, self.clock.now(), attempt, outcome.message,
                             received_at=received_at, started_at=started_at, page_id=cmd.page_id)
        with self._lock:
            self._done[cmd.command_id] = update
            while len(self._done) > self._remember:
                self._done.popitem(last=False)
            self.processed += 1
        return update

    def _call(self, fn: Handler, ctx: ExecutionContext) -> HandlerResult:
        timeout = ctx.timeout.total_seconds()
        if timeout <= 0:
            return _as_result(fn, ctx)
        # A timed-out handler thread cannot be killed in Python; it is reported as timed
        # out and its eventual return is ignored.
        box: list[HandlerResult] = []
        t = threading.Thread(target=lambda: box.append(_as_result(fn, ctx)), daemon=True)
        t.start()
        t.join(timeout)
        if t.is_alive() or not box:
            return HandlerResult(ok=False, message=f"timed out after {timeout:g}s", timed_out=True)
        return box[0]

    def close(self) -> None:
        self.sub.close()
        self._pool.shutdown(wait=True)


def _as_result(fn: Handler, ctx: ExecutionContext) -> HandlerResult:
    try:
        value = fn(ctx)
    except FutureTimeout:
        return HandlerResult(ok=False, message="timed out", timed_out=True)
    except Exception as exc:
        return HandlerResult(ok=False, message=f"{type(exc).__name__}: {exc}"[:1000])
    if isinstance(value, HandlerResult):
        return value
    if value is False:
        return HandlerResult(ok=False, message="handler returned False")
    return HandlerResult(ok=True)
