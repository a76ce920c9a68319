"""The handlers of the run-log test's executor process (`switchyard executor run --handlers
tests.integration.runlog_handlers`): they log through `ctx.log` and a logger of their own,
as a handler author would; "flood" logs far past the per-run cap."""

from __future__ import annotations

import logging

from scheduler_core.executor import ExecutionContext

own = logging.getLogger("billing.report")


def chatty(ctx: ExecutionContext) -> None:
    ctx.log.info("item %s of %s starts, param %s", ctx.item_index, ctx.item_total, ctx.params)
    own.warning("own logger of item %s", ctx.item_index)
    if ctx.params == "flood":
        for i in range(3000):
            ctx.log.info("flood line %05d %s", i, "y" * 40)


HANDLERS = {"chatty": chatty}
