"""`BatchCenterReader`: the batch center's businesses, tasks and execution log as neutral
records, read-only (the documented flags are in `flag.py`).

Paging and connections work as in the xxl-job reader: keyset pages by `id` for tasks,
by `(scheduled_time, id)` on `idx_biz_time` for the log, one short connection per page,
or every read on the caller's `Connection` when one is given (one snapshot).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, ClassVar, TypeVar

from sqlalchemy import Connection, Engine, LargeBinary, Select, String, cast, column, inspect, select, table
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.sql.elements import ColumnElement

from dbkit.fastpath import fast
from readers.batchcenter.mapping import (
    DIGEST_MASKED,
    DIGEST_SKIP,
    RECURRING_TYPES,
    TaskContext,
    map_business,
    map_exec,
    map_task,
    shard_count,
    task_digest,
)
from readers.digest import column_kinds, digest_sql
from readers.errors import MissingTables, SourceUnavailable
from readers.images import session_zone, shaped_decoder
from readers.legacy_ddl.tables import WallTime
from readers.legacy_ddl.values import parse_int, raw_text
from readers.log_pages import Cursor, pages, uncached, window_page
from readers.ports import ImageDecoder, ImageDigester, LegacyReader
from readers.records import ContentDigest, LegacyBusiness, LegacyDefinition, LegacyExecution, SourceSystem
from readers.timezones import DEFAULT_ZONE, LegacyTimeZone

T = TypeVar("T")

logger = logging.getLogger(__name__)

BIZ, TASK, EXEC_LOG = "bc_biz", "bc_task", "bc_task_exec_log"
_SHARD_CACHE_LIMIT = 50_000
_EXEC_COLUMNS = (
    "id", "task_id", "biz_code", "shard_index", "attempt", "scheduled_time", "start_time", "end_time",
    "status", "http_status", "worker_host", "error_msg",
)  # fmt: skip


class BatchCenterReader(LegacyReader):
    """Reads the batch center's `bc_biz`, `bc_task` and `bc_task_exec_log`."""

    system: ClassVar[SourceSystem] = SourceSystem.BATCH_CENTER

    def __init__(self, bind: Engine | Connection, *, tz: str = DEFAULT_ZONE, batch_size: int = 1000) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self._bind = bind
        self._tz = LegacyTimeZone(tz)
        self._batch = batch_size
        self._columns: dict[str, tuple[tuple[str, ...], frozenset[str]]] | None = None
        self._kinds: dict[str, dict[str, str]] = {}

    @contextmanager
    def _connect(self, action: str) -> Iterator[Connection]:
        try:
            if isinstance(self._bind, Connection):
                yield self._bind
            else:
                with self._bind.connect() as conn:
                    yield conn
        except (OperationalError, InterfaceError) as exc:
            raise SourceUnavailable(self.system.value, action) from exc

    def _shape(self, name: str) -> tuple[tuple[str, ...], frozenset[str]]:
        """(columns, text columns) of a table as the database has it."""
        if self._columns is None:
            with self._connect("inspect_schema") as conn:
                insp = inspect(conn)
                present = set(insp.get_table_names())
                missing = [t for t in (BIZ, TASK, EXEC_LOG) if t not in present]
                if missing:
                    raise MissingTables(self.system.value, missing)
                self._columns = {}
                for t in (BIZ, TASK, EXEC_LOG):
                    cols = insp.get_columns(t)
                    names = tuple(str(c["name"]) for c in cols)
                    texts = frozenset(str(c["name"]) for c in cols if isinstance(c["type"], String))
                    self._columns[t] = (names, texts)
                    self._kinds[t] = column_kinds(cols)  # type: ignore[arg-type]
        return self._columns[name]

    def _select_list(self, name: str, wanted: Sequence[str] | None = None) -> list[ColumnElement[object]]:
        names, texts = self._shape(name)
        return [
            cast(column(n), LargeBinary).label(n) if n in texts else column(n)  # type: ignore[misc]
            for n in (wanted or names)
            if n in names
        ]

    # -- businesses -------------------------------------------------------------------

    def businesses(self) -> list[LegacyBusiness]:
        stmt = select(*self._select_list(BIZ)).select_from(table(BIZ)).order_by(column("biz_code"))
        with self._connect("read_businesses") as conn:
            return [map_business(r) for r in conn.execute(stmt).mappings()]

    # -- definitions ------------------------------------------------------------------

    def _context(self) -> TaskContext:
        return TaskContext(
            tz=self._tz,
            businesses={b.biz_code: b for b in self.businesses()},
            text_columns=self._shape(TASK)[1],
        )

    def definitions(self, biz_codes: Collection[str] | None = None) -> Iterator[LegacyDefinition]:
        """Tasks of these businesses (all tasks, orphans included, when None), by id."""
        ctx = self._context()
        codes = tuple(sorted(set(biz_codes))) if biz_codes is not None else None
        if codes is not None and not codes:
            return
        last = -1
        while True:
            rows = self._task_page(last, codes)
            for row in rows:
                yield map_task(row, ctx)
            if len(rows) < self._batch:
                return
            last = int(rows[-1]["id"])

    def _task_page(self, after: int, codes: tuple[str, ...] | None) -> list[RowMapping]:
        stmt = (
            select(*self._select_list(TASK))
            .select_from(table(TASK))
            .where(column("id") > after)
            .order_by(column("id"))
            .limit(self._batch)
        )
        if codes is not None:
            stmt = stmt.where(column("biz_code").in_(codes))
        with self._connect("read_tasks") as conn:
            return list(conn.execute(stmt).mappings())

    def definition(self, key: str) -> LegacyDefinition | None:
        task_id = parse_int(key.strip()) if isinstance(key, str) else None
        if task_id is None:
            return None
        stmt = select(*self._select_list(TASK)).select_from(table(TASK)).where(column("id") == task_id)
        with self._connect("read_task") as conn:
            row = conn.execute(stmt).mappings().first()
        return map_task(row, self._context()) if row is not None else None

    def definitions_by_keys(self, keys: Collection[str]) -> dict[str, LegacyDefinition]:
        ids = sorted({i for i in (parse_int(k.strip()) for k in keys) if i is not None})
        if not ids:
            return {}
        ctx = self._context()
        out: dict[str, LegacyDefinition] = {}
        with self._connect("read_tasks") as conn:
            for i in range(0, len(ids), self._batch):
                stmt = (
                    select(*self._select_list(TASK))
                    .select_from(table(TASK))
                    .where(column("id").in_(ids[i : i + self._batch]))
                )
                for row in conn.execute(stmt).mappings():
                    d = map_task(row, ctx)
                    out[d.source_key] = d
        return out

    def content_digests(self, biz_codes: Collection[str] | None = None) -> Iterator[ContentDigest] | None:
        """Each task's content digest computed by the server (as `definitions` would give
        it to a row without problems), in pages by id; None when the server cannot
        (SQLite): the caller then reads the rows."""
        names = self._shape(TASK)[0]
        with self._connect("read_digests") as conn:
            if not fast(conn):
                return None
        digest = digest_sql(
            names, self._kinds[TASK], DIGEST_SKIP, {n: column("task_type").in_(RECURRING_TYPES) for n in DIGEST_MASKED}
        ).label("digest")
        codes = tuple(sorted(set(biz_codes))) if biz_codes is not None else None
        return self._digest_pages(digest, codes)

    def _digest_pages(self, digest: Any, codes: tuple[str, ...] | None) -> Iterator[ContentDigest]:
        if codes is not None and not codes:
            return
        last = -1
        while True:
            stmt = (
                select(
                    column("id"), cast(column("biz_code"), LargeBinary).label("biz_code"), digest, column("migrated")
                )
                .select_from(table(TASK))
                .where(column("id") > last)
                .order_by(column("id"))
                .limit(self._batch)
            )
            if codes is not None:
                stmt = stmt.where(column("biz_code").in_(codes))
            with self._connect("read_digests") as conn:
                rows = conn.execute(stmt).all()
            for task_id, biz, d, migrated in rows:
                yield ContentDigest(str(task_id), raw_text(biz)[0] or "", d, self._tz.name, flag_pending=migrated != 1)
            if len(rows) < self._batch:
                return
            last = int(rows[-1][0])

    def image_decoder(self) -> ImageDecoder:
        """Decode binlog row images of `bc_task` as `definitions_by_keys` would map the
        same rows (businesses read now)."""
        return self._images(map_task)

    def image_digester(self) -> ImageDigester:
        """The content digest of a binlog row image of `bc_task` as `image_decoder` would
        give it, without mapping (None: map it). Bound like `image_decoder`."""
        return self._images(task_digest)

    def _images(self, decode: Callable[[Mapping[str, Any], TaskContext], T]) -> Callable[[Mapping[str, Any]], T]:
        ctx = self._context()
        with self._connect("read_time_zone") as conn:
            zone = session_zone(conn)
        return shaped_decoder(self._shape(TASK)[0], zone, lambda row: decode(row, ctx))

    def reload_schema(self) -> None:
        """Forget the inspected columns (after DDL on the legacy tables)."""
        self._columns = None
        self._kinds = {}

    # -- executions -------------------------------------------------------------------

    def executions(self, biz_code: str, since: datetime, until: datetime) -> Iterator[LegacyExecution]:
        """Attempts of one business with `scheduled_time` in [since, until), by
        (scheduled_time, id)."""
        lo, hi = self._tz.to_wall(since), self._tz.to_wall(until)
        if lo >= hi:
            return
        totals: dict[int, int] = {}
        for rows in pages(lambda cursor: self._exec_page(biz_code, lo, hi, cursor), "scheduled_time", self._batch):
            self._load_shard_totals(rows, totals)
            for row in rows:
                yield map_exec(row, self._tz, totals)

    def _exec_page(self, biz_code: str, lo: datetime, hi: datetime, cursor: Cursor | None) -> list[RowMapping]:
        stmt = (
            select(*self._select_list(EXEC_LOG, _EXEC_COLUMNS))
            .select_from(table(EXEC_LOG))
            .where(column("biz_code") == biz_code)
        )
        page = window_page(stmt, column("scheduled_time"), WallTime(3), lo, hi, cursor, self._batch)
        with self._connect("read_exec_log") as conn:
            return list(conn.execute(page).mappings())

    def _load_shard_totals(self, rows: Sequence[RowMapping], cache: dict[int, int]) -> None:
        """Each task's shard count, fetched once per task (log_pages.uncached)."""
        wanted = uncached(rows, "task_id", cache, _SHARD_CACHE_LIMIT)
        if not wanted:
            return
        stmt: Select[*tuple[Any, ...]] = (
            select(column("id"), column("shard_total"), cast(column("shard_params"), LargeBinary).label("shard_params"))
            .select_from(table(TASK))
            .where(column("id").in_(wanted))
        )
        with self._connect("read_shard_totals") as conn:
            for r in conn.execute(stmt).mappings():
                cache[int(r["id"])] = shard_count(parse_int(r["shard_total"]), r["shard_params"])
