"""What the migrator needs from elsewhere, stated here so that only the composition root
joins packages: the cutover gate (dual-run's verdict) and the legacy switch."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Protocol

# The cutover gate passes only a verdict younger than this (`BusinessSwitch.max_verdict_age`
# by default); wherever a verdict is shown, an older one is flagged stale by this same bound
# (the reports read it through dual-run's MigrationRecords port, the console from here).
VERDICT_MAX_AGE = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class GateDecision:
    ready: bool
    comparison_id: int | None = None
    computed_at: datetime | None = None
    reasons: tuple[str, ...] = ()
    # what must be done before cutover although the verdict passed, e.g. "N legacy job(s)
    # of this business are quarantined and still run only on legacy; fix them before
    # cutover" (dual-run's verdict warnings)
    warnings: tuple[str, ...] = ()


class CutoverGate(Protocol):
    @abstractmethod
    def decision(self, biz_code: str) -> GateDecision | None:
        """The latest stored verdict for the business, or None when there is none."""


@dataclass(frozen=True, slots=True)
class Settled:
    """The legacy side after a stop has settled: for each source key, the first
    occurrence it will not fire (None: it will never fire again, e.g. a finished
    one-shot). `fired_after_stop` lists what the legacy side still fired while settling."""

    next_due: Mapping[str, datetime | None]
    notes: tuple[str, ...] = field(default_factory=tuple)


class LegacyControl(Protocol):
    """The documented switch of one legacy system (xxl-job trigger_status; batch center
    task pause / bc_biz.enabled)."""

    @abstractmethod
    def stop(self, keys: Sequence[str]) -> Settled:
        """Switch the jobs off and wait until the legacy side has settled."""

    @abstractmethod
    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        """Switch the jobs back on, each next due at the given time; returns the keys
        switched on."""

    @abstractmethod
    def next_due(self, keys: Sequence[str]) -> Mapping[str, datetime | None]:
        """The legacy next due time of each job as it stands (no change)."""

    @abstractmethod
    def live(self, keys: Sequence[str]) -> set[str]:
        """The keys whose legacy job is switched on now (it fires at its next time);
        a key missing from the legacy tables is not live."""

    def close(self) -> None:
        """Release what the control holds (its engine's pooled connections)."""

    # How far ahead of now a job switched back on must be due for the legacy scheduler to
    # fire it on time (xxl-job: its scan pre-reads 5 s and, idle, scans every 5 s; a job
    # it finds late fires once and then skips ahead). A rollback hands over at least
    # this far ahead; until then the new side fires what it already published.
    start_margin: timedelta


class FencePort(Protocol):
    """The rollback fence (DESIGN "The rollback fence"): executors skip, with a record,
    every command of a business scheduled in [from, until). A rollback raises it at its
    handover F (open-ended), so the commands the new side already published for >= F are
    never run; a later dual-run start closes it at its own start instant. Executors learn
    it without reaching the store (the bus's control channel; in-process on the embedded
    default). Implemented in `scheduler_core.fence`, joined in `switchyard.wiring`."""

    @abstractmethod
    def raise_fence(self, biz_code: str, at: datetime) -> int:
        """From `at` on, no command of the business is invoked; already published ones at
        or after `at` are recorded as skipped by the rollback. Returns the fired records
        so marked."""

    @abstractmethod
    def store_fence(self, biz_code: str, at: datetime) -> int:
        """`raise_fence` without telling the executors yet (a leader relays a stored fence
        within its relay period); `broadcast_fence` tells them now."""

    @abstractmethod
    def broadcast_fence(self, biz_code: str) -> None:
        """The business's stored fence, to the executors now."""

    @abstractmethod
    def lift_fence(self, biz_code: str, at: datetime) -> None:
        """Commands scheduled at or after `at` run again (the fence becomes [from, at))."""
