"""Executors in their own process (as they run in production), with receipt stamps.

`ExecutorHost` spawns a fresh interpreter that subscribes one `Executor` per business
business to the bench's topic prefix, says when it is subscribed, runs until every
expected item was handled (or its deadline), and sends back per-business figures:
items handled, messages received, first/last receipt and handler times, and the
receipt lag (receive time minus T from the message's `scheduled_at` property) per
message. Receipt is stamped on the subscription the Executor reads from, before its
concurrency quota and handler run.

Handlers: "noop" (count only) or "http:<url>" (one GET per item, new connection each
time, as a business callback would be).
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

READY_TIMEOUT_S = 60


@dataclass
class HostConfig:
    pulsar_url: str
    topic_prefix: str
    biz_codes: list[str]
    expected: dict[str, int]  # items per business
    handler: str = "noop"
    concurrency: int = 16
    deadline_s: float = 120.0
    keep_lags: bool = True
    # executor processes on one Shared subscription, as a business scales its executors
    # out; each reports its count into a shared slot and all stop when the sum is reached
    processes: int = 1
    # biz_code -> the lane whose command topic its executor takes (scheduler_core.model.Lane)
    lanes: dict[str, str] = field(default_factory=dict)


@dataclass
class BusinessFigures:
    items: int = 0
    messages: int = 0
    first_recv: float | None = None  # epoch seconds
    last_recv: float | None = None
    first_handled: float | None = None
    last_handled: float | None = None
    recv_lag_ms: list[float] = field(default_factory=list)  # one per message
    start_lag_ms: list[float] = field(default_factory=list)  # handler start - T, one per item
    errors: int = 0
    cpu_s: float = 0.0  # the host process's CPU time from ready to done (it idles before the first receipt)
    # the host process's CPU time since it started, at done (time.process_time(): /proc's
    # utime + stime): the end of a bench/cpu.py window whose start the parent read from /proc
    cpu_end_s: float = 0.0


class _StampingSubscription:
    """Wraps the Executor's subscription: stamps each received message."""

    def __init__(self, inner: Any, fig: BusinessFigures, lock: threading.Lock, keep: bool) -> None:
        self._inner = inner
        self._fig = fig
        self._lock = lock
        self._keep = keep

    def receive(self, max_messages: int, timeout: timedelta) -> Any:
        got = self._inner.receive(max_messages, timeout)
        if got:
            now = time.time()
            with self._lock:
                f = self._fig
                if f.first_recv is None:
                    f.first_recv = now
                f.last_recv = now
                f.messages += len(got)
                if self._keep:
                    for r in got:
                        t = r.message.properties.get("scheduled_at")
                        if t is not None:
                            f.recv_lag_ms.append(now * 1000 - int(t))
        return got

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _http_call(url: str) -> bool:
    import http.client
    import urllib.parse

    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname or "127.0.0.1", u.port or 80, timeout=30)
    try:
        conn.request("GET", u.path + (f"?{u.query}" if u.query else ""), headers={"Connection": "close"})
        resp = conn.getresponse()
        resp.read()
        return resp.status == 200
    finally:
        conn.close()


def host_main(cfg: HostConfig, out: Any, counts: Any = None, slot: int = 0) -> None:
    from scheduler_core.bus.pulsar import PulsarBus
    from scheduler_core.executor import ExecutionContext, Executor
    from scheduler_core.executor.sdk import HandlerResult
    from scheduler_core.model import Lane

    figs = {d: BusinessFigures() for d in cfg.biz_codes}
    lock = threading.Lock()
    bus = PulsarBus(cfg.pulsar_url, topic_prefix=cfg.topic_prefix)
    executors = []
    per_thread: dict[str, list[BusinessFigures]] = {}  # biz_code -> one tally per worker thread
    http_url = cfg.handler[len("http:") :] if cfg.handler.startswith("http:") else None
    try:
        for d in cfg.biz_codes:
            ex = Executor(bus, d, concurrency=cfg.concurrency, lane=Lane(cfg.lanes.get(d, Lane.DEFAULT.value)))
            ex.sub = _StampingSubscription(ex.sub, figs[d], lock, cfg.keep_lags)  # type: ignore[assignment]

            tallies = per_thread[d] = []
            local = threading.local()

            def handler(
                ctx: ExecutionContext, tallies: list[BusinessFigures] = tallies, local: threading.local = local
            ) -> Any:
                start = time.time()
                ok = True
                if http_url is not None:
                    try:
                        ok = _http_call(http_url)
                    except OSError:
                        ok = False
                    done = time.time()
                else:
                    done = start  # a no-op: one clock read is enough (it is in the measured loop)
                # Each worker thread tallies into its own figures: a lock shared by the 16
                # workers here made the handlers convoy and doubled the executor's CPU per
                # run (68 vs 31 us in a no-op hot minute), which was the bench, not the SDK.
                mine = getattr(local, "fig", None)
                if mine is None:
                    mine = local.fig = BusinessFigures()
                    with lock:
                        tallies.append(mine)
                mine.items += 1
                if mine.first_handled is None:
                    mine.first_handled = start
                mine.last_handled = done
                if cfg.keep_lags:
                    mine.start_lag_ms.append(start * 1000 - ctx.scheduled_at.timestamp() * 1000)
                if not ok:
                    mine.errors += 1
                return None if ok else HandlerResult(ok=False, message="http call failed")

            ex.handler()(handler)
            executors.append(ex)
        stop = threading.Event()
        threads = [threading.Thread(target=ex.run, args=(stop,), daemon=True) for ex in executors]
        for t in threads:
            t.start()
        cpu0 = time.process_time()
        out.put(("ready", time.time()))
        end = time.monotonic() + cfg.deadline_s
        cmd = None
        while time.monotonic() < end:
            with lock:
                mine = [sum(t.items for t in per_thread.get(d, ())) for d in cfg.biz_codes]
            if counts is not None:  # what the parent reads (ExecutorHost.handled)
                width = len(cfg.biz_codes)
                for k, n in enumerate(mine):
                    counts[slot * width + k] = n
            if counts is None or cfg.processes <= 1:
                done = all(n >= cfg.expected.get(d, 0) for d, n in zip(cfg.biz_codes, mine, strict=True))
            else:  # several processes: the sum over all of them, per business
                done = all(
                    sum(counts[p * width + k] for p in range(cfg.processes)) >= cfg.expected.get(d, 0)
                    for k, d in enumerate(cfg.biz_codes)
                )
            if done:
                break
            time.sleep(0.01)
        cpu_end = time.process_time()
        cpu = cpu_end - cpu0
        stop.set()
        for t in threads:
            t.join(timeout=10)
        for d, f in figs.items():
            f.cpu_s = cpu  # the process's, shared by its businesses
            f.cpu_end_s = cpu_end
            with lock:
                tallies = list(per_thread.get(d, ()))
            for tally in tallies:
                f.items += tally.items
                f.errors += tally.errors
                f.start_lag_ms += tally.start_lag_ms
                if tally.first_handled is not None:
                    f.first_handled = (
                        tally.first_handled if f.first_handled is None else min(f.first_handled, tally.first_handled)
                    )
                if tally.last_handled is not None:
                    f.last_handled = (
                        tally.last_handled if f.last_handled is None else max(f.last_handled, tally.last_handled)
                    )
        out.put(("done", {d: f.__dict__ for d, f in figs.items()}, cmd))
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        for ex in executors:
            try:
                ex.close()
            except Exception:  # noqa: BLE001
                pass
        bus.close()


class ExecutorHost:
    def __init__(self, cfg: HostConfig) -> None:
        self.cfg = cfg
        ctx = mp.get_context("spawn")
        self.q = ctx.Queue()
        n = max(1, cfg.processes)
        # items handled per process and business, written by each process every 10 ms: the
        # processes' stop condition when there are several, and the parent's `handled`
        self.counts = ctx.Array("q", n * len(cfg.biz_codes), lock=False)
        self.procs = [ctx.Process(target=host_main, args=(cfg, self.q, self.counts, i), daemon=True) for i in range(n)]
        self.result: dict[str, Any] | None = None

    @property
    def proc(self) -> Any:
        return self.procs[0]

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs if p.pid is not None]

    def handled(self) -> int:
        """Items handled so far by every process, all businesses (at most 10 ms old)."""
        return sum(self.counts[:])

    def wait_handled(self, expected: int, timeout: float, poll: float = 0.01) -> bool:
        """Until `expected` items were handled (for a window that ends with the last one,
        before the processes report and exit); False at the timeout."""
        end = time.monotonic() + timeout
        while self.handled() < expected:
            if time.monotonic() >= end:
                return False
            time.sleep(poll)
        return True

    def __enter__(self) -> ExecutorHost:
        for p in self.procs:
            p.start()
        for _ in self.procs:
            msg = self.q.get(timeout=READY_TIMEOUT_S)
            if msg[0] != "ready":
                for p in self.procs:
                    p.join(timeout=5)
                raise RuntimeError(f"executor host failed to start: {msg[1]}")
        return self

    def wait(self, timeout: float | None = None) -> dict[str, BusinessFigures]:
        merged: dict[str, BusinessFigures] = {}
        for _ in self.procs:
            msg = self.q.get(timeout=(timeout if timeout is not None else self.cfg.deadline_s) + 30)
            if msg[0] == "error":
                raise RuntimeError(f"executor host: {msg[1]}")
            for d, v in msg[1].items():
                merged[d] = _merge(merged[d], BusinessFigures(**v)) if d in merged else BusinessFigures(**v)
        self.result = {d: f.__dict__ for d, f in merged.items()}
        return merged

    def __exit__(self, *exc: Any) -> None:
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)


def _merge(a: BusinessFigures, b: BusinessFigures) -> BusinessFigures:
    def pick(x: float | None, y: float | None, f: Any) -> float | None:
        return y if x is None else x if y is None else f(x, y)

    return BusinessFigures(
        items=a.items + b.items,
        messages=a.messages + b.messages,
        first_recv=pick(a.first_recv, b.first_recv, min),
        last_recv=pick(a.last_recv, b.last_recv, max),
        first_handled=pick(a.first_handled, b.first_handled, min),
        last_handled=pick(a.last_handled, b.last_handled, max),
        recv_lag_ms=a.recv_lag_ms + b.recv_lag_ms,
        start_lag_ms=a.start_lag_ms + b.start_lag_ms,
        errors=a.errors + b.errors,
        cpu_s=a.cpu_s + b.cpu_s,
        cpu_end_s=a.cpu_end_s + b.cpu_end_s,
    )
