"""One item's state as one letter: the compact result form on the wire (codec.py), the
executor's per-item outcomes, and the store's page records (a string of these letters,
one per item) all spell it with this enum, so the letters are defined once.

A StrEnum: a member is its letter, so strings of them are built with `"".join` and read
with `str.count` at C speed, and a letter read back compares equal to its member."""

from __future__ import annotations

import enum

from scheduler_core.model import FiredState


class ItemState(enum.StrEnum):
    SUCCEEDED = "S"
    FAILED = "F"
    TIMED_OUT = "T"
    RECEIVED = "R"
    # skipped by a rollback fence, never invoked; newer than the result form: a scheduler
    # that does not know it drops such a result message as malformed
    SKIPPED = "K"
    # killed by an operator (`run kill`): the handler was told and returned; newer than
    # "K", with the same upgrade order (the scheduler's callback consumer before executors)
    KILLED = "X"
    # FiredState.PUBLISHED's letter, so every fired state has one; no page record's item is
    # ever written with it (no result carries it, and a fire stamps no publication)
    PUBLISHED = "P"
    PENDING = "."  # page records only: an item no result has reached yet

    @property
    def fired_state(self) -> FiredState:
        return FiredState[self.name]

    @classmethod
    def of(cls, state: FiredState) -> ItemState:
        return cls[state.name]


# the states a result message may carry (an executor reports these and no others)
RESULT_STATES: tuple[ItemState, ...] = (
    ItemState.SUCCEEDED,
    ItemState.FAILED,
    ItemState.TIMED_OUT,
    ItemState.RECEIVED,
    ItemState.SKIPPED,
    ItemState.KILLED,
)
