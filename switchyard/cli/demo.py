"""`switchyard demo`: the main job on the embedded default, no servers."""

from __future__ import annotations

import json
from pathlib import Path

import click

from switchyard import exitcodes
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import exits
from switchyard.exitcodes import FAILED, OK, USAGE


@exits(OK, FAILED, USAGE)
@click.command()
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path(".demo"),
    show_default=True,
    help="Scratch directory: created, or the demo's own from an earlier run (wiped at start); "
    "a non-empty directory the demo did not make is refused (exit 2).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def demo(workdir: Path, as_json: bool) -> None:
    """Run the whole migration story on SQLite + in-process bus + local election."""
    from switchyard.demo import WorkdirNotOurs, run_demo

    try:
        result = run_demo(workdir, say=(lambda _m: None) if as_json else click.echo)
    except WorkdirNotOurs as exc:
        raise CliFailure(f"--workdir: {exc}", exitcodes.USAGE) from None
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    from rich.console import Console
    from rich.table import Table

    window = result.window
    span = (
        ""
        if window is None
        else (f"{window.start:%H:%M}-{window.end:%H:%M}Z ({window.length.total_seconds() / 60:.0f} min)")
    )
    # the fire counts are the verdict's own, over its window, on both sides alike: counted
    # over different spans they would show gaps the verdict never saw
    table = Table(
        title=f"Switchyard demo ({result.seconds:.0f} s)",
        caption=f"fires: both sides over the verdict window {span}, as the verdict counted them "
        "(shadow records included); boundary: occurrences after the switch's handover "
        "(checked), and of those not fired by the side switched to (missing) or fired by both "
        "(doubled)",
    )
    for col, kw in (
        ("business", {"no_wrap": True}),
        ("source", {"no_wrap": True}),
        ("state", {}),
        ("verdict", {}),
        ("legacy fires", {"justify": "right"}),
        ("new fires", {"justify": "right"}),
        ("switch", {}),
        ("boundary checked", {"justify": "right"}),
        ("missing", {"justify": "right"}),
        ("doubled", {"justify": "right"}),
    ):
        table.add_column(col, **kw)  # type: ignore[arg-type]
    for b in result.businesses:
        checked = b.switched != ""
        table.add_row(
            b.biz_code,
            b.source,
            b.state,
            b.verdict,
            str(b.legacy_fires),
            str(b.new_fires),
            b.switched or "-",
            str(b.boundary_checked) if checked else "-",
            str(b.boundary_missing) if checked else "-",
            str(b.boundary_doubled) if checked else "-",
        )
    console = Console(width=max(Console().width, 132))  # the names must stay whole when piped (80 columns)
    console.print(table)
    for b in result.businesses:
        if b.reasons:
            console.print(f"[bold]{b.biz_code}[/bold] {b.verdict}: " + "; ".join(b.reasons[:3]))
        for w in b.warnings:
            console.print(f"[bold]{b.biz_code}[/bold] warning: {w}")
    rb = result.rollback
    if rb.fence_at:
        click.echo(
            f"rollback fence at {rb.fence_at}: after the rollback the new side ran the regressed handler "
            f"{rb.invoked_after} time(s), the last {rb.last_invocation_s:.0f} s after it, "
            f"{rb.invoked_at_or_after_fence} at or after the fence; {rb.fenced} published command(s) "
            "recorded as skipped"
        )
    pz = result.pause
    if pz.paused_from:
        click.echo(
            f"pause of {pz.job_code} ({pz.biz_code}, in dual-run) from {pz.paused_from}: {pz.published_ahead} "
            f"published command(s) recorded skipped, {pz.invoked_in_pause} invocation(s) in the pause; resumed "
            f"from {pz.resumed_from}: {pz.ran_after_resume} occurrence(s) ran, {pz.doubled_after_resume} twice"
        )
    click.echo(f"overview report: {result.overview}")
