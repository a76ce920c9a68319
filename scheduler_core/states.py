"""The trigger state machine, as data. The store's CAS and the operator commands both
check against this one table, so a manual operation can never leave a state the
scheduler misreads."""

from __future__ import annotations

from scheduler_core.errors import IllegalTransition
from scheduler_core.model import TriggerState as S

# (from, to): why it exists
TRANSITIONS: dict[tuple[S, S], str] = {
    (S.CREATED, S.WAITING): "activate (a migrated business enters dual-run or cutover)",
    (S.CREATED, S.PAUSED): "a migrated trigger whose legacy job is disabled",
    (S.WAITING, S.CREATED): "deactivate: a business rolled back to legacy",
    (S.WAITING, S.ACQUIRED): "admission by the leader (stamps epoch and deadline)",
    (S.ACQUIRED, S.ACQUIRED): "reclaim by a newer epoch after the owner's deadline",
    (S.ACQUIRED, S.COMPLETED): "one-shot fired",
    (S.ACQUIRED, S.WAITING): "cron/fixed-rate next occurrence, or release after failed dispatch",
    (S.WAITING, S.PAUSED): "pause",
    (S.WAITING, S.WAITING): "re-align the next fire time (cutover hand-over), in one conditional update",
    (S.PAUSED, S.WAITING): "resume",
    (S.PAUSED, S.COMPLETED): "resume of a one-shot whose time passed while it was paused",
    (S.CREATED, S.CANCELLED): "cancel",
    (S.CREATED, S.COMPLETED): "a rollback: every occurrence left falls before the fence (the new side runs them)",
    (S.WAITING, S.CANCELLED): "cancel",
    (S.PAUSED, S.CANCELLED): "cancel",
    (S.ACQUIRED, S.CANCELLED): "cancel after admission: its stop (scheduler_core.stops) skips what was published",
    (S.COMPLETED, S.WAITING): "re-arm a one-shot at a shadow cutover: its fire was only recorded, never run",
}

# terminal for the scheduler (it never selects them); a shadow cutover may re-arm a one-shot
TERMINAL: frozenset[S] = frozenset({S.COMPLETED, S.CANCELLED})


def is_allowed(from_state: S, to_state: S) -> bool:
    return (from_state, to_state) in TRANSITIONS


def check_transition(from_state: S, to_state: S) -> None:
    if not is_allowed(from_state, to_state):
        raise IllegalTransition(str(from_state), str(to_state))
