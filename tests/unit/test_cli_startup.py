"""A `switchyard` process imports only the module of the command it runs: the commands a
test suite or an operator starts most (scheduler, executor, job, runs, trigger) do not pay
for pandas and matplotlib, the dual-run's frames and the reports' plots."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from switchyard.cli import COMMANDS, cli
from tests.servers import REPO

LEAN = ("scheduler", "executor", "job", "runs", "trigger")
HEAVY = ("pandas", "matplotlib")

# in a fresh interpreter: the commands named in argv looked up one by one, and after each
# which of HEAVY it has imported so far
_PROBE = """
import json, sys
from switchyard.cli import cli
seen = {}
for name in sys.argv[1:]:
    cli.commands[name]
    seen[name] = sorted(m for m in HEAVY if m in sys.modules)
print(json.dumps(seen))
"""


def test_the_common_commands_load_without_pandas_or_matplotlib() -> None:
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{_PROBE}", *LEAN],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen == {name: [] for name in LEAN}, f"a common command imports {HEAVY}: {seen}"


def test_every_command_is_listed_and_loads_as_its_name() -> None:
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        cmd = cli.get_command(ctx, name)
        assert isinstance(cmd, click.Command) and cmd.name == name, (name, cmd)
    dualrun = cli.get_command(ctx, "dualrun")
    assert isinstance(dualrun, click.Group) and "start" in dualrun.commands
    assert cli.get_command(ctx, "nosuch") is None
