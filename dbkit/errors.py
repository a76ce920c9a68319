"""The database's errors: what a caller decides on when a statement fails.

Raised by the boundary in `dbkit.translate` from the driver's error: `what` says what kind
of failure it is, `detail` what the server or driver said (its first line, secrets
masked). They live here, below every package of ours, so that each store raises the same
kinds; the scheduler core re-exports them (`scheduler_core.errors`) as its port's errors.
"""

from __future__ import annotations


class StoreError(Exception):
    """The database could not be reached or refused an operation."""

    def __init__(self, what: str, detail: str = "") -> None:
        super().__init__(f"{what}: {detail}" if detail else what)
        self.what = what
        self.detail = detail


class StoreUnavailable(StoreError):
    """The database cannot be reached, or the connection was lost: retrying later may work."""


class StoreAccessDenied(StoreError):
    """The database refused the credentials, or the user lacks a privilege the call needs."""


class StoreConflict(StoreError):
    """A uniqueness or foreign-key rule refused the write."""


class StoreRefused(StoreError):
    """The database would not run a statement (neither unavailable nor a conflict)."""


class StoreValueRefused(StoreRefused):
    """The database cannot hold a value of the row written (a character its column's
    character set lacks, a value too long or out of range): the row is wrong for this
    store, not the statement, so the same statement without that row goes through."""


class BadStoreUrl(StoreError, ValueError):
    """The store URL cannot be parsed, or names a dialect or driver that is not installed."""


class SchemaError(StoreError):
    """The schema is missing, or differs from what this version expects."""
