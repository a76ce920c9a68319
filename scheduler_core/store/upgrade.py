"""Bringing an existing store up to the current schema (`switchyard db init` does it).

Additive only: a column the current schema has and a table of the store lacks is added
with `ALTER TABLE ... ADD COLUMN`, nullable and without a default, so every row already
there reads as it did before (NULL is each such column's "as before": for
`dus_job_trigger.cron_dialect`, the default dialect; for `dus_job.block`, concurrent, which
stays NULL: the default block strategy is stored so). A missing column that could not be
added that way is refused with the table and column named, never guessed at.

Lanes (issue 29): the lane columns added so are then filled with `default` (NULL reads as
`default` too, but a read of one lane matches the stored value), and an index an older
schema had is replaced by the one that serves its reads now (schema.REPLACED_INDEXES).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from sqlalchemy import Column, Index, MetaData, Table, func, insert, inspect, select, update
from sqlalchemy.engine import Engine

from dbkit.capabilities import capabilities
from dbkit.connections import begin, connect
from scheduler_core.errors import SchemaError
from scheduler_core.model import Lane
from scheduler_core.stops import Cause, SkipWindow, windows_to_text
from scheduler_core.store.schema import REPLACED_INDEXES, Tables

# rows per UPDATE filling the lane columns: a store of millions of triggers is filled in
# transactions of this many ids, never one statement holding every row's lock
FILL_STEP = 20_000


def _tables(tables: Tables, also: Sequence[MetaData]) -> Iterator[tuple[str, Table]]:
    for md in (tables.metadata, *also):
        yield from md.tables.items()


def missing_columns(engine: Engine, tables: Tables, also: Sequence[MetaData] = ()) -> list[tuple[Table, Column]]:  # type: ignore[type-arg]
    """(table, column) for each column of the current schema an existing table lacks
    (tables that do not exist at all are `create_all`'s); `also`: the other packages'."""
    insp = inspect(engine)
    present = set(insp.get_table_names())
    out: list[tuple[Table, Column]] = []  # type: ignore[type-arg]
    for name, table in _tables(tables, also):
        if name not in present:
            continue
        have = {str(c["name"]) for c in insp.get_columns(name)}
        out += [(table, col) for col in table.columns if col.name not in have and col.computed is None]
    return out


def add_missing_columns(engine: Engine, tables: Tables, also: Sequence[MetaData] = ()) -> list[str]:
    """Add every missing column (see the module doc); returns them as "table.column"."""
    todo = missing_columns(engine, tables, also)
    for table, col in todo:
        if not col.nullable or col.server_default is not None or col.primary_key:
            raise SchemaError(
                f"{table.name}.{col.name}: the store lacks this column and it cannot be added in "
                "place (not nullable); upgrade refused, nothing changed"
            )
    added: list[str] = []
    q = engine.dialect.identifier_preparer.quote
    with begin(engine) as conn:
        for table, col in todo:
            kind = col.type.compile(dialect=engine.dialect)
            conn.exec_driver_sql(f"ALTER TABLE {q(table.name)} ADD COLUMN {q(col.name)} {kind} NULL")
            added.append(f"{table.name}.{col.name}")
    return added


def fill_lanes(engine: Engine, tables: Tables) -> list[str]:
    """Every job and trigger without a lane lands in `default` (today's behaviour), in
    steps of FILL_STEP ids. Returns "table.lane (n rows)" for each table it filled."""
    out: list[str] = []
    for table in (tables.job, tables.trigger):
        with connect(engine) as conn:
            if conn.execute(select(table.c.id).where(table.c.lane.is_(None)).limit(1)).first() is None:
                continue
            low, high = conn.execute(select(func.min(table.c.id), func.max(table.c.id))).one()
        filled = 0
        for start in range(int(low), int(high) + 1, FILL_STEP):
            with begin(engine) as conn:
                filled += conn.execute(
                    update(table)
                    .where(table.c.lane.is_(None), table.c.id.between(start, start + FILL_STEP - 1))
                    .values(lane=Lane.DEFAULT.value)
                ).rowcount
        out.append(f"{table.name}.lane ({filled} row(s) -> {Lane.DEFAULT.value})")
    return out


def missing_indexes(engine: Engine, tables: Tables) -> list[Index]:
    """Each index of the core's tables an existing table lacks, by name (`db check` names
    them; `replace_indexes` creates them)."""
    insp = inspect(engine)
    present = set(insp.get_table_names())
    out: list[Index] = []
    for name, table in tables.metadata.tables.items():
        if name not in present:
            continue
        have = {str(i["name"]) for i in insp.get_indexes(name)}
        out += [ix for ix in sorted(table.indexes, key=lambda i: str(i.name)) if str(ix.name) not in have]
    return out


def replace_indexes(engine: Engine, tables: Tables) -> list[str]:
    """Create each index of the core's tables an existing table lacks, then drop the old
    index it replaces (schema.REPLACED_INDEXES): created first, so the reads it serves
    always have one. Returns "table.index" for each created, "-table.index" dropped."""
    insp = inspect(engine)
    present = set(insp.get_table_names())
    out: list[str] = []
    for name, table in tables.metadata.tables.items():
        if name not in present:
            continue
        have = {str(i["name"]) for i in insp.get_indexes(name)}
        for index in table.indexes:
            if index.name not in have:
                index.create(engine)
                out.append(f"{name}.{index.name}")
        q = engine.dialect.identifier_preparer.quote
        wanted = {i.name for i in table.indexes}
        for old, new in REPLACED_INDEXES.get(name, {}).items():
            if old in have and new in wanted:
                on = f" ON {q(name)}" if capabilities(engine).drop_index_on_table else ""
                with begin(engine) as conn:
                    conn.exec_driver_sql(f"DROP INDEX {q(old)}{on}")
                out.append(f"-{name}.{old}")
    return out


OLD_FENCE_TABLE = "dus_business_fence"


def carry_business_fences(engine: Engine, tables: Tables, present: set[str]) -> list[str]:
    """A store of before the stops (`scheduler_core.stops`) kept each business's rollback
    fence in a table of its own; its fences become rollback windows of the business's stop
    (a business that has a stop row already keeps it: it was written by this version).
    The old table is left in place, unread. Returns "dus_business_fence -> dus_stop" when
    rows were carried."""
    if OLD_FENCE_TABLE not in present:
        return []
    old = Table(OLD_FENCE_TABLE, MetaData(), autoload_with=engine)
    st = tables.stop
    carried = 0
    with begin(engine) as conn:
        have = {k for (k,) in conn.execute(select(st.c.scope_key).where(st.c.scope == "business"))}
        for row in conn.execute(select(old)).all():
            if row.biz_code in have:
                continue
            until = None if row.until_at is None else int(row.until_at)
            window = SkipWindow(int(row.from_at), until, Cause.ROLLBACK)
            conn.execute(
                insert(st).values(
                    scope="business",
                    scope_key=row.biz_code,
                    windows=windows_to_text((window,)),
                    epoch=int(row.epoch),
                    updated_at=int(row.updated_at),
                )
            )
            carried += 1
    return [f"{OLD_FENCE_TABLE} -> dus_stop ({carried} fence(s))"] if carried else []
