"""Handlers for the `run kill` test's executor process (`switchyard executor run --handlers
tests.integration.kill_handlers`): each writes "<command id> <event> ..." lines to the file
named by $KILL_EVENTS, so the test sees from outside the process when a handler started
and what it saw of the kill."""

from __future__ import annotations

import os
import threading
import time

from scheduler_core.executor import ExecutionContext, HandlerResult

_lock = threading.Lock()
_out = open(os.environ["KILL_EVENTS"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - process-long
IGNORE_S = 35.0  # the stubborn handler's run: past its job's timeout (25 s)


def _note(ctx: ExecutionContext, event: str) -> None:
    with _lock:
        _out.write(f"{ctx.command_id} {event}\n")


def cooperating(ctx: ExecutionContext) -> HandlerResult:
    """Waits for its kill (at most a minute), and stops when it comes."""
    _note(ctx, "started")
    heard = ctx.cancel_event.wait(60)
    _note(ctx, f"returned heard={heard} cancelled={ctx.cancelled}")
    return HandlerResult(ok=True, message="stopped early")


def stubborn(ctx: ExecutionContext) -> None:
    """Never looks at the kill."""
    _note(ctx, "started")
    time.sleep(IGNORE_S)
    _note(ctx, f"returned cancelled={ctx.cancelled}")


HANDLERS = {"kill:cooperating": cooperating, "kill:stubborn": stubborn}
