"""The wire encoding of execution commands and results, shared by every bus.

One message carries one *envelope*: a header for one run (trigger, fire time, job) and
1..K items. K = 1 is the default (one message per sharding item); K > 1 packs items of
the same run and fire time together, because the Pulsar client never batches messages
that carry a deliver-at. Results are always per item.
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from scheduler_core.model import CommandId, Epoch, ExecutionCommand, FiredState, JobCode, TriggerId, command_id
from scheduler_core.ports import FiredUpdate
from scheduler_core.times import from_ms, opt_from_ms, opt_to_ms, to_ms

WIRE_VERSION = 1


class CodecError(ValueError):
    """A payload that is not a Switchyard message of a version we read."""


def command_topic(biz_code: str) -> str:
    """The logical topic of a business domain's commands."""
    return f"cmd.{biz_code}"


CALLBACK_TOPIC = "callback"


def encode_commands(commands: Sequence[ExecutionCommand], *, page_record: bool = False) -> bytes:
    """One envelope. `page_record`: the scheduler keeps one fired record for the whole
    envelope (its id is the first item's command id), and results say so."""
    if not commands:
        raise ValueError("an envelope needs at least one command")
    head = commands[0]
    ms = to_ms(head.scheduled_at)
    for c in commands[1:]:
        if c.trigger_id != head.trigger_id or c.scheduled_at != head.scheduled_at:
            raise ValueError("an envelope carries items of one run and one fire time only")
    body = {
        "v": WIRE_VERSION,
        "t": head.trigger_id,
        "T": ms,
        "j": head.job_code,
        "b": head.biz_code,
        "h": head.handler,
        "p": head.params,
        "n": head.item_total,
        "a": head.attempt,
        "to": int(head.timeout.total_seconds() * 1000),
        "r": head.max_retry,
        "e": head.epoch,
        "i": [[c.item_index, c.item_param] for c in commands],
    }
    if page_record:
        body["pr"] = 1
    if head.shadow:
        body["sh"] = 1
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_commands(payload: bytes) -> list[ExecutionCommand]:
    body = _load(payload)
    try:
        trigger_id = TriggerId(int(body["t"]))
        ms = int(body["T"])
        scheduled = from_ms(ms)
        page = command_id(trigger_id, ms, int(body["i"][0][0])) if body.get("pr") else None
        return [
            ExecutionCommand(
                command_id=command_id(trigger_id, ms, int(idx)),
                trigger_id=trigger_id,
                job_code=JobCode(body["j"]),
                biz_code=body["b"],
                handler=body["h"],
                scheduled_at=scheduled,
                item_index=int(idx),
                item_total=int(body["n"]),
                item_param=str(param),
                params=body["p"],
                attempt=int(body["a"]),
                timeout=timedelta(milliseconds=int(body["to"])),
                max_retry=int(body["r"]),
                epoch=Epoch(int(body["e"])),
                page_id=page,
                shadow=bool(body.get("sh")),
            )
            for idx, param in body["i"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"malformed command envelope: {exc}") from exc


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
            }
            for u in updates
        ],
    }
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def decode_results(payload: bytes) -> list[FiredUpdate]:
    body = _load(payload)
    try:
        return [
            FiredUpdate(
                command_id=CommandId(r["c"]),
                state=FiredState(r["s"]),
                at=from_ms(int(r["at"])),
                attempt=int(r["a"]),
                message=str(r.get("m", "")),
                received_at=opt_from_ms(r.get("rc")),
                started_at=opt_from_ms(r.get("st")),
                page_id=CommandId(r["pg"]) if r.get("pg") else None,
            )
            for r in body["r"]
        ]
    except (KeyError, TypeError, ValueError) as exc:
        raise CodecError(f"malformed result message: {exc}") from exc


def _load(payload: bytes) -> dict[str, Any]:
    try:
        body = json.loads(payload)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CodecError(f"not a JSON payload: {exc}") from exc
    if not isinstance(body, dict) or body.get("v") != WIRE_VERSION:
        raise CodecError(f"unsupported wire version {body.get('v') if isinstance(body, dict) else None!r}")
    return body
