"""Handlers for the rollback-fence test's executor process (`switchyard executor run
--handlers tests.integration.fence_handlers`): each invocation appends
"<command id> <scheduled ms> <invoked wall ms>" to the file named by $FENCE_INVOCATIONS,
so the test sees, from outside the process, which occurrence ran and when."""

from __future__ import annotations

import os
import threading
import time

from scheduler_core.executor import ExecutionContext

_lock = threading.Lock()
_out = open(os.environ["FENCE_INVOCATIONS"], "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - process-long


def record(ctx: ExecutionContext) -> None:
    line = f"{ctx.command_id} {int(ctx.scheduled_at.timestamp() * 1000)} {time.time_ns() // 1_000_000}\n"
    with _lock:
        _out.write(line)


HANDLERS = {"quick": record, "watched": record}
