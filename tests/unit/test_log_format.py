"""Structured logs: the scheduler core's lines carry the fields an operator filters on
(`extra=`: business, partition, epoch, fence, trigger/command id), and `--log-format
json` on a long-running command prints each line as one JSON object with those fields
as keys of their own."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner

from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import SystemClock
from scheduler_core.fence import FenceService
from scheduler_core.logfields import log_fields
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.cli import cli
from switchyard.logs import JsonLines

WAIT_S = 120.0  # bound on a subprocess reaching its first log line (a loaded machine is slow)


def _record(msg: str, *args: object, exc: bool = False, **extra: object) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise RuntimeError("boom")
        except RuntimeError:
            exc_info = sys.exc_info()
    record = logging.LogRecord("scheduler_core.shards", logging.WARNING, __file__, 1, msg, args, exc_info)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_json_line_carries_the_message_and_every_extra_field_as_a_key() -> None:
    record = _record("partition %s: ownership of epoch %s lost", 3, 7, **log_fields(partition=3, epoch=7))  # type: ignore[arg-type]
    line = JsonLines().format(record)
    assert "\n" not in line
    got = json.loads(line)
    assert got["message"] == "partition 3: ownership of epoch 7 lost"
    assert (got["level"], got["logger"], got["partition"], got["epoch"]) == ("WARNING", "scheduler_core.shards", 3, 7)
    assert datetime.fromisoformat(got["time"]).tzinfo is not None
    assert not {"args", "msg", "levelno", "pathname", "exc_info"} & set(got)  # the record's own attributes stay out


def test_an_exception_is_one_escaped_field_not_extra_lines() -> None:
    line = JsonLines().format(_record("tick failed", exc=True, **log_fields(biz_code="b1")))
    got = json.loads(line)
    assert "\n" not in line and "RuntimeError: boom" in got["exception"] and got["business"] == "b1"


def test_log_fields_keeps_only_the_fields_given() -> None:
    assert log_fields(biz_code="b", epoch=0, trigger_id=None) == {"business": "b", "epoch": 0}


def test_the_cores_fence_lines_carry_business_and_epoch(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
    init_schema(engine, 2)
    clock = SystemClock()
    fences = FenceService(SqlTriggerStore(engine, clock), InProcessBus(clock))
    with caplog.at_level(logging.INFO, logger="scheduler_core.fence"):
        fences.raise_fence("biz-a", datetime(2026, 1, 1, tzinfo=timezone.utc))
        fences.lift_fence("biz-a", datetime(2026, 1, 2, tzinfo=timezone.utc))
    lines = [json.loads(JsonLines().format(r)) for r in caplog.records if r.name == "scheduler_core.fence"]
    assert [ln["message"].split(" ")[0] for ln in lines] == ["raised", "lifted"]
    assert [(ln["business"], ln["epoch"]) for ln in lines] == [("biz-a", 1), ("biz-a", 2)]


@pytest.mark.parametrize(
    "command",
    [
        ["scheduler", "run"],
        ["executor", "run"],
        ["serve"],
        ["migrate", "stream"],
        ["dualrun", "watch-cutover"],
        ["console"],
    ],
)
def test_every_long_running_command_offers_the_json_format(command: list[str]) -> None:
    result = CliRunner().invoke(cli, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "--log-format [text|json]" in result.output


def test_scheduler_run_with_json_logs_prints_json_lines_with_the_epoch(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    err = tmp_path / "err"
    env = {**os.environ, "SWITCHYARD_BUS": "memory"}
    env.pop("SWITCHYARD_ETCD_URL", None)  # the local election: no server needed
    with err.open("wb") as e:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "switchyard",
                "scheduler",
                "run",
                "--url",
                url,
                "--election",
                "local",
                "--metrics-port",
                "0",
                "--log-format",
                "json",
            ],
            stdout=subprocess.DEVNULL,
            stderr=e,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tmp_path,
        )
    try:
        deadline = time.monotonic() + WAIT_S
        leading: list[dict[str, object]] = []
        while not leading and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.2)
            text = err.read_text()
            complete = text[: text.rfind("\n") + 1]
            leading = [ln for ln in map(json.loads, complete.splitlines()) if ln["message"].startswith("leading")]
        assert leading, f"no 'leading with epoch' line (exit {proc.poll()}):\n{err.read_text()[-2000:]}"
        assert leading[0]["epoch"] == 1 and leading[0]["logger"] == "scheduler_core.scheduler"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
    lines = err.read_text().splitlines()
    assert lines and all(isinstance(json.loads(ln), dict) for ln in lines)  # every stderr line is a JSON object
