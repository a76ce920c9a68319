"""A pytest run in a child process with none of this run's SWITCHYARD_* settings: how the
tests check what a run under CI=true (or not) reports."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def run_pytest(args: list[str], *, ci: str, timeout_s: float, **env: str) -> subprocess.CompletedProcess[str]:
    """`pytest -q ARGS` from the repository with CI=`ci`, the repository on PYTHONPATH
    and `env`, output captured, bounded by `timeout_s`."""
    child = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    child.update(CI=ci, PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(REPO),
            "-c",
            str(REPO / "pyproject.toml"),
            *args,
        ],
        cwd=REPO,
        env=child,
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
