"""Handlers of the soak's executor processes (`switchyard executor run --handlers
tests.soak.handlers`): every invocation appends "<pid> <command id> <scheduled ms>
<invoked wall ms> <job code>" to the file named by $SOAK_INVOCATIONS, so the checker
sees from outside which occurrence ran, in which process and when. A job whose code
ends in a digit divisible by 3 is "slow": it runs until killed (at most SLOW_S), so the
workload has running runs to kill."""

from __future__ import annotations

import os
import threading
import time
from typing import TextIO

from scheduler_core.executor import ExecutionContext, Executor, HandlerResult

SLOW_S = 4.0
_lock = threading.Lock()
_out: list[TextIO] = []  # the log, opened on the first run (importing it opens nothing)
_pid = os.getpid()


def is_slow(job_code: str) -> bool:
    last = job_code[-1:]
    return last.isdigit() and int(last) % 3 == 0


def run(ctx: ExecutionContext) -> HandlerResult:
    line = f"{_pid} {ctx.command_id} {int(ctx.scheduled_at.timestamp() * 1000)} {time.time_ns() // 1_000_000} {ctx.job_code}\n"
    with _lock:
        if not _out:
            _out.append(open(os.environ["SOAK_INVOCATIONS"], "a", buffering=1, encoding="utf-8"))  # noqa: SIM115
        _out[0].write(line)
    if is_slow(str(ctx.job_code)) and ctx.cancel_event.wait(SLOW_S):
        return HandlerResult(ok=True, message="stopped early: killed")
    return HandlerResult(ok=True, message="ok")


def register(executor: Executor) -> None:
    executor.handler()(run)
