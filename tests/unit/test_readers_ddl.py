"""readers.legacy_ddl: the MySQL .sql files and the SQLite Core tables are the same schema."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import MetaData, Text, UniqueConstraint, create_engine, inspect, text
from sqlalchemy.pool import StaticPool

from readers.errors import UnknownSystem
from readers.legacy_ddl import (
    XxlJobLineage,
    batch_center_metadata,
    create_legacy_schema,
    load_ddl,
    split_statements,
    xxljob_metadata,
)

_CREATE = re.compile(r"CREATE TABLE `(\w+)` \((.*?)\n\) ENGINE", re.S)
_COLUMN = re.compile(r"^\s+`(\w+)`\s+(\w+)", re.M)
_KEY = re.compile(r"^\s+(UNIQUE KEY|KEY) `(\w+)`", re.M)
_TEXT_TYPES = {"text", "mediumtext", "longtext"}

SCHEMAS = [("xxl-job", lin.value, xxljob_metadata(lin)) for lin in XxlJobLineage] + [
    ("batch-center", None, batch_center_metadata())
]


Shape = dict[str, dict[str, dict[str, bool]]]  # {table: {"columns"|"indexes": {name: text?|unique?}}}


def _parse(sql: str) -> Shape:
    """{table: {columns: {name: is_text}, indexes: {name: unique}}} from a DDL file."""
    out: Shape = {}
    for name, body in _CREATE.findall(sql):
        columns = {c: t.lower() in _TEXT_TYPES for c, t in _COLUMN.findall(body)}
        indexes = {k: kind == "UNIQUE KEY" for kind, k in _KEY.findall(body)}
        out[name] = {"columns": columns, "indexes": indexes}
    return out


def _core(md: MetaData) -> Shape:
    out: Shape = {}
    for t in md.tables.values():
        columns = {c.name: isinstance(c.type, Text) for c in t.columns}
        indexes = {str(i.name): bool(i.unique) for i in t.indexes}
        indexes |= {str(u.name): True for u in t.constraints if u.name and isinstance(u, UniqueConstraint)}
        out[t.name] = {"columns": columns, "indexes": indexes}
    return out


@pytest.mark.parametrize(("system", "lineage", "md"), SCHEMAS, ids=[s[1] or s[0] for s in SCHEMAS])
def test_sql_file_and_core_tables_have_the_same_tables_columns_types_and_keys(
    system: str, lineage: str | None, md: MetaData
) -> None:
    assert _parse(load_ddl(system, lineage)) == _core(md)


def test_lineages_differ_where_the_notes_say() -> None:
    cols = {lin: _parse(load_ddl("xxl-job", lin.value)) for lin in XxlJobLineage}
    info = {lin: c["xxl_job_info"]["columns"] for lin, c in cols.items()}
    assert "job_cron" in info[XxlJobLineage.V2_2] and "schedule_type" not in info[XxlJobLineage.V2_2]
    assert info[XxlJobLineage.V2_4]["executor_param"] is False  # varchar(512)
    assert info[XxlJobLineage.V3_4]["executor_param"] is True  # text
    assert "name" in info[XxlJobLineage.MASTER] and "job_desc" not in info[XxlJobLineage.MASTER]
    group = cols[XxlJobLineage.MASTER]["xxl_job_group"]
    assert {"name", "access_token"} <= set(group["columns"]) and group["indexes"] == {"i_app_name": True}


def test_batch_center_ddl_is_the_contract() -> None:
    sql = load_ddl("batch-center")
    assert "`update_time` DATETIME NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP" in sql
    assert "KEY `idx_due` (`status`, `fire_time`)" in sql
    assert "KEY `idx_biz` (`biz_code`, `status`)" in sql
    assert "UNIQUE KEY `uk_biz_task_key` (`biz_code`, `task_key`)" in sql
    assert "KEY `idx_task` (`task_id`, `scheduled_time`)" in sql
    assert "KEY `idx_biz_time` (`biz_code`, `scheduled_time`)" in sql
    assert "`scheduled_time` DATETIME(3) NOT NULL" in sql


def test_split_statements_drops_comments_and_keeps_quoted_semicolons() -> None:
    sql = "-- a comment; with a semicolon\nCREATE TABLE t (a int COMMENT 'x;y');\nINSERT INTO t VALUES (1);\n"
    assert split_statements(sql) == ["CREATE TABLE t (a int COMMENT 'x;y')", "INSERT INTO t VALUES (1)"]


def test_every_xxl_job_file_seeds_the_schedule_lock_row() -> None:
    for lin in XxlJobLineage:
        assert split_statements(load_ddl("xxl-job", lin.value))[-1].startswith("INSERT INTO `xxl_job_lock`")


@pytest.mark.parametrize("lineage", [lin.value for lin in XxlJobLineage])
def test_sqlite_schema_has_the_lock_row_and_the_indexes(lineage: str) -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "xxl-job", lineage)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT lock_name FROM xxl_job_lock")).scalars().all() == ["schedule_lock"]
    names = {i["name"] for i in inspect(engine).get_indexes("xxl_job_log")}
    assert names == set(_parse(load_ddl("xxl-job", lineage))["xxl_job_log"]["indexes"])


def test_sqlite_bc_task_update_time_follows_updates_like_on_update_current_timestamp() -> None:
    engine = create_engine("sqlite://", poolclass=StaticPool)
    create_legacy_schema(engine, "batch-center")
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO bc_biz (biz_code) VALUES ('b')"))
        conn.execute(text(
            "INSERT INTO bc_task (biz_code, task_key, task_type, fire_time, callback_url, update_time) "
            "VALUES ('b', 'k', 1, '2026-12-02 08:00:00', '/cb', '2000-01-01 00:00:00')"
        ))  # fmt: skip
        conn.execute(text("UPDATE bc_task SET version = version + 1"))
        stamped = conn.execute(text("SELECT update_time, create_time FROM bc_task")).one()
        conn.execute(text("UPDATE bc_task SET update_time = '2001-01-01 00:00:00'"))
        explicit = conn.execute(text("SELECT update_time FROM bc_task")).scalar_one()
    assert stamped.update_time != "2000-01-01 00:00:00" and len(stamped.update_time) == 19
    assert explicit == "2001-01-01 00:00:00"  # an explicit value wins, as in MySQL


def test_unknown_system_is_refused() -> None:
    with pytest.raises(UnknownSystem):
        create_legacy_schema(create_engine("sqlite://"), "quartz")
