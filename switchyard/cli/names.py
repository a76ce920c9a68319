"""Whether a name an operator typed exists: a business is known when the migration
registry has it, a job of the store belongs to it (a native business, never migrated), or
runs were recorded for it (its jobs since deleted: its history can still be compared)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from migrator.business import NATIVE, BusinessRegistry
from scheduler_core.ports import CatalogReads, TriggerStore
from switchyard import exitcodes
from switchyard.cli.errors import CliFailure

if TYPE_CHECKING:
    from migrator.store import MigratorStore


class NamedStore(TriggerStore, CatalogReads, Protocol):
    """What resolving an operator's names reads of the store: its jobs and triggers, and
    the businesses it knows."""


def known_business(store: CatalogReads, own: MigratorStore, biz_code: str) -> bool:
    return (
        BusinessRegistry(own).get(biz_code) is not None
        or biz_code in store.job_biz_codes()
        or store.has_fired_records(biz_code)
    )


def refuse_native(biz_code: str, source_system: str, doing: str) -> None:
    """A business created in this center has no legacy side: a switch or a comparison of
    it is bad input (exit 2, nothing changed), said in those words."""
    if source_system == NATIVE:
        raise CliFailure(
            f"{biz_code} was created in this center (native): it has no legacy side to {doing}; its jobs run "
            "here only (stop one with `switchyard job stop`, every run of the business with `switchyard freeze`)",
            exitcodes.USAGE,
        )


__all__ = ["NamedStore", "known_business", "refuse_native"]
