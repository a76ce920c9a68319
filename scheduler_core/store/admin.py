"""Schema creation and inspection (`switchyard db init|check`).

Init is idempotent: a second run creates nothing and changes nothing. The partition count
is fixed at the first init; a later init with another count is refused, not applied.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from sqlalchemy import MetaData, Table, func, inspect, select, text
from sqlalchemy.engine import Engine

from dbkit.capabilities import capabilities
from dbkit.translate import translated
from scheduler_core.errors import SchemaError
from scheduler_core.ports import LEADER_FENCE, Partition
from scheduler_core.store import charset
from scheduler_core.store.charset import NotUtf8mb4
from scheduler_core.store.schema import (
    DEFAULT_PARTITIONS,
    SCHEMA_VERSION,
    Tables,
    build_tables,
)
from scheduler_core.store.upgrade import (
    add_missing_columns,
    carry_business_fences,
    fill_lanes,
    missing_columns,
    missing_indexes,
    replace_indexes,
)

FENCE_NAME = LEADER_FENCE  # the single leader's fence row (partitions have their own: ports.partition_fence)
_PARTITION_NAME = re.compile(r"^p[0-9]{1,4}$")


@dataclass
class SchemaReport:
    dialect: str
    tables: dict[str, int] = field(default_factory=dict)  # table -> rows
    missing: list[str] = field(default_factory=list)
    partitions: list[str] = field(default_factory=list)
    schema_version: int | None = None
    created: list[str] = field(default_factory=list)
    # what init changed in existing tables: "table.column" added, "table: latin1 -> utf8mb4" converted
    upgraded: list[str] = field(default_factory=list)
    not_utf8mb4: list[NotUtf8mb4] = field(default_factory=list)  # tables that cannot hold every character

    @property
    def ok(self) -> bool:
        return not self.missing and not self.not_utf8mb4 and self.schema_version == SCHEMA_VERSION


@translated
def discover_partitions(engine: Engine, tables: Tables) -> list[Partition]:
    """Partitions of the trigger table, from metadata only."""
    if tables.sliced_by_column:
        return [Partition(i, f"p{i}") for i in range(tables.partitions)]
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT PARTITION_NAME, PARTITION_ORDINAL_POSITION FROM information_schema.PARTITIONS "
                "WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = :t ORDER BY PARTITION_ORDINAL_POSITION"
            ),
            {"t": tables.trigger.name},
        ).all()
    parts: list[Partition] = []
    for name, ordinal in rows:
        if name is None:  # the table exists but is not partitioned: one slice, no hint
            return [Partition(0, "")]
        if not _PARTITION_NAME.match(name):
            # the name is interpolated into SQL as an identifier: accept only the shape
            # HASH partitioning generates, whatever the metadata says
            raise SchemaError(f"unexpected partition name {name!r} on {tables.trigger.name}")
        parts.append(Partition(int(ordinal) - 1, name))
    if not parts:
        raise SchemaError(f"table {tables.trigger.name} not found: run `switchyard db init`")
    return parts


@translated
def stored_partitions(engine: Engine) -> int | None:
    """The partition count recorded at init, or None before init."""
    md_tables = build_tables(engine.dialect.name, 1)
    if not inspect(engine).has_table(md_tables.meta.name):
        return None
    with engine.connect() as conn:
        value = conn.execute(
            select(md_tables.meta.c.value).where(md_tables.meta.c.name == "partitions")
        ).scalar_one_or_none()
    return None if value is None else int(value)


@translated
def tables_for(engine: Engine) -> Tables:
    """The table set of an initialised store (partition count read from dus_meta). A
    store of an older schema version is refused with what to run (its SQL would fail on
    a missing column later, less clearly)."""
    n = stored_partitions(engine)
    if n is None:
        raise SchemaError("the store has no schema: run `switchyard db init --url ...` first")
    tables = build_tables(engine.dialect.name, n)
    with engine.connect() as conn:
        version = conn.execute(
            select(tables.meta.c.value).where(tables.meta.c.name == "schema_version")
        ).scalar_one_or_none()
    if version is not None and int(version) < SCHEMA_VERSION:
        raise SchemaError(
            f"the store's schema is version {version}, this Switchyard needs {SCHEMA_VERSION}: "
            "run `switchyard db init --url ...` (it adds what is missing, keeping every row)"
        )
    return tables


def _all_tables(tables: Tables, also: Sequence[MetaData]) -> Iterator[tuple[str, Table]]:
    yield from tables.metadata.tables.items()
    for md in also:
        yield from md.tables.items()


def creatable(tables: Tables, also: Sequence[MetaData] = ()) -> tuple[MetaData, ...]:
    """Every MetaData `db init` creates: the core's and `also`, each table declaring the
    store's character set (store/charset.py). The one way init creates tables, so a table
    added to any package gets it without anyone remembering."""
    return tuple(charset.declare_utf8mb4(md) for md in (tables.metadata, *also))


@translated
def init_schema(engine: Engine, partitions: int | None = None, also: Sequence[MetaData] = ()) -> SchemaReport:
    """Create the core's tables and those of `also` (the other packages' tables, which the
    core does not know: switchyard.schema gathers them)."""
    existing = stored_partitions(engine)
    if existing is not None and partitions is not None and partitions != existing:
        raise SchemaError(
            f"the store was initialised with {existing} partitions; re-partitioning to {partitions} is not done by init"
        )
    n = existing or partitions or DEFAULT_PARTITIONS
    tables = build_tables(engine.dialect.name, n)
    insp = inspect(engine)
    before = set(insp.get_table_names())
    for md in creatable(tables, also):
        md.create_all(engine, checkfirst=True)
    ours = {name for name, _ in _all_tables(tables, also)}
    created = sorted(ours - before)
    # a table an older init made in the database's default (latin1): converted before any
    # column is added to it, so the added column inherits utf8mb4 too
    upgraded = charset.convert(engine, ours & before)
    upgraded += add_missing_columns(engine, tables, also)  # a store of an older schema version
    upgraded += fill_lanes(engine, tables)
    upgraded += replace_indexes(engine, tables)
    upgraded += carry_business_fences(engine, tables, before)
    with engine.begin() as conn:
        have = dict(conn.execute(select(tables.meta.c.name, tables.meta.c.value)).all())
        for name, value in (("schema_version", str(SCHEMA_VERSION)), ("partitions", str(n))):
            if name not in have:
                conn.execute(tables.meta.insert().values(name=name, value=value))
        if int(have.get("schema_version", SCHEMA_VERSION)) < SCHEMA_VERSION:
            conn.execute(
                tables.meta.update().where(tables.meta.c.name == "schema_version").values(value=str(SCHEMA_VERSION))
            )
        if conn.execute(select(tables.fence.c.name).where(tables.fence.c.name == FENCE_NAME)).first() is None:
            conn.execute(tables.fence.insert().values(name=FENCE_NAME, epoch=0, updated_at=0))
    report = check_schema(engine, also)
    report.created = created
    report.upgraded = upgraded
    return report


@translated
def check_schema(engine: Engine, also: Sequence[MetaData] = ()) -> SchemaReport:
    dialect = engine.dialect.name
    report = SchemaReport(dialect=dialect)
    insp = inspect(engine)
    present = set(insp.get_table_names())
    n = stored_partitions(engine) or DEFAULT_PARTITIONS
    tables = build_tables(dialect, n)
    with engine.connect() as conn:
        for name, table in _all_tables(tables, also):
            if name not in present:
                report.missing.append(name)
                continue
            report.tables[name] = conn.execute(select(func.count()).select_from(table)).scalar_one()
        if tables.meta.name in present:
            version = conn.execute(
                select(tables.meta.c.value).where(tables.meta.c.name == "schema_version")
            ).scalar_one_or_none()
            report.schema_version = None if version is None else int(version)
    report.missing += [f"{t.name}.{c.name}" for t, c in missing_columns(engine, tables, also)]
    report.missing += [f"{ix.table.name}.{ix.name}" for ix in missing_indexes(engine, tables)]  # type: ignore[union-attr]
    report.not_utf8mb4 = charset.not_utf8mb4(engine, [name for name, _ in _all_tables(tables, also)])
    if tables.trigger.name in present:
        if capabilities(engine).server_partitions:
            report.partitions = [p.name for p in discover_partitions(engine, tables)]
        else:
            report.partitions = [f"part={i}" for i in range(n)]
    return report
