"""Running the items of one envelope: the per-item loop, retries, and the hand-over a
timeout needs.

Items of an envelope run back to back on one worker thread, as they always did. The
loop is tight on purpose (at 200K commands/s the budget is a few microseconds per item):
no datetime, lock, dict copy or log call per item unless the item fails. Outcomes are
kept as one letter per item plus a short list of the items that have something to say
(a retry, a message), which is also what goes on the wire (`codec.EnvelopeResult`).

A job timeout must not cost a thread per item (a handler run on a thread of its own,
joined with the timeout, doubles the threads of a busy executor): the handler runs on
the worker itself and one watchdog per executor looks at each watched run's deadline. When an item overruns, the watchdog
reports it timed out (or schedules its retry), bumps the run's generation and has a
fresh thread carry on with the rest of the envelope; the overrunning thread, whenever
its handler returns, finds the generation moved on and drops its result. So a handler
exceeding the job timeout is reported as timed out, at its deadline, as before; what a
timeout costs now is a lock per item, and a thread only when one actually fires.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from scheduler_core.codec import Envelope
from scheduler_core.executor.context import ExecutionContext, Handler, HandlerResult
from scheduler_core.executor.kills import Cancellations
from scheduler_core.item_states import ItemState

INF = float("inf")
Backoff = Callable[[int], float]  # attempt number (1 = first retry) -> seconds to wait before it


class EnvelopeRun:
    """One envelope in work. Shared by its worker and, with a timeout, the watchdog:
    `pos`, `attempt`, `gen` and `deadline` change only under `lock` on that path."""

    __slots__ = (
        "env",
        "fn",
        "received",
        "skip",
        "received_ms",
        "started_ms",
        "letters",
        "starts",
        "extras",
        "pos",
        "attempt",
        "gen",
        "deadline",
        "lock",
        "finished",
        "waiter",
        "duplicates",
        "serve_after",
        "result",
        "pack",
        "kills",
        "queued",
    )

    def __init__(
        self,
        env: Envelope,
        fn: Handler,
        *,
        received: object,
        received_ms: int,
        started_ms: int,
        skip: dict[int, int] | None,
        serve_after: bool,
        kills: Cancellations | None = None,
    ) -> None:
        self.env = env
        self.fn = fn
        self.received = received  # the bus message to ack once the results are published
        self.skip = skip  # item index -> attempt, for items that already succeeded here
        self.received_ms = received_ms
        self.started_ms = started_ms
        self.letters: list[str] = []
        self.starts: list[float] = []  # monotonic start per item
        self.extras: list[tuple[int, int, str]] = []  # (position, attempt, message)
        self.pos = 0
        self.attempt = 0
        self.gen = 0
        self.deadline = INF
        self.lock = threading.Lock()
        # done-ness as a flag, with an Event only for a caller that waits (poll_once): a
        # threading.Event per run cost more than a no-op handler's whole item loop
        self.finished = False
        self.waiter: threading.Event | None = None
        self.duplicates = 0
        self.serve_after = serve_after  # the thread that finishes it then serves the inbox
        self.result: object = None
        self.pack: object = None  # the packed message this run is one of (sdk.PackRun), if any
        self.kills = kills  # the executor's kill requests (executor.kills), None: none can come
        self.queued = False  # it waited in a serial job's queue (sdk: block strategy serial)

    def mark_done(self) -> None:
        with self.lock:
            self.finished = True
            waiter = self.waiter
        if waiter is not None:
            waiter.set()

    def wait_done(self) -> None:
        with self.lock:
            if self.finished:
                return
            if self.waiter is None:
                self.waiter = threading.Event()
            waiter = self.waiter
        waiter.wait()

    def record(self, pos: int, outcome: HandlerResult | None, attempt: int) -> None:
        if outcome is None:
            self.letters.append(ItemState.SUCCEEDED)
            if attempt:
                self.extras.append((pos, attempt, ""))
            return
        self.letters.append(
            ItemState.SUCCEEDED if outcome.ok else (ItemState.TIMED_OUT if outcome.timed_out else ItemState.FAILED)
        )
        if attempt or outcome.message:
            self.extras.append((pos, attempt, outcome.message))

    def killed(self, pos: int, idx: int, attempt: int, outcome: HandlerResult | None = None) -> bool:
        """If an operator killed item `idx` (at `pos`), record it killed and say so: once
        its handler returned (`outcome`, what it returned), or before it started (None).
        Called only when `kills.cancelled` or `kills.ended` is not empty (an item killed
        earlier here, met again in a copy of its message, is answered killed, not run)."""
        kills = self.kills
        key = (self.env.trigger_id, self.env.scheduled_ms, idx)
        if kills is None or not kills.is_cancelled(key):
            return False
        said = f": {outcome.message}" if outcome is not None and outcome.message else ""
        how = "" if outcome is not None else " before it started"
        self.letters.append(ItemState.KILLED)
        self.extras.append((pos, attempt, f"{kills.message(key)}{how}{said}"))
        kills.landed(key, ItemState.KILLED if outcome is not None else "")
        return True

    def start_offsets_ms(self) -> list[int]:
        s0 = self.starts[0] if self.starts else 0.0
        return [int((s - s0) * 1000) for s in self.starts]


def attempt_once(fn: Handler, ctx: ExecutionContext) -> HandlerResult | None:
    """One call. None: succeeded with nothing to say (the case the loop is tuned for)."""
    try:
        value = fn(ctx)
    except TimeoutError:  # the handler's own timeout (concurrent.futures' is the same class)
        return HandlerResult(ok=False, message="timed out", timed_out=True)
    except Exception as exc:
        return HandlerResult(ok=False, message=f"{type(exc).__name__}: {exc}"[:1000])
    return _judge(value)


def run_unwatched(run: EnvelopeRun, backoff: Backoff, first: int = 0) -> None:
    """Every item from position `first` on (the ones before it have their letters), no
    timeout: nothing can take the run away from this thread."""
    env, fn, letters, starts, skip, kills = run.env, run.fn, run.letters, run.starts, run.skip, run.kills
    cancelled = kills.cancelled if kills is not None else ()  # live: empty unless a kill is in progress
    ended = kills.ended if kills is not None else ()  # live: items killed earlier here
    make = ExecutionContext.of
    mono = time.monotonic
    items = env.items
    for pos, (idx, param) in enumerate(items[first:] if first else items, first):
        starts.append(mono())
        if skip is not None and idx in skip:
            run.duplicates += 1
            run.record(pos, None, skip[idx])
            continue
        if (cancelled or ended) and run.killed(pos, idx, 0):
            continue
        # inlined attempt_once for the common case: a call and a None check
        try:
            value = fn(make(env, idx, param, 0, kills))
        except Exception:
            value = failed_now()
        if cancelled or (value is not None and value is not True):
            returned(run, pos, idx, param, value, backoff)
            continue
        letters.append(ItemState.SUCCEEDED)


def returned(run: EnvelopeRun, pos: int, idx: int, param: str, value: object, backoff: Backoff) -> None:
    """Item `idx` (at `pos`) returned `value` from its first attempt, and that was not a
    plain success or a kill is in progress: recorded killed if it is one an operator
    killed (not retried), else judged and retried with back-off (`settle`)."""
    kills = run.kills
    if kills is not None and kills.cancelled and run.killed(pos, idx, 0, _judge(value) or HandlerResult()):
        return
    if value is None or value is True:
        run.letters.append(ItemState.SUCCEEDED)
        return
    settle(run, pos, idx, param, value, backoff)


def failed_now() -> HandlerResult:
    # Called from an except block: the exception being handled is the item's failure.
    exc = sys.exc_info()[1]
    if isinstance(exc, TimeoutError):
        return HandlerResult(ok=False, message="timed out", timed_out=True)
    return HandlerResult(ok=False, message=f"{type(exc).__name__}: {exc}"[:1000])


def _judge(value: object) -> HandlerResult | None:
    if value is None or value is True:
        return None
    if isinstance(value, HandlerResult):
        return None if value.ok and not value.message else value
    if value is False:
        return HandlerResult(ok=False, message="handler returned False")
    return None


def settle(run: EnvelopeRun, pos: int, idx: int, param: str, value: object, backoff: Backoff) -> None:
    """An item whose first attempt did not simply succeed: judge it, retry with back-off."""
    env, fn, kills = run.env, run.fn, run.kills
    outcome = _judge(value)
    attempt = 0
    while outcome is not None and not outcome.ok and attempt < env.max_retry:
        if kills is not None and kills.cancelled and run.killed(pos, idx, attempt, outcome):
            return  # killed: not retried
        attempt += 1
        time.sleep(backoff(attempt))
        outcome = attempt_once(fn, ExecutionContext.of(env, idx, param, attempt, kills))
    if kills is not None and kills.cancelled and run.killed(pos, idx, attempt, outcome or HandlerResult()):
        return
    run.record(pos, outcome, attempt)


def run_watched(run: EnvelopeRun, gen: int, backoff: Backoff) -> bool:
    """The rest of the run under a job timeout, as generation `gen`. True when this thread
    ran it to the end; False when the watchdog took it over (the caller must stop)."""
    env, fn, items, lock, kills = run.env, run.fn, run.env.items, run.lock, run.kills
    cancelled = kills.cancelled if kills is not None else ()
    ended = kills.ended if kills is not None else ()
    n = len(items)
    timeout = env.timeout.total_seconds()
    mono = time.monotonic
    make = ExecutionContext.of
    while True:
        with lock:
            if run.gen != gen:
                return False
            pos = run.pos
            if pos >= n:
                return True
            attempt = run.attempt
            idx, param = items[pos]
            if attempt == 0:
                run.starts.append(mono())
                if run.skip is not None and idx in run.skip:
                    run.duplicates += 1
                    run.record(pos, None, run.skip[idx])
                    run.pos = pos + 1
                    continue
            if (cancelled or ended) and run.killed(pos, idx, attempt):
                run.pos, run.attempt = pos + 1, 0
                continue
            run.deadline = mono() + timeout
        outcome = attempt_once(fn, make(env, idx, param, attempt, kills))
        wait = 0.0
        with lock:
            if run.gen != gen:
                return False  # reported timed out meanwhile; this late return is ignored
            run.deadline = INF
            if cancelled and run.killed(pos, idx, attempt, outcome or HandlerResult()):
                run.pos, run.attempt = pos + 1, 0  # killed: not retried
            elif outcome is None or outcome.ok or attempt >= env.max_retry:
                run.record(pos, outcome, attempt)
                run.pos = pos + 1
                run.attempt = 0
            else:
                run.attempt = attempt + 1
                wait = backoff(attempt + 1)
        if wait > 0:
            time.sleep(wait)


def expire(run: EnvelopeRun, now: float, backoff: Backoff) -> tuple[int, float] | None:
    """The watchdog's step: if the current item is past its deadline, report it timed
    out (or schedule its retry) and take the run from its thread. Returns the new
    generation and how long the successor waits before going on; None if in time."""
    with run.lock:
        if run.deadline > now:
            return None
        run.gen += 1
        run.deadline = INF
        attempt = run.attempt
        kills = run.kills
        key = (run.env.trigger_id, run.env.scheduled_ms, run.env.items[run.pos][0])
        killed = kills is not None and kills.is_cancelled(key)
        if attempt >= run.env.max_retry or killed:  # a killed item that overran is not retried
            timeout = run.env.timeout.total_seconds()
            why = f" (it ignored the {kills.message(key)})" if killed and kills is not None else ""
            run.record(
                run.pos,
                HandlerResult(ok=False, message=f"timed out after {timeout:g}s{why}", timed_out=True),
                attempt,
            )
            if killed and kills is not None:
                kills.landed(key, ItemState.TIMED_OUT)
            run.pos += 1
            run.attempt = 0
            return run.gen, 0.0
        run.attempt = attempt + 1
        return run.gen, backoff(attempt + 1)
