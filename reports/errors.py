"""Errors of the reports."""

from __future__ import annotations


class ReportError(Exception):
    """The report could not be produced."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class UnknownFormat(ReportError, ValueError):
    """A report format other than html, md and json."""

    def __init__(self, fmt: str, message: str | None = None) -> None:
        super().__init__(message or f"unknown report format {fmt!r}: use html, md or json")
        self.format = fmt
