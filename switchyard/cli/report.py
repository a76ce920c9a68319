"""`switchyard report` (filled in by the reports work)."""
from __future__ import annotations

import click


@click.group(invoke_without_command=True)
def report() -> None:
    """Comparison and cutover reports."""
