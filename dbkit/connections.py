"""Connections at the boundary: `connect(bind)` and `begin(bind)` are the engine's own,
with every driver error raised inside the block (and by the connect itself) leaving it as
the database's error (`dbkit.errors`, translated by `dbkit.translate`).

A class, not a generator-based context manager: these sit on the stores' hot paths, where
the generator machinery would cost more than the check itself.
"""

from __future__ import annotations

from types import TracebackType

import pymysql
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError

from dbkit.translate import translate, wrapped


class _Translated:
    __slots__ = ("_bind", "_begin", "_cm")

    def __init__(self, bind: Engine, begin: bool) -> None:
        self._bind = bind
        self._begin = begin
        self._cm: object = None

    def __enter__(self) -> Connection:
        try:
            if self._begin:
                cm = self._bind.begin()
                self._cm = cm
                return cm.__enter__()
            conn = self._bind.connect()
            self._cm = conn
            return conn
        except SQLAlchemyError as exc:
            raise translate(exc) from exc

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self._cm.__exit__(kind, exc, tb)  # type: ignore[attr-defined]
        except SQLAlchemyError as failed:  # the COMMIT (or the close) failed
            raise translate(failed) from failed
        except pymysql.err.Error as failed:
            raise translate(wrapped(failed)) from failed
        if isinstance(exc, SQLAlchemyError):
            raise translate(exc) from exc
        if isinstance(exc, pymysql.err.Error):  # the fast path's own cursor (dbkit.fastpath)
            raise translate(wrapped(exc)) from exc


def connect(bind: Engine) -> _Translated:
    """`bind.connect()` whose driver errors come out as the database's errors."""
    return _Translated(bind, begin=False)


def begin(bind: Engine) -> _Translated:
    """`bind.begin()` (committed at the end of the block, rolled back on an error) whose
    driver errors come out as the database's errors."""
    return _Translated(bind, begin=True)
