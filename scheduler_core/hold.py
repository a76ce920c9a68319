"""Chunks of one-shot triggers admitted shortly before their fire time, held by the
scheduler and fired at T (recurring triggers keep publishing their lookahead ahead: see
`SchedulerCore._fire_chunk`).

A command published ahead of T waits at the broker for its deliver-at, and the broker's
delayed delivery runs on a tick: Pulsar hands it over up to a tick late (100 ms here,
Pulsar's default 1 s; more with its time buckets), whatever the scheduler did. A command
published at T is delivered at once. So a chunk admitted less than `hold_within` before
its T (a trigger created with a short delay, woken at once) is kept here, still acquired
by this epoch, and handed to the fire pool at T; its lag is then the fire itself.

Nothing changes for crashes: a held chunk is an acquired chunk that has not fired yet,
reclaimed after its deadline with the same command ids, as a queued one is. The hold is
bounded per broker tick (`hold_per_window` triggers due in one `pack_window`): what a
burst due at one instant brings beyond it is fired at once with deliver-at = T as
before, so a hot minute never waits for its own fires at T.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from scheduler_core.ports import Clock

log = logging.getLogger(__name__)

# hands one held chunk to the fire pool: (biz_code, triggers, work) -> accepted
Submit = Callable[[str, int, Callable[[], object]], bool]
RETRY_S = 0.01  # a held chunk the pool refused at T is offered again this soon


@dataclass(order=True)
class _Held:
    due_ms: int
    seq: int
    biz_code: str = field(compare=False)
    size: int = field(compare=False)
    work: Callable[[], object] = field(compare=False)
    bucket: int = field(compare=False)


class HeldChunks:
    def __init__(self, clock: Clock, submit: Submit, *, within_ms: int, per_window: int, window_ms: int) -> None:
        self.clock = clock
        self.submit = submit
        self.within_ms = within_ms
        self.per_window = per_window
        self.window_ms = max(1, window_ms)
        self._lock = threading.Condition()
        self._heap: list[_Held] = []
        self._by_bucket: Counter[int] = Counter()
        self._seq = itertools.count()
        self._stopped = False
        self._offering = 0  # popped, being handed to the pool
        self.held = 0  # triggers held so far (figures, tests)
        self._thread = threading.Thread(target=self._run, name="held-chunks", daemon=True)
        self._thread.start()

    def hold(self, due_ms: int, biz_code: str, size: int, work: Callable[[], object]) -> bool:
        """Keep `work` until `due_ms` when it is due within the hold and the hold of its
        broker tick has room; False: fire it now."""
        ahead = due_ms - self.clock.now_ms()
        if ahead <= 0 or ahead > self.within_ms:
            return False
        bucket = due_ms // self.window_ms
        with self._lock:
            if self._stopped or self._by_bucket[bucket] + size > self.per_window:
                return False
            self._by_bucket[bucket] += size
            heapq.heappush(self._heap, _Held(due_ms, next(self._seq), biz_code, size, work, bucket))
            self.held += size
            self._lock.notify_all()
        return True

    def pending(self) -> int:
        with self._lock:
            return sum(h.size for h in self._heap)

    def wait_empty(self, timeout: float) -> bool:
        with self._lock:
            return self._lock.wait_for(lambda: not self._heap and not self._offering, timeout)

    def stop(self, *, cancel: bool) -> None:
        """Stop holding. `cancel`: drop what is held (the rows stay acquired, and are
        reclaimed after their deadline: a deposed owner's chunks); otherwise hand it all
        to the pool now (a clean stop after `wait_empty` leaves nothing)."""
        with self._lock:
            self._stopped = True
            left, self._heap = self._heap, []
            self._by_bucket.clear()
            self._lock.notify_all()
        if cancel:
            if left:
                log.warning(
                    "%d held chunk(s) dropped at stop; their triggers are reclaimed after the deadline", len(left)
                )
        else:
            for h in sorted(left):
                self._offer(h)
        self._thread.join(timeout=5)

    def _offer(self, h: _Held) -> bool:
        try:
            return self.submit(h.biz_code, h.size, h.work)
        except RuntimeError as exc:  # the pool is shutting down: the rows are reclaimed
            log.warning("a held chunk of %d trigger(s) not fired (%s); reclaimed after its deadline", h.size, exc)
            return True

    def _run(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                if not self._heap:
                    self._lock.wait(1.0)
                    continue
                left_ms = self._heap[0].due_ms - self.clock.now_ms()
                if left_ms > 0:
                    # real waits, re-reading the clock: a little early wake costs a loop
                    self._lock.wait(min(left_ms / 1000, 0.25))
                    continue
                h = heapq.heappop(self._heap)
                self._by_bucket[h.bucket] -= h.size
                if self._by_bucket[h.bucket] <= 0:
                    del self._by_bucket[h.bucket]
                self._offering += 1
            accepted = self._offer(h)
            with self._lock:
                self._offering -= 1
                if not accepted and not self._stopped:
                    # the pool is full at T: offer it again shortly (late, not lost)
                    self._by_bucket[h.bucket] += h.size
                    heapq.heappush(self._heap, h)
                    self._lock.wait(RETRY_S)
                elif not accepted:
                    log.warning("a held chunk of %d trigger(s) not fired at stop; reclaimed after its deadline", h.size)
                self._lock.notify_all()
