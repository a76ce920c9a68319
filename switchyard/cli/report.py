"""`switchyard report BUSINESS | --overview`: the comparison report of a business, or the
overview of every business with its cutover state, as HTML, Markdown or JSON."""

from __future__ import annotations

from pathlib import Path

import click

from dualrun.errors import NoComparison
from reports.errors import ReportError, UnknownFormat
from reports.load import load_overview, load_report
from reports.write import FORMATS, format_for, render_report, write_report
from switchyard import exitcodes
from switchyard.cli.business import one_business
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits_as
from switchyard.cli.names import known_business
from switchyard.cli.options import store_url
from switchyard.exitcodes import FAILED, OK
from switchyard.wiring import dualrun_store, migrator_store, open_existing_store

EPILOG = """\b
Examples:
  switchyard report --business reminder --format html --out reports/reminder.html
  switchyard report --business reminder --format md --out reports/reminder.md
  switchyard report --overview --out reports/index.html
  switchyard report --business reminder --format json --out - | jq .verdict"""


@exits_as({**dict.fromkeys(STORE), OK: "written", FAILED: "no comparison stored yet"})
@click.command(epilog=EPILOG)
@one_business(required=False, help="The business whose report to write (or --overview).")
@click.option("--overview", is_flag=True, help="Every business with its cutover state and latest verdict.")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(sorted(FORMATS)),
    default=None,
    help="Output form (default: from the --out suffix, else html).",
)
@click.option(
    "--out",
    required=True,
    type=click.Path(dir_okay=False, allow_dash=True, path_type=Path),
    help="File to write (.html, .md or .json), or - for stdout.",
)
@click.option(
    "--comparison",
    "comparison_id",
    type=click.IntRange(1),
    default=None,
    help="A stored comparison id (default: the latest of the business).",
)
@click.option(
    "--history",
    "history_limit",
    type=click.IntRange(0),
    default=200,
    show_default=True,
    help="Stored comparisons to plot as the series.",
)
@store_url
@cli_errors
def report(
    biz_code: str | None,
    overview: bool,
    fmt: str | None,
    out: Path,
    comparison_id: int | None,
    history_limit: int,
    url: str,
) -> None:
    """Write the dual-run report of a business, or the --overview page."""
    if overview == (biz_code is not None):
        raise click.UsageError("give either --business or --overview")
    to_stdout = str(out) == "-"
    try:
        form = (fmt or "html") if to_stdout else format_for(out, fmt)
    except UnknownFormat as exc:
        raise click.BadParameter(str(exc), param_hint="--out") from None
    store = open_existing_store(url)
    try:
        # a typo'd business is a wrong argument (2), not "no comparison stored yet" (1)
        if biz_code is not None and not known_business(store, migrator_store(store), biz_code):
            raise CliFailure(f"no such business: {biz_code}", exitcodes.USAGE)
        now = store.clock.now()
        own = dualrun_store(store)
        model = (
            load_overview(own, now=now, reports_dir=out.parent)
            if overview
            else load_report(own, biz_code or "", now=now, comparison_id=comparison_id, history_limit=history_limit)
        )
        if to_stdout:
            text = render_report(model.content(), form)
            click.echo(text, nl=not text.endswith("\n"))
            return
        path = write_report(model.content(), form, out)
    except NoComparison as exc:
        raise CliFailure(str(exc), exitcodes.FAILED) from None
    except ReportError as exc:
        raise CliFailure(str(exc), exitcodes.FAILED) from None
    finally:
        store.close()
    click.echo(f"wrote {path}")
