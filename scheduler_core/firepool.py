"""The bounded fire pool, with a capacity budget per business domain.

Admission asks the pool for its free capacity before selecting, and leaves out domains
whose budget is spent, so one domain's on-the-hour burst cannot hold every slot while
another domain's due commands wait (the original's hot-minute incident).
"""

from __future__ import annotations

import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

from scheduler_core.model import Trigger


def group_by_domain(triggers: Sequence[Trigger]) -> dict[str, list[Trigger]]:
    """Triggers by business domain: the pool budgets (and admission hands chunks) per domain."""
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
        self._by_domain: Counter[str] = Counter()
        self._executor = None if inline else ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fire")
        self._idle = threading.Condition(self._lock)

    def free(self) -> int:
        with self._lock:
            return max(0, self.capacity - self._in_flight)

    def saturated_domains(self) -> set[str]:
        with self._lock:
            return {d for d, n in self._by_domain.items() if n >= self.budget_of(d)}

    def in_flight(self, domain: str | None = None) -> int:
        with self._lock:
            return self._in_flight if domain is None else self._by_domain[domain]

    def try_submit(self, domain: str, size: int, work: Callable[[], object]) -> bool:
        """Run `work` (a chunk of `size` triggers of one domain) if capacity allows."""
        with self._lock:
            if self._in_flight + size > self.capacity:
                return False
            if self._by_domain[domain] + size > self.budget_of(domain) and self._by_domain[domain] > 0:
                return False
            self._in_flight += size
            self._by_domain[domain] += size
        if self._executor is None:
            try:
                work()
            finally:
                self._done(domain, size)
            return True
        fut: Future[object] = self._executor.submit(work)
        fut.add_done_callback(lambda _f: self._done(domain, size))
        return True

    def _done(self, domain: str, size: int) -> None:
        with self._lock:
            self._in_flight -= size
            self._by_domain[domain] -= size
            if self._by_domain[domain] <= 0:
                del self._by_domain[domain]
            self._idle.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._lock:
            return self._idle.wait_for(lambda: self._in_flight == 0, timeout)

    def shutdown(self, cancel: bool = False) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=cancel)
