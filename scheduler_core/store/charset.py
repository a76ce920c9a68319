"""The store's character set: every table Switchyard creates is utf8mb4 with a binary
collation, declared by the table itself, on MySQL-compatible servers.

Why declared, not inherited: a table created without a character set takes its
database's default, which takes the server's; on a server whose default is latin1 the
store's tables came out latin1 and an xxl-job parameter `参数=1` failed the whole
migration (error 1366). utf8mb4 holds every character a legacy row can carry (utf8mb3 has
no emoji).

Why utf8mb4_bin: keys (job codes, business codes, ledger keys) are compared exactly
everywhere else: in Python, on SQLite (BINARY), and on TiDB, whose default utf8mb4
collation is utf8mb4_bin. A case- or accent-insensitive collation (MariaDB's
utf8mb4_general_ci, which a table inherits from a server's default unless it names one) would
make `xxl:App:1` and `xxl:app:1` one job on the store and two in the code. Both MariaDB
and TiDB have utf8mb4_bin; TiDB has utf8mb4_general_ci only with its new collation
framework (without it, general_ci quietly compares as bin), and MariaDB 11's default
(utf8mb4_uca1400_ai_ci) does not exist on TiDB.

`db check` names every table or text column that is not utf8mb4 with the statement that
fixes it; `db init` runs that statement (see `convert`).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from sqlalchemy import MetaData, text
from sqlalchemy.engine import Engine

from dbkit.capabilities import MYSQL_DIALECTS, capabilities
from dbkit.connections import begin, connect
from scheduler_core.errors import SchemaError, StoreError

CHARSET = "utf8mb4"
COLLATION = "utf8mb4_bin"


def declare_utf8mb4(metadata: MetaData) -> MetaData:
    """Every table of `metadata` declares CHARSET and COLLATION itself (for both names a
    MySQL-compatible URL can give its dialect; SQLite ignores them). `db init` calls it
    on every MetaData it creates, so a new table of any package cannot miss it."""
    for table in metadata.tables.values():
        for dialect in MYSQL_DIALECTS:
            table.dialect_kwargs[f"{dialect}_charset"] = CHARSET
            table.dialect_kwargs[f"{dialect}_collate"] = COLLATION
    return metadata


@dataclass(frozen=True)
class NotUtf8mb4:
    """A store table that cannot hold every character: its own default character set is
    not utf8mb4, or some of its text columns are not (column -> its character set)."""

    table: str
    charset: str
    columns: tuple[tuple[str, str], ...] = ()

    @property
    def fix(self) -> str:
        """The statement that converts the table and every text column of it (what `db
        init` runs; the table is rewritten, its rows converted: latin1 and utf8mb3 hold
        nothing utf8mb4 cannot)."""
        return f"ALTER TABLE `{self.table}` CONVERT TO CHARACTER SET {CHARSET} COLLATE {COLLATION}"

    def __str__(self) -> str:
        what = [f"{self.table} is {self.charset}"] if self.charset != CHARSET else []
        what += [f"{self.table}.{column} is {charset}" for column, charset in self.columns]
        return f"{', '.join(what)}, not {CHARSET}: {self.fix}"


def not_utf8mb4(engine: Engine, tables: Collection[str]) -> list[NotUtf8mb4]:
    """The tables among `tables` (those that exist) that are not utf8mb4, in name order;
    always none on SQLite (its text is Unicode whatever the table says)."""
    if not capabilities(engine).table_charset or not tables:
        return []
    names = sorted(tables)
    marks = ", ".join(f":t{i}" for i in range(len(names)))
    args = {f"t{i}": n for i, n in enumerate(names)}
    with connect(engine) as conn:
        # a table's character set is its default collation's (information_schema.TABLES
        # names only the collation; every collation name starts with its character set's)
        table_collation: dict[str, str] = dict(
            conn.execute(
                text(
                    "SELECT TABLE_NAME, TABLE_COLLATION FROM information_schema.TABLES "
                    f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks})"
                ),
                args,
            ).all()
        )
        bad_columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, charset in conn.execute(
            text(
                "SELECT TABLE_NAME, COLUMN_NAME, CHARACTER_SET_NAME FROM information_schema.COLUMNS "
                f"WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME IN ({marks}) "
                "AND CHARACTER_SET_NAME IS NOT NULL AND CHARACTER_SET_NAME <> :cs ORDER BY TABLE_NAME, ORDINAL_POSITION"
            ),
            {**args, "cs": CHARSET},
        ):
            bad_columns.setdefault(table, []).append((column, charset))
    out: list[NotUtf8mb4] = []
    for table in names:
        collation = table_collation.get(table)
        if collation is None:
            continue  # not there: `db check` reports it missing
        charset = CHARSET if collation.startswith(f"{CHARSET}_") else collation.split("_", 1)[0]
        if charset != CHARSET or table in bad_columns:
            out.append(NotUtf8mb4(table, charset, tuple(bad_columns.get(table, ()))))
    return out


def convert(engine: Engine, tables: Collection[str]) -> list[str]:
    """Convert every table among `tables` that is not utf8mb4 (`NotUtf8mb4.fix`);
    returns "table: latin1 -> utf8mb4" for each. A server that refuses a conversion
    stops `db init` with the table and the statement to run by hand."""
    done: list[str] = []
    for finding in not_utf8mb4(engine, tables):
        try:
            with begin(engine) as conn:
                conn.exec_driver_sql(finding.fix)
        except StoreError as exc:
            raise SchemaError(
                f"{finding}; the server refused the conversion ({exc.detail or exc.what}): run it by hand, "
                "then `switchyard db check`"
            ) from exc
        was = {finding.charset, *(c for _, c in finding.columns)} - {CHARSET}
        done.append(f"{finding.table}: {'/'.join(sorted(was))} -> {CHARSET}")
    return done
