"""Handlers of the alerts test's executor process (`switchyard executor run --handlers
tests.integration.alert_handlers`): `fail` raises, `slow` overruns any timeout under 5 s."""

from __future__ import annotations

import time

from scheduler_core.executor import ExecutionContext


def fail(ctx: ExecutionContext) -> None:
    raise RuntimeError(f"payment gateway refused run {ctx.command_id}")


def slow(ctx: ExecutionContext) -> None:
    time.sleep(5)


HANDLERS = {"fail": fail, "slow": slow}
