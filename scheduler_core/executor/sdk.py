"""The executor SDK.

    executor = Executor(bus, biz_code="reminder")

    @executor.handler("send-reminder")
    def send(ctx: ExecutionContext) -> None:
        ...  # raise to fail; return HandlerResult(ok=False, message=...) to fail quietly

    executor.run(stop_event)

Commands arrive on the business's topic (Shared subscription, so executors scale out:
run more processes with the same biz_code to use more cores); envelopes are unpacked
into items; each item runs with the job's timeout and retries with back-off; results
stay per item (succeeded / failed / timed out, attempt, message) and go to the callback
topic, one compact entry per envelope, batched by the outbox; a message is acked only
after all of its items' results are published. Delivery is at-least-once: a command id
that already succeeded here is answered from memory, not run again; a second copy of a
run that is still in work here (the broker redelivering a message it already handed over,
or a re-fire) waits for the first copy to finish, then is answered the same way: a
handler is never called twice at once for one command in one process.

Concurrency quota: at most `concurrency` messages of the business are in work at once
(one semaphore step per message, not per item or per run), on `concurrency` worker
threads; the items of one envelope, and the runs of one packed message, run one after
another on its worker.

Job timeout: a handler still running when the job's timeout passes is reported as timed
out at that moment (and retried if the job has retries left); its eventual return is
ignored (a Python thread cannot be killed). One watchdog thread per executor enforces
it (`runner`), instead of a thread per item.

Kill requests (`scheduler_core.kills`, `run kill`): heard on the same control channel; the
runs in work here that a request covers are cancelled cooperatively (`executor.kills`), and
the executor answers on the control channel whether the handler returned (recorded killed)
or is still running `KILL_GRACE` after (it ignores the kill; its job timeout still ends it,
and a second answer says so).

Block strategy (`model.Block`, carried in the envelope; absent means concurrent): by
default a later run of a job starts beside an earlier one still in work (different fire
times take different workers, up to the quota); only a second copy of the same run waits.
A job set to discard_later has a later run answered failed, never invoked, while an earlier
run of it is in work in this process; cover_early cancels the earlier run's items (the kill
mechanism: recorded killed, "covered by ...") and runs the later one. With serial (xxl-job's
SERIAL_EXECUTION) the later run waits in the job's queue here and runs once the earlier
ones that share a sharding item with it have left work (a handler past its timeout
counts until it returns), in arrival order; a waiting run holds no worker and no quota
step (the business's other jobs go on), a stop or kill answers it at once, never
invoked, a run beyond `serial_queue` waiting ones is answered failed, and a stopping
executor hands its queued runs back to the bus. Pages of one run do not block each
other. It holds per executor process, as xxl-job's per executor: two processes of the
business may each run the job at once.

Shadow mode (for handlers that are not idempotent during dual-run): commands are
received and recorded, the handler is never called.

Rollback fences (`scheduler_core.fence`): the executor follows the bus's control channel
(`FenceView`, one per executor unless one is given). A run whose business's fence covers
its fire time is answered skipped (ItemState.SKIPPED, with the fence's message) and acked, its handler
never called; it is checked when the run is about to start, so a fence that arrives
while a message waits for a worker still stops it. While the view is not in sync (just
started, or cut off from the broker) nothing is run: the messages received go back to the
bus (nack) and are redelivered, after a log line, until it is.
"""

from __future__ import annotations

import functools
import logging
import os
import queue
import socket
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import timedelta

from scheduler_core.clock import SystemClock
from scheduler_core.codec import (
    EXECUTOR_SUBSCRIPTION,
    CodecError,
    Envelope,
    EnvelopeResult,
    command_topic,
    decode_message,
)
from scheduler_core.executor import run_logs
from scheduler_core.executor.context import ExecutionContext, Handler, HandlerResult
from scheduler_core.executor.fences import FenceView
from scheduler_core.executor.identity import new_instance_id
from scheduler_core.executor.kills import Cancellations
from scheduler_core.executor.outbox import ResultOutbox, publish_and_ack
from scheduler_core.executor.packs import PackRun, PackShare, nack
from scheduler_core.executor.receipts import ReceiptStamps
from scheduler_core.executor.runner import (
    EnvelopeRun,
    failed_now,
    returned,
    run_unwatched,
    run_watched,
    settle,
)
from scheduler_core.executor.watchdog import Watchdog
from scheduler_core.item_states import ItemState
from scheduler_core.kills import Kill, KillAnswer, Outcome, encode_answer
from scheduler_core.logfields import log_fields
from scheduler_core.model import SHADOW_NOTE, Block, Lane, command_id
from scheduler_core.ports import Clock, MessageBus, Received
from scheduler_core.stops import Cause, SkipWindow
from scheduler_core.times import from_ms

__all__ = ["ExecutionContext", "Executor", "Handler", "HandlerResult"]

log = logging.getLogger(__name__)
SUBSCRIPTION = EXECUTOR_SUBSCRIPTION
OUTBOX_ENVELOPES = 1024
# block strategy serial: the runs of one job that may wait in one executor process at once;
# one more is answered failed (xxl-job's queue is unbounded: a job slower than its period
# grew it until the executor's memory ran out)
SERIAL_QUEUE = 100
# How long a stopping executor waits for the copies it parked to be answered from memory
# once their first copies are done (each is a look-up, not a run): bounded, not forever.
LOOSE_WAIT_S = 30.0
HELD_LOG_EVERY_S = 10.0  # messages held back while the fences are unknown: one log line per this
HOLD_WAIT = timedelta(milliseconds=200)  # after handing messages back, wait this long for the sync
# after a kill, how long a handler has to return before the answer says it is still running
KILL_GRACE = timedelta(seconds=2)
# an ignored kill: the longest the executor follows the run to answer how it ended (it stops
# as soon as the run leaves work; past this, the "still running" answer stands)
KILL_FOLLOW_UP = timedelta(hours=1)
REMEMBER_KILLS = 1024  # request ids acted on, so a relayed copy is not acted on twice
_STOP = None
_CONCURRENT = Block.CONCURRENT
_GONE = "gone"  # a killed item's run left work without the kill being answered for it


class _Handoff:
    """A timed-out run handed to a successor: whether the overrun handler has returned,
    and whether the successor took a spare quota step to go on meanwhile."""

    __slots__ = ("event", "extra", "returned")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.extra = False
        self.returned = False


class _Progress:
    """A quick run of several items in work (`Executor._quick_many`), as a kill sees it:
    the letters of its items that have their result (`Executor._recorded`)."""

    __slots__ = ("env", "letters")

    def __init__(self, env: Envelope, letters: list[str]) -> None:
        self.env = env
        self.letters = letters


def _flight_key(env: Envelope) -> tuple[int, int, int]:
    """What a run in work is known by: its trigger, T and first item (a page of a per-item
    fan-out is a run of its own; every copy of a message has the same first item)."""
    return (env.trigger_id, env.scheduled_ms, env.items[0][0] if env.items else -1)


def _watched(run: EnvelopeRun) -> bool:
    """Under the job timeout, unless the handler enforces the timeout itself (a bridge
    whose legacy executor runs the job under its own timeout)."""
    return run.env.timeout.total_seconds() > 0 and not getattr(run.fn, "enforces_own_timeout", False)


# how an item can end that a copy of its message must not undo by running it again
_ENDED_BADLY = frozenset({ItemState.FAILED, ItemState.TIMED_OUT})


class Executor:
    def __init__(
        self,
        bus: MessageBus,
        biz_code: str,
        *,
        clock: Clock | None = None,
        concurrency: int = 16,
        shadow: bool = False,
        retry_backoff: timedelta = timedelta(milliseconds=200),
        max_backoff: timedelta = timedelta(seconds=30),
        remember: int = 100_000,
        compact_results: bool = True,
        fences: FenceView | None = None,
        receipt_after: timedelta | None = timedelta(seconds=1),
        name: str | None = None,
        lane: Lane = Lane.DEFAULT,
        instance_id: str | None = None,
        serial_queue: int = SERIAL_QUEUE,
    ) -> None:
        self.bus = bus
        # the lane whose command topic it takes (codec.command_topic): one executor per lane,
        # so a stalled lane's backlog never holds this one's receive loop or quota
        self.lane = lane
        self.name = name or f"{socket.gethostname()}-{os.getpid()}-{biz_code}"
        # who ran a run, as its result says (the run log's executor): the instance id this
        # process heartbeats with into the executor registry (give the heartbeat's, or the
        # heartbeat this one: `Heartbeat(..., instance_id=executor.instance_id)`)
        self.instance_id = instance_id or new_instance_id()
        self.biz_code = biz_code
        self.clock = clock or SystemClock()
        self.shadow = shadow
        self.retry_backoff = retry_backoff
        self.max_backoff = max_backoff
        self.concurrency = concurrency
        self.compact_results = compact_results
        self._handlers: dict[str, Handler] = {}
        self._default: Handler | None = None
        self._quota = threading.BoundedSemaphore(concurrency)  # per-business concurrency quota
        self._inbox: queue.SimpleQueue[PackRun | None] = queue.SimpleQueue()
        self._outbox: ResultOutbox | None = None
        self._watchdog = Watchdog(self._backoff, self._take_over, f"exec-{biz_code}-watchdog")
        # a run still going `receipt_after` after its receipt is stamped received at once
        # (receipts.py); None: the times travel with the result only
        self.receipts = (
            None
            if receipt_after is None
            else ReceiptStamps(
                bus,
                self.clock,
                receipt_after,
                compact=compact_results,
                name=f"exec-{biz_code}-receipts",
                executor=self.instance_id,
            )
        )
        # (trigger id, T ms) -> {item index: attempt} of items that succeeded here
        self._done: OrderedDict[tuple[int, int], dict[int, int]] = OrderedDict()
        # runs that ended here failed or timed out (their retries spent): item -> letter. A
        # copy of the message (a broker's redelivery after a restart, one parked behind the
        # run) is answered with that end instead of running the handler again (a timed-out
        # run's copy would otherwise be a second invocation, seconds later). Bounded as `_done`.
        self._ended: OrderedDict[tuple[int, int], dict[int, str]] = OrderedDict()
        self._done_items = 0
        self._remember = remember
        self._lock = threading.Lock()
        # Runs in work here, (trigger id, T ms, first item index) -> the envelope working it.
        # A broker can hand a message over again while its first copy is still in work: the
        # Pulsar standalone broker (4.2) was seen dispatching the same delayed message (same
        # ledger entry, redelivery count 0, no nack, no reconnect) twice back to back, both
        # copies in one receive batch; a replay after a nack or a reconnect does it too. Two
        # workers took the copies at once and `_done` learns of a run only once it is
        # finished, so both called the handler (under load, when the first copy's worker was
        # preempted before recording it). Claimed with dict.setdefault (atomic), left under
        # `_lock`.
        self._flights: dict[tuple[int, int, int], Envelope] = {}
        # copies that found their run in work: (their pack, parked) until the first copy lands.
        # A parked pack holds no quota step: a broker's redelivery after a restart hands over
        # a copy of every run in work or queued here, and a serial job's queue is as long as
        # its backlog; parked in their steps, a few such copies held them all and the
        # executor took nothing more of its business for minutes (the chaos soak, seed 23:
        # every job of a business pending behind one slow serial job's 75 queued runs)
        self._parked: dict[tuple[int, int, int], list[PackRun]] = {}
        self._loose = 0  # parked copies put back to work without a step while stopping
        self._loose_done = threading.Condition(self._lock)
        self.waited = 0  # second copies of a run in work that waited for the first
        self._handoffs: dict[tuple[EnvelopeRun, int], _Handoff] = {}  # (run, generation) -> its predecessor
        # the fences first: a subscription would start taking messages it cannot judge
        self._own_fences = fences is None
        self.fences = fences if fences is not None else FenceView(bus)
        try:
            self.sub = bus.subscribe(command_topic(biz_code, lane), SUBSCRIPTION)
        except BaseException:
            if self._own_fences:
                self.fences.close()
            raise
        self.processed = 0
        self.duplicates = 0
        self.fenced = 0  # runs answered skipped by a rollback fence
        self.superseded = 0  # runs answered skipped because a schedule edit superseded them
        self.stopped = 0  # runs answered skipped because an operator stopped them (scheduler_core.stops)
        self.held = 0  # messages handed back while the fences were not known
        self._held_since_log = 0
        self._held_logged = float("-inf")
        self._fences_logged: set[tuple[str, int]] = set()
        self.kills = Cancellations()  # run items an operator asked to kill (executor.kills)
        # the runs of several items in work, by flight key: a kill of one of their items that
        # already has its result is answered so, not cancelled (one-item runs need no entry)
        self._runs_in_work: dict[tuple[int, int, int], EnvelopeRun | _Progress] = {}
        self._kills_heard: OrderedDict[int, None] = OrderedDict()
        self.fences.kill_listeners.append(self._on_kill)
        # the runs in work here of jobs with a block strategy other than concurrent (model.Block):
        # job code -> (trigger id, T ms) -> its envelopes in work (pages of a fan-out share a run)
        self._job_runs: dict[str, dict[tuple[int, int], list[Envelope]]] = {}
        self.discarded = 0  # runs not run: an earlier run of their job was in work (discard_later)
        self.covered = 0  # runs killed by a later run of their job (cover_early)
        # serial: job code -> its runs waiting here, in arrival order (no thread, no quota step)
        self._waiting: dict[str, list[EnvelopeRun]] = {}
        self.serial_queue = serial_queue  # runs of one job that may wait here at once
        # waiting runs free to start, each for the next quota step given back (packs.PackRun.ready)
        self._ready: deque[PackRun] = deque()
        # id(envelope) of a serial run -> its handlers still running past their timeout: the
        # run is left in work (for the job's next run) until they have returned
        self._overrunning: dict[int, int] = {}
        self._overrun_landed: dict[int, Envelope] = {}
        self._serving = False  # run() is serving: released runs go to the workers
        self._closing = False  # run() is stopping: queued runs go back to the bus
        self.queued = 0  # runs that waited in a serial queue
        self.queue_full = 0  # runs answered failed: their job's serial queue was full
        self.fences.stop_listeners.append(self._on_stop)
        run_logs.install()  # the handlers' own log lines go with their results

    # -- registration ----------------------------------------------------------------

    def handler(self, name: str | None = None) -> Callable[[Handler], Handler]:
        """Register for a job code, or a handler name; with no name, the business's default."""

        def register(fn: Handler) -> Handler:
            if name is None:
                self._default = fn
            else:
                self._handlers[name] = fn
            return fn

        return register

    def in_flight(self) -> int:
        """Runs in work here now (taken, result not landed yet): the executor registry's
        gauge (executor.heartbeat), read on the heartbeat's thread without the lock: a
        moment's count, nothing decided on it."""
        return len(self._flights)

    def _lookup(self, env: Envelope) -> Handler | None:
        return self._handlers.get(env.job_code) or self._handlers.get(env.handler) or self._default

    # -- the loop --------------------------------------------------------------------

    def run(self, stop: threading.Event, batch: int = 100) -> None:
        # the outbox's bound is in envelopes: with one-item envelopes (a hot minute of
        # separate triggers) a bound of a few per worker capped each result publish at
        # ~64 results, one broker round trip each (~5K results/s); 1,024 keeps the round
        # trips few while still bounding what waits when the broker is slow
        self._outbox = ResultOutbox(
            self.bus,
            self.sub,
            compact=self.compact_results,
            capacity=max(OUTBOX_ENVELOPES, 4 * self.concurrency),
            name=f"exec-{self.biz_code}-results",
        )
        for i in range(self.concurrency):
            self._spawn(self._serve, f"exec-{self.biz_code}-{i}")
        self._serving = True
        try:
            while not stop.is_set():
                got = self.sub.receive(batch, timedelta(milliseconds=200))
                if got and not self.fences.synced():
                    self._hold(got)
                    continue
                for r in got:
                    pack = self._runs_of(r)
                    if pack is None:
                        continue
                    self._quota.acquire()  # released when the message's runs are done
                    self._inbox.put(pack)
        finally:
            with self._lock:  # runs waiting in serial queues go back to the bus, not run
                self._closing = True
            self._hand_back_queued()
            for _ in range(self.concurrency):  # every envelope taken is finished...
                self._quota.acquire()
            self._hand_back_queued()  # (those that were queued behind them meanwhile)
            with self._lock:  # ...and the copies that waited for them, answered from memory
                self._loose_done.wait_for(lambda: self._loose == 0, timeout=LOOSE_WAIT_S)
            for _ in range(self.concurrency):  # ...then each serving worker stops
                self._inbox.put(_STOP)
            for _ in range(self.concurrency):
                self._quota.release()
            self._outbox.close()  # ...and its results are published and acked
            self._outbox = None
            self._serving = self._closing = False

    def poll_once(self, batch: int = 100, timeout: timedelta = timedelta(milliseconds=50)) -> int:
        """Receive and process one batch on the caller's thread (tests, demos); results
        are published and the messages acked before it returns."""
        self._work_released_polled()
        got = self.sub.receive(batch, timeout)
        if got and not self.fences.synced():
            self._hold(got)
            return 0
        for r, env in ((p.share, env) for m in got if (p := self._runs_of(m)) is not None for env in p.envs):
            if self._flights.setdefault(_flight_key(env), env) is not env:
                nack(self.sub, r)  # a copy in work on another thread: back to the bus, answered later
                continue
            run = self._start((r, env), serve_after=False)
            if run is None or run.queued:  # queued: worked once released (_work_released_polled)
                continue
            if run.finished:  # shadow, or no handler: answered already
                pass
            elif _watched(run):
                # on a thread of its own, so that a timeout hands the rest to a successor
                # and this call returns once the envelope is finished, not the handler
                self._spawn(functools.partial(self._work, run), f"exec-{self.biz_code}-poll")
                run.wait_done()
            else:
                self._work(run)
            if isinstance(run.result, EnvelopeResult) and not run.queued:
                publish_and_ack(self.bus, self.sub, [(r, run.result)], self.compact_results)
        self._work_released_polled()
        return len(got)

    def _serve(self) -> None:
        """A worker: messages from the inbox until told to stop, or until the watchdog
        took one of its runs (a successor serves in its place)."""
        while True:
            part = self._inbox.get()
            if part is _STOP or not self._work_pack(part):
                return

    def _work_pack(self, pack: PackRun) -> bool:
        """The runs of a message (one, or a packed message's) from the next one on, on
        this thread; then their results go to the outbox together and the message's quota
        step is given back. False if the watchdog took a run over: its successor carries
        on with the rest."""
        released = pack.ready
        if released is not None:  # a serial job's run that waited for an earlier one
            pack.ready = None
            if not self._work_released(released):
                return False
        while pack.pos < len(pack.envs):
            env = pack.envs[pack.pos]
            if not self._claim(env, pack):
                return True  # parked: a worker takes the pack up again when the first copy lands
            pack.pos += 1
            if self._quick_run(pack, env):
                continue
            run = self._start((pack.share, env), serve_after=True, pack=pack)
            if run is None or run.finished or run.queued:
                continue
            if not self._work(run):
                return False
        self._remember_quick(pack)
        if self._outbox is not None:
            self._outbox.put_many(pack.results)
        if pack.stepped:
            self._give_step()
        elif pack.loose:
            with self._lock:
                pack.loose = False
                self._loose -= 1
                if not self._loose:
                    self._loose_done.notify_all()
        return True

    def _claim(self, env: Envelope, pack: PackRun) -> bool:
        """Take the run of `env` into work; False if another copy of it is in work here:
        then `pack` waits (parked, no thread, its quota step given back) until that copy
        is finished, and goes back to work (`_resume`), where this run is answered from
        memory."""
        key = _flight_key(env)
        stepped = False
        while True:
            owner = self._flights.setdefault(key, env)  # atomic: one copy wins
            if owner is env:
                return True
            # what this pack already finished leaves work first, so that a parked pack
            # holds no run another parked pack could be waiting for
            self._remember_quick(pack)
            with self._lock:
                if self._flights.get(key) is owner:
                    # the step is let go before the pack is visible to `_leave`: whoever
                    # resumes it sees it stepless, and gives it a step of its own
                    stepped, pack.stepped = pack.stepped, False
                    self._parked.setdefault(key, []).append(pack)
                    self.waited += 1
                    break
            # the first copy finished meanwhile: claim again
        if stepped:
            self._give_step()
        log.info(
            "a second copy of the run of trigger %s at %s came while the first is in work here; it waits for "
            "the first and is answered with its result",
            env.trigger_id,
            env.scheduled_ms,
        )
        return False

    def _leave(self, key: tuple[int, int, int]) -> list[PackRun] | None:
        """A run is out of work (under `_lock`, after `_done` has its successes): the packs
        parked on it."""
        self._flights.pop(key, None)
        return self._parked.pop(key, None) if self._parked else None

    def _block(self, run: EnvelopeRun) -> None:
        """The job's block strategy, before its run starts: with an earlier run of the job
        in work here, discard_later answers this one failed (never invoked), cover_early
        cancels the earlier one's items (as a kill does) and lets this one run."""
        env = run.env
        key = (env.trigger_id, env.scheduled_ms)
        with self._lock:
            runs = self._job_runs.setdefault(env.job_code, {})
            earlier = [e for k, envs in runs.items() if k != key for e in envs]
            discard = bool(earlier) and env.block is Block.DISCARD_LATER
            if discard:
                self.discarded += 1
            else:
                runs.setdefault(key, []).append(env)
                if earlier:
                    self.covered += len(earlier)
        if not earlier:
            return
        first = min(earlier, key=lambda e: e.scheduled_ms)
        if discard:
            self._finish(
                run,
                ItemState.FAILED,
                f"block strategy discard_later: not run, the run of {env.job_code} at "
                f"{first.scheduled_at.isoformat()} is still in work in executor {self.name}",
                started=False,
            )
            return
        why = (
            f"covered by the run of {env.job_code} at {env.scheduled_at.isoformat()} "
            f"(block strategy cover_early, executor {self.name})"
        )
        for e in earlier:
            for idx, _p in e.items:
                self.kills.cancel((e.trigger_id, e.scheduled_ms, idx), why, answered=False)
        log.info(
            "%s at %s covers %d earlier run(s) in work here (block strategy cover_early)",
            env.job_code,
            env.scheduled_at.isoformat(),
            len(earlier),
            extra=log_fields(biz_code=env.biz_code),
        )

    def _unblock(self, env: Envelope) -> None:
        """A run of a job with a block strategy leaves work (a serial one once its handlers
        past their timeout have returned too): the job's queued runs that may start now
        are released."""
        with self._lock:
            if env.block is Block.SERIAL and self._overrunning.get(id(env), 0) > 0:
                self._overrun_landed[id(env)] = env  # left in work until they return
                return
            self._unregister(env)
            released = self._release(env.job_code) if self._waiting else []
        for run in released:
            self._dispatch(run)

    def _unregister(self, env: Envelope) -> None:
        """Out of the job's runs in work (under `_lock`); nothing if it never was in
        (discarded, or it waited in a serial queue and was answered from there)."""
        key = (env.trigger_id, env.scheduled_ms)
        runs = self._job_runs.get(env.job_code)
        envs = runs.get(key) if runs is not None else None
        if runs is None or envs is None or not any(e is env for e in envs):
            return
        envs[:] = [e for e in envs if e is not env]
        if not envs:
            del runs[key]
            if not runs:
                del self._job_runs[env.job_code]

    # -- block strategy serial ---------------------------------------------------------

    def _serial(self, run: EnvelopeRun) -> None:
        """Block strategy serial, before its run starts: with an earlier run of the job in
        work here on one of its items (or queued before it), the run waits in the job's
        queue, holding no thread and no quota step, until the earlier ones have left work;
        a full queue answers it failed, never invoked."""
        env = run.env
        with self._lock:
            runs = self._job_runs.setdefault(env.job_code, {})
            waiting = self._waiting.get(env.job_code, [])
            if not self._serial_blocked(env, runs, waiting):
                runs.setdefault((env.trigger_id, env.scheduled_ms), []).append(env)
                return
            if not runs:
                del self._job_runs[env.job_code]
            full = len(waiting) >= self.serial_queue
            if full:
                self.queue_full += 1
            else:
                run.queued = True
                solo = PackRun(run.received, [env])  # type: ignore[arg-type]
                solo.pos, solo.stepped = 1, False
                run.pack = solo
                self._waiting.setdefault(env.job_code, []).append(run)
                self.queued += 1
        if full:
            log.warning(
                "%s at %s not run: %d run(s) of it already wait in this executor (block strategy serial)",
                env.job_code,
                env.scheduled_at.isoformat(),
                len(waiting),
                extra=log_fields(biz_code=env.biz_code),
            )
            self._finish(
                run,
                ItemState.FAILED,
                f"block strategy serial: not run, {len(waiting)} run(s) of {env.job_code} already wait "
                f"in executor {self.name} (its queue holds {self.serial_queue})",
                started=False,
            )
            return
        if self.receipts is not None:  # stamped received (not started) if it waits long
            self.receipts.begin(env, run.received_ms, queued=True)

    @staticmethod
    def _serial_blocked(env: Envelope, runs: dict[tuple[int, int], list[Envelope]], ahead: list[EnvelopeRun]) -> bool:
        """Whether a run of another fire of the job, in work or queued before `env`, has one
        of `env`'s items (pages of one fire never block each other)."""
        key = (env.trigger_id, env.scheduled_ms)
        mine = {idx for idx, _p in env.items}
        for k, envs in runs.items():
            if k != key and any(idx in mine for e in envs for idx, _p in e.items):
                return True
        return any(
            (w.env.trigger_id, w.env.scheduled_ms) != key and any(idx in mine for idx, _p in w.env.items) for w in ahead
        )

    def _release(self, job_code: str) -> list[EnvelopeRun]:
        """Under `_lock`: the job's queued runs that may start now, in arrival order, taken
        into work."""
        waiting = self._waiting.get(job_code)
        if not waiting:
            return []
        runs = self._job_runs.setdefault(job_code, {})
        out: list[EnvelopeRun] = []
        still: list[EnvelopeRun] = []
        for w in waiting:
            if self._serial_blocked(w.env, runs, still):
                still.append(w)
            else:
                runs.setdefault((w.env.trigger_id, w.env.scheduled_ms), []).append(w.env)
                out.append(w)
        if still:
            self._waiting[job_code] = still
        else:
            del self._waiting[job_code]
        if not runs:
            del self._job_runs[job_code]
        return out

    def _dispatch(self, run: EnvelopeRun) -> None:
        """A released run to the workers, in a quota step of its own: a free one now, or the
        next one given back (`_give_step`). Polled (no workers): the next poll_once works it;
        stopping: back to the bus."""
        pack = run.pack
        assert isinstance(pack, PackRun)
        pack.ready = run
        with self._lock:
            closing = self._closing
            if not closing:
                if self._serving and self._quota.acquire(blocking=False):
                    pack.stepped = True
                    self._inbox.put(pack)
                else:
                    self._ready.append(pack)
        if closing:
            self._hand_back(run)

    def _give_step(self) -> None:
        """A quota step is free: to the first released run waiting for one, else back."""
        with self._lock:
            pack = self._ready.popleft() if self._ready and self._serving and not self._closing else None
            if pack is None:
                self._quota.release()
        if pack is not None:
            pack.stepped = True
            self._inbox.put(pack)

    def _work_released(self, run: EnvelopeRun) -> bool:
        """A queued run starts now, on this thread (a stop that came meanwhile skips it);
        False if the watchdog took it over."""
        run.started_ms = self.clock.now_ms()
        env = run.env
        window = self.fences.stopping(env.trigger_id, env.job_code, env.biz_code, env.scheduled_ms)
        if window is not None:
            self._skip_stopped(run, window)
            return True
        return self._work(run)

    def _work_released_polled(self) -> None:
        """poll_once: the queued runs released since, worked on the caller's thread."""
        while True:
            with self._lock:
                pack = self._ready.popleft() if self._ready else None
            if pack is None:
                return
            run = pack.ready
            pack.ready = None
            if run is None:  # a resumed copy: polled, copies are nacked, never parked
                continue
            if _watched(run):  # as poll_once runs one: a timeout hands the rest to a successor
                self._spawn(functools.partial(self._work_released, run), f"exec-{self.biz_code}-poll")
                run.wait_done()
            else:
                self._work_released(run)
            publish_and_ack(self.bus, self.sub, pack.results, self.compact_results)

    def _overrun_ended(self, env: Envelope, step: int) -> None:
        """A serial run's handler overran its timeout (+1) or returned after it did (-1, which
        can come first): once none is running, a run that left work leaves it for its job."""
        with self._lock:
            n = self._overrunning.get(id(env), 0) + step
            if n:
                self._overrunning[id(env)] = n
                return
            self._overrunning.pop(id(env), None)
            landed = self._overrun_landed.pop(id(env), None)
        if landed is not None:
            self._unblock(landed)

    def _take_waiting(self, leaves: Callable[[EnvelopeRun], bool]) -> list[EnvelopeRun]:
        """The queued runs `leaves` picks, out of their queues (they never start)."""
        out: list[EnvelopeRun] = []
        with self._lock:
            for job_code, waiting in list(self._waiting.items()):
                gone = [w for w in waiting if leaves(w)]
                if not gone:
                    continue
                out += gone
                kept = [w for w in waiting if w not in gone]
                if kept:
                    self._waiting[job_code] = kept
                else:
                    del self._waiting[job_code]
        return out

    def _on_stop(self) -> None:
        """A stop came (on the control follower's thread): the queued runs it covers are
        answered skipped now, not when their turn comes (a thread of their own: the answer
        goes to the outbox, which may wait)."""
        if self._waiting:
            self._spawn(self._skip_stopped_waiting, f"exec-{self.biz_code}-stop")

    def _skip_stopped_waiting(self) -> None:
        def stopping(w: EnvelopeRun) -> SkipWindow | None:
            e = w.env
            return self.fences.stopping(e.trigger_id, e.job_code, e.biz_code, e.scheduled_ms)

        for w in self._take_waiting(lambda w: stopping(w) is not None):
            window = stopping(w)
            assert window is not None  # a stop's windows only grow over a fire time
            self._skip_stopped(w, window)
            self._deliver(w)

    def _kill_waiting(self) -> None:
        """Queued runs every item of which an operator killed: recorded killed before they
        started, now, not when their turn comes."""
        kills = self.kills

        def killed(w: EnvelopeRun) -> bool:
            e = w.env
            return all(kills.is_cancelled((e.trigger_id, e.scheduled_ms, idx)) for idx, _p in e.items)

        for w in self._take_waiting(killed):
            for pos, (idx, _p) in enumerate(w.env.items):
                w.killed(pos, idx, 0)
            self._finish(w, "".join(w.letters), "", started=False)
            self._deliver(w)

    def _deliver(self, run: EnvelopeRun) -> None:
        """The result of a queued run answered without a worker (stopped, killed)."""
        pack = run.pack
        assert isinstance(pack, PackRun)
        if self._outbox is not None:
            self._outbox.put_many(pack.results)
        else:
            publish_and_ack(self.bus, self.sub, pack.results, self.compact_results)

    def _hand_back_queued(self) -> None:
        """Stopping: every queued run (waiting, or released and waiting for a quota step)
        goes back to the bus."""
        with self._lock:
            runs = [w for waiting in self._waiting.values() for w in waiting]
            runs += [p.ready for p in self._ready if p.ready is not None]
            copies = [p for p in self._ready if p.ready is None]  # resumed copies (`_resume`)
            self._waiting.clear()
            self._ready.clear()
        for run in runs:
            self._hand_back(run)
        for pack in copies:
            self._resume(pack)  # stopping: back to work without a step

    def _hand_back(self, run: EnvelopeRun) -> None:
        """A queued run not started, back to the bus (redelivered, here or elsewhere)."""
        if self.receipts is not None:
            self.receipts.end(run.env)
        nack(self.sub, run.received)  # type: ignore[arg-type]
        self._land(run.env)
        run.mark_done()

    def _land(self, env: Envelope) -> None:
        if env.block is not _CONCURRENT:
            self._unblock(env)
        if self.kills.watched():  # a kill or a handler's wait on one: drop what was kept for this run
            self.kills.forget((env.trigger_id, env.scheduled_ms, idx) for idx, _p in env.items)
        key = _flight_key(env)
        if len(env.items) > 1 and (run := self._runs_in_work.get(key)) is not None and run.env is env:
            del self._runs_in_work[key]
        with self._lock:
            parked = self._leave(key) if self._flights.get(key) is env else None
        self._unpark([parked])

    def _unpark(self, parked: list[list[PackRun] | None]) -> None:
        for packs in parked:
            for p in packs or ():
                self._resume(p)

    def _resume(self, pack: PackRun) -> None:
        """A parked copy goes back to work once its first copy landed, in a quota step of
        its own: a free one now, or the next one given back (`_give_step`). While the
        executor stops, at once without one: its answer comes from memory, where handed
        back to the bus it would run the handler again in another process."""
        with self._lock:
            if self._serving and not self._closing:
                if not self._quota.acquire(blocking=False):
                    self._ready.append(pack)
                    return
                pack.stepped = True
            elif not pack.loose:
                pack.loose = True
                self._loose += 1
        self._inbox.put(pack)

    def _quick_run(self, pack: PackRun, env: Envelope) -> bool:
        """The common run, at a few microseconds an item: no job timeout, none of its items
        seen here before, a handler, and a first attempt of every item that succeeds (a hot
        minute is 50K one-item runs due in one second; an on-the-hour burst of sharded
        triggers is 50K runs of a few items, packed). Anything else goes the ordinary way;
        a failure or a kill found here is judged, retried with back-off and finished as
        there. True if it is done.

        What it saves over the ordinary way is the per-run bookkeeping under `_lock` (the
        look-up of what succeeded before, the successes, the run's leaving work): a quick
        run is remembered with the rest of its pack under one acquisition
        (`_remember_quick`). Three acquisitions a run, by 16 workers, made the lock and the
        GIL convoy: a packed burst of four-item runs went at ~50K items/s, a third of the
        one-item runs' rate."""
        if env.timeout or env.shadow or self.shadow or env.block is not _CONCURRENT:
            return False
        # usually empty: one attribute read and a truth test
        if self.fences.stops.by_scope and self.fences.stopping(
            env.trigger_id, env.job_code, env.biz_code, env.scheduled_ms
        ):
            return False  # the ordinary path answers it skipped
        items = env.items
        key = (env.trigger_id, env.scheduled_ms)
        if self._ended and key in self._ended:  # a copy of a run that ended badly here
            return False
        # (dict reads without the lock: single operations, atomic under the GIL; a copy of
        # this very run cannot change them meanwhile, it waits for its flight to land)
        known = self._done.get(key)
        if known is not None and (len(items) == 1 or any(idx in known for idx, _p in items)):
            return False  # a redelivery: answered from memory (another page of its run may pass)
        ended = self.kills.ended
        if ended and any((*key, idx) in ended for idx, _p in items):
            return False  # killed here before: the ordinary path answers it killed
        fn = self._lookup(env)
        if fn is None:
            return False
        if len(items) == 1:
            return self._quick_one(pack, env, key, fn)
        return self._quick_many(pack, env, fn)

    def _quick_one(self, pack: PackRun, env: Envelope, key: tuple[int, int], fn: Handler) -> bool:
        """A quick run of one item: no run object unless it fails."""
        idx, param = env.items[0]
        received_ms = self.clock.now_ms()
        started = time.monotonic()
        receipts = self.receipts
        if receipts is not None:
            receipts.begin(env, received_ms)
        kills = self.kills
        try:
            value = fn(ExecutionContext.of(env, idx, param, 0, kills))
        except Exception:
            value = failed_now()
        if receipts is not None:
            receipts.end(env)
        if (value is not None and value is not True) or kills.cancelled:
            # not a plain success: judged, retried with back-off, finished as usual
            run = self._ordinary(pack, env, fn, received_ms)
            run.starts.append(started)
            settle(run, 0, idx, param, value, self._backoff)
            self._finish(run)
            return True
        self._quick_done(pack, env, [idx], ItemState.SUCCEEDED, received_ms, [0])
        return True

    def _quick_many(self, pack: PackRun, env: Envelope, fn: Handler) -> bool:
        """A quick run of several items: a plain loop while every item simply succeeds (no
        run object, no per-item bookkeeping); at the first item that does not, or once a
        kill is in progress, the run becomes an ordinary one from that item on (kills,
        failures and retries item by item, as `runner.run_unwatched`) and is finished as
        usual. See `_quick_run`."""
        received_ms = self.clock.now_ms()
        kills = self.kills
        cancelled = kills.cancelled  # live: empty unless a kill is in progress
        items = env.items
        letters: list[str] = []
        starts: list[float] = []
        # as `_start` does with its run: a kill of an item that already has its result is
        # answered so (`_recorded`); left with the run's flight (`_remember_quick`, `_land`)
        fkey = _flight_key(env)
        self._runs_in_work[fkey] = _Progress(env, letters)
        receipts = self.receipts
        if receipts is not None:
            receipts.begin(env, received_ms)
        make = ExecutionContext.of
        mono = time.monotonic
        ok = ItemState.SUCCEEDED
        pos = -1
        value: object = None
        called = False
        try:
            for pos, (idx, param) in enumerate(items):  # noqa: B007 - pos and idx are read after a break
                starts.append(mono())
                if cancelled:
                    break
                try:
                    value = fn(make(env, idx, param, 0, kills))
                except Exception:
                    value = failed_now()
                if cancelled or (value is not None and value is not True):
                    called = True
                    break
                letters.append(ok)
            else:
                pos = len(items)
            if pos < len(items):  # the rest the ordinary way, from this item on
                run = self._ordinary(pack, env, fn, received_ms)
                run.letters = letters
                run.starts = starts
                self._runs_in_work[fkey] = run
                if called:
                    idx, param = items[pos]
                    returned(run, pos, idx, param, value, self._backoff)
                    pos += 1
                else:
                    starts.pop()  # run_unwatched stamps this item's start again
                run_unwatched(run, self._backoff, pos)
                self._finish(run)
                return True
        except Exception:  # as `_work`: back to the bus
            if receipts is not None:
                receipts.end(env)
            self._failed(pack.share)
            self._land(env)
            return True
        if receipts is not None:
            receipts.end(env)
        s0 = starts[0]
        offsets = [int((s - s0) * 1000) for s in starts]
        self._quick_done(pack, env, [idx for idx, _p in items], "".join(letters), received_ms, offsets)
        return True

    def _ordinary(self, pack: PackRun, env: Envelope, fn: Handler, received_ms: int) -> EnvelopeRun:
        """A quick run that met an item not simply succeeding, as an ordinary run of `pack`."""
        return self._run_of(env, fn, pack.share, received_ms, skip=None, serve_after=True, pack=pack)

    def _run_of(
        self,
        env: Envelope,
        fn: Handler | None,
        received: Received | PackShare,
        received_ms: int,
        *,
        skip: dict[int, int] | None,
        serve_after: bool,
        pack: PackRun | None,
    ) -> EnvelopeRun:
        """The run of `env` (None for `fn`: a shadow run, nothing invoked)."""
        run = EnvelopeRun(
            env,
            fn,  # type: ignore[arg-type]
            received=received,
            received_ms=received_ms,
            started_ms=received_ms,
            skip=skip,
            serve_after=serve_after,
            kills=self.kills,
        )
        run.pack = pack
        return run

    def _quick_done(
        self, pack: PackRun, env: Envelope, indices: list[int], letters: str, received_ms: int, offsets: list[int]
    ) -> None:
        """A quick run's result, with its pack's (remembered with them: `_remember_quick`)."""
        result = EnvelopeResult(
            trigger_id=env.trigger_id,
            scheduled_ms=env.scheduled_ms,
            page_id=env.page_id,
            indices=indices,
            letters=letters,
            received_ms=received_ms,
            started_ms=received_ms,
            finished_ms=self.clock.now_ms(),
            start_offsets_ms=offsets,
            message="",
            exceptions=[],
            logs=run_logs.take(env),
            executor=self.instance_id,
        )
        pack.results.append((pack.share, result))
        pack.quick.append(env)

    def _remember_quick(self, pack: PackRun) -> None:
        """The quick runs' successes, and their leaving work, under one lock acquisition
        for the whole pack (a waiting copy is answered from `_done`: it learns of them first)."""
        if not pack.quick:
            return
        with self._lock:
            done = self._done
            added = 0
            parked: list[list[PackRun] | None] = []
            for env in pack.quick:
                key = (env.trigger_id, env.scheduled_ms)
                items = env.items
                known = done.get(key)
                if len(items) == 1:
                    idx = items[0][0]
                    fkey = (*key, idx)
                    if known is None:
                        done[key] = {idx: 0}
                        added += 1
                    elif idx not in known:
                        known[idx] = 0
                        added += 1
                else:
                    fkey = (*key, items[0][0])
                    ok = dict.fromkeys([idx for idx, _p in items], 0)
                    if known is None:
                        done[key] = ok
                        added += len(ok)
                    else:
                        before = len(known)
                        known.update(ok)
                        added += len(known) - before
                    run = self._runs_in_work.get(fkey)
                    if run is not None and run.env is env:
                        del self._runs_in_work[fkey]
                self.processed += len(items)
                parked.append(self._leave(fkey))
            self._done_items += added
            while self._done_items > self._remember and len(done) > 1:
                _k, gone = done.popitem(last=False)
                self._done_items -= len(gone)
        pack.quick.clear()
        self._unpark(parked)

    def _runs_of(self, r: Received) -> PackRun | None:
        """A message's runs (one, or a packed message's), worked one after another on one
        worker, with the receipt their results ack: the message's own, or for a packed
        message a share of it (acked when every run is done). None: malformed, dropped."""
        try:
            envs = decode_message(r.message.payload)
        except CodecError as exc:
            log.error("dropping a malformed command message: %s", exc)
            self.sub.ack(r)
            return None
        return PackRun(r if len(envs) == 1 else PackShare(r, len(envs)), envs)

    def _start(
        self, part: tuple[Received | PackShare, Envelope], *, serve_after: bool, pack: PackRun | None = None
    ) -> EnvelopeRun | None:
        """The run of one envelope; None if there is nothing to run (failed)."""
        r, env = part
        try:
            received_ms = self.clock.now_ms()
            shadow = self.shadow or env.shadow
            fn = None if shadow else self._lookup(env)
            with self._lock:
                skip = self._done.get((env.trigger_id, env.scheduled_ms))
                ended = self._ended.get((env.trigger_id, env.scheduled_ms)) if self._ended else None
            run = self._run_of(env, fn, r, received_ms, skip=skip, serve_after=serve_after, pack=pack)
            if len(env.items) > 1:
                self._runs_in_work[_flight_key(env)] = run
            stopped = self.fences.stopping(env.trigger_id, env.job_code, env.biz_code, env.scheduled_ms)
            if stopped is not None:
                self._skip_stopped(run, stopped)
            elif ended is not None and all(idx in ended or (skip is not None and idx in skip) for idx, _p in env.items):
                # a copy of a run that ended here: answered with how each item ended, not run again
                letters = "".join(ended.get(idx, ItemState.SUCCEEDED) for idx, _p in env.items)
                self._finish(run, letters, "a copy of a run that already ended here: not run again", started=False)
            elif shadow:
                self._finish(run, ItemState.RECEIVED, SHADOW_NOTE, started=False)
            elif fn is None:
                self._finish(
                    run,
                    ItemState.FAILED,
                    f"no handler registered for job {env.job_code!r} (handler {env.handler!r})",
                    started=False,
                )
            elif env.block is Block.SERIAL:
                self._serial(run)
            elif env.block is not _CONCURRENT:
                self._block(run)
            return run
        except Exception:
            self._failed(r)
            self._land(env)
            return None

    def _work(self, run: EnvelopeRun) -> bool:
        """Run the items on this thread; False if the watchdog took the run over."""
        if self.receipts is not None:
            if run.queued:
                self.receipts.started(run.env, run.started_ms)
            else:
                self.receipts.begin(run.env, run.received_ms)
        try:
            if _watched(run):
                self._watchdog.watch(run)
                if not run_watched(run, 0, self._backoff):
                    self._overrun_returned(run, 1)
                    return False
                self._watchdog.unwatch(run)
            else:
                run_unwatched(run, self._backoff)
            self._finish(run)
        except Exception:
            self._watchdog.unwatch(run)
            if self.receipts is not None:
                self.receipts.end(run.env)
            self._failed(run.received)  # type: ignore[arg-type]
            self._land(run.env)
            run.mark_done()
        return True

    def _take_over(self, run: EnvelopeRun, gen: int, wait: float) -> None:
        """The watchdog's hand-over: a successor thread carries on with the run."""

        if run.env.block is Block.SERIAL:  # its job's next run waits for the overrun handler too
            self._overrun_ended(run.env, +1)

        def carry_on() -> None:
            # The overrun handler still runs (a thread cannot be killed), in the message's
            # quota step. The successor goes on at once in a spare step if there is one
            # (given back when the overrun handler returns), else it waits for that
            # handler to return: never more than `concurrency` handlers run at once.
            # (Blocking on a fresh step instead would deadlock with the receive loop,
            # which takes the step the overrun handler frees for a new message.)
            self._successor_slot(run, gen)
            if wait > 0:
                time.sleep(wait)  # the retry's back-off, as on the worker
            try:
                if not run_watched(run, gen, self._backoff):
                    self._overrun_returned(run, gen + 1)
                    return
                self._watchdog.unwatch(run)
                self._finish(run)
            except Exception:
                self._watchdog.unwatch(run)
                self._failed(run.received)  # type: ignore[arg-type]
                self._land(run.env)
                run.mark_done()
            if isinstance(run.pack, PackRun) and not self._work_pack(run.pack):
                return  # another overrun: a further successor has the pack now
            if run.serve_after:
                self._serve()

        self._spawn(carry_on, f"exec-{self.biz_code}-successor")

    def _successor_slot(self, run: EnvelopeRun, gen: int) -> None:
        """Before generation `gen` of `run` calls a handler: a spare quota step, or the
        return of the handler that overran generation `gen - 1`."""
        with self._lock:
            hand = self._handoffs.setdefault((run, gen), _Handoff())
            if not hand.returned and self._quota.acquire(blocking=False):
                hand.extra = True
        if not hand.extra:
            hand.event.wait()
        with self._lock:
            if hand.returned:
                self._handoffs.pop((run, gen), None)

    def _overrun_returned(self, run: EnvelopeRun, gen: int) -> None:
        """The handler whose run was handed to generation `gen` has returned."""
        with self._lock:
            hand = self._handoffs.setdefault((run, gen), _Handoff())
            hand.returned = True
            if hand.extra:
                self._handoffs.pop((run, gen), None)
        if hand.extra:
            self._give_step()  # the spare step its successor took
        hand.event.set()
        if run.env.block is Block.SERIAL:
            self._overrun_ended(run.env, -1)

    def _skip_stopped(self, run: EnvelopeRun, window: SkipWindow) -> None:
        """Answer a run a stop covers (a pause, cancel or freeze, or a rollback's fence):
        skipped, never invoked. An item that already succeeded here (a redelivery) keeps
        its success: it did run."""
        env = run.env
        skip = run.skip
        ok, skipped = ItemState.SUCCEEDED, ItemState.SKIPPED
        letters = "".join(ok if skip is not None and idx in skip else skipped for idx, _p in env.items)
        n = letters.count(skipped)
        rollback = window.cause is Cause.ROLLBACK
        with self._lock:
            if rollback:
                self.fenced += n
            elif window.cause is Cause.EDIT:
                self.superseded += n
            else:
                self.stopped += n
            # one line per window (an edit's point windows: one per edit)
            mark = (env.biz_code, window.from_ms if window.effective_ms is None else window.effective_ms)
            first = mark not in self._fences_logged
            self._fences_logged.add(mark)
        if first:
            log.info(
                "skipping the commands of %s scheduled from %s: %s",
                env.biz_code,
                from_ms(window.from_ms).isoformat(),
                window.message,
                extra=log_fields(biz_code=env.biz_code),
            )
        self._finish(run, letters, window.message, started=False)

    def _hold(self, got: list[Received]) -> None:
        """The fences are not known (the control channel is not in sync): running these
        could run what a rollback fenced off, dropping them would lose them. Back to the
        bus; redelivered after its nack delay."""
        for r in got:
            try:
                self.sub.nack(r)
            except Exception:  # noqa: BLE001 - unacked, it comes back anyway
                log.debug("nack of a held message failed", exc_info=True)
        self.held += len(got)
        self._held_since_log += len(got)
        now = time.monotonic()
        if now - self._held_logged >= HELD_LOG_EVERY_S:
            log.warning(
                "%d command message(s) of %s handed back for redelivery: the rollback fences are not "
                "known yet (the control channel is not in sync)",
                self._held_since_log,
                self.biz_code,
                extra=log_fields(biz_code=self.biz_code),
            )
            self._held_logged, self._held_since_log = now, 0
        self.fences.wait_synced(HOLD_WAIT)

    def _finish(self, run: EnvelopeRun, letter: str | None = None, message: str = "", *, started: bool = True) -> None:
        """`letter`: one letter for every item, or a string of one per item (a run
        finished without running, e.g. shadow, or skipped by a fence); None: the letters
        the run recorded."""
        env = run.env
        if self.receipts is not None:
            self.receipts.end(env)
        n = len(env.items)
        now_ms = self.clock.now_ms()
        letters = "".join(run.letters) if letter is None else (letter if len(letter) == n else letter * n)
        indices = [idx for idx, _p in env.items]
        result = EnvelopeResult(
            trigger_id=env.trigger_id,
            scheduled_ms=env.scheduled_ms,
            page_id=env.page_id,
            indices=indices,
            letters=letters,
            received_ms=run.received_ms,
            started_ms=run.started_ms if started else None,
            finished_ms=now_ms,
            start_offsets_ms=run.start_offsets_ms() if started else None,
            message=message,
            exceptions=run.extras,
            logs=run_logs.take(env),
            executor=self.instance_id,
        )
        if letter is None:
            self._remember_successes(run, indices, letters)
        self._land(env)  # after `_done` knows its successes: a waiting copy is answered from there
        run.result = result
        if isinstance(run.pack, PackRun):  # published with the message's other runs
            run.pack.results.append((run.received, result))  # type: ignore[arg-type]
        run.mark_done()  # (poll_once publishes its own)

    def _remember_successes(self, run: EnvelopeRun, indices: list[int], letters: str) -> None:
        if letters.count(ItemState.SUCCEEDED) == len(letters):  # the usual case, at C speed
            ok = dict.fromkeys(indices, 0)
        else:
            ok = {indices[k]: 0 for k, c in enumerate(letters) if c == ItemState.SUCCEEDED}
            bad = {indices[k]: c for k, c in enumerate(letters) if c in _ENDED_BADLY}
            if bad:
                with self._lock:
                    self._ended.setdefault((run.env.trigger_id, run.env.scheduled_ms), {}).update(bad)
                    while len(self._ended) > max(1, self._remember // 8):
                        self._ended.popitem(last=False)
        for pos, attempt, _m in run.extras:
            if attempt and indices[pos] in ok:
                ok[indices[pos]] = attempt
        key = (run.env.trigger_id, run.env.scheduled_ms)
        with self._lock:
            self.processed += len(indices) - run.duplicates
            self.duplicates += run.duplicates
            known = self._done.get(key)
            if known is None:
                self._done[key] = ok
                self._done_items += len(ok)
            else:
                before = len(known)
                known.update(ok)
                self._done_items += len(known) - before
            while self._done_items > self._remember and len(self._done) > 1:
                _k, gone = self._done.popitem(last=False)
                self._done_items -= len(gone)

    def _failed(self, r: Received | PackShare) -> None:
        # not acked: the bus redelivers it; the same command ids make that safe. The
        # message's quota step is given back when its last run is done (_work_pack).
        log.exception("processing a command message failed; it will be redelivered")
        nack(self.sub, r)

    def _backoff(self, attempt: int) -> float:
        return min(self.retry_backoff.total_seconds() * (2.0 ** (attempt - 1)), self.max_backoff.total_seconds())

    def _spawn(self, target: Callable[[], object], name: str) -> None:
        threading.Thread(target=target, name=name, daemon=True).start()

    # -- kill requests (scheduler_core.kills) ----------------------------------------

    def _on_kill(self, kill: Kill) -> None:
        """On the control follower's thread: cancel the covered runs in work here, then
        answer for each on a thread of its own (the answer waits for the handler, and an
        in-process bus hands control messages to followers on the publisher's thread, so
        an answer published from here would re-enter it)."""
        if kill.biz_code != self.biz_code or not kill.fresh(self.clock.now_ms()):
            return
        with self._lock:
            if kill.request_id in self._kills_heard:
                return
            self._kills_heard[kill.request_id] = None
            while len(self._kills_heard) > REMEMBER_KILLS:
                self._kills_heard.popitem(last=False)
        in_work = self._flights.copy()  # atomic under the GIL; claims go on meanwhile
        covered = [
            ((env.trigger_id, env.scheduled_ms, idx), fkey, env)
            for fkey, env in in_work.items()
            for idx, _p in env.items
            if kill.covers(env.job_code, env.trigger_id, env.scheduled_ms, idx)
        ]
        done = [c for c in covered if self._recorded(*c)]
        for key, _f, _e in done:  # answered on a thread of its own, as every answer: see _on_kill
            finished = functools.partial(
                self._send_answer, kill, command_id(*key), Outcome.FINISHED, "the item had its result before the kill"
            )
            self._spawn(finished, f"exec-{self.biz_code}-kill")
        covered = [c for c in covered if c not in done]
        if not covered:
            return
        for key, _f, _e in covered:
            self.kills.cancel(key, kill.message)
        if self._waiting:  # queued serial runs: answered now, not when their turn comes
            self._spawn(self._kill_waiting, f"exec-{self.biz_code}-kill")
        log.info(
            "%s: cancelling %d run item(s) in work here", kill, len(covered), extra=log_fields(biz_code=self.biz_code)
        )
        for key, fkey, env in covered:
            self._spawn(functools.partial(self._answer_kill, kill, key, fkey, env), f"exec-{self.biz_code}-kill")

    def _recorded(self, key: tuple[int, int, int], fkey: tuple[int, int, int], env: Envelope) -> bool:
        """An item of a run of several items in work here that already has its result."""
        run = self._runs_in_work.get(fkey)
        if run is None or run.env is not env:
            return False
        pos = next(p for p, (idx, _param) in enumerate(env.items) if idx == key[2])
        return pos < len(run.letters)

    def _answer_kill(self, kill: Kill, key: tuple[int, int, int], fkey: tuple[int, int, int], env: Envelope) -> None:
        try:
            self._answer_outcome(kill, key, fkey, env)
        finally:
            self.kills.answered(key)

    def _answer_outcome(self, kill: Kill, key: tuple[int, int, int], fkey: tuple[int, int, int], env: Envelope) -> None:
        """Once the item has its result, or while it is still running `KILL_GRACE` after
        the kill (then again when it ends, for as long as the run is in work here)."""
        cid = command_id(*key)
        state = self._landed_or_gone(key, fkey, env, KILL_GRACE.total_seconds())
        if state is None:
            timeout = env.timeout
            limit = f"its job timeout ({timeout.total_seconds():g}s) ends it" if timeout else "it has no job timeout"
            self._send_answer(
                kill,
                cid,
                Outcome.STILL_RUNNING,
                f"the handler has not returned {KILL_GRACE.total_seconds():g}s after the kill; {limit}",
            )
            end = time.monotonic() + KILL_FOLLOW_UP.total_seconds()
            while state is None and time.monotonic() < end:  # bounded; ends with the run
                state = self._landed_or_gone(key, fkey, env, 1.0)
            if state is None:
                return
        if state == _GONE:
            self.kills.forget([key])
            self._send_answer(kill, cid, Outcome.FINISHED, "the run ended on its own before the kill reached it")
        elif state == ItemState.TIMED_OUT:
            self._send_answer(kill, cid, Outcome.TIMED_OUT, "the handler ignored the kill; timed out")
        elif state == ItemState.KILLED:
            self._send_answer(kill, cid, Outcome.KILLED, "the handler returned; recorded killed")
        else:
            self._send_answer(kill, cid, Outcome.NOT_STARTED, "killed before its handler started")

    def _landed_or_gone(
        self, key: tuple[int, int, int], fkey: tuple[int, int, int], env: Envelope, wait: float
    ) -> str | None:
        """The state the cancelled item ended in; `_GONE` if its run is no longer in work
        here without the item having been answered for the kill (it ended just before the
        kill came); None while it is still running after `wait` s."""
        state = self.kills.wait_landed(key, wait)
        if state is not None:
            return state
        if self._flights.get(fkey) is not env:
            # the result is recorded before the run leaves work: look once more
            late = self.kills.wait_landed(key, 0)
            return _GONE if late is None else late
        return None

    def _send_answer(self, kill: Kill, cid: str, outcome: Outcome, message: str) -> None:
        answer = KillAnswer(kill.request_id, cid, outcome, message, self.name)
        try:
            self.bus.publish_control(self.biz_code, encode_answer(answer))
        except Exception:  # the answer is a courtesy: the run's result is recorded anyway
            log.warning("could not publish the answer to the %s: %s", kill, answer, exc_info=True)

    def close(self) -> None:
        if self._on_kill in self.fences.kill_listeners:
            self.fences.kill_listeners.remove(self._on_kill)
        if self._on_stop in self.fences.stop_listeners:
            self.fences.stop_listeners.remove(self._on_stop)
        self._watchdog.close()
        if self.receipts is not None:
            self.receipts.close()
        self.sub.close()
        if self._own_fences:
            self.fences.close()
