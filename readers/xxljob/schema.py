"""Which xxl-job schema a database holds, found from its columns, and how to select them.

Lineage rule (columns of `xxl_job_info`, then types):

- `job_cron` and no `schedule_type`                         -> 2.2 (2.1.0 - 2.2.x)
- `schedule_type` + `schedule_conf` + `misfire_strategy`, and
  - `name` instead of `job_desc` (and `xxl_job_group.name`) -> master (after 3.4.2)
  - `job_desc`, `executor_param` a TEXT type                -> 3.4 (3.4.x)
  - `job_desc`, `executor_param` a VARCHAR                  -> 2.4 (2.3.0 - 3.3.x)
- anything else                                             -> UnknownLineage

2.3 to 3.3 have the same columns (2.5.0 only adds keys), so "2.4" names that whole
range; the reader reads them alike. Free-text columns are selected as binary so that a
value that is not valid UTF-8 reaches the decoder as bytes (and becomes a Problem)
instead of failing the whole page inside the driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlalchemy import Connection, LargeBinary, String, cast, column, inspect
from sqlalchemy.sql.elements import ColumnClause, ColumnElement, Label
from sqlalchemy.types import Text, TypeEngine

from readers.digest import column_kinds
from readers.errors import MissingTables, UnknownLineage
from readers.legacy_ddl.tables import XxlJobLineage
from readers.records import SourceSystem

INFO = "xxl_job_info"
GROUP = "xxl_job_group"
LOG = "xxl_job_log"
REGISTRY = "xxl_job_registry"
USER = "xxl_job_user"
REQUIRED = (INFO, GROUP)
_SCHEDULE_COLUMNS = frozenset({"schedule_type", "schedule_conf", "misfire_strategy"})


@dataclass(frozen=True, slots=True)
class TableShape:
    """The columns one legacy table really has, and which of them are text."""

    name: str
    columns: tuple[str, ...]
    text_columns: frozenset[str]
    kinds: Mapping[str, str] = field(default_factory=dict)  # column -> text | int | time (readers.digest)

    def has(self, name: str) -> bool:
        return name in self.columns

    def select_list(self, wanted: tuple[str, ...] | None = None) -> list[ColumnElement[object] | Label[bytes]]:
        """Columns to select: text ones cast to binary (decoded by the reader)."""
        out: list[ColumnElement[object] | Label[bytes]] = []
        for name in wanted or self.columns:
            if name not in self.columns:
                continue
            col: ColumnClause[object] = column(name)
            out.append(cast(col, LargeBinary).label(name) if name in self.text_columns else col)
        return out


@dataclass(frozen=True, slots=True)
class XxlJobSchema:
    lineage: XxlJobLineage
    info: TableShape
    group: TableShape
    log: TableShape | None
    registry: TableShape | None
    user_token: bool = False  # xxl_job_user.token exists: xxl-job 3.2.0 or later (readers.xxljob.cron_lineage)

    @property
    def title_column(self) -> str:
        return "name" if self.group.has("name") else "title"


def _shape(name: str, columns: list[Mapping[str, object]]) -> TableShape:
    names = tuple(str(c["name"]) for c in columns)
    texts = frozenset(str(c["name"]) for c in columns if isinstance(c["type"], String))
    return TableShape(name, names, texts, column_kinds(columns))


def _is_text(type_: object) -> bool:
    return isinstance(type_, Text)


def detect_lineage(info: Mapping[str, TypeEngine[object]], group_columns: frozenset[str]) -> XxlJobLineage:
    """The lineage from `xxl_job_info`'s column types and `xxl_job_group`'s column names."""
    cols = frozenset(info)
    if "job_cron" in cols and "schedule_type" not in cols:
        return XxlJobLineage.V2_2
    if not _SCHEDULE_COLUMNS.issubset(cols):
        raise UnknownLineage(f"{INFO} has neither job_cron nor schedule_type/schedule_conf/misfire_strategy")
    if "name" in cols and "job_desc" not in cols:
        if "name" not in group_columns:
            raise UnknownLineage(f"{INFO}.name (master) but {GROUP} has no name column")
        return XxlJobLineage.MASTER
    if "job_desc" not in cols:
        raise UnknownLineage(f"{INFO} has neither job_desc nor name")
    if "executor_param" in info and _is_text(info["executor_param"]):
        return XxlJobLineage.V3_4
    return XxlJobLineage.V2_4


def inspect_schema(conn: Connection) -> XxlJobSchema:
    """Read the legacy tables' metadata; raises MissingTables / UnknownLineage."""
    insp = inspect(conn)
    present = set(insp.get_table_names())
    missing = [t for t in REQUIRED if t not in present]
    if missing:
        raise MissingTables(SourceSystem.XXL_JOB.value, missing)
    info_cols = insp.get_columns(INFO)
    group_cols = insp.get_columns(GROUP)
    lineage = detect_lineage(
        {str(c["name"]): c["type"] for c in info_cols}, frozenset(str(c["name"]) for c in group_cols)
    )
    return XxlJobSchema(
        lineage=lineage,
        info=_shape(INFO, info_cols),  # type: ignore[arg-type]
        group=_shape(GROUP, group_cols),  # type: ignore[arg-type]
        log=_shape(LOG, insp.get_columns(LOG)) if LOG in present else None,  # type: ignore[arg-type]
        registry=_shape(REGISTRY, insp.get_columns(REGISTRY)) if REGISTRY in present else None,  # type: ignore[arg-type]
        user_token=USER in present and any(str(c["name"]) == "token" for c in insp.get_columns(USER)),
    )
