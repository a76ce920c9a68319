"""What a handler sees (`ExecutionContext`) and what it may return (`HandlerResult`).

The context is built once per item and per attempt, so it is cheap on purpose: the
run's fields live in the decoded `Envelope`, shared by every item of the message; the
context holds a reference to it plus the item's own three fields, and derives the
command id only when a handler asks for it. A frozen dataclass of eleven fields cost
about 1.5 us per item, more than a no-op handler. The public fields are read-only
properties, as they were on the frozen dataclass.

Cancellation (`run kill`, `scheduler_core.executor.kills`) is cooperative: a handler that
can stop early checks `ctx.cancelled`, waits on `ctx.cancel_event`, or registers
`ctx.on_cancel(fn)`, and returns; its run is then recorded killed. The context holds a
reference to its executor's `Cancellations` and asks it only when the handler does.

Log lines: `ctx.log` (or any logger reaching the root logger) during the run are kept
with it (`executor.run_logs`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from scheduler_core.codec import Envelope
from scheduler_core.executor import run_logs
from scheduler_core.executor.kills import Cancellations
from scheduler_core.model import CommandId, Epoch, JobCode, TriggerId, command_id
from scheduler_core.times import to_ms


class ExecutionContext:
    __slots__ = ("_env", "_index", "_param", "_attempt", "_cid", "_kills")

    _env: Envelope
    _index: int
    _param: str
    _attempt: int
    _cid: CommandId | None  # set only by the public constructor; otherwise derived
    _kills: Cancellations | None  # the executor's kill requests; None: never cancelled

    def __init__(
        self,
        *,
        command_id: CommandId,
        trigger_id: TriggerId,
        job_code: JobCode,
        biz_code: str,
        scheduled_at: datetime,
        item_index: int,
        item_total: int,
        item_param: str,
        params: str,
        attempt: int,
        timeout: timedelta,
    ) -> None:
        # The public constructor (tests, bridges): a one-item envelope of its own, and
        # the command id as given.
        ms = to_ms(scheduled_at)
        self._cid = command_id
        self._env = Envelope(
            trigger_id=trigger_id,
            scheduled_ms=ms,
            scheduled_at=scheduled_at,
            job_code=job_code,
            biz_code=biz_code,
            handler="",
            params=params,
            item_total=item_total,
            attempt=attempt,
            timeout=timeout,
            max_retry=0,
            epoch=Epoch(0),
            page_id=None,
            shadow=False,
            items=[(item_index, item_param)],
        )
        self._index = item_index
        self._param = item_param
        self._attempt = attempt
        self._kills = None

    @classmethod
    def of(
        cls, env: Envelope, item_index: int, item_param: str, attempt: int, kills: Cancellations | None = None
    ) -> ExecutionContext:
        """The executor's path: a few slot stores, no validation (the codec did it)."""
        ctx = cls.__new__(cls)
        ctx._env = env
        ctx._index = item_index
        ctx._param = item_param
        ctx._attempt = attempt
        ctx._cid = None
        ctx._kills = kills
        run_logs.current.ctx = ctx  # the run in work on this thread, for its log lines
        return ctx

    @property
    def log(self) -> logging.Logger:
        """The handler's logger (`handler.<job code>`, INFO and above): its lines are kept
        with this run and shown in the run log (`switchyard runs log`, the console)."""
        return logging.getLogger(f"{run_logs.HANDLER_LOGGER}.{self._env.job_code}")

    # -- cancellation (run kill) ------------------------------------------------------

    def _run_key(self) -> tuple[int, int, int]:
        return (self._env.trigger_id, self._env.scheduled_ms, self._index)

    @property
    def cancelled(self) -> bool:
        """An operator asked to kill this run: stop, and return (the run is recorded killed)."""
        kills = self._kills
        return kills is not None and kills.is_cancelled(self._run_key())

    @property
    def cancel_event(self) -> threading.Event:
        """Set when this run is killed: wait on it instead of sleeping (`ev.wait(5)`)."""
        kills = self._kills
        return threading.Event() if kills is None else kills.event(self._run_key())

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """Call `fn` (on the thread that delivers the kill) when this run is killed; at
        once if it is already. For a handler blocked in a call it can abort from outside
        (the xxl-job bridge's `/kill`). Keep `fn` quick: hand anything slow (a network
        call) to a thread of its own, as the bridge does; the delivering thread follows
        the control channel for every executor of the process."""
        kills = self._kills
        if kills is not None:
            kills.on_cancel(self._run_key(), fn)

    @property
    def command_id(self) -> CommandId:
        if self._cid is not None:
            return self._cid
        return _command_id(self._env.trigger_id, self._env.scheduled_ms, self._index)

    @property
    def trigger_id(self) -> TriggerId:
        return self._env.trigger_id

    @property
    def job_code(self) -> JobCode:
        return self._env.job_code

    @property
    def biz_code(self) -> str:
        return self._env.biz_code

    @property
    def scheduled_at(self) -> datetime:
        return self._env.scheduled_at

    @property
    def item_index(self) -> int:
        return self._index

    @property
    def item_total(self) -> int:
        return self._env.item_total

    @property
    def item_param(self) -> str:
        return self._param

    @property
    def params(self) -> str:
        return self._env.params

    @property
    def attempt(self) -> int:
        return self._attempt

    @property
    def timeout(self) -> timedelta:
        return self._env.timeout

    def _key(self) -> tuple[Any, ...]:
        return (
            self.command_id,
            self.job_code,
            self.biz_code,
            self.item_param,
            self.params,
            self.attempt,
            self.item_total,
            self.timeout,
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ExecutionContext) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (
            f"ExecutionContext(command_id={self.command_id!r}, job_code={self.job_code!r}, "
            f"biz_code={self.biz_code!r}, item_index={self._index}, item_total={self.item_total}, "
            f"attempt={self._attempt}, timeout={self.timeout})"
        )


_command_id = command_id


@dataclass(frozen=True, slots=True)
class HandlerResult:
    ok: bool = True
    message: str = ""
    timed_out: bool = False


Handler = Callable[[ExecutionContext], "HandlerResult | bool | None"]
