"""Killing a running run (`switchyard run kill`): an operator asks the executor that holds
a run to cancel its handler.

- `Kill` is one request: one command (`command_id`), or every run of a job (`job_code`)
  scheduled at or before the request, that an executor has in work when it hears it.
- `KillService` is the writing side: the request is stored first (`dus_kill_request`),
  then put on the bus's control channel when the caller has the bus.
- `KillRelay` is run by whoever holds the bus (the scheduler leader, the member owning
  the lowest partition under `--shards`, `switchyard serve`), beside the fence relay: it
  broadcasts the requests stored in the last `KILL_FRESH` that it has not carried yet,
  so a `run kill` without `--bus` still reaches the executors.
- An executor holding a covered run tells its handler (`ExecutionContext.cancelled`,
  `.cancel_event`, `.on_cancel`: `scheduler_core.executor.kills`) and answers on the
  control channel (`KillAnswer`): the handler returned (the run is recorded `killed`), or
  it is still running (it ignored the kill: its job timeout still applies).

A request is only acted on while fresh (`KILL_FRESH` after it was made): a relay that
starts again, or an executor reading the control topic's history, must not kill the runs
of a later day. Executors ignore a request id they have acted on already.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass
from datetime import timedelta
from functools import partial
from typing import Protocol

from scheduler_core.control import EVERYTHING, ControlBroadcasts, RelayScope, decode_control, encode_control
from scheduler_core.logfields import log_fields
from scheduler_core.model import parse_command_id
from scheduler_core.ports import Clock, MessageBus

log = logging.getLogger(__name__)

KIND = "kill"
ANSWER_KIND = "kill-answer"
# How long a request stays live: relayed, and acted on by an executor that hears it.
KILL_FRESH = timedelta(minutes=5)
# Every killed result carries a message starting with this.
MESSAGE_PREFIX = "killed by an operator"


@dataclass(frozen=True, slots=True)
class Kill:
    """One kill request. Exactly one of `command_id` and `job_code` is set."""

    request_id: int
    biz_code: str
    command_id: str | None
    job_code: str | None
    requested_ms: int
    requested_by: str = ""

    def covers(self, job_code: str, trigger_id: int, scheduled_ms: int, item_index: int) -> bool:
        """Whether this request is for that run item (the executor asks it of its runs in work)."""
        if self.command_id is not None:
            try:
                return parse_command_id(self.command_id) == (trigger_id, scheduled_ms, item_index)
            except ValueError:
                return False
        # by job: the runs already due when the operator asked, not the job's later ones
        return self.job_code == job_code and scheduled_ms <= self.requested_ms

    def fresh(self, now_ms: int) -> bool:
        return now_ms - self.requested_ms <= KILL_FRESH.total_seconds() * 1000

    @property
    def message(self) -> str:
        who = f" {self.requested_by}" if self.requested_by else ""
        return f"{MESSAGE_PREFIX}{who} (kill request {self.request_id})"

    def __str__(self) -> str:
        what = f"command {self.command_id}" if self.command_id is not None else f"the running runs of {self.job_code}"
        return f"kill request {self.request_id} for {what}"


def encode_kill(kill: Kill) -> bytes:
    return encode_control(
        KIND,
        {
            "r": kill.request_id,
            "b": kill.biz_code,
            "c": kill.command_id,
            "j": kill.job_code,
            "at": kill.requested_ms,
            "by": kill.requested_by,
        },
    )


def decode_kill(payload: bytes) -> Kill | None:
    """The request of a control message; None for another kind. Raises ValueError for a
    malformed one."""
    body = decode_control(payload, KIND)
    if body is None:
        return None
    try:
        cid, job = body.get("c"), body.get("j")
        if (cid is None) == (job is None):
            raise ValueError("names neither or both of a command and a job")
        return Kill(
            request_id=int(body["r"]),
            biz_code=str(body["b"]),
            command_id=None if cid is None else str(cid),
            job_code=None if job is None else str(job),
            requested_ms=int(body["at"]),
            requested_by=str(body.get("by") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed kill message: {exc}") from exc


class Outcome(enum.StrEnum):
    """What an executor that held a covered run says of it."""

    KILLED = "killed"  # the handler noticed and returned: recorded killed
    NOT_STARTED = "not_started"  # the item had not started: recorded killed, never invoked
    STILL_RUNNING = "still_running"  # told, but the handler has not returned (it ignores the kill)
    TIMED_OUT = "timed_out"  # it never returned: its job timeout ended it, recorded timed out
    FINISHED = "finished"  # it ended on its own just before the kill reached it: recorded as it ended


@dataclass(frozen=True, slots=True)
class KillAnswer:
    request_id: int
    command_id: str
    outcome: Outcome
    message: str
    executor: str

    def __str__(self) -> str:
        return f"{self.command_id}: {self.outcome.value} ({self.message}) [{self.executor}]"


def encode_answer(answer: KillAnswer) -> bytes:
    return encode_control(
        ANSWER_KIND,
        {
            "r": answer.request_id,
            "c": answer.command_id,
            "o": answer.outcome.value,
            "m": answer.message,
            "x": answer.executor,
        },
    )


def decode_answer(payload: bytes) -> KillAnswer | None:
    body = decode_control(payload, ANSWER_KIND)
    if body is None:
        return None
    try:
        return KillAnswer(
            request_id=int(body["r"]),
            command_id=str(body["c"]),
            outcome=Outcome(body["o"]),
            message=str(body.get("m") or ""),
            executor=str(body.get("x") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"malformed kill answer: {exc}") from exc


class KillStore(Protocol):
    def add_kill(
        self, biz_code: str, command_id: str | None, job_code: str | None, requested_ms: int, requested_by: str
    ) -> Kill:
        """Store a request; returns it with its id."""

    def kills_since(self, since_ms: int) -> list[Kill]:
        """The requests made at or after `since_ms`, oldest first."""


class KillService:
    """Stores a kill request, then (with a bus) broadcasts it. Without a bus the request
    reaches the executors through whoever holds the bus (`KillRelay`)."""

    def __init__(self, store: KillStore, clock: Clock, bus: MessageBus | None = None) -> None:
        self.store = store
        self.clock = clock
        self.bus = bus

    def request(
        self, biz_code: str, *, command_id: str | None = None, job_code: str | None = None, by: str = ""
    ) -> Kill:
        kill = self.store.add_kill(biz_code, command_id, job_code, self.clock.now_ms(), by)
        if self.bus is not None:
            self.bus.publish_control(biz_code, encode_kill(kill))
        log.info("stored the %s", kill, extra=log_fields(biz_code=biz_code))
        return kill


class KillRelay:
    """Broadcasts the fresh kill requests the store has and this bus has not carried yet
    (see the module doc). `relay()` every few hundred ms, like `FenceRelay.relay`."""

    def __init__(self, store: KillStore, bus: MessageBus, clock: Clock, scope: RelayScope = EVERYTHING) -> None:
        self.store = store
        self.clock = clock
        self.scope = scope
        self.broadcasts = ControlBroadcasts(bus)

    def relay(self) -> int:
        """Broadcast each fresh stored request not carried yet; returns how many."""
        if not self.scope.business_wide():
            return 0
        since = self.clock.now_ms() - int(KILL_FRESH.total_seconds() * 1000)
        sent = 0
        for kill in self.store.kills_since(since):
            if self.broadcasts.send(kill.biz_code, (KIND, kill.request_id), 1, partial(encode_kill, kill)):
                sent += 1
        return sent


__all__ = [
    "ANSWER_KIND",
    "KILL_FRESH",
    "KIND",
    "MESSAGE_PREFIX",
    "Kill",
    "KillAnswer",
    "KillRelay",
    "KillService",
    "KillStore",
    "Outcome",
    "decode_answer",
    "decode_kill",
    "encode_answer",
    "encode_kill",
]
