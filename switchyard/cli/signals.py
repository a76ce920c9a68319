"""A stop event set by SIGTERM and SIGINT, so long-running commands stop cleanly.

CPython splits a signal in two. Its C-level handler runs in whichever thread the kernel hands
the signal to, and only notes it; the Python handler runs later, in the main thread, the next
time that thread executes bytecode. A SIGTERM sent to the process usually lands in the main
thread, which interrupts a blocking `Event.wait()` there. But any thread of the process that has
the signal unblocked may take it. A thread that is just starting takes it, because it unblocks
its signals as it starts (`dualrun watch` starts one per comparison, for the baseline). Then a
main thread blocked in `Event.wait()` with no timeout never wakes, the handler never runs, and
the command never stops. Two rules follow:

* every wait on a `StopEvent` wakes at least every `WAKE_S`. A main thread waiting on it
  returns to bytecode, runs the pending handler, and sees the request.
* the handler takes no lock. It runs between two bytecodes of the main thread, possibly inside
  `stop.wait()` while that thread holds the event's (non-reentrant) lock, so calling `set()`
  there could deadlock. It only records the request. Waits and `is_set()` turn the request
  into the event.
"""

from __future__ import annotations

import signal
import threading
import time

WAKE_S = 0.2  # longest a wait on a StopEvent sleeps before it looks for a stop request again


class StopEvent(threading.Event):
    """A `threading.Event` that a signal handler can set safely, with `request()`."""

    def __init__(self) -> None:
        super().__init__()
        self._requested = False

    def request(self) -> None:
        """Ask to stop; safe in a signal handler (one attribute store: no lock)."""
        self._requested = True

    def is_set(self) -> bool:
        if self._requested and not super().is_set():
            self.set()  # unlike the handler, no caller of is_set() is inside this event's lock
        return super().is_set()

    def wait(self, timeout: float | None = None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self.is_set():
            left = WAKE_S if deadline is None else min(WAKE_S, deadline - time.monotonic())
            if left <= 0:
                return False
            super().wait(left)
        return True


def stop_event() -> StopEvent:
    stop = StopEvent()

    def _handler(_signum: int, _frame: object) -> None:
        stop.request()

    signal.signal(signal.SIGTERM, _handler)
    signal.signal(signal.SIGINT, _handler)
    return stop
