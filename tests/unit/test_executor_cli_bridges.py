"""`switchyard executor run --bridge ...`: the refusals before anything starts."""

from __future__ import annotations

import socket

import pytest
from click.testing import CliRunner

from switchyard import exitcodes
from switchyard.cli import cli

BASE = ["executor", "run", "--business", "d", "--bus", "memory"]


@pytest.mark.parametrize(
    "args,needle",
    [
        ([], "--handlers MODULE, or --bridge"),
        (
            ["--bridge", "xxl-job", "--access-token-env", "SY_TEST_UNSET_VAR"],
            "SY_TEST_UNSET_VAR: that environment variable",
        ),
        (["--bridge", "xxl-job", "--listen", "localhost"], "expected HOST:PORT"),
        (["--bridge", "batch-center"], "needs --legacy-url (bc_biz tokens) or --bc-token-env"),
        (["--bridge", "nonsense"], "nonsense"),
    ],
)
def test_bridge_options_are_checked_before_starting(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(cli, BASE + args, env={"SY_TEST_UNSET_VAR": None})
    assert result.exit_code == exitcodes.USAGE, result.output
    assert needle in result.output


def test_a_taken_listen_port_is_a_clear_usage_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = CliRunner().invoke(cli, [*BASE, "--bridge", "xxl-job", "--listen", f"127.0.0.1:{port}"])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert f"--listen 127.0.0.1:{port}: cannot bind the xxl-job endpoint" in result.output
