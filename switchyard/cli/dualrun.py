"""`switchyard dualrun ...` (placeholder group: the commands are added by the dual-run work)."""
from __future__ import annotations

import click


@click.group()
def dualrun() -> None:
    """Compare the legacy and the new path per business."""
