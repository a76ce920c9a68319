"""Each command's exit codes at the end of its --help (issue 32), in the words of
`switchyard.exitcodes`: the one source, so the help and the code cannot drift apart."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

import click

from switchyard import exitcodes
from switchyard.exitcodes import OK, SCHEMA, UNREACHABLE, USAGE

C = TypeVar("C", bound=click.Command)

# what every command that opens the store may end with
STORE = (OK, USAGE, UNREACHABLE, SCHEMA)


def exits(*codes: int) -> Callable[[C], C]:
    """Decorate a click command (above `@click.command`): its codes with their general
    meaning; see `exits_as` for a command's own words."""
    return exits_as({c: None for c in codes})


def exits_as(codes: Mapping[int, str | None]) -> Callable[[C], C]:
    """Decorate a click command with its exit codes, a code mapped to the command's own
    words for it (None: the general meaning)."""

    def add(cmd: C) -> C:
        line = exitcodes.describe(codes)
        cmd.epilog = f"{cmd.epilog}\n\n{line}" if cmd.epilog else line
        return cmd

    return add


__all__ = ["STORE", "exits", "exits_as"]
