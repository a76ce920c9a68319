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
    """Run the embedded demo: SQLite store, in-process bus, local election."""
    from switchyard.demo import run_demo

    result = run_demo(workdir, say=(lambda _m: None) if as_json else click.echo)
    if as_json:
        click.echo(json.dumps(result.__dict__))
        return
    click.echo("")
    click.echo(f"delivered {result.command_id}: scheduled {result.scheduled_at}, "
               f"received {result.received_lag_ms:.0f} ms after T, state {result.state}")
