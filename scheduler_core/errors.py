"""Errors of the scheduler core. Losing a CAS race is not an error: it is a return value."""

from __future__ import annotations

# The database's errors are the store port's: defined beside the engine (dbkit), named here
# for the core's callers
from dbkit.errors import BadStoreUrl as BadStoreUrl
from dbkit.errors import SchemaError as SchemaError
from dbkit.errors import StoreAccessDenied as StoreAccessDenied
from dbkit.errors import StoreConflict as StoreConflict
from dbkit.errors import StoreError as StoreError
from dbkit.errors import StoreRefused as StoreRefused
from dbkit.errors import StoreUnavailable as StoreUnavailable
from dbkit.errors import StoreValueRefused as StoreValueRefused


class SchedulerError(Exception):
    """Base class for the scheduler core's errors."""


class IllegalTransition(SchedulerError, ValueError):
    """A caller asked for a state change the state machine does not allow."""

    def __init__(self, from_state: str, to_state: str) -> None:
        super().__init__(f"transition {from_state} -> {to_state} is not allowed")
        self.from_state = from_state
        self.to_state = to_state


class BusError(SchedulerError):
    """The command bus could not publish or receive."""


class PublishError(BusError):
    """Some messages of a publish call were not acknowledged by the broker."""

    def __init__(self, message: str, failed: int) -> None:
        super().__init__(message)
        self.failed = failed


class ElectionError(SchedulerError):
    """The election backend could not be reached."""
