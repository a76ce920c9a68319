"""`switchyard demo`: the main job on the embedded default, no servers."""
from __future__ import annotations

import json
from pathlib import Path

import click

from switchyard.cli.errors import cli_errors


@click.command()
@click.option("--workdir", type=click.Path(file_okay=False, path_type=Path), default=Path(".demo"),
              show_default=True, help="Scratch directory (wiped at start).")
@click.option("--json", "as_json", is_flag=True)
@cli_errors
def demo(workdir: Path, as_json: bool) -> None:
    """Run the whole migration story on SQLite + in-process bus + local election."""
    from switchyard.demo import run_demo

    result = run_demo(workdir, say=(lambda _m: None) if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(result.as_dict()))
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"Switchyard demo ({result.seconds:.0f} s)")
    for col in ("business", "source", "state", "verdict", "legacy fires", "new fires", "boundary missing",
                "boundary doubled"):
        table.add_column(col)
    for b in result.businesses:
        table.add_row(b.business, b.source, b.state, b.verdict, str(b.legacy_fires), str(b.new_fires),
                      str(b.boundary_missing), str(b.boundary_doubled))
    console = Console()
    console.print(table)
    for b in result.businesses:
        if b.reasons:
            console.print(f"[bold]{b.business}[/bold] {b.verdict}: " + "; ".join(b.reasons[:3]))
    click.echo(f"overview report: {result.overview}")
