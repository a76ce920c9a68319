"""`switchyard db init|check` on the embedded default: idempotent init, a check that
leaves nothing behind."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from switchyard import exitcodes
from switchyard.cli import cli


def test_init_twice_creates_once_and_check_sees_the_schema(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    first = CliRunner().invoke(cli, ["db", "init", "--url", url, "--partitions", "4", "--json"])
    assert first.exit_code == 0, first.output
    created = json.loads(first.output)
    assert created["created"] and len(created["partitions"]) == 4
    again = CliRunner().invoke(cli, ["db", "init", "--url", url, "--json"])
    assert again.exit_code == 0, again.output
    second = json.loads(again.output)
    assert second["created"] == [], "a second init must change nothing"
    assert len(second["partitions"]) == 4
    other = CliRunner().invoke(cli, ["db", "init", "--url", url, "--partitions", "8"])
    assert other.exit_code != 0 and "re-partitioning to 8 is not done by init" in other.output, (
        "the partition count is fixed at the first init, and saying otherwise is refused, not ignored"
    )
    check = CliRunner().invoke(cli, ["db", "check", "--url", url, "--json"])
    assert check.exit_code == 0 and json.loads(check.output)["ok"] is True


def test_check_of_a_missing_file_fails_and_creates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "nowhere" / "store.db"
    result = CliRunner().invoke(cli, ["db", "check", "--url", f"sqlite:///{path}"])
    assert result.exit_code == exitcodes.SCHEMA
    assert "no store at" in result.output and "switchyard db init" in result.output
    assert not path.exists() and not path.parent.exists()
