"""`switchyard` — the console script."""

from __future__ import annotations

import sys
from typing import Any

import click

from switchyard import exitcodes
from switchyard.cli.alerts import alerts
from switchyard.cli.config import config_option
from switchyard.cli.console import console
from switchyard.cli.cron import cron
from switchyard.cli.cutover import cutover, dualrun_start, rollback, status
from switchyard.cli.db import db
from switchyard.cli.demo import demo
from switchyard.cli.dualrun import dualrun
from switchyard.cli.executor import executor
from switchyard.cli.executors import executors
from switchyard.cli.exits import exits_as
from switchyard.cli.freeze import freeze, unfreeze
from switchyard.cli.job import job
from switchyard.cli.migrate import migrate
from switchyard.cli.report import report
from switchyard.cli.run import run_group
from switchyard.cli.runs import runs
from switchyard.cli.scheduler import scheduler
from switchyard.cli.serve import serve
from switchyard.cli.trigger import trigger


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


cli.add_command(db)
cli.add_command(cron)
cli.add_command(demo)
cli.add_command(scheduler)
cli.add_command(executor)
cli.add_command(trigger)
cli.add_command(freeze)
cli.add_command(unfreeze)
cli.add_command(run_group)
cli.add_command(migrate)
cli.add_command(dualrun)
cli.add_command(report)
cli.add_command(status)
cli.add_command(cutover)
cli.add_command(rollback)
cli.add_command(console)
cli.add_command(serve)
cli.add_command(job)
cli.add_command(runs)
cli.add_command(executors)
cli.add_command(alerts)
dualrun.add_command(dualrun_start)


def main() -> None:
    cli(prog_name="switchyard")
