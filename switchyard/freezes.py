"""The standing freezes (`switchyard freeze`) as `status` shows them: per business, the
freeze that stops it now (its own, or the freeze of everything)."""

from __future__ import annotations

from dataclasses import dataclass, field

from scheduler_core.ports import StopReads
from scheduler_core.stops import Cause, Scope


@dataclass(frozen=True)
class Freezes:
    of_business: dict[str, str] = field(default_factory=dict)  # business -> the window's message
    everything: str | None = None

    def of(self, biz_code: str) -> str | None:
        own = self.of_business.get(biz_code)
        if own is not None:
            return own
        return None if self.everything is None else f"everything frozen: {self.everything}"


def standing_freezes(store: StopReads) -> Freezes:
    of_business: dict[str, str] = {}
    everything = None
    for stop in store.stops():
        w = stop.open_window((Cause.FREEZE,))
        if w is None:
            continue
        if stop.scope is Scope.ALL:
            everything = w.message
        elif stop.scope is Scope.BUSINESS:
            of_business[stop.key] = w.message
    return Freezes(of_business, everything)


__all__ = ["Freezes", "standing_freezes"]
