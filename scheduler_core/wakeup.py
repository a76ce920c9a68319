"""Wake-ups for short delays: a trigger added due within the lookahead is admitted in
time by its partition's loop, not after the loop's idle wait.

The store tells its `Wakeups` which partitions got such triggers (`notify_added`, after
the insert committed); every scheduler listens and wakes only the loops of partitions it
runs: under the shard registry that is each partition's owner, and nobody else. In one
process (`LocalWakeups`: the embedded default, `switchyard serve`, a scheduler adding
triggers through its own store) the notifier calls the listeners directly; across
processes the etcd adapter (`election.wake_etcd`) carries it as one key write. A
wake-up carries each partition's earliest fire time: the loop ticks by then minus
`SchedulerSettings.wake_lead` (at once when that has passed), so a loop that ticks
often anyway is not made to tick once per added batch.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta

from scheduler_core.model import Trigger
from scheduler_core.ports import Wakeups
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)

# triggers due further ahead than this are found by the regular ticks in time (the
# default lookahead: such a trigger is admitted by a tick long before its T anyway)
WAKE_HORIZON = timedelta(minutes=30)

Listener = Callable[[Mapping[int, int]], None]


def partitions_to_wake(
    triggers: Sequence[Trigger], partitions: int, now: datetime, horizon: timedelta = WAKE_HORIZON
) -> dict[int, int]:
    """Partition index -> the earliest fire time (epoch ms) of the new triggers due by now
    + horizon there. A trigger's partition is id mod the partition count: the store's
    HASH(id) partitions on MariaDB/MySQL/TiDB, and the `part` column slice on SQLite."""
    due: dict[int, int] = {}
    if partitions < 1:
        return due
    until = now + horizon
    for t in triggers:
        if t.id is None or t.next_fire_at > until:
            continue
        index, at = int(t.id) % partitions, to_ms(t.next_fire_at)
        if at < due.get(index, at + 1):
            due[index] = at
    return due


def merge_due(into: dict[int, int], more: Mapping[int, int]) -> None:
    """Keep the earliest fire time per partition."""
    for index, at in more.items():
        if at < into.get(index, at + 1):
            into[index] = at


class Listeners:
    """A set of wake-up listeners; calling it hands the partitions to each one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []

    def add(self, on_wake: Listener) -> Callable[[], None]:
        with self._lock:
            self._listeners = [*self._listeners, on_wake]

        def remove() -> None:
            with self._lock:
                self._listeners = [f for f in self._listeners if f is not on_wake]

        return remove

    def __bool__(self) -> bool:
        return bool(self._listeners)

    def __call__(self, due: Mapping[int, int]) -> None:
        for on_wake in self._listeners:  # the list is replaced, never changed in place
            try:
                on_wake(due)
            except Exception:  # a listener's bug must not fail the insert that notified
                log.exception("a wake-up listener failed")


class LocalWakeups(Wakeups):
    """Wake-ups inside one process: the notifier calls every listener on its own thread
    (a listener only sets the loops' events)."""

    def __init__(self) -> None:
        self._listeners = Listeners()

    def notify(self, due: Mapping[int, int]) -> None:
        if due:
            self._listeners(dict(due))

    def listen(self, on_wake: Listener) -> Callable[[], None]:
        return self._listeners.add(on_wake)

    def close(self) -> None:
        pass


def notify_added(wakeups: Wakeups | None, triggers: Sequence[Trigger], partitions: int, now: datetime) -> None:
    """After an insert committed: wake the partitions that got triggers due soon. Never
    raises: the triggers are stored, and a wake-up is only a shortcut."""
    if wakeups is None:
        return
    woken = partitions_to_wake(triggers, partitions, now)
    if not woken:
        return
    try:
        wakeups.notify(woken)
    except Exception as exc:
        log.warning(
            "wake-up of partition(s) %s not sent (%s: %s); their next tick finds the triggers",
            sorted(woken),
            type(exc).__name__,
            exc,
        )
