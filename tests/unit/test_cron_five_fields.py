"""A Unix (5-field) cron given where Switchyard parses a Quartz one: the error says Quartz
reads the first field as seconds, and suggests the 6-field form when it means the same."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from switchyard import exitcodes
from switchyard.cli import cli


def test_a_five_field_cron_is_told_about_quartz_seconds_field() -> None:
    result = CliRunner().invoke(cli, ["cron", "next", "*/5 * * * *"])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert "Quartz cron has 6 or 7 fields, seconds first" in result.stderr
    assert "did you mean '0 */5 * * * ?'" in result.stderr


def test_a_five_field_cron_with_a_weekday_number_gets_no_wrong_suggestion() -> None:
    from scheduler_core.cron import CronSyntaxError, validate

    with pytest.raises(CronSyntaxError) as err:
        validate("0 2 * * 1-5")  # Unix Mon-Fri; Quartz's 1-5 would be Sun-Thu
    assert "seconds first" in str(err.value)
    assert "Sunday = 1" in str(err.value)
    assert "did you mean" not in str(err.value)
