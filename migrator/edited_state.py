"""Which state a legacy row read back leaves on an existing new-side trigger.

Whether a trigger is admitted (`waiting`) or not (`created`) is the switch's decision
alone (dual-run start, cutover, rollback) and the operator's (`trigger resume`): a legacy
row read back by `migrate run` or `migrate stream` never moves a trigger between the two.
It carries the operator's stop and start made in the legacy admin, and nothing else:

- enabled on legacy, trigger created or waiting: kept as it is. The switch writes its own
  legacy starts and stops (a rollback starts the jobs it hands back, after taking their
  triggers off). Read back, a start would otherwise admit the trigger again whenever the
  business state the mapping saw was older than the trigger's (a change decided while the
  business was still cut over, written after the rollback: live on both sides, seen on a
  real xxl-job admin with `migrate stream` running);
- enabled on legacy, trigger paused (or a job without a schedule given one): the
  operator started it in the legacy admin; it is admitted only when the business, as read
  when the row is written, runs on the new side (dual-run or cut over), else created;
- stopped on legacy: paused (the switch's own stops are held and read back as enabled,
  migrator.holds); finished or cancelled: as mapped.

A business cut over keeps its triggers' states whatever legacy says (the new side owns
them); a job that had no schedule starts its new one as mapped.
"""

from __future__ import annotations

from migrator.model import BusinessState
from scheduler_core.model import TriggerState

S = TriggerState
_ENABLED = (S.CREATED, S.WAITING)


def edited_state(current: S, mapped: S, business: BusinessState, *, had_schedule: bool) -> S:
    """The state an edit leaves on a trigger now `current`, mapped from legacy as `mapped`,
    in a business that is `business` when the edit is written."""
    if business is BusinessState.CUTOVER and had_schedule:
        return current
    if mapped not in _ENABLED:
        return mapped
    if current in _ENABLED:
        return current
    return S.CREATED if business is BusinessState.LEGACY else S.WAITING
