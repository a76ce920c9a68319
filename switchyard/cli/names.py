"""Whether a name an operator typed exists: a business is known when the migration
registry has it, a job of the store belongs to it (a native business, never migrated), or
runs were recorded for it (its jobs since deleted: its history can still be compared)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from migrator.business import BusinessRegistry
from scheduler_core.store.reads import has_fired_records, job_biz_codes
from scheduler_core.store.sql import SqlTriggerStore

if TYPE_CHECKING:
    from migrator.store import MigratorStore


def known_business(store: SqlTriggerStore, own: MigratorStore, biz_code: str) -> bool:
    return (
        BusinessRegistry(own).get(biz_code) is not None
        or biz_code in job_biz_codes(store)
        or has_fired_records(store, biz_code)
    )


__all__ = ["known_business"]
