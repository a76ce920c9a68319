"""Handlers for the `switchyard serve` tests: every run appends one line (job, T in ms,
item, pid) to the file named by $SERVE_RUN_LOG, so a test sees each run exactly once."""

from __future__ import annotations

import json
import os

from scheduler_core.executor import ExecutionContext, Executor, HandlerResult
from scheduler_core.times import to_ms


def _run(ctx: ExecutionContext) -> HandlerResult:
    line = json.dumps({"job": ctx.job_code, "T": to_ms(ctx.scheduled_at), "item": ctx.item_index, "pid": os.getpid()})
    with open(os.environ["SERVE_RUN_LOG"], "a", encoding="utf-8") as out:
        out.write(line + "\n")
    return HandlerResult(ok=True, message="done")


def register(executor: Executor) -> None:
    executor.handler()(_run)
