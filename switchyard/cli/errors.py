"""Turn known failures into one clear line on stderr and a documented exit code, never a
traceback. Messages pass through `redact` so no secret reaches the terminal."""
from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError, OperationalError, SQLAlchemyError

from readers.errors import MissingTables, ReaderError, SourceUnavailable, UnknownLineage
from readers.streams.errors import StreamError, StreamPermissionError, StreamStalled, StreamUnreachable
from scheduler_core.errors import BusError, ElectionError, SchemaError
from switchyard import exitcodes

F = TypeVar("F", bound=Callable[..., Any])
_URL_PASSWORD = re.compile(r"(://[^:/@\s]+:)[^@\s]+@")


def redact(text: str) -> str:
    return _URL_PASSWORD.sub(r"\1***@", text)


class CliFailure(click.ClickException):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(redact(message))
        self.exit_code = code  # type: ignore[misc]  # click declares it per class; ours is per failure


def _first_line(exc: BaseException) -> str:
    text = str(exc.orig) if isinstance(exc, DBAPIError) and exc.orig is not None else str(exc)
    return redact(text.strip().splitlines()[0] if text.strip() else type(exc).__name__)


def cli_errors(fn: F) -> F:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except click.ClickException:
            raise
        except StreamPermissionError as exc:
            raise CliFailure(str(exc), exitcodes.UNREACHABLE) from None
        except StreamUnreachable as exc:
            raise CliFailure(str(exc), exitcodes.UNREACHABLE) from None
        except StreamStalled as exc:
            raise CliFailure(f"change stream stalled: {exc}", exitcodes.UNREACHABLE) from None
        except SourceUnavailable as exc:
            cause = f": {_first_line(exc.__cause__)}" if exc.__cause__ is not None else ""
            raise CliFailure(f"{_first_line(exc)}{cause}", exitcodes.UNREACHABLE) from None
        except (MissingTables, UnknownLineage) as exc:
            raise CliFailure(_first_line(exc), exitcodes.SCHEMA) from None
        except (StreamError, ReaderError) as exc:
            raise CliFailure(_first_line(exc), exitcodes.FAILED) from None
        except SchemaError as exc:
            raise CliFailure(str(exc), exitcodes.SCHEMA) from None
        except (ArgumentError, NoSuchModuleError) as exc:
            raise CliFailure(f"bad URL: {_first_line(exc)}", exitcodes.USAGE) from None
        except OperationalError as exc:
            code = getattr(exc.orig, "args", [None])[0] if exc.orig is not None else None
            what = "access denied" if code in (1044, 1045, 1142, 1227) else "cannot reach the database"
            raise CliFailure(f"{what}: {_first_line(exc)}", exitcodes.UNREACHABLE) from None
        except SQLAlchemyError as exc:
            raise CliFailure(f"database error: {_first_line(exc)}", exitcodes.FAILED) from None
        except (BusError, ElectionError) as exc:
            raise CliFailure(f"{_first_line(exc)}", exitcodes.UNREACHABLE) from None
        except (ValueError, KeyError) as exc:
            raise CliFailure(_first_line(exc), exitcodes.USAGE) from None
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)
        except Exception as exc:
            # never a traceback for an operator; SWITCHYARD_DEBUG=1 shows it to a developer
            if os.environ.get("SWITCHYARD_DEBUG"):
                raise
            raise CliFailure(f"unexpected error ({type(exc).__name__}): {_first_line(exc)} "
                             "(set SWITCHYARD_DEBUG=1 for the traceback)", exitcodes.FAILED) from None

    return wrapper  # type: ignore[return-value]
