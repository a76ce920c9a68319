"""The legacy schemas: MySQL/MariaDB DDL files per xxl-job lineage and for the batch
center, the same tables as SQLAlchemy Core for SQLite, and `create_legacy_schema`."""

from __future__ import annotations

from readers.legacy_ddl.loader import create_legacy_schema, ddl_file, load_ddl, split_statements
from readers.legacy_ddl.tables import XxlJobLineage, batch_center_metadata, xxljob_metadata

__all__ = [
    "XxlJobLineage",
    "batch_center_metadata",
    "create_legacy_schema",
    "ddl_file",
    "load_ddl",
    "split_statements",
    "xxljob_metadata",
]
