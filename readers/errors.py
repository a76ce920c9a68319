"""Errors of the readers. A bad legacy *row* is not an error: it is data (`Problem`s on
the record, quarantined by the migrator). These exceptions are for a source that cannot
be read at all, or for a caller's misuse."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar


class ReaderError(Exception):
    """A legacy source could not be read as its contract says."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class UnknownSystem(ReaderError, LookupError):
    """No such legacy system (expected 'xxl-job' or 'batch-center')."""

    def __init__(self, system: str) -> None:
        super().__init__(f"unknown legacy system {system!r}: expected 'xxl-job' or 'batch-center'")
        self.system = system


class UnknownLineage(ReaderError, LookupError):
    """The xxl-job tables match no schema lineage this reader knows."""

    def __init__(self, detail: str) -> None:
        super().__init__(f"unknown xxl-job schema lineage: {detail}")
        self.detail = detail


class MissingTables(ReaderError):
    """Tables the reader needs are not in the legacy database."""

    def __init__(self, system: str, tables: Iterable[str]) -> None:
        self.system = system
        self.tables = tuple(sorted(tables))
        super().__init__(f"{system}: missing table(s) {', '.join(self.tables)}: is this the right database?")


class SourceUnavailable(ReaderError):
    """The legacy database could not be reached or refused the read."""

    transient: ClassVar[bool] = True

    def __init__(self, system: str, action: str) -> None:
        super().__init__(f"{system}: the legacy database failed during {action}")
        self.system = system
        self.action = action
