"""Create a legacy database's tables: the .sql files on MySQL-compatible servers, the
equivalent Core tables (`tables.py`) elsewhere (SQLite)."""

from __future__ import annotations

import logging
from datetime import datetime, timezone
from importlib import resources

from sqlalchemy import Connection, Engine, text

from dbkit.capabilities import capabilities
from dbkit.connections import begin
from readers.errors import UnknownSystem
from readers.legacy_ddl.tables import (
    XxlJobLineage,
    batch_center_metadata,
    sqlite_update_time_trigger,
    xxljob_metadata,
)
from readers.records import SourceSystem
from readers.timezones import DEFAULT_ZONE, LegacyTimeZone

logger = logging.getLogger(__name__)

DEFAULT_XXL_JOB_LINEAGE = XxlJobLineage.V3_4  # the newest release


def _system(system: str | SourceSystem) -> SourceSystem:
    try:
        return SourceSystem(system)
    except ValueError:
        raise UnknownSystem(str(system)) from None


def ddl_file(system: str | SourceSystem, lineage: str | None = None) -> str:
    """The file name of one legacy schema's MySQL DDL."""
    if _system(system) is SourceSystem.BATCH_CENTER:
        return "batch_center.sql"
    return f"xxl_job_{XxlJobLineage(lineage or DEFAULT_XXL_JOB_LINEAGE).value}.sql"


def load_ddl(system: str | SourceSystem, lineage: str | None = None) -> str:
    """The MySQL/MariaDB DDL text of one legacy schema."""
    return resources.files(__package__).joinpath(ddl_file(system, lineage)).read_text(encoding="utf-8")


def split_statements(sql: str) -> list[str]:
    """The statements of a DDL file: `--` comment lines dropped, split on `;` outside
    quotes (PyMySQL runs one statement per call)."""
    body = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
    out: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for ch in body:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'`\"":
            quote = ch
        elif ch == ";":
            out.append("".join(current).strip())
            current = []
            continue
        current.append(ch)
    tail = "".join(current).strip()
    return [s for s in (*out, tail) if s]


def create_legacy_schema(
    bind: Engine | Connection,
    system: str | SourceSystem,
    lineage: str | None = None,
    *,
    tz: str = DEFAULT_ZONE,
) -> None:
    """Create one legacy system's tables in an empty database.

    `system` is 'xxl-job' or 'batch-center'; `lineage` picks the xxl-job schema ('2.2',
    '2.4', '3.4', 'master'; default '3.4') and is ignored for the batch center. On MySQL/
    MariaDB the .sql file runs as written. Elsewhere the Core tables are created, plus
    the `schedule_lock` row and (batch center) the `update_time` trigger; `tz` is the
    legacy zone whose offset SQLite's CURRENT_TIMESTAMP defaults use.
    """
    sys_ = _system(system)
    if isinstance(bind, Engine):
        with begin(bind) as conn:
            _create(conn, sys_, lineage, tz)
    else:
        _create(bind, sys_, lineage, tz)


def _create(conn: Connection, system: SourceSystem, lineage: str | None, tz: str) -> None:
    caps = capabilities(conn)
    if caps.mysql_sql:
        for statement in split_statements(load_ddl(system, lineage)):
            conn.exec_driver_sql(statement)
        return
    offset = LegacyTimeZone(tz).zone.utcoffset(datetime.now(timezone.utc).replace(tzinfo=None))
    assert offset is not None
    if system is SourceSystem.BATCH_CENTER:
        batch_center_metadata(local_offset=offset).create_all(conn)
        if caps.update_time_by_trigger:
            conn.exec_driver_sql(sqlite_update_time_trigger(offset))
        else:
            logger.warning("no ON UPDATE emulation for bc_task.update_time on %s", conn.dialect.name)
        return
    xxljob_metadata(lineage or DEFAULT_XXL_JOB_LINEAGE).create_all(conn)
    conn.execute(text("INSERT INTO xxl_job_lock (lock_name) VALUES ('schedule_lock')"))
