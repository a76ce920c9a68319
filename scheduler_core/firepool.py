"""The bounded fire pool, with a capacity budget per business.

Admission asks the pool for its free capacity before selecting, and leaves out businesses
whose budget is spent, so one business's on-the-hour burst cannot hold every slot while
another business's due commands wait (the original's hot-minute incident).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from scheduler_core.model import Trigger


def group_by_biz_code(triggers: Sequence[Trigger]) -> dict[str, list[Trigger]]:
    """Triggers by biz_code: the pool budgets (and admission hands chunks) per business."""
    out: dict[str, list[Trigger]] = defaultdict(list)
    for t in triggers:
        out[t.biz_code].append(t)
    return out


class FirePool:
    def __init__(self, capacity: int, workers: int, budget_of: Callable[[str], int], *, inline: bool = False) -> None:
        self.capacity = capacity
        self.budget_of = budget_of
        self.inline = inline  # run chunks on the caller's thread: driven-clock tests
        self._lock = threading.Lock()
        self._in_flight = 0
        self._by_biz_code: Counter[str] = Counter()
        self._executor = None if inline else ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fire")
        self._idle = threading.Condition(self._lock)

    def free(self) -> int:
        with self._lock:
            return max(0, self.capacity - self._in_flight)

    def saturated_biz_codes(self) -> set[str]:
        with self._lock:
            return {d for d, n in self._by_biz_code.items() if n >= self.budget_of(d)}

    def in_flight(self, biz_code: str | None = None) -> int:
        with self._lock:
            return self._in_flight if biz_code is None else self._by_biz_code[biz_code]

    def try_submit(self, biz_code: str, size: int, work: Callable[[], object]) -> bool:
        """Run `work` (a chunk of `size` triggers of one business) if capacity allows."""
        with self._lock:
            if self._in_flight + size > self.capacity:
                return False
            if self._by_biz_code[biz_code] + size > self.budget_of(biz_code) and self._by_biz_code[biz_code] > 0:
                return False
            self._in_flight += size
            self._by_biz_code[biz_code] += size
        if self._executor is None:
            try:
                work()
            finally:
                self._done(biz_code, size)
            return True
        fut: Future[object] = self._executor.submit(work)
        fut.add_done_callback(lambda _f: self._done(biz_code, size))
        return True

    def _done(self, biz_code: str, size: int) -> None:
        with self._lock:
            self._in_flight -= size
            self._by_biz_code[biz_code] -= size
            if self._by_biz_code[biz_code] <= 0:
                del self._by_biz_code[biz_code]
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self, cancel: bool = False) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=cancel)
