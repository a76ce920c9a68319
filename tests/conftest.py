"""Shared fixtures, and the per-marker count printed at the end of every run."""

from __future__ import annotations

import re
import subprocess
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

import tests.servers  # noqa: F401  (loads the stack's env file)
from scheduler_core.clock import ManualClock
from tests.argv_urls import password_leaks, stack_passwords

SERVER_MARKERS = ("mariadb", "pulsar", "etcd")
_outcomes: dict[str, Counter[str]] = {m: Counter() for m in (*SERVER_MARKERS, "unit")}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--long", action="store_true", help="run the long fault variants (marked slow)")


DURATIONS = Path(__file__).with_name("durations.txt")
_DURATION_LINE = re.compile(r"^\s*([0-9.]+)s\s+(?:setup|call|teardown)\s+(\S+)")


def recorded_file_seconds(text: str) -> dict[str, float]:
    """Seconds per test file from pytest's --durations lines (setup, call and teardown
    of every listed test summed per file)."""
    per_file: defaultdict[str, float] = defaultdict(float)
    for line in text.splitlines():
        if m := _DURATION_LINE.match(line):
            per_file[m.group(2).split("::", 1)[0]] += float(m.group(1))
    return dict(per_file)


def slowest_files_first(items: list[pytest.Item], seconds: dict[str, float]) -> list[pytest.Item]:
    """The items grouped by file, the files by their recorded seconds, longest first
    (ties and unrecorded files in collection order), tests in a file in their own order.
    Under `--dist loadfile --no-loadscope-reorder` a worker takes one file at a time in
    this order: the long files start at once instead of ending the run on one worker
    while the others idle (largest first is the classic bound for that tail)."""
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(files, key=lambda f: -seconds.get(f, 0.0))  # stable: ties keep their order
    return [item for f in order for item in files[f]]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if DURATIONS.exists():
        items[:] = slowest_files_first(items, recorded_file_seconds(DURATIONS.read_text()))
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


@pytest.fixture(scope="session", autouse=True)
def no_password_in_any_process_arguments() -> Iterator[None]:
    """Every process a test starts (subprocess.Popen, which subprocess.run and asyncio use
    too) is refused when its arguments carry a URL with a password or one of the stack's
    passwords: every user of the host reads them (`ps`). Pass the URL in its environment
    variable (tests.argv_urls.urls_in_env does it) or a password file."""
    passwords = stack_passwords()
    original = subprocess.Popen.__init__

    def guarded(self: subprocess.Popen[Any], args: Any, *more: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, (str, bytes)) else list(args)
        leaks = password_leaks(
            [a.decode(errors="replace") if isinstance(a, bytes) else str(a) for a in argv], passwords
        )
        if leaks:
            raise AssertionError(f"a password in the arguments of a process the test starts: {', '.join(leaks)}")
        original(self, args, *more, **kwargs)

    patch = pytest.MonkeyPatch()
    patch.setattr(subprocess.Popen, "__init__", guarded)
    try:
        yield
    finally:
        patch.undo()
