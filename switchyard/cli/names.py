"""Whether a name an operator typed exists: a business is known when the migration
registry has it, a job of the store belongs to it (a native business, never migrated), or
runs were recorded for it (its jobs since deleted: its history can still be compared)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from migrator.business import BusinessRegistry
from scheduler_core.ports import CatalogReads, TriggerStore

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


__all__ = ["NamedStore", "known_business"]
