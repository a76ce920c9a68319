"""`switchyard cron next`: the next occurrences of a Quartz expression."""

from __future__ import annotations

import json
import sys
from datetime import datetime
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import click

from scheduler_core.cron import CronExpression, CronSyntaxError
from switchyard import exitcodes
from switchyard.cli.exits import exits
from switchyard.exitcodes import OK, USAGE


@exits(OK, USAGE)
@click.group()
def cron() -> None:
    """Quartz cron tools."""


@exits(OK, USAGE)
@cron.command("next")
@click.argument("expr")
@click.option("--tz", "tz_name", default="UTC", show_default=True, help="IANA time zone the expression runs in.")
@click.option("--after", "after", default=None, help="ISO 8601 instant (default: now); naive means --tz local time.")
@click.option(
    "--count", type=click.IntRange(1, 10000), default=5, show_default=True, help="How many fire times to print."
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
def next_cmd(expr: str, tz_name: str, after: str | None, count: int, as_json: bool) -> None:
    """Print the next COUNT fire times of EXPR strictly after --after."""
    try:
        tz = ZoneInfo(tz_name)
    except (ZoneInfoNotFoundError, ValueError):
        click.echo(f"error: unknown time zone {tz_name!r}", err=True)
        sys.exit(exitcodes.USAGE)
    try:
        start = datetime.now(tz) if after is None else datetime.fromisoformat(after)
    except ValueError as exc:
        click.echo(f"error: --after: {exc}", err=True)
        sys.exit(exitcodes.USAGE)
    if start.tzinfo is None:
        start = start.replace(tzinfo=tz)
    try:
        parsed = CronExpression(expr, tz)
    except CronSyntaxError as exc:
        click.echo(f"error: invalid cron expression {expr!r}: {exc}", err=True)
        sys.exit(exitcodes.USAGE)
    out: list[str] = []
    cursor: datetime | None = start
    for _ in range(count):
        assert cursor is not None
        cursor = parsed.next_after(cursor)
        if cursor is None:
            break
        out.append(cursor.isoformat())
    if as_json:
        click.echo(json.dumps({"expr": expr, "tz": tz_name, "next": out}))
    else:
        for line in out:
            click.echo(line)
        if len(out) < count:
            click.echo("(the expression never fires again)")
