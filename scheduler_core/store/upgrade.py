"""Bringing an existing store up to the current schema (`switchyard db init` does it).

Additive only: a column the current schema has and a table of the store lacks is added
with `ALTER TABLE ... ADD COLUMN`, nullable and without a default, so every row already
there reads as it did before (NULL is each such column's "as before": for
`dus_job_trigger.cron_dialect`, the default dialect). A missing column that could not be
added that way is refused with the table and column named, never guessed at.
"""

from __future__ import annotations

from sqlalchemy import Column, Table, inspect
from sqlalchemy.engine import Engine

from scheduler_core.errors import SchemaError
from scheduler_core.store.schema import Tables


def missing_columns(engine: Engine, tables: Tables) -> list[tuple[Table, Column]]:  # type: ignore[type-arg]
    """(table, column) for each column of the current schema an existing table lacks
    (tables that do not exist at all are `create_all`'s)."""
    insp = inspect(engine)
    present = set(insp.get_table_names())
    out: list[tuple[Table, Column]] = []  # type: ignore[type-arg]
    for name, table in tables.metadata.tables.items():
        if name not in present:
            continue
        have = {str(c["name"]) for c in insp.get_columns(name)}
        out += [(table, col) for col in table.columns if col.name not in have and col.computed is None]
    return out


def add_missing_columns(engine: Engine, tables: Tables) -> list[str]:
    """Add every missing column (see the module doc); returns them as "table.column"."""
    todo = missing_columns(engine, tables)
    for table, col in todo:
        if not col.nullable or col.server_default is not None or col.primary_key:
            raise SchemaError(
                f"{table.name}.{col.name}: the store lacks this column and it cannot be added in "
                "place (not nullable); upgrade refused, nothing changed"
            )
    added: list[str] = []
    q = engine.dialect.identifier_preparer.quote
    with engine.begin() as conn:
        for table, col in todo:
            kind = col.type.compile(dialect=engine.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {q(table.name)} ADD COLUMN {q(col.name)} {kind} NULL")
            added.append(f"{table.name}.{col.name}")
    return added
