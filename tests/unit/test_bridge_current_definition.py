"""A bridged run takes the job's run fields from its legacy row as it is now, as the
xxl-job admin does at every trigger.

Seen on a real xxl-job 3.4.2 admin (docs/xxl-job-real-check.md): a GLUE source edited in
the admin during a live dual-run ran on legacy's next trigger, while the bridged runs
kept V2 for half an hour, because the commands the scheduler had already published
(its 30 min lookahead) carry the params of when they were fired."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.unit.test_bridge_xxljob_threads import T1, T2, V1, V2, glue_params
from tests.unit.test_bridges import Xxl, ctx, xxl_params


def test_an_edit_made_after_the_command_was_published_reaches_the_next_bridged_run() -> None:
    row: dict[str, Any] = {
        "glue_type": "GLUE_SHELL",
        "glue_source": V1,
        "glue_updatetime": T1,
        "executor_param": "a",
        "block_strategy": "SERIAL_EXECUTION",
        "executor_timeout": 0,
        "route_strategy": "FIRST",
    }
    asked: list[int] = []

    def current(job_id: int) -> dict[str, Any]:
        asked.append(job_id)
        return dict(row)

    x = Xxl(handler=lambda t: None, current_params=current)
    try:
        published = glue_params(V1, T1, executor_param="a")  # fired before the edit
        assert x.bridge(ctx(published)).ok
        row.update(glue_source=V2, glue_updatetime=T2, executor_param="b", executor_timeout=7)  # edited in the admin
        assert x.bridge(ctx(published)).ok  # the same params: published ahead by the lookahead
        first, second = x.executor.triggers
        assert (first["glueSource"], first["glueUpdatetime"], first["executorParams"]) == (V1, T1, "a")
        assert (second["glueSource"], second["glueUpdatetime"], second["executorParams"]) == (V2, T2, "b")
        assert second["executorTimeout"] == 7
        assert second["executorHandler"] == published["executor_handler"]  # GLUE runs by source, not by name
        assert asked == [7, 7]
    finally:
        x.close()


def test_a_bean_jobs_handler_and_param_follow_the_row() -> None:
    x = Xxl(
        handler=lambda t: None,
        current_params=lambda _id: {
            "glue_type": "BEAN",
            "executor_handler": "demoJobHandler2",
            "executor_param": "edited",
        },
    )
    try:
        assert x.bridge(ctx(xxl_params())).ok
        [trigger] = x.executor.triggers
        assert (trigger["executorHandler"], trigger["executorParams"]) == ("demoJobHandler2", "edited")
    finally:
        x.close()


@pytest.mark.parametrize("answer", ["gone", "other glue type", "unreadable"])
def test_the_commands_params_run_when_the_row_cannot_say(answer: str, caplog: pytest.LogCaptureFixture) -> None:
    def current(_job_id: int) -> dict[str, Any] | None:
        if answer == "gone":
            return None
        if answer == "other glue type":  # BEAN now: the migration decides (or quarantines)
            return {"glue_type": "BEAN", "executor_handler": "demoJobHandler", "executor_param": "x"}
        raise ConnectionError("legacy database down")

    x = Xxl(handler=lambda t: None, current_params=current)
    try:
        with caplog.at_level(logging.WARNING):
            assert x.bridge(ctx(glue_params(V1, T1))).ok
        [trigger] = x.executor.triggers
        assert (trigger["glueType"], trigger["glueSource"], trigger["glueUpdatetime"]) == ("GLUE_SHELL", V1, T1)
        warned = [r for r in caplog.records if "current definition unreadable" in r.getMessage()]
        assert bool(warned) == (answer == "unreadable")
    finally:
        x.close()
