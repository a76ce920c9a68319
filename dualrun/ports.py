"""What the comparator needs from outside, as Protocols in domain terms only.

The legacy side is `readers.ports.LegacyReader`; the new side is the trigger store's
ports (`scheduler_core.ports`: `RunRecordReads`, `StopReads`, `TriggerStore`). Consumer lag comes from any bus with a
`backlog(topic, subscription) -> (due, delayed)` view (PulsarBus, InProcessBus).
"""

from __future__ import annotations

from abc import abstractmethod
from datetime import timedelta
from typing import Protocol

from scheduler_core.ports import RunRecordReads, StopReads, TriggerStore


class NewSide(RunRecordReads, StopReads, TriggerStore, Protocol):
    """The new side as the post-cutover watch reads it: a business's run records, its
    triggers and the operators' standing stops."""


class BacklogProbe(Protocol):
    @abstractmethod
    def backlog(self, topic: str, subscription: str) -> tuple[int, int]:
        """(due, delayed) messages waiting in one subscription."""


class MigrationRecords(Protocol):
    """The migrator's records dual-run and the reports read: the business states, the
    ledger and the cutover audit. Those tables are the migrator's, which dual-run may not
    import (it does not migrate): the migrator implements this (migrator.records) and the
    composition root hands it over (switchyard.wiring.dualrun_store). Rows are plain
    tuples, as the two packages share no types."""

    @abstractmethod
    def business(self, biz_code: str) -> tuple[str, str, str, bool] | None:
        """(biz_code, source_system, state, shadow) of one business; None: not registered."""

    @abstractmethod
    def businesses(self) -> list[tuple[str, str, str, bool]]:
        """(biz_code, source_system, state, shadow) of every registered business, by code."""

    @abstractmethod
    def job_codes(self, source: str, biz_code: str) -> dict[str, str]:
        """Legacy source key -> target job code, of the business's ledger rows that have one."""

    @abstractmethod
    def quarantined(self, source: str, biz_code: str) -> list[tuple[str, str | None, str | None]]:
        """(source key, field, reason) of the business's rows the migrator quarantined, by key."""

    @abstractmethod
    def switches(self, biz_code: str) -> list[tuple[int, str, str]]:
        """(at epoch ms, from state, to state) of the business's state changes, oldest first
        (audit notes that changed nothing are not among them)."""

    @abstractmethod
    def last_cutover(self, biz_code: str) -> tuple[int, str, str, bool, int | None, str | None] | None:
        """(at epoch ms, actor, reason, forced, comparison id, detail JSON) of the business's
        latest switch to cutover, as audited; None: never cut over."""

    @abstractmethod
    def verdict_max_age(self) -> timedelta:
        """The cutover gate's freshness bound: a verdict older than this does not pass the
        gate, and is shown as stale wherever it is shown."""
