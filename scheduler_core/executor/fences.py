"""What an executor knows of the stops (`scheduler_core.stops`: operators' pauses,
cancels and freezes, rollback fences and the times schedule edits superseded, which are
all stops), learnt from the bus's control channel without reaching the store.

The executor asks two things: before taking messages, whether the view is in sync (if
not, a stop may exist that it has not heard of: the messages go back to the bus); and
per run, whether a stop covers its fire time. The second is on the hot path,
so the indexes are plain dicts never changed in place: an update builds a new one and
swaps it in, and a reader needs no lock.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import timedelta

from scheduler_core.executor.kills import KillListener, dispatch_kill
from scheduler_core.fence import Fence, fence_of_stop
from scheduler_core.ports import ControlFeed, MessageBus
from scheduler_core.stops import Cause, Scope, SkipWindow, Stop, StopIndex, decode_stop

log = logging.getLogger(__name__)
# How long a new executor waits for its first catch-up before it starts anyway (holding
# commands until it is in sync): reading a control topic's history takes a moment.
INITIAL_SYNC = timedelta(seconds=10)


class FenceView:
    def __init__(self, bus: MessageBus, *, initial_sync: timedelta = INITIAL_SYNC) -> None:
        # every stop by scope (pause, cancel, freeze, rollback, a schedule edit's superseded
        # times); swapped whole on a change
        self.stops = StopIndex()
        # (scope, key, epoch) -> when this follower heard it (ms, this host's clock): what
        # the stop-latency figures measure
        self.heard: dict[tuple[str, str, int], int] = {}
        self._lock = threading.Lock()
        self.kill_listeners: list[KillListener] = []  # the executors following kills through this view
        # told of every new stop (on the control follower's thread), after the view has it:
        # an executor re-judges the runs waiting in its serial queues
        self.stop_listeners: list[Callable[[], None]] = []
        self._feed: ControlFeed = bus.follow_control(self._on_message)
        if not self._feed.wait_synced(initial_sync):
            log.warning("the control channel is not in sync after %s; commands wait until it is", initial_sync)

    def synced(self) -> bool:
        return self._feed.synced()

    def wait_synced(self, timeout: timedelta) -> bool:
        return self._feed.wait_synced(timeout)

    @property
    def by_business(self) -> dict[str, Fence]:
        """The rollback fence of each business known (its latest rollback window)."""
        out: dict[str, Fence] = {}
        for (scope, key), stop in self.stops.by_scope.items():
            if scope is Scope.BUSINESS and (fence := fence_of_stop(stop)) is not None:
                out[key] = fence
        return out

    def covering(self, biz_code: str, scheduled_ms: int) -> Fence | None:
        """The rollback window that skips a command of `business` due at `scheduled_ms`, if any."""
        stop = self.stops.by_scope.get((Scope.BUSINESS, biz_code))
        if stop is None:
            return None
        for w in stop.windows:
            if w.cause is Cause.ROLLBACK and w.covers(scheduled_ms):
                return Fence(biz_code, w.from_ms, w.until_ms, stop.epoch, stop)
        return None

    def superseding(self, trigger_id: int, scheduled_ms: int) -> SkipWindow | None:
        """The schedule edit's window that skips a command of `trigger_id` due at
        `scheduled_ms`, if any."""
        stop = self.stops.by_scope.get((Scope.TRIGGER, str(trigger_id)))
        w = None if stop is None else stop.covering(scheduled_ms)
        return w if w is not None and w.cause is Cause.EDIT else None

    def superseded_ms(self, trigger_id: int) -> set[int]:
        """Every occurrence of the trigger a schedule edit superseded, as this follower knows."""
        stop = self.stops.by_scope.get((Scope.TRIGGER, str(trigger_id)))
        return set() if stop is None else {w.from_ms for w in stop.windows if w.cause is Cause.EDIT}

    def stopping(self, trigger_id: int, job_code: str, biz_code: str, scheduled_ms: int) -> SkipWindow | None:
        """The stop window (an operator's or a rollback's) that skips this command, if any."""
        return self.stops.covering(trigger_id, job_code, biz_code, scheduled_ms)

    def _on_message(self, payload: bytes) -> None:
        if dispatch_kill(payload, self.kill_listeners):  # a kill request (scheduler_core.executor.kills)
            return
        try:
            stop = decode_stop(payload)
        except ValueError as exc:
            log.error("ignoring a malformed control message: %s", exc)
            return
        if stop is not None:
            self._on_stop(stop)

    def _on_stop(self, stop: Stop) -> None:
        with self._lock:
            if not self.stops.newer(stop):
                return  # an older (or repeated) change: the later one stands
            self.stops = self.stops.with_stop(stop)  # one reference swap: readers see old or new, whole
            self.heard[(stop.scope.value, stop.key, stop.epoch)] = int(time.time() * 1000)
        log.info("now following the %s", stop)
        for listener in list(self.stop_listeners):
            try:
                listener()
            except Exception:  # noqa: BLE001 - a listener's failure must not stop the follower
                log.exception("a stop listener failed")

    def close(self) -> None:
        self._feed.close()
