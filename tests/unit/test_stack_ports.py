"""`scripts/stack` with SWITCHYARD_STACK_PORT_OFFSET: a second, private stack (the soak's,
whose servers it restarts) on ports of its own, kept with its directory; a bad or
conflicting offset is refused with the reason. Only `status` runs: nothing is started."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.servers import REPO


def _stack(sd: Path, offset: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SWITCHYARD_STACK_PORT_OFFSET"}
    env["SWITCHYARD_STACK_DIR"] = str(sd)
    if offset is not None:
        env["SWITCHYARD_STACK_PORT_OFFSET"] = offset
    return subprocess.run(
        [str(REPO / "scripts" / "stack"), "status"], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_an_offset_moves_every_port_and_stays_with_the_stacks_directory(tmp_path: Path) -> None:
    sd = tmp_path / "private"
    first = _stack(sd, "1000")
    assert "ports=14306" in first.stdout and "ports=24790,24800,24810" in first.stdout, first.stdout
    assert "ports=17650,19080,14181" in first.stdout
    again = _stack(sd)  # no variable: the directory remembers its offset
    assert "ports=14306" in again.stdout, again.stdout
    assert "ports=13306" in _stack(tmp_path / "shared").stdout  # another directory: the default ports


def test_a_bad_or_conflicting_offset_is_refused_with_its_reason(tmp_path: Path) -> None:
    sd = tmp_path / "private"
    _stack(sd, "1000")
    moved = _stack(sd, "5")
    assert moved.returncode == 2 and "set up with port offset 1000, not 5" in moved.stderr, moved.stderr
    bad = _stack(tmp_path / "other", "abc")
    assert bad.returncode == 2 and "SWITCHYARD_STACK_PORT_OFFSET=abc" in bad.stderr, bad.stderr
