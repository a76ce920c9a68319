"""A switch cut short by its database: run it again as soon as the database answers.

A rollback takes the business's triggers off the scheduler, stores its fence, starts the
legacy jobs and records the transition; a cutover holds and stops the legacy jobs, then
gives them to the new side. A MariaDB restart in between left the jobs live on neither
side (the chaos soak, seed 23: a rollback, four jobs for 13-19 s, until its operator ran
it again). A switch is safe to run again (each step finds what the previous run did; a
stopped legacy job keeps its next time, so the handover is the same), so the command does
that itself, every second, for as long as the outage lasts up to its patience, and says
so on stderr."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import click

from dbkit.errors import StoreUnavailable
from dbkit.translate import as_store_error
from migrator.business import TransitionRefused

T = TypeVar("T")
PATIENCE_S = 120.0
EVERY_S = 1.0


class CompletedBefore(Exception):
    """The switch was done by an attempt the outage cut short after its transition."""


def through_outages(
    step: Callable[[], T],
    what: str,
    *,
    half_done: Callable[[], bool] = lambda: True,
    done: Callable[[], bool] = lambda: True,
    patience_s: float = PATIENCE_S,
    every_s: float = EVERY_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> T:
    """`step()`, run again while it fails because a database cannot be reached once it
    is `half_done()` (before it changed anything, the failure is raised at once: a wrong
    URL is an error now, not in two minutes), up to `patience_s`; the last failure is
    raised after that. A refusal on a later attempt with the business already where the
    switch leads (`done()`) means an earlier attempt had got as far as its transition:
    CompletedBefore; any other refusal is raised as it is."""
    deadline = clock() + patience_s
    failed = 0
    while True:
        try:
            return step()
        except TransitionRefused as refused:
            if failed and done():
                raise CompletedBefore(
                    f"{what}: done by the attempt the database cut short ({refused}); "
                    "run `switchyard status --check` to see every job on its side"
                ) from refused
            raise
        except Exception as exc:  # noqa: BLE001 - classified below; anything else is raised as it is
            if not isinstance(as_store_error(exc), StoreUnavailable) or not half_done() or clock() >= deadline:
                raise
            failed += 1
            if failed == 1:
                click.echo(
                    f"warning: {what} cut short: a database cannot be reached ({str(exc).splitlines()[0][:200]}); "
                    f"running it again every {every_s:.0f} s for up to {patience_s:.0f} s (it is safe to repeat)",
                    err=True,
                )
            sleep(every_s)


__all__ = ["CompletedBefore", "through_outages"]
