"""Every table `db init` creates declares utf8mb4 and its collation itself on MySQL and
MariaDB (issue 30): checked over the very MetaData init creates, so a table added to any
package's tables without it fails here."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine
from sqlalchemy.schema import CreateTable

from scheduler_core.store.admin import creatable
from scheduler_core.store.charset import NotUtf8mb4
from scheduler_core.store.schema import build_tables
from switchyard.schema import package_metadata


@pytest.mark.parametrize("url", ["mysql+pymysql://", "mariadb+pymysql://"])
def test_every_table_init_creates_declares_utf8mb4_with_the_binary_collation(url: str) -> None:
    dialect = create_engine(url).dialect
    tables = [t for md in creatable(build_tables(dialect.name, 4), package_metadata()) for t in md.tables.values()]
    # the core's, the migrator's and dual-run's tables are all there
    assert {"dus_job", "dus_job_trigger", "dus_migration_ledger", "dus_comparison"} <= {t.name for t in tables}
    ddl = {t.name: str(CreateTable(t).compile(dialect=dialect)) for t in tables}
    assert [n for n, d in ddl.items() if "CHARSET=utf8mb4 COLLATE utf8mb4_bin" not in d] == []
    # the trigger table keeps its partitions beside it
    assert "PARTITION BY HASH(id)" in ddl["dus_job_trigger"]


def test_sqlite_ddl_carries_no_character_set() -> None:
    dialect = create_engine("sqlite://").dialect
    for md in creatable(build_tables("sqlite", 4), package_metadata()):
        for table in md.tables.values():
            assert "CHARSET" not in str(CreateTable(table).compile(dialect=dialect))


def test_a_finding_names_the_table_its_columns_and_the_statement_that_fixes_it() -> None:
    finding = NotUtf8mb4("dus_job", "latin1", (("params", "latin1"),))
    assert str(finding) == (
        "dus_job is latin1, dus_job.params is latin1, not utf8mb4: "
        "ALTER TABLE `dus_job` CONVERT TO CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
    )
    only_a_column = NotUtf8mb4("dus_migration_ledger", "utf8mb4", (("reason", "utf8mb3"),))
    assert str(only_a_column).startswith("dus_migration_ledger.reason is utf8mb3, not utf8mb4: ALTER TABLE")
