"""The bounded fire pool, with a capacity budget per business and per lane.

Admission asks the pool for its free capacity before selecting, and leaves out businesses
and lanes whose budget is spent, so one business's on-the-hour burst cannot hold every
slot while another business's due commands wait (the original's hot-minute incident),
nor a lane's backlog the other lanes' (issue 29).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from scheduler_core.model import Lane, Trigger


def group_by_biz_code(triggers: Sequence[Trigger]) -> dict[tuple[str, Lane], list[Trigger]]:
    """Triggers by (biz_code, lane): the pool budgets (and admission hands chunks) per
    business and per lane."""
    out: dict[tuple[str, Lane], list[Trigger]] = defaultdict(list)
    for t in triggers:
        out[t.biz_code, t.lane].append(t)
    return out


def _no_lane_budget(_lane: Lane) -> int:
    return 1 << 62


class FirePool:
    def __init__(
        self,
        capacity: int,
        workers: int,
        budget_of: Callable[[str], int],
        *,
        inline: bool = False,
        lane_budget_of: Callable[[Lane], int] = _no_lane_budget,
    ) -> None:
        self.capacity = capacity
        self.budget_of = budget_of
        self.lane_budget_of = lane_budget_of
        self.inline = inline  # run chunks on the caller's thread: driven-clock tests
        self._lock = threading.Lock()
        self._in_flight = 0
        self._by_biz_code: Counter[str] = Counter()
        self._by_lane: Counter[Lane] = Counter()
        self._executor = None if inline else ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fire")
        self._idle = threading.Condition(self._lock)

    def free(self) -> int:
        with self._lock:
            return max(0, self.capacity - self._in_flight)

    def saturated_biz_codes(self) -> set[str]:
        with self._lock:
            return {d for d, n in self._by_biz_code.items() if n >= self.budget_of(d)}

    def saturated_lanes(self) -> set[Lane]:
        with self._lock:
            return {lane for lane, n in self._by_lane.items() if n >= self.lane_budget_of(lane)}

    def in_flight(self, biz_code: str | None = None) -> int:
        with self._lock:
            return self._in_flight if biz_code is None else self._by_biz_code[biz_code]

    def in_flight_lane(self, lane: Lane) -> int:
        with self._lock:
            return self._by_lane[lane]

    def try_submit(self, biz_code: str, size: int, work: Callable[[], object], lane: Lane = Lane.DEFAULT) -> bool:
        """Run `work` (a chunk of `size` triggers of one business and lane) if capacity allows."""
        with self._lock:
            if self._in_flight + size > self.capacity:
                return False
            if self._by_biz_code[biz_code] + size > self.budget_of(biz_code) and self._by_biz_code[biz_code] > 0:
                return False
            if self._by_lane[lane] + size > self.lane_budget_of(lane) and self._by_lane[lane] > 0:
                return False
            self._in_flight += size
            self._by_biz_code[biz_code] += size
            self._by_lane[lane] += size
        if self._executor is None:
            try:
                work()
            finally:
                self._done(biz_code, size, lane)
            return True
        fut: Future[object] = self._executor.submit(work)
        fut.add_done_callback(lambda _f: self._done(biz_code, size, lane))
        return True

    def _done(self, biz_code: str, size: int, lane: Lane = Lane.DEFAULT) -> None:
        with self._lock:
            self._in_flight -= size
            self._by_biz_code[biz_code] -= size
            if self._by_biz_code[biz_code] <= 0:
                del self._by_biz_code[biz_code]
            self._by_lane[lane] -= size
            if self._by_lane[lane] <= 0:
                del self._by_lane[lane]
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self, cancel: bool = False) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=cancel)
