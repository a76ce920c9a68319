"""The handler of the job CLI test's executor process (`switchyard executor run --handlers
tests.integration.job_handlers`): each run (`note`, and `fail`, which then fails) writes "<command id> <scheduled ms> <parameter>" to the file
named by $JOB_EVENTS, so the test sees from outside the process what ran and for when."""

from __future__ import annotations

import os
import threading

from scheduler_core.executor import ExecutionContext
from scheduler_core.times import to_ms

_lock = threading.Lock()
_out = open(os.environ["JOB_EVENTS"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - process-long


def note(ctx: ExecutionContext) -> None:
    with _lock:
        _out.write(f"{ctx.command_id} {to_ms(ctx.scheduled_at)} {ctx.params}\n")


def fail(ctx: ExecutionContext) -> None:
    """A run that fails (the console's daily loop: its alert reaches a webhook)."""
    note(ctx)
    raise RuntimeError(f"the ledger refused run {ctx.command_id}")


HANDLERS = {"note": note, "fail": fail}
