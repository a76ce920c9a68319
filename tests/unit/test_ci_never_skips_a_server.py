"""A run without its servers can never be reported green: under CI=true a missing server
fails the test that needs it; locally it is skipped (and said to be)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.pytest_child import run_pytest

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
    # nothing listens on port 1
    return run_pytest(
        [str(probe)],
        ci=ci,
        timeout_s=120,
        SWITCHYARD_STACK_DIR=str(tmp_path / "no-stack"),
        SWITCHYARD_MARIADB_URL="mysql+pymysql://u:p@127.0.0.1:1/x",
    )


@pytest.mark.parametrize("ci, code, says", [("true", 1, "mariadb server missing under CI"), ("", 0, "1 skipped")])
def test_a_missing_server_fails_under_ci_and_skips_locally(tmp_path: Path, ci: str, code: int, says: str) -> None:
    result = _run(tmp_path, ci)
    assert result.returncode == code, result.stdout + result.stderr
    assert says in result.stdout, result.stdout
