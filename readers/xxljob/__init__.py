"""xxl-job: its admin tables (every lineage from 2.1 to master) as neutral records, and
the one documented legacy switch (`control.set_trigger_status`) for cutover."""

from __future__ import annotations

from readers.legacy_ddl.tables import XxlJobLineage
from readers.xxljob.reader import DEAD_TIMEOUT, XxlJobReader

__all__ = ["DEAD_TIMEOUT", "XxlJobLineage", "XxlJobReader"]
