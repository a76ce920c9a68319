"""`switchyard` — the console script."""
from __future__ import annotations

import click

from switchyard.cli.cron import cron
from switchyard.cli.cutover import cutover, dualrun_start, rollback, status
from switchyard.cli.db import db
from switchyard.cli.demo import demo
from switchyard.cli.executor import executor
from switchyard.cli.migrate import migrate
from switchyard.cli.dualrun import dualrun
from switchyard.cli.report import report
from switchyard.cli.scheduler import scheduler
from switchyard.cli.trigger import trigger


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="switchyard")
def cli() -> None:
    """Move delayed and recurring jobs off xxl-job and the batch center, one business at a time.

    Exit codes: 0 ok, 1 failed check, 2 bad arguments or input, 3 server unreachable or
    credentials refused, 4 schema missing or different, 5 refused by a rule.
    """


cli.add_command(db)
cli.add_command(cron)
cli.add_command(demo)
cli.add_command(scheduler)
cli.add_command(executor)
cli.add_command(trigger)
cli.add_command(migrate)
cli.add_command(dualrun)
cli.add_command(report)
cli.add_command(status)
cli.add_command(cutover)
cli.add_command(rollback)
dualrun.add_command(dualrun_start)


def main() -> None:
    try:
        cli(prog_name="switchyard", standalone_mode=False)
    except click.UsageError as exc:
        # one line, whatever click's own formatting would have wrapped
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        click.echo("Error: " + " ".join(exc.format_message().split()) + hint, err=True)
        raise SystemExit(exc.exit_code) from None
    except click.ClickException as exc:
        click.echo("Error: " + " ".join(exc.format_message().split()), err=True)
        raise SystemExit(exc.exit_code) from None
    except click.exceptions.Exit as exc:
        raise SystemExit(exc.exit_code) from None
    except click.Abort:
        click.echo("aborted", err=True)
        raise SystemExit(130) from None
