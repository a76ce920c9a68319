"""The boundary for driver errors: SQLAlchemy's exceptions (with PyMySQL's or sqlite3's
inside) become the database's errors (`dbkit.errors`) here, and nowhere else.

As procrastinate's connector wraps its driver's errors once, every connection opened
through `dbkit.connect` / `dbkit.begin` (and every public method of a class marked
`translated_methods`) runs inside `store_errors`: a caller catches `StoreError` (or one of
its kinds) and never imports `sqlalchemy.exc`.
The kinds are what a caller decides on: unavailable (retry later: the server is down,
the connection was cut, a lock timed out), access denied (fix the credentials or the
grants), conflict (a uniqueness or foreign-key rule refused the write), schema (a table
or column is missing: `db init`), bad URL, a value refused (the row holds a value its
column cannot: that row is the problem, not the statement), and refused (any other
statement the database would not run: a bug).
The driver's own first line stays in the message (password masked), so an operator sees
what the server said without a stack trace.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

import pymysql
from sqlalchemy.exc import (
    ArgumentError,
    DataError,
    DBAPIError,
    DisconnectionError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    SQLAlchemyError,
)
from sqlalchemy.exc import TimeoutError as PoolTimeout

from dbkit.errors import (
    BadStoreUrl,
    SchemaError,
    StoreAccessDenied,
    StoreConflict,
    StoreError,
    StoreRefused,
    StoreUnavailable,
    StoreValueRefused,
)
from dbkit.redact import redact

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C", bound=type)

# MySQL/MariaDB: 1044 no access to the database, 1045 bad user or password, 1142 a command
# denied on a table, 1227 an operation that needs a privilege the user lacks
ACCESS_DENIED_CODES = frozenset({1044, 1045, 1142, 1227})
# MySQL/MariaDB: 1146 no such table, 1054 no such column
MISSING_SCHEMA_CODES = frozenset({1146, 1054})
# sqlite3's primary result codes: SQLITE_ERROR is a statement it cannot run (no such table,
# a syntax error); PERM, READONLY and AUTH are refusals; the rest (BUSY, LOCKED, CANTOPEN,
# IOERR, FULL, ...) are the file or its lock being unavailable
SQLITE_ERROR = 1
SQLITE_DENIED = frozenset({3, 8, 23})
_SQLITE_MISSING = ("no such table", "no such column")


def driver_message(exc: BaseException) -> str:
    """The first line of what the driver (or SQLAlchemy) said, password masked."""
    text = str(exc.orig) if isinstance(exc, DBAPIError) and exc.orig is not None else str(exc)
    text = text.strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return redact(line)


def _driver_code(exc: DBAPIError) -> int | None:
    args = getattr(exc.orig, "args", None)
    return args[0] if args and isinstance(args[0], int) else None


def _sqlite_code(exc: DBAPIError) -> int | None:
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code & 0xFF if isinstance(code, int) else None  # the primary code, without the extended bits


def translate(exc: SQLAlchemyError) -> StoreError:
    """The port's error for a driver error (the caller raises it `from exc`)."""
    detail = driver_message(exc)
    if isinstance(exc, ArgumentError):  # NoSuchModuleError included: an unknown dialect or driver
        return BadStoreUrl("bad URL", detail)
    if isinstance(exc, IntegrityError):
        return StoreConflict("the database refused the write", detail)
    if isinstance(exc, DataError):  # MySQL 1366 (a character the column cannot hold), 1406, 1264, ...
        return StoreValueRefused("the database cannot hold a value of the row", detail)
    if not isinstance(exc, DBAPIError):
        return _not_from_the_driver(exc, detail)
    code, lite = _driver_code(exc), _sqlite_code(exc)
    if code in MISSING_SCHEMA_CODES or (lite == SQLITE_ERROR and detail.startswith(_SQLITE_MISSING)):
        return SchemaError("the store's schema is missing or differs (run `switchyard db init`)", detail)
    if code in ACCESS_DENIED_CODES or lite in SQLITE_DENIED:
        return StoreAccessDenied("access denied", detail)
    if lite == SQLITE_ERROR:  # sqlite3 calls a statement it cannot run an OperationalError too
        return StoreRefused("database error", detail)
    if isinstance(exc, (OperationalError, InterfaceError)) or exc.connection_invalidated:
        return StoreUnavailable("cannot reach the database", detail)
    return StoreRefused("database error", detail)


def _not_from_the_driver(exc: SQLAlchemyError, detail: str) -> StoreError:
    if isinstance(exc, (DisconnectionError, PoolTimeout)):
        return StoreUnavailable("cannot reach the database", detail)
    return StoreRefused("database error", detail)


# PyMySQL's packet reader asserts each packet's length: one cut short by a server that
# died while sending it (a restart) raises a bare AssertionError, which SQLAlchemy passes
# through unwrapped (and without discarding the connection)
CUT_PACKET = "Result length not requested length"


def lost_in_cut_packet(exc: BaseException) -> pymysql.err.OperationalError | None:
    """The lost connection (MySQL error 2013) that `exc` is, when it is PyMySQL's assertion
    on a packet cut short; None for anything else (a real assertion stays one)."""
    if not (isinstance(exc, AssertionError) and exc.args and str(exc.args[0]).startswith(CUT_PACKET)):
        return None
    return pymysql.err.OperationalError(
        2013, f"Lost connection to MySQL server during query ({str(exc.args[0]).splitlines()[0]})"
    )


def wrapped(exc: pymysql.err.Error) -> SQLAlchemyError:
    """A driver error raised past SQLAlchemy (the fast path's own cursor: dbkit/fastpath.py)
    as SQLAlchemy wraps one: the same class by the driver's (DataError for DataError)."""
    return DBAPIError.instance(None, None, exc, pymysql.err.Error)


def as_store_error(exc: BaseException) -> BaseException:
    """`exc` translated if it is a driver error, else itself (for callers that handle
    errors from code not yet behind a port, such as the CLI's last line of defence)."""
    if isinstance(exc, pymysql.err.Error):
        return translate(wrapped(exc))
    if (lost := lost_in_cut_packet(exc)) is not None:  # from a driver connection of its own
        return translate(wrapped(lost))
    return translate(exc) if isinstance(exc, SQLAlchemyError) else exc


@contextmanager
def store_errors() -> Iterator[None]:
    """Run a block at the store's boundary: driver errors leave it as the port's."""
    try:
        yield
    except SQLAlchemyError as exc:
        raise translate(exc) from exc
    except pymysql.err.Error as exc:
        raise translate(wrapped(exc)) from exc
    except AssertionError as exc:
        if (lost := lost_in_cut_packet(exc)) is None:
            raise
        raise translate(wrapped(lost)) from exc


def translated(fn: Callable[P, R]) -> Callable[P, R]:
    """`fn` at the store's boundary (see `store_errors`)."""
    if inspect.isgeneratorfunction(fn):  # a wrapper around a generator would not see its errors
        raise TypeError(f"{fn.__qualname__} is a generator: wrap its consumer instead")

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except SQLAlchemyError as exc:
            raise translate(exc) from exc
        except pymysql.err.Error as exc:
            raise translate(wrapped(exc)) from exc
        except AssertionError as exc:  # a packet cut short (the fast path's own cursor)
            if (lost := lost_in_cut_packet(exc)) is None:
                raise
            raise translate(wrapped(lost)) from exc

    return wrapper


def translated_methods(cls: C) -> C:
    """Every public method of `cls` (its own and inherited ones) at the store's boundary.

    One place instead of a decorator per method, so a method added later cannot forget it.
    A public method calling another is fine: a `StoreError` passes through unchanged."""
    for name in dir(cls):
        if name.startswith("_"):
            continue
        fn = inspect.getattr_static(cls, name)
        if inspect.isfunction(fn):
            setattr(cls, name, translated(fn))
    return cls
