"""What an executor does with a kill request (`scheduler_core.kills`): cooperative
cancellation of the handlers it has in work.

`Cancellations` is one executor's record of the run items an operator asked to kill, by
(trigger id, T ms, item index). A handler learns it through its context
(`ExecutionContext.cancelled`, `.cancel_event`, `.on_cancel`); the runner checks it
before an item starts (a killed item is never invoked) and when the handler returns (the
item is recorded killed, whatever the handler returned, and is not retried). A Python
thread cannot be stopped from outside: a handler that ignores the kill runs on, and its
job timeout ends it as before (recorded timed out).

The per-item check is on the hot path, so `cancelled` is a plain set that is empty unless
a kill is in progress: the runner tests its truth first, and looks a key up only then.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence

from scheduler_core.control import decode_control
from scheduler_core.kills import ANSWER_KIND, KIND, Kill, decode_kill

log = logging.getLogger(__name__)

RunKey = tuple[int, int, int]  # (trigger id, scheduled ms, item index): a command id's parts
KillListener = Callable[[Kill], None]


# items an operator killed whose run is over, remembered (oldest dropped first) so that a
# second copy of their message is answered killed instead of running them again
ENDED_MEMORY = 10_000


class Cancellations:
    def __init__(self) -> None:
        # read without the lock on the hot path (truth test, then membership); changed under it
        self.cancelled: set[RunKey] = set()
        # an operator's kills (not a block strategy's covers) whose run is over: a copy of
        # the message (parked behind the killed run, or redelivered after a broker restart)
        # is answered killed: run again, it would undo the operator's kill
        self.ended: OrderedDict[RunKey, str] = OrderedDict()
        self._operator: set[RunKey] = set()
        self._messages: dict[RunKey, str] = {}
        self._events: dict[RunKey, threading.Event] = {}
        self._callbacks: dict[RunKey, list[Callable[[], None]]] = {}
        self._landed: dict[RunKey, tuple[threading.Event, list[str]]] = {}
        self._lock = threading.Lock()

    def cancel(self, key: RunKey, message: str, *, answered: bool = True) -> None:
        """Ask the handler of `key` to stop: its event is set and its callbacks run (here,
        on the caller's thread: a callback that fails is logged, the others still run).
        `answered=False`: nobody waits to hear how it ended (a block strategy's cover, not
        an operator's kill), so nothing is kept for `wait_landed`."""
        with self._lock:
            if key in self.cancelled:
                return
            self._messages[key] = message
            if answered:
                self._landed.setdefault(key, (threading.Event(), []))
                self._operator.add(key)
            self.cancelled.add(key)
            event = self._events.get(key)
            callbacks = self._callbacks.pop(key, [])
        if event is not None:
            event.set()
        for fn in callbacks:
            try:
                fn()
            except Exception:
                log.exception("a handler's cancel callback failed for %s", key)

    def is_cancelled(self, key: RunKey) -> bool:
        return (bool(self.cancelled) and key in self.cancelled) or (bool(self.ended) and key in self.ended)

    def message(self, key: RunKey) -> str:
        return self._messages.get(key) or self.ended.get(key, "")

    def event(self, key: RunKey) -> threading.Event:
        """The event set when `key` is cancelled (set already if it is)."""
        with self._lock:
            event = self._events.get(key)
            if event is None:
                event = self._events[key] = threading.Event()
                if key in self.cancelled:
                    event.set()
        return event

    def on_cancel(self, key: RunKey, fn: Callable[[], None]) -> None:
        """Call `fn` when `key` is cancelled (at once, here, if it is already)."""
        with self._lock:
            if key not in self.cancelled:
                self._callbacks.setdefault(key, []).append(fn)
                return
        fn()

    def landed(self, key: RunKey, state: str) -> None:
        """The item `key`, cancelled, has its result (`state`: an ItemState letter)."""
        with self._lock:
            got = self._landed.get(key)
        if got is not None:
            got[1].append(state)
            got[0].set()

    def wait_landed(self, key: RunKey, timeout: float) -> str | None:
        """The state the cancelled item ended in, or None if it is still running after `timeout`."""
        with self._lock:
            got = self._landed.get(key)
        if got is None or not got[0].wait(timeout):
            return None
        return got[1][0] if got[1] else None

    def forget(self, keys: Iterable[RunKey]) -> None:
        """The items' run is over: drop what was kept for them."""
        with self._lock:
            for key in keys:
                self.cancelled.discard(key)
                message = self._messages.pop(key, None)
                if key in self._operator:
                    self._operator.discard(key)
                    self.ended[key] = message or "killed by an operator"
                    while len(self.ended) > ENDED_MEMORY:
                        self.ended.popitem(last=False)
                self._events.pop(key, None)
                self._callbacks.pop(key, None)
                # not `_landed`: the answer to the kill reads it, later (`answered`)

    def answered(self, key: RunKey) -> None:
        """The kill of `key` is answered: its outcome is no longer needed."""
        with self._lock:
            self._landed.pop(key, None)

    def watched(self) -> bool:
        """Anything kept (a kill in progress, or a handler waiting on its event)."""
        return bool(self.cancelled or self._events or self._callbacks)


def dispatch_kill(payload: bytes, listeners: Sequence[KillListener]) -> bool:
    """For the executor's control follower (`FenceView`): a kill request goes to every
    listener (each executor sharing the follower); True when the message was of this
    module's kinds (a request, or an answer, which executors ignore)."""
    try:
        if decode_control(payload, KIND) is None:
            return decode_control(payload, ANSWER_KIND) is not None
    except ValueError:
        return False  # no control message of a known version: the follower says so itself
    try:
        kill = decode_kill(payload)
    except ValueError as exc:
        log.error("ignoring a malformed kill message: %s", exc)
        return True
    assert kill is not None
    for listener in list(listeners):
        try:
            listener(kill)
        except Exception:
            log.exception("acting on the %s failed", kill)
    return True


__all__ = ["Cancellations", "KillListener", "RunKey", "dispatch_kill"]
