"""Wake-ups for short delays: a trigger added due within the lookahead is admitted on its
partition's next tick at once, not after the loop's idle wait (30 s by default).

The store tells its `Wakeups` which partitions got such triggers (`notify_added`, after
the insert committed); every scheduler listens and wakes only the loops of partitions it
runs: under the shard registry that is each partition's owner, and nobody else. In one
process (`LocalWakeups`: the embedded default, `switchyard serve`, a scheduler adding
triggers through its own store) the notifier calls the listeners directly; across
processes the etcd adapter (`election.wake_etcd`) carries it as one key write.
"""
from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta

from scheduler_core.model import Trigger
from scheduler_core.ports import Wakeups

log = logging.getLogger(__name__)

# triggers due further ahead than this are found by the regular ticks in time (the
# default lookahead: such a trigger is admitted by a tick long before its T anyway)
WAKE_HORIZON = timedelta(minutes=30)

Listener = Callable[[frozenset[int]], None]


def partitions_to_wake(triggers: Sequence[Trigger], partitions: int, now: datetime,
                       horizon: timedelta = WAKE_HORIZON) -> frozenset[int]:
    """The partition indexes of new triggers due by now + horizon. A trigger's partition
    is id mod the partition count: the store's HASH(id) partitions on MariaDB/MySQL/TiDB,
    and the `part` column slice on SQLite."""
    if partitions < 1:
        return frozenset()
    until = now + horizon
    return frozenset(int(t.id) % partitions for t in triggers if t.id is not None and t.next_fire_at <= until)


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

    def __call__(self, partitions: frozenset[int]) -> None:
        for on_wake in self._listeners:  # the list is replaced, never changed in place
            try:
                on_wake(partitions)
            except Exception:  # a listener's bug must not fail the insert that notified
                log.exception("a wake-up listener failed")


class LocalWakeups(Wakeups):
    """Wake-ups inside one process: the notifier calls every listener on its own thread
    (a listener only sets the loops' events)."""

    def __init__(self) -> None:
        self._listeners = Listeners()

    def notify(self, partitions: Collection[int]) -> None:
        if partitions:
            self._listeners(frozenset(partitions))

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
        log.warning("wake-up of partition(s) %s not sent (%s: %s); their next tick finds the triggers",
                    sorted(woken), type(exc).__name__, exc)
