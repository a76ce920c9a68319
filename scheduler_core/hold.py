"""Chunks of one-shot triggers admitted shortly before their fire time, held by the
scheduler and fired at T (recurring triggers keep publishing their lookahead ahead: see
`scheduler_core.firepath`, which decides what is held).

A command published ahead of T waits at the broker for its deliver-at, and the broker's
delayed delivery runs on a tick: Pulsar hands it over up to a tick late (100 ms here,
Pulsar's default 1 s; more with its time buckets), whatever the scheduler did. A command
published at T is delivered at once. So a chunk admitted less than `hold_within` before
its T (a trigger created with a short delay, woken at once) is kept here, still acquired
by this epoch, and handed to the fire pool at T; its lag is then the fire itself.

A held chunk is prepared when it is admitted (`FirePipeline.prepare`: its fired records
written while the epoch holds its ownership, its messages built), so at T only the publication and the
outcome CAS are left. Chunks held for the same T by the same owner (one business, epoch
and ownership) are delivered as one at T: a business adding 20 jobs due together, spread
over a tick's 16 partitions, is one publication and one outcome CAS at T, not eight
parallel fires queueing for the pool and the GIL (p50 52 ms at 200/s before, measured).

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
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from scheduler_core.model import Trigger
from scheduler_core.ports import Clock
from scheduler_core.times import to_ms

log = logging.getLogger(__name__)

# hands one held chunk to the fire pool: (biz_code, triggers, work) -> accepted
Submit = Callable[[str, int, Callable[[], object]], bool]
# fires the parts held for T under one key (each part as `hold` was given it): (T in ms,
# parts); called up to `early_ms` before T, it publishes nothing before T
Fire = Callable[[int, list[Any]], None]
RETRY_S = 0.01  # a held chunk the pool refused at T is offered again this soon


@dataclass(order=True)
class _Held:
    due_ms: int
    seq: int
    key: Hashable = field(compare=False)
    biz_code: str = field(compare=False)
    size: int = field(compare=False)
    parts: list[Any] = field(compare=False)
    fire: Fire = field(compare=False)
    bucket: int = field(compare=False)


def by_due(chunk: Sequence[Trigger], spread_ms: int) -> list[tuple[int, list[Trigger]]]:
    """`chunk` cut into groups of triggers due within `spread_ms` of the group's first T,
    each with the T it is fired at: its last (held to it, no trigger of the group is
    published before its T; the first is at most `spread_ms` late)."""
    groups: list[tuple[int, list[Trigger]]] = []
    first = 0
    for t in sorted(chunk, key=lambda t: t.next_fire_at):
        due = to_ms(t.next_fire_at)
        if groups and due - first <= spread_ms:
            groups[-1][1].append(t)
            groups[-1] = (due, groups[-1][1])  # sorted: the group's last T so far
        else:
            first = due
            groups.append((due, [t]))
    return groups


class HeldChunks:
    def __init__(
        self,
        clock: Clock,
        submit: Submit,
        *,
        within_ms: int,
        per_window: int,
        window_ms: int,
        merge_max: int = 300,
        early_ms: int = 0,
    ) -> None:
        self.clock = clock
        self.submit = submit
        self.within_ms = within_ms
        self.per_window = per_window
        self.window_ms = max(1, window_ms)
        self.merge_max = max(1, merge_max)
        # handed to the pool this long before T: the pool's hand-over and what the fire
        # reads before publishing are done by T, only the publication is left at T
        self.early_ms = max(0, early_ms)
        self._lock = threading.Condition()
        self._heap: list[_Held] = []
        # held chunks still open to a merge, by (T, owner key): popped ones leave it
        self._open: dict[tuple[int, Hashable], _Held] = {}
        self._by_bucket: Counter[int] = Counter()
        self._seq = itertools.count()
        self._stopped = False
        self._offering = 0  # popped, being handed to the pool
        self.held = 0  # triggers held so far (figures, tests)
        self.merged = 0  # chunks merged into one held for the same T and owner
        self._thread = threading.Thread(target=self._run, name="held-chunks", daemon=True)
        self._thread.start()

    def accepts(self, due_ms: int, size: int) -> bool:
        """Whether `hold` would take `size` triggers due at `due_ms` now (asked before the
        work of preparing them; `hold` may still refuse, when the tick filled meanwhile)."""
        with self._lock:
            return self._takes(due_ms, size)

    def _takes(self, due_ms: int, size: int) -> bool:
        """Under the lock: due within the hold, and room in the hold of its broker tick."""
        ahead = due_ms - self.clock.now_ms()
        return (
            0 < ahead <= self.within_ms
            and not self._stopped
            and self._by_bucket[due_ms // self.window_ms] + size <= self.per_window
        )

    def hold(self, due_ms: int, key: Hashable, biz_code: str, size: int, part: Any, fire: Fire) -> bool:
        """Keep `part` (`size` triggers of one business, owned under `key`) until `due_ms`
        when it is due within the hold and the hold of its broker tick has room; False:
        the caller fires it now. Parts held for the same T under the same key are fired
        together, by the first one's `fire`: one key, one owner (epoch and ownership)."""
        bucket = due_ms // self.window_ms
        with self._lock:
            if not self._takes(due_ms, size):
                return False
            self._by_bucket[bucket] += size
            self.held += size
            into = self._open.get((due_ms, key))
            if into is not None and into.size + size <= self.merge_max:
                into.parts.append(part)
                into.size += size
                self.merged += 1
                return True
            h = _Held(due_ms, next(self._seq), key, biz_code, size, [part], fire, bucket)
            self._open[(due_ms, key)] = h
            heapq.heappush(self._heap, h)
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
            self._open.clear()
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
            # the pool runs the owner's delivery itself: no hop back through this module
            return self.submit(h.biz_code, h.size, partial(h.fire, h.due_ms, h.parts))
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
                left_ms = self._heap[0].due_ms - self.early_ms - self.clock.now_ms()
                if left_ms > 0:
                    # real waits, re-reading the clock: a little early wake costs a loop
                    self._lock.wait(min(left_ms / 1000, 0.25))
                    continue
                h = heapq.heappop(self._heap)
                if self._open.get((h.due_ms, h.key)) is h:
                    del self._open[(h.due_ms, h.key)]  # closed to merges: it is being fired
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
                    log.warning(
                        "a held chunk of %d trigger(s) not fired at stop; reclaimed after its deadline",
                        h.size,
                    )
                self._lock.notify_all()
