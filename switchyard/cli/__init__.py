"""`switchyard` — the console script."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import click

from switchyard import exitcodes
from switchyard.cli.config import config_option
from switchyard.cli.exits import exits_as

# Each command: (its module, the command's name there). A command's module is imported when
# the command is looked up, not when `switchyard` starts: most commands need neither pandas
# nor matplotlib (the dual-run's frames, the reports' plots), whose import took most of a
# process's start (3 s of 4 on a loaded 2-core machine), paid by every `scheduler run`,
# `executor run` and `job add`.
COMMANDS: dict[str, tuple[str, str]] = {
    "db": ("switchyard.cli.db", "db"),
    "cron": ("switchyard.cli.cron", "cron"),
    "demo": ("switchyard.cli.demo", "demo"),
    "scheduler": ("switchyard.cli.scheduler", "scheduler"),
    "executor": ("switchyard.cli.executor", "executor"),
    "trigger": ("switchyard.cli.trigger", "trigger"),
    "freeze": ("switchyard.cli.freeze", "freeze"),
    "unfreeze": ("switchyard.cli.freeze", "unfreeze"),
    "run": ("switchyard.cli.run", "run_group"),
    "migrate": ("switchyard.cli.migrate", "migrate"),
    "dualrun": ("switchyard.cli.dualrun", "dualrun"),
    "report": ("switchyard.cli.report", "report"),
    "status": ("switchyard.cli.cutover", "status"),
    "cutover": ("switchyard.cli.cutover", "cutover"),
    "rollback": ("switchyard.cli.cutover", "rollback"),
    "console": ("switchyard.cli.console", "console"),
    "serve": ("switchyard.cli.serve", "serve"),
    "job": ("switchyard.cli.job", "job"),
    "runs": ("switchyard.cli.runs", "runs"),
    "executors": ("switchyard.cli.executors", "executors"),
    "alerts": ("switchyard.cli.alerts", "alerts"),
}


def _load(name: str) -> click.Command:
    module, attr = COMMANDS[name]
    cmd = getattr(importlib.import_module(module), attr)
    if not isinstance(cmd, click.Command):
        raise TypeError(f"{module}.{attr} is not a click command")
    if name == "dualrun" and isinstance(cmd, click.Group) and "start" not in cmd.commands:
        # `dualrun start` is the first of the switches, beside cutover and rollback
        start = importlib.import_module("switchyard.cli.cutover").dualrun_start
        cmd.add_command(start)
    return cmd


class LazyCommands(MutableMapping[str, click.Command]):
    """The root group's commands: every name of COMMANDS is listed, a command's module is
    imported on its first lookup (click looks up only the command a user runs; --help and
    `.items()` load them all)."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            self._loaded[name] = _load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, cmd: click.Command) -> None:
        self._loaded[name] = cmd

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys([*COMMANDS, *self._loaded]))

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._loaded))


class OneLineErrors(click.Group):
    """Every error is one line on stderr (click wraps usage errors over several lines)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs.pop("standalone_mode", None)
        try:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[call-overload]
        except click.UsageError as exc:
            hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
            click.echo("Error: " + " ".join(exc.format_message().split()) + hint, err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo("Error: " + " ".join(exc.format_message().split()), err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Exit as exc:
            sys.exit(exc.exit_code)
        except click.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)


@exits_as(dict.fromkeys(exitcodes.MEANING))
@click.group(cls=OneLineErrors, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="switchyard")
@config_option
def cli() -> None:
    """Move delayed and recurring jobs off xxl-job and the batch center, one business at a time.

    Settings shared by every command (the store, the legacy databases, the bus) come from
    the command line, else their environment variables (SWITCHYARD_URL,
    SWITCHYARD_LEGACY_URL, SWITCHYARD_BUS, ...), else the --config file, else the built-in
    defaults. Shell completion: eval "$(_SWITCHYARD_COMPLETE=bash_source switchyard)".
    """


cli.commands = LazyCommands()


def main() -> None:
    cli(prog_name="switchyard")
