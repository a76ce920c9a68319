"""The wire encoding of execution commands and results, shared by every bus.

One message carries one *envelope*: a header for one run (trigger, fire time, job) and
1..K items. K = 1 is the default (one message per sharding item); K > 1 packs items of
the same run and fire time together, because the Pulsar client never batches messages
that carry a deliver-at.

Results are always per item, in one of two forms a result message may mix:
- "r": one JSON object per item (the original form; what `encode_results` writes);
- "e": one compact object per envelope (`encode_envelope_results`): the item states as
  one letter each, times as the envelope's receipt/start/finish plus per-item start
  offsets, and only the items with a message or a retry spelled out. At 1,000 items
  per envelope the per-item form cost the executor ~15 us per item to build; this one
  costs a letter. `decode_results` expands both into the same per-item `FiredUpdate`s,
  so the store sees no difference. A scheduler older than the "e" form drops such a
  message as malformed: upgrade the scheduler (callback consumer) before executors, or
  run executors with `compact_results=False`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from scheduler_core.item_states import RESULT_STATES
from scheduler_core.model import (
    Block,
    CommandId,
    Epoch,
    ExecutionCommand,
    FiredState,
    JobCode,
    Lane,
    TriggerId,
    command_id,
)
from scheduler_core.ports import FiredUpdate
from scheduler_core.times import from_ms, opt_from_ms, opt_to_ms, to_ms

WIRE_VERSION = 1
# the longest executor id a result names (dus_fired_record.executor, dus_executor.instance_id)
EXECUTOR_ID_MAX = 64


class CodecError(ValueError):
    """A payload that is not a Switchyard message of a version we read."""


def command_topic(biz_code: str, lane: Lane = Lane.DEFAULT) -> str:
    """The logical topic of a business's commands in a lane: a backlog in one lane's topic
    never holds another's back (each has its own subscription and consumers). The default
    lane keeps the name it had before lanes, so executors of then keep receiving; the
    others add `:lane` (a business code has no ':', jobspec)."""
    return f"cmd.{biz_code}" if lane is Lane.DEFAULT else f"cmd.{biz_code}:{lane.value}"


CALLBACK_TOPIC = "callback"
# The executors' shared subscription on every command topic. The scheduler creates it
# before its first publish to a topic: a broker keeps messages only for subscriptions
# that exist, so a business whose executors have not connected yet would lose them.
EXECUTOR_SUBSCRIPTION = "executor"


def encode_commands(commands: Sequence[ExecutionCommand], *, page_record: bool = False) -> bytes:
    """One envelope. `page_record`: the scheduler keeps one fired record for the whole
    envelope (its id is the first item's command id), and results say so."""
    if not commands:
        raise ValueError("an envelope needs at least one command")
    head = commands[0]
    for c in commands[1:]:
        if c.trigger_id != head.trigger_id or c.scheduled_at != head.scheduled_at:
            raise ValueError("an envelope carries items of one run and one fire time only")
    return _dump(envelope_body(head, [(c.item_index, c.item_param) for c in commands], page_record=page_record))


def envelope_body(
    run: ExecutionCommand, items: Sequence[tuple[int, str]], *, page_record: bool = False
) -> dict[str, Any]:
    """One envelope's body from the run's header (any command of the run: only its
    run-level fields are read) and the items as (index, param) pairs."""
    header = run_header(
        job_code=run.job_code,
        biz_code=run.biz_code,
        handler=run.handler,
        params=run.params,
        item_total=run.item_total,
        timeout=run.timeout,
        max_retry=run.max_retry,
        epoch=run.epoch,
        attempt=run.attempt,
        block=run.block,
    )
    return run_body(header, run.trigger_id, to_ms(run.scheduled_at), items, page_record=page_record, shadow=run.shadow)


def run_header(
    *,
    job_code: str,
    biz_code: str,
    handler: str,
    params: str,
    item_total: int,
    timeout: timedelta,
    max_retry: int,
    epoch: int,
    attempt: int = 0,
    block: Block = Block.CONCURRENT,
) -> dict[str, Any]:
    """The fields every run of a job fired by one epoch shares: the fire pipeline's
    fan-out path builds them once per job and chunk, not once per run. The block strategy
    travels only when it is not `concurrent`: an envelope without it (an older scheduler's,
    or most) means concurrent, and an older executor ignores the member."""
    header: dict[str, Any] = {
        "j": job_code,
        "b": biz_code,
        "h": handler,
        "p": params,
        "n": item_total,
        "a": attempt,
        "to": int(timeout.total_seconds() * 1000),
        "r": max_retry,
        "e": epoch,
    }
    if block is not Block.CONCURRENT:
        header["bk"] = block.value
    return header


def run_body(
    header: dict[str, Any],
    trigger_id: int,
    scheduled_ms: int,
    items: Sequence[tuple[int, str]],
    *,
    page_record: bool = False,
    shadow: bool = False,
) -> dict[str, Any]:
    """One envelope's body: a run's header (`run_header`), its trigger and T in epoch
    milliseconds, and the items as (index, param) pairs; no command object per item."""
    if not items:
        raise ValueError("an envelope needs at least one item")
    body: dict[str, Any] = {"v": WIRE_VERSION, "t": trigger_id, "T": scheduled_ms}
    body.update(header)
    body["i"] = [[i, param] for i, param in items]
    if page_record:
        body["pr"] = 1
    if shadow:
        body["sh"] = 1
    return body


def encode_packed(bodies: Sequence[dict[str, Any]]) -> bytes:
    """Several runs' envelopes in one message (runs of one job due at the same time): a
    hot minute of 50K separate triggers becomes a few hundred messages. The executor
    runs each envelope as its own run and acks the message once all their results are
    published."""
    if not bodies:
        raise ValueError("a packed message needs at least one envelope")
    if len(bodies) == 1:
        return _dump(bodies[0])
    return _dump({"v": WIRE_VERSION, "m": list(bodies)})


def _dump(body: dict[str, Any]) -> bytes:
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


# --- the fire path's encoding: the bytes of _dump(run_body(...)), without json.dumps per run ---
# The fire pipeline encodes one body per run (a hot minute: one per trigger). json.dumps built
# an encoder and walked the whole body for each (~5 us here); the header is the same for every
# run of a job, so it is encoded once (`run_header_json`) and each body is formatted around it.
# tests/unit/test_codec_fire_encoding.py holds these byte for byte to the json.dumps forms.

_json_str = json.encoder.encode_basestring  # a str as _dump writes it (ensure_ascii=False)


def run_header_json(header: dict[str, Any]) -> str:
    """A run header (`run_header`) encoded once: its members as `_dump` writes them, without
    the braces, for `encode_run` to splice into each body of the job."""
    return json.dumps(header, separators=(",", ":"), ensure_ascii=False)[1:-1]


def encode_run(
    header_json: str,
    trigger_id: int,
    scheduled_ms: int,
    items: Sequence[tuple[int, str]],
    *,
    page_record: bool = False,
    shadow: bool = False,
) -> bytes:
    """The bytes of `_dump(run_body(header, trigger_id, scheduled_ms, items, ...))` for the
    header `header_json` encodes (`run_header_json`): one envelope's body, ready to send."""
    if not items:
        raise ValueError("an envelope needs at least one item")
    listed = ",".join(
        f"[{int(i)},{_json_str(param) if type(param) is str else json.dumps(param, ensure_ascii=False)}]"
        for i, param in items
    )
    tail = (',"pr":1' if page_record else "") + (',"sh":1' if shadow else "")
    return (
        f'{{"v":{WIRE_VERSION},"t":{int(trigger_id)},"T":{int(scheduled_ms)},{header_json},"i":[{listed}]{tail}}}'
    ).encode()


def pack_encoded(bodies: Sequence[bytes]) -> bytes:
    """`encode_packed` of bodies already encoded (`encode_run`): the same bytes."""
    if not bodies:
        raise ValueError("a packed message needs at least one envelope")
    if len(bodies) == 1:
        return bodies[0]
    return b'{"v":%d,"m":[' % WIRE_VERSION + b",".join(bodies) + b"]}"


# Not frozen: a frozen dataclass sets each field through object.__setattr__, which made
# building one per run (a packed hot minute builds 50K) cost as much as running the run.
# Nobody mutates them; they are not hashed.
@dataclass(slots=True)
class Envelope:
    """One command message as the executor needs it: the run's header once, the items as
    (index, param) pairs. Building an `ExecutionCommand` per item costs more than a no-op
    handler; `commands()` still gives them for code that wants them."""

    trigger_id: TriggerId
    scheduled_ms: int
    scheduled_at: datetime
    job_code: JobCode
    biz_code: str
    handler: str
    params: str
    item_total: int
    attempt: int
    timeout: timedelta
    max_retry: int
    epoch: Epoch
    page_id: CommandId | None
    shadow: bool
    items: list[tuple[int, str]]
    block: Block = Block.CONCURRENT  # the job's block strategy (model.Block), applied per executor

    def command_id(self, item_index: int) -> CommandId:
        return command_id(self.trigger_id, self.scheduled_ms, item_index)

    def commands(self) -> list[ExecutionCommand]:
        return [
            ExecutionCommand(
                command_id=command_id(self.trigger_id, self.scheduled_ms, idx),
                trigger_id=self.trigger_id,
                job_code=self.job_code,
                biz_code=self.biz_code,
                handler=self.handler,
                scheduled_at=self.scheduled_at,
                item_index=idx,
                item_total=self.item_total,
                item_param=param,
                params=self.params,
                attempt=self.attempt,
                timeout=self.timeout,
                max_retry=self.max_retry,
                epoch=self.epoch,
                page_id=self.page_id,
                shadow=self.shadow,
                block=self.block,
            )
            for idx, param in self.items
        ]


def decode_envelope(payload: bytes) -> Envelope:
    """A message of one envelope (a packed message is refused here: see decode_message)."""
    body = _load(payload)
    if "m" in body:
        raise CodecError("a packed message carries several envelopes: use decode_message")
    return _envelope_from_body(body)


def decode_message(payload: bytes) -> list[Envelope]:
    """Every envelope of a command message: one, or the runs of a packed message."""
    body = _load(payload)
    packed = body.get("m")
    if packed is None:
        return [_envelope_from_body(body)]
    if not isinstance(packed, list) or not packed or not all(isinstance(b, dict) for b in packed):
        raise CodecError("malformed packed message: 'm' must be a non-empty list of envelopes")
    # the runs of a pack share a job, so mostly their fire times and timeout too
    times: dict[int, datetime] = {}
    timeouts: dict[int, timedelta] = {}
    return [_envelope_from_body(b, times, timeouts) for b in packed]


def _envelope_from_body(
    body: dict[str, Any], times: dict[int, datetime] | None = None, timeouts: dict[int, timedelta] | None = None
) -> Envelope:
    try:
        trigger_id = TriggerId(int(body["t"]))
        ms = int(body["T"])
        to_ms_ = int(body["to"])
        if times is None or timeouts is None:
            at, timeout = from_ms(ms), timedelta(milliseconds=to_ms_)
        else:
            at = times.get(ms)  # type: ignore[assignment]
            if at is None:
                at = times[ms] = from_ms(ms)
            timeout = timeouts.get(to_ms_)  # type: ignore[assignment]
            if timeout is None:
                timeout = timeouts[to_ms_] = timedelta(milliseconds=to_ms_)
        # validated here, once, so that a malformed item is a CodecError (dropped), not
        # an exception in the executor's item loop (redelivered forever)
        items = [(int(idx), str(param)) for idx, param in body["i"]]
        if not items:
            raise ValueError("an envelope without items")
        return Envelope(
            trigger_id=trigger_id,
            scheduled_ms=ms,
            scheduled_at=at,
            job_code=JobCode(body["j"]),
            biz_code=body["b"],
            handler=body["h"],
            params=body["p"],
            item_total=int(body["n"]),
            attempt=int(body["a"]),
            timeout=timeout,
            max_retry=int(body["r"]),
            epoch=Epoch(int(body["e"])),
            page_id=command_id(trigger_id, ms, items[0][0]) if body.get("pr") else None,
            shadow=bool(body.get("sh")),
            items=items,
            block=Block.of(body.get("bk")) if "bk" in body else Block.CONCURRENT,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"malformed command envelope: {exc}") from exc


def decode_commands(payload: bytes) -> list[ExecutionCommand]:
    return [c for env in decode_message(payload) for c in env.commands()]


def encode_results(updates: Sequence[FiredUpdate]) -> bytes:
    body = {
        "v": WIRE_VERSION,
        "r": [
            {
                "c": u.command_id,
                "s": u.state.value,
                "at": to_ms(u.at),
                "a": u.attempt,
                "m": u.message,
                "rc": opt_to_ms(u.received_at),
                "st": opt_to_ms(u.started_at),
                **({"pg": u.page_id} if u.page_id else {}),
                **({"lg": [list(x) for x in u.logs]} if u.logs else {}),
                **({"ex": u.executor} if u.executor else {}),
            }
            for u in updates
        ],
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_results(payload: bytes) -> list[FiredUpdate]:
    body = _load(payload)
    try:
        out = [
            FiredUpdate(
                command_id=CommandId(r["c"]),
                state=FiredState(r["s"]),
                at=from_ms(int(r["at"])),
                attempt=int(r["a"]),
                message=str(r.get("m", "")),
                received_at=opt_from_ms(r.get("rc")),
                started_at=opt_from_ms(r.get("st")),
                page_id=CommandId(r["pg"]) if r.get("pg") else None,
                logs=tuple((int(a), str(x), bool(c)) for a, x, c in r.get("lg", ())),
                executor=_executor(r.get("ex")),
            )
            for r in body.get("r", ())
        ]
        for e in body.get("e", ()):
            out += _envelope_result_from_wire(e).updates()
        if "r" not in body and "e" not in body:
            raise KeyError("r")
        return out
    except (KeyError, TypeError, ValueError, IndexError) as exc:
        raise CodecError(f"malformed result message: {exc}") from exc


# one letter per item state in the compact form (item_states.ItemState, which the store's
# page records use too). "K" (skipped by a rollback fence, never invoked) is newer than
# the form: a scheduler that does not know it drops such a result message as malformed,
# so upgrade the scheduler (callback consumer) before executors, as for the "e" form.
_LETTER_STATE: dict[str, FiredState] = {s.value: s.fired_state for s in RESULT_STATES}


@dataclass(slots=True)  # not frozen, for the same reason as Envelope
class EnvelopeResult:
    """The per-item results of one envelope, compactly.

    Item k (indices[k]) ended in letters[k]; it started at started_ms + start_offsets_ms[k]
    (no offsets: all at started_ms) and its result time is the next item's start (the
    items of an envelope run back to back on one worker), the last item's finished_ms.
    `message` is every item's message unless `exceptions` names the item:
    (position k, attempt, message). Items not named ran attempt 0.
    """

    trigger_id: int
    scheduled_ms: int
    page_id: CommandId | None
    indices: Sequence[int]
    letters: str
    received_ms: int
    started_ms: int | None
    finished_ms: int
    start_offsets_ms: Sequence[int] | None = None
    message: str = ""
    exceptions: Sequence[tuple[int, int, str]] = field(default_factory=tuple)
    # the handlers' own log lines: (item index, attempt, text, truncated), few or none
    logs: Sequence[tuple[int, int, str, bool]] = field(default_factory=tuple)
    # the executor process's instance id (its executor registry row); None: not said (an
    # executor older than the field)
    executor: str | None = None

    def updates(self) -> list[FiredUpdate]:
        n = len(self.indices)
        if len(self.letters) != n:
            raise ValueError(f"{len(self.letters)} states for {n} items")
        offsets = self.start_offsets_ms
        if offsets is not None and len(offsets) != n:
            raise ValueError(f"{len(offsets)} start offsets for {n} items")
        extra = {int(pos): (int(att), str(msg)) for pos, att, msg in self.exceptions}
        received = from_ms(self.received_ms)
        finished = from_ms(self.finished_ms)
        st = self.started_ms
        starts: list[datetime | None]
        if st is None:
            starts = [None] * n
        elif offsets is None:
            starts = [from_ms(st)] * n
        else:
            starts = [from_ms(st + o) for o in offsets]
        tid, ms, default, executor = self.trigger_id, self.scheduled_ms, self.message, self.executor
        logs: dict[int, list[tuple[int, str, bool]]] = {}
        for i, att, text, cut in self.logs:
            logs.setdefault(int(i), []).append((int(att), str(text), bool(cut)))
        out: list[FiredUpdate] = []
        for k, idx in enumerate(self.indices):
            attempt, message = extra.get(k, (0, default))
            nxt = starts[k + 1] if k + 1 < n else None
            out.append(
                FiredUpdate(
                    command_id=command_id(tid, ms, idx),
                    state=_LETTER_STATE[self.letters[k]],
                    at=nxt if nxt is not None else finished,
                    attempt=attempt,
                    message=message,
                    received_at=received,
                    started_at=starts[k],
                    page_id=self.page_id,
                    logs=tuple(logs.get(idx, ())),
                    executor=executor,
                )
            )
        return out


def encode_envelope_results(results: Sequence[EnvelopeResult]) -> bytes:
    """One result message for one or more envelopes. Keep an envelope's items in one
    message: a page record is updated from the items of one message at a time.

    The bytes of `json.dumps({"v": WIRE_VERSION, "e": [_envelope_result_to_wire(r), ...]})`
    (tests/unit/test_codec_result_encoding.py holds them byte for byte), written without
    json.dumps for the common result (nothing to say: no message, exceptions or log lines):
    building each envelope's dict and walking it cost ~4 us an envelope, a fifth of an
    executor's whole time per item in a packed burst."""
    return b'{"v":%d,"e":[' % WIRE_VERSION + ",".join(map(_result_json, results)).encode("utf-8") + b"]}"


def _result_json(r: EnvelopeResult) -> str:
    """One envelope's result as `json.dumps(_envelope_result_to_wire(r))` writes it (the
    same members in the same order)."""
    if r.message or r.exceptions or r.logs:  # rare: json.dumps, as the wire form says
        return json.dumps(_envelope_result_to_wire(r), separators=(",", ":"), ensure_ascii=False)
    indices = r.indices
    first = indices[0] if indices else 0
    out = f'{{"t":{r.trigger_id},"T":{r.scheduled_ms},"s":{_json_str(r.letters)},"rc":{r.received_ms},"at":{r.finished_ms}'
    if list(indices) == list(range(first, first + len(indices))):
        out += f',"i0":{first}'
    else:
        out += f',"ix":[{",".join(map(str, map(int, indices)))}]'
    if r.page_id:
        out += ',"pg":' + _json_str(r.page_id)
    if r.started_ms is not None:
        out += f',"st":{r.started_ms}'
    offsets = r.start_offsets_ms
    if offsets is not None and any(offsets):
        out += f',"so":[{",".join(map(str, map(int, offsets)))}]'
    if r.executor:
        out += ',"ex":' + _json_str(r.executor)
    return out + "}"


def _envelope_result_to_wire(r: EnvelopeResult) -> dict[str, Any]:
    body: dict[str, Any] = {
        "t": r.trigger_id,
        "T": r.scheduled_ms,
        "s": r.letters,
        "rc": r.received_ms,
        "at": r.finished_ms,
    }
    first = r.indices[0] if r.indices else 0
    if list(r.indices) == list(range(first, first + len(r.indices))):
        body["i0"] = first  # the usual case: one sharding page, contiguous indices
    else:
        body["ix"] = list(r.indices)
    if r.page_id:
        body["pg"] = r.page_id
    if r.started_ms is not None:
        body["st"] = r.started_ms
    if r.start_offsets_ms is not None and any(r.start_offsets_ms):
        body["so"] = list(r.start_offsets_ms)
    if r.message:
        body["m"] = r.message
    if r.exceptions:
        body["x"] = [list(x) for x in r.exceptions]
    if r.logs:  # an older scheduler ignores the key: the results apply, the lines are lost
        body["lg"] = [list(x) for x in r.logs]
    if r.executor:  # an older scheduler ignores the key: the result applies, the executor is not named
        body["ex"] = r.executor
    return body


def _envelope_result_from_wire(e: dict[str, Any]) -> EnvelopeResult:
    letters = str(e["s"])
    indices: Sequence[int] = (
        range(int(e["i0"]), int(e["i0"]) + len(letters)) if "ix" not in e else [int(i) for i in e["ix"]]
    )
    so = e.get("so")
    return EnvelopeResult(
        trigger_id=int(e["t"]),
        scheduled_ms=int(e["T"]),
        page_id=CommandId(e["pg"]) if e.get("pg") else None,
        indices=indices,
        letters=letters,
        received_ms=int(e["rc"]),
        started_ms=int(e["st"]) if e.get("st") is not None else None,
        finished_ms=int(e["at"]),
        start_offsets_ms=[int(o) for o in so] if so is not None else None,
        message=str(e.get("m", "")),
        exceptions=[(int(p), int(a), str(m)) for p, a, m in e.get("x", ())],
        logs=[(int(i), int(a), str(x), bool(c)) for i, a, x, c in e.get("lg", ())],
        executor=_executor(e.get("ex")),
    )


def _executor(value: object) -> str | None:
    """A result's executor id as stored (at most EXECUTOR_ID_MAX characters); absent,
    empty or not a string: None (not named)."""
    if not isinstance(value, str) or not value:
        return None
    return value[:EXECUTOR_ID_MAX]


def _load(payload: bytes) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"not a JSON payload: {exc}") from exc
    if not isinstance(body, dict) or body.get("v") != WIRE_VERSION:
        raise CodecError(f"unsupported wire version {body.get('v') if isinstance(body, dict) else None!r}")
    return body
