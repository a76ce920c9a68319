"""A run without its servers can never be reported green: under CI=true a missing server
fails the test that needs it; locally it is skipped (and said to be)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent.parent
PROBE = """
import pytest
from tests.servers import server_url

@pytest.mark.mariadb
def test_needs_mariadb():
    server_url("mariadb")
"""


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    env.update(
        CI=ci,
        PYTHONPATH=str(REPO),
        SWITCHYARD_STACK_DIR=str(tmp_path / "no-stack"),
        SWITCHYARD_MARIADB_URL="mysql+pymysql://u:p@127.0.0.1:1/x",
    )  # nothing listens on port 1
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
            str(probe),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize("ci, code, says", [("true", 1, "mariadb server missing under CI"), ("", 0, "1 skipped")])
def test_a_missing_server_fails_under_ci_and_skips_locally(tmp_path: Path, ci: str, code: int, says: str) -> None:
    result = _run(tmp_path, ci)
    assert result.returncode == code, result.stdout + result.stderr
    assert says in result.stdout, result.stdout
