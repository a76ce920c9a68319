"""Shared fixtures, and the per-marker count printed at the end of every run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

import tests.servers  # noqa: F401  (loads the stack's env file)
from scheduler_core.clock import ManualClock

SERVER_MARKERS = ("mariadb", "pulsar", "etcd")
_outcomes: dict[str, Counter[str]] = {m: Counter() for m in (*SERVER_MARKERS, "unit")}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long fault variants (marked slow)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_slow = pytest.mark.skip(reason="long variant: run with --long")
    if config.getoption("--long"):
        for item in items:  # the long variants outlast the default per-test bound (pyproject)
            if "slow" in item.keywords and item.get_closest_marker("timeout") is None:
                item.add_marker(pytest.mark.timeout(3600))
        return
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip_slow)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.when == "setup" and report.outcome != "passed"):
        return
    marks = [m for m in SERVER_MARKERS if m in report.keywords] or ["unit"]
    for m in marks:
        _outcomes[m][report.outcome] += 1


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    terminalreporter.section("tests per server marker")
    for marker, counts in _outcomes.items():
        terminalreporter.write_line(
            f"{marker:<8} passed={counts['passed']} failed={counts['failed']} skipped={counts['skipped']}"
        )


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(datetime(2026, 12, 2, 6, 0, 0, tzinfo=timezone.utc))


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path
