"""Errors of the scheduler core. Losing a CAS race is not an error: it is a return value."""

from __future__ import annotations


class SchedulerError(Exception):
    """Base class for the scheduler core's errors."""


class IllegalTransition(SchedulerError, ValueError):
    """A caller asked for a state change the state machine does not allow."""

    def __init__(self, from_state: str, to_state: str) -> None:
        super().__init__(f"transition {from_state} -> {to_state} is not allowed")
        self.from_state = from_state
        self.to_state = to_state


class StoreError(SchedulerError):
    """The trigger store could not be reached or refused an operation.

    Raised by the store's boundary (store/driver_errors.py) from the driver's error:
    `what` says what kind of failure it is, `detail` what the server or driver said (its
    first line, password masked)."""

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


class BusError(SchedulerError):
    """The command bus could not publish or receive."""


class PublishError(BusError):
    """Some messages of a publish call were not acknowledged by the broker."""

    def __init__(self, message: str, failed: int) -> None:
        super().__init__(message)
        self.failed = failed


class ElectionError(SchedulerError):
    """The election backend could not be reached."""
