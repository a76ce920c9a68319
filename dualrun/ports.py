"""What the comparator needs from outside, as Protocols in domain terms only.

The legacy side is `readers.ports.LegacyReader`; the new side is the trigger store
(`scheduler_core.store.sql.SqlTriggerStore`). Consumer lag comes from any bus with a
`backlog(topic, subscription) -> (due, delayed)` view (PulsarBus, InProcessBus).
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Protocol


class BacklogProbe(Protocol):
    @abstractmethod
    def backlog(self, topic: str, subscription: str) -> tuple[int, int]:
        """(due, delayed) messages waiting in one subscription."""
