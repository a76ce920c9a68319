"""Turn known failures into one clear line on stderr and a documented exit code, never a
traceback. Messages pass through `redact` so no secret reaches the terminal."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from dbkit.redact import redact
from dbkit.translate import as_store_error, driver_message
from readers.errors import MissingTables, ReaderError, SourceUnavailable, UnknownLineage
from readers.streams.errors import StreamError, StreamPermissionError, StreamStalled, StreamUnreachable
from scheduler_core.errors import (
    BadStoreUrl,
    BusError,
    ElectionError,
    SchemaError,
    StoreAccessDenied,
    StoreError,
    StoreUnavailable,
)
from switchyard import exitcodes

F = TypeVar("F", bound=Callable[..., Any])


class CliFailure(click.ClickException):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(redact(message))
        self.exit_code = code  # type: ignore[misc]  # click declares it per class; ours is per failure


def _first_line(exc: BaseException) -> str:
    return redact(driver_message(exc))


def _failure(exc: BaseException) -> CliFailure | None:
    """The one line and exit code for a known failure; None for an unexpected one.

    The store's errors arrive as the port's (StoreError and its kinds, translated once at
    the store's boundary); a driver error from code that reaches a database directly is
    translated by the same function before it is looked at here."""
    exc = as_store_error(exc)
    if isinstance(exc, (StreamPermissionError, StreamUnreachable)):
        return CliFailure(str(exc), exitcodes.UNREACHABLE)
    if isinstance(exc, StreamStalled):
        return CliFailure(f"change stream stalled: {exc}", exitcodes.UNREACHABLE)
    if isinstance(exc, SourceUnavailable):
        cause = f": {_first_line(exc.__cause__)}" if exc.__cause__ is not None else ""
        return CliFailure(f"{_first_line(exc)}{cause}", exitcodes.UNREACHABLE)
    if isinstance(exc, (MissingTables, UnknownLineage)):
        return CliFailure(_first_line(exc), exitcodes.SCHEMA)
    if isinstance(exc, (StreamError, ReaderError)):
        return CliFailure(_first_line(exc), exitcodes.FAILED)
    if isinstance(exc, SchemaError):
        return CliFailure(str(exc), exitcodes.SCHEMA)
    if isinstance(exc, BadStoreUrl):
        return CliFailure(str(exc), exitcodes.USAGE)
    if isinstance(exc, (StoreUnavailable, StoreAccessDenied)):
        return CliFailure(str(exc), exitcodes.UNREACHABLE)
    if isinstance(exc, StoreError):
        return CliFailure(str(exc), exitcodes.FAILED)
    if isinstance(exc, (BusError, ElectionError)):
        return CliFailure(_first_line(exc), exitcodes.UNREACHABLE)
    if isinstance(exc, (ValueError, KeyError)):
        return CliFailure(_first_line(exc), exitcodes.USAGE)
    return None


def cli_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            failure = _failure(exc)
            if failure is not None:
                raise failure from None
            # never a traceback for an operator; SWITCHYARD_DEBUG=1 shows it to a developer
            if os.environ.get("SWITCHYARD_DEBUG"):
                raise
            raise CliFailure(
                f"unexpected error ({type(exc).__name__}): {_first_line(exc)} "
                "(set SWITCHYARD_DEBUG=1 for the traceback)",
                exitcodes.FAILED,
            ) from None

    return wrapper  # type: ignore[return-value]
