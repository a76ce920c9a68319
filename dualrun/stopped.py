"""Occurrences an operator stopped on purpose (`scheduler_core.stops`: pause, cancel,
freeze): after a cutover the new side runs them nowhere by decision, so the post-cutover
watch counts them neither missing nor failed. A stop covers an occurrence whether its
command had been published (then recorded skipped) or never was (a pause longer than the
lookahead: nothing admitted, no record at all)."""

from __future__ import annotations

from collections.abc import Callable

from dualrun.ports import NewSide
from scheduler_core.stops import StopIndex

Stopped = Callable[[str, int], bool]


def stopped_occurrences(store: NewSide, biz_code: str) -> Stopped:
    """`stopped(job_code, scheduled_ms)`: whether a stop covers that occurrence of the
    business (through any of the job's triggers, the job, the business or everything)."""
    index = StopIndex({(s.scope, s.key): s for s in store.stops()})
    if not index.by_scope:
        return lambda _job, _ms: False
    triggers: dict[str, list[int]] = {}
    for t in store.triggers_of(biz_code=biz_code):
        if t.id is not None:
            triggers.setdefault(str(t.job_code), []).append(int(t.id))

    def stopped(job_code: str, scheduled_ms: int) -> bool:
        for tid in triggers.get(job_code) or [0]:
            if index.covering(tid, job_code, biz_code, scheduled_ms) is not None:
                return True
        return False

    return stopped


__all__ = ["Stopped", "stopped_occurrences"]
