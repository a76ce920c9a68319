"""`switchyard dualrun compare` over a dual-run test scenario (tests/unit/test_dualrun_support.py): its
arguments, and the command's legacy reader replaced by the scenario's."""

from __future__ import annotations

import importlib
from datetime import timezone
from pathlib import Path

import pytest

from tests.unit.test_dualrun_support import Scenario


def compare_args(s: Scenario, tmp_path: Path, *extra: str) -> list[str]:
    """The scenario's business and window, a store in `tmp_path`, and `extra`."""
    return [
        "dualrun",
        "compare",
        "--business",
        s.biz_code,
        "--source",
        s.source.value,
        "--legacy-url",
        "sqlite://",
        "--url",
        f"sqlite:///{tmp_path / 'store.db'}",
        "--since",
        s.current.start.astimezone(timezone.utc).isoformat(),
        "--until",
        s.current.end.astimezone(timezone.utc).isoformat(),
        *extra,
    ]


def patch_reader(monkeypatch: pytest.MonkeyPatch, s: Scenario) -> None:
    """The command reads the scenario's legacy log (flushed first) instead of a database."""
    s.flush()
    command = importlib.import_module("switchyard.cli.dualrun")  # the package attribute is the group
    monkeypatch.setattr(command, "open_reader", lambda source, url, tz: s.reader())
