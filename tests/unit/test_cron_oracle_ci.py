"""The cron differential can never pass unseen: under CI=true a missing Quartz jar fails it;
locally it is skipped, and said to be."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.pytest_child import run_pytest

REPO = Path(__file__).resolve().parent.parent.parent


@pytest.mark.parametrize("ci, code, says", [("true", 1, "required under CI"), ("", 0, "skipped")])
def test_missing_quartz_jars_fail_under_ci_and_skip_locally(tmp_path: Path, ci: str, code: int, says: str) -> None:
    empty = tmp_path / "quartz"
    empty.mkdir()
    (empty / "QuartzOracle.java").write_text("")
    result = run_pytest(
        [str(REPO / "tests" / "unit" / "test_cron_quartz_oracle.py"), "-k", "named and 2.5.2 and MON/2"],
        ci=ci,
        timeout_s=300,
        SWITCHYARD_QUARTZ_DIR=str(empty),
    )
    assert result.returncode == code, result.stdout + result.stderr
    assert says in result.stdout, result.stdout
    assert "Quartz jars not resolved" in result.stdout + result.stderr or ci == "", result.stdout
