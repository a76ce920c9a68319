"""The handler of the block strategy test's executor process (`switchyard executor run
--handlers tests.integration.block_handlers`): a run holds for the job's parameter (seconds)
unless it is cancelled first, and writes "<command id> <scheduled ms> started|returned
cancelled=<bool>" lines to the file named by $BLOCK_EVENTS, so the test sees from outside
the process which runs reached the handler and how they ended."""

from __future__ import annotations

import os
import threading

from scheduler_core.executor import ExecutionContext
from scheduler_core.times import to_ms

_lock = threading.Lock()
_out = open(os.environ["BLOCK_EVENTS"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - process-long


def _note(ctx: ExecutionContext, event: str) -> None:
    with _lock:
        _out.write(f"{ctx.command_id} {to_ms(ctx.scheduled_at)} {event}\n")


def hold(ctx: ExecutionContext) -> None:
    _note(ctx, "started")
    ctx.cancel_event.wait(float(ctx.params))
    _note(ctx, f"returned cancelled={ctx.cancelled}")


HANDLERS = {"hold": hold}
