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
    """The trigger store could not be reached or refused an operation."""


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
