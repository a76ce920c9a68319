"""`XxlJobReader`: xxl-job's groups, jobs and log as neutral records, read-only.

Reads stream in pages by key (keyset pagination: `WHERE id > :last ORDER BY id LIMIT
:batch`; the log by `(trigger_time, id)`), each page on its own short connection, so
memory stays flat in table size and no connection is held while the caller works.
Given a `Connection` instead of an `Engine`, every read runs on it: the caller's
transaction then gives one consistent snapshot (as the snapshot + change stream needs).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import datetime, timedelta, timezone
from typing import Any, ClassVar, TypeVar

from sqlalchemy import (
    Connection,
    Engine,
    LargeBinary,
    Select,
    bindparam,
    cast,
    column,
    func,
    literal,
    select,
    table,
    text,
)
from sqlalchemy.engine import RowMapping
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.sql.elements import ColumnClause

from dbkit.capabilities import capabilities
from dbkit.fastpath import driver_rows, driver_tuples, fast
from readers.digest import digest_sql
from readers.errors import MissingTables, SourceUnavailable
from readers.images import session_zone, shaped_decoder
from readers.legacy_ddl.tables import WallTime, XxlJobLineage
from readers.legacy_ddl.values import parse_int, raw_text
from readers.log_pages import Cursor, pages, uncached, window_page
from readers.ports import ImageDecoder, ImageDigester, LegacyReader
from readers.records import (
    ContentDigest,
    LegacyBusiness,
    LegacyDefinition,
    LegacyExecution,
    RegisteredExecutor,
    SourceSystem,
)
from readers.timezones import LegacyTimeZone, LegacyZones, parse_wall, require_aware
from readers.xxljob.cron_lineage import CronLineage, cron_lineage, parse_version
from readers.xxljob.logs import LogContext, map_log
from readers.xxljob.mapping import SERVER_DIGEST, VOLATILE_COLUMNS, JobContext, job_digest, map_job
from readers.xxljob.schema import GROUP, INFO, LOG, REGISTRY, XxlJobSchema, inspect_schema

T = TypeVar("T")

logger = logging.getLogger(__name__)

DEAD_TIMEOUT = timedelta(seconds=90)  # RegistryConfig.DEAD_TIMEOUT: 3 x the 30 s beat
_TRIGGER_MSG_PREFIX = 1000  # the type leads trigger_msg; a failed trigger's reason follows
_HANDLE_MSG_PREFIX = 1000
_RETRY_CACHE_LIMIT = 50_000


class XxlJobReader(LegacyReader):
    """Reads one xxl-job admin database (any lineage: 2.2, 2.4, 3.4, master)."""

    system: ClassVar[SourceSystem] = SourceSystem.XXL_JOB

    def __init__(
        self,
        bind: Engine | Connection,
        *,
        admin_tz: str | None = None,
        db_tz: str | None = None,
        cron_tz: str | None = None,
        batch_size: int = 1000,
        version: str | None = None,
    ) -> None:
        """`db_tz`: the zone the admin writes its DATETIME columns in (its JDBC
        `serverTimezone`); `cron_tz`: the zone its crons run in (the admin JVM's default
        zone), which becomes each definition's `time_zone`. `admin_tz` is both at once;
        either one alone sets the other too (readers.timezones.LegacyZones.of). `version`:
        the admin's xxl-job version (e.g. '2.4.2'), which picks the Quartz dialect of its
        crons; None: told from the schema (readers.xxljob.cron_lineage)."""
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if version is not None:
            parse_version(version)  # a bad version fails here, before anything is read
        self.version = version
        self.zones = LegacyZones.of(admin_tz, db=db_tz, cron=cron_tz)
        self._bind = bind
        self._tz = LegacyTimeZone(self.zones.db)  # every DATETIME read or written (the registry, the log)
        self._batch = batch_size
        self._schema: XxlJobSchema | None = None
        # the job SELECT rendered once (its digest expression is ~30 functions deep)
        self._job_sql: str | None = None

    # -- plumbing ---------------------------------------------------------------------

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

    def schema(self) -> XxlJobSchema:
        if self._schema is None:
            with self._connect("inspect_schema") as conn:
                self._schema = inspect_schema(conn)
            cron = self.cron_lineage()
            logger.info(
                "xxl-job schema lineage %s; crons follow Quartz %s (%s)",
                self._schema.lineage.value,
                cron.dialect,
                cron.why,
                extra={"action": "detect_lineage", "lineage": self._schema.lineage.value, "cron_dialect": cron.dialect},
            )
        return self._schema

    def cron_lineage(self) -> CronLineage:
        """The Quartz line the admin's crons follow: by the given version, else the schema."""
        schema = self.schema()
        return cron_lineage(schema.lineage, version=self.version, user_token=schema.user_token)

    def lineage(self) -> XxlJobLineage:
        return self.schema().lineage

    def _groups(self, conn: Connection) -> list[RowMapping]:
        shape = self.schema().group
        stmt: Select[*tuple[Any, ...]] = select(*shape.select_list()).select_from(table(GROUP)).order_by(column("id"))
        return list(conn.execute(stmt).mappings())

    def _group_names(self, conn: Connection) -> dict[int, str]:
        shape = self.schema().group
        stmt: Select[*tuple[Any, ...]] = select(column("id"), *shape.select_list(("app_name",))).select_from(
            table(GROUP)
        )
        return {int(r["id"]): raw_text(r["app_name"])[0] or "" for r in conn.execute(stmt).mappings()}

    # -- businesses -------------------------------------------------------------------

    def businesses(self, *, as_of: datetime | None = None) -> list[LegacyBusiness]:
        """One business per executor app (`app_name`). Addresses: the live registry rows
        (updated within DEAD_TIMEOUT of the database's clock, or `as_of`), sorted as the
        admin sorts them; else the group's `address_list`. Manual groups (address_type 1)
        always use their typed list, as xxl-job does."""
        with self._connect("read_businesses") as conn:
            groups = self._groups(conn)
            now = require_aware(as_of, "as_of") if as_of is not None else db_utc_now(conn)
            live = self._live_addresses(conn, now)
        out: dict[str, LegacyBusiness] = {}
        for g in groups:
            business = self._business(g, live)
            # app_name is unique only on master: keep the first (lowest id) group of a name
            out.setdefault(business.biz_code, business)
        return list(out.values())

    def _business(self, g: RowMapping, live: Mapping[str, list[str]]) -> LegacyBusiness:
        app = raw_text(g["app_name"])[0] or ""
        listed = [a.strip() for a in (raw_text(g.get("address_list"))[0] or "").split(",") if a.strip()]
        manual = parse_int(g.get("address_type")) == 1
        addresses = listed if manual or not live.get(app) else live[app]
        token = raw_text(g.get("access_token"))[0] if "access_token" in g else None
        return LegacyBusiness(
            source=self.system,
            biz_code=app,
            name=raw_text(g.get(self.schema().title_column))[0] or app,
            access_token=token or None,
            executor_addresses=tuple(addresses),
            source_id=int(g["id"]),
        )

    def _live_addresses(self, conn: Connection, now: datetime) -> dict[str, list[str]]:
        shape = self.schema().registry
        if shape is None:
            logger.warning("no %s table: executor addresses come from address_list", REGISTRY)
            return {}
        cutoff = self._tz.to_wall(now - DEAD_TIMEOUT)
        stmt = (
            select(*shape.select_list(("registry_key", "registry_value")))
            .select_from(table(REGISTRY))
            .where(column("registry_group") == "EXECUTOR")
            .where(column("update_time") > bindparam("cutoff", cutoff, type_=WallTime()))
        )
        live: dict[str, set[str]] = {}
        for r in conn.execute(stmt).mappings():
            key, value = raw_text(r["registry_key"])[0] or "", (raw_text(r["registry_value"])[0] or "").strip()
            if value:
                live.setdefault(key, set()).add(value)  # pre-2.5 registries hold duplicate rows
        return {k: sorted(v) for k, v in live.items()}  # the admin sorts addresses as strings

    def registered_executors(self, *, as_of: datetime | None = None) -> list[RegisteredExecutor]:
        """Every EXECUTOR row of the admin's registry, alive or not by the admin's rule
        (registered within DEAD_TIMEOUT of the database's clock, or `as_of`), by app then
        address; a pre-2.5 registry's duplicate rows count once (the newest). Empty without
        a registry table."""
        shape = self.schema().registry
        if shape is None:
            return []
        stmt = (
            select(*shape.select_list(("registry_key", "registry_value")), column("update_time"))
            .select_from(table(REGISTRY))
            .where(column("registry_group") == "EXECUTOR")
        )
        with self._connect("read_registry") as conn:
            now = require_aware(as_of, "as_of") if as_of is not None else db_utc_now(conn)
            rows = list(conn.execute(stmt).mappings())
        newest: dict[tuple[str, str], datetime | None] = {}
        for r in rows:
            key = (raw_text(r["registry_key"])[0] or "", (raw_text(r["registry_value"])[0] or "").strip())
            at = None if r["update_time"] is None else self._tz.to_utc(r["update_time"])
            seen = newest.get(key)
            if key not in newest or (at is not None and (seen is None or at > seen)):
                newest[key] = at
        return [
            RegisteredExecutor(
                app=app,
                address=address,
                updated_at=at,
                age=None if at is None else now - at,
                alive=at is not None and now - at < DEAD_TIMEOUT,
            )
            for (app, address), at in sorted(newest.items())
        ]

    # -- definitions ------------------------------------------------------------------

    def definitions(self, biz_codes: Collection[str] | None = None) -> Iterator[LegacyDefinition]:
        """Jobs of these apps (all jobs, orphans included, when None), by job id."""
        schema = self.schema()
        with self._connect("read_groups") as conn:
            groups = self._group_names(conn)
        ctx = self._job_context(schema, groups)
        group_ids: tuple[int, ...] | None = None
        if biz_codes is not None:
            wanted = set(biz_codes)
            group_ids = tuple(gid for gid, app in groups.items() if app in wanted)
            if not group_ids:
                return
        for rows in self._pages(lambda after: self._job_page(after, group_ids), lambda r: int(r["id"])):
            for row in rows:
                yield map_job(row, ctx)

    def _job_columns(self, conn: Connection) -> list[Any]:
        """The job columns to select; on a MySQL-compatible server with the row's content
        digest computed there (map_job keeps it instead of hashing the row in Python)."""
        info = self.schema().info
        cols: list[Any] = list(info.select_list())
        if fast(conn):
            cols.append(digest_sql(info.columns, info.kinds, VOLATILE_COLUMNS).label(SERVER_DIGEST))
        return cols

    def _job_page(self, after: int, group_ids: Sequence[int] | None) -> list[Mapping[str, Any]]:
        with self._connect("read_jobs") as conn:
            if fast(conn):
                where = "`id` > %s"
                if group_ids is not None:
                    where += f" AND `job_group` IN ({', '.join(['%s'] * len(group_ids))})"
                return self._driver_rows(
                    conn, f"{where} ORDER BY `id` LIMIT %s", (after, *(group_ids or ()), self._batch)
                )
            stmt = (
                select(*self._job_columns(conn))
                .select_from(table(INFO))
                .where(column("id") > after)
                .order_by(column("id"))
                .limit(self._batch)
            )
            if group_ids is not None:
                stmt = stmt.where(column("job_group").in_(group_ids))
            return list(conn.execute(stmt).mappings())  # type: ignore[arg-type]  # RowMapping: keyed by name

    def _driver_rows(self, conn: Connection, where: str, args: Sequence[Any]) -> list[Mapping[str, Any]]:
        """MySQL-compatible servers: job rows (as `_job_columns` selects them) WHERE
        `where` (%s placeholders for `args`), as dicts straight from the driver's tuples.
        SQLAlchemy's result rows and their mappings cost about as much CPU per row as
        mapping the row; the values are the same (binary text as bytes, DATETIMEs as
        datetimes, the digest as text)."""
        if self._job_sql is None:
            stmt = select(*self._job_columns(conn)).select_from(table(INFO))
            # the digest's constants inline; literal percent signs come out doubled, so the
            # statement always goes with arguments (PyMySQL formats it then)
            self._job_sql = str(stmt.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True}))
        return driver_rows(conn, f"{self._job_sql} WHERE {where}", args)

    def definition(self, key: str) -> LegacyDefinition | None:
        job_id = parse_int(key.strip()) if isinstance(key, str) else None
        if job_id is None:
            return None
        schema = self.schema()
        stmt = select(*schema.info.select_list()).select_from(table(INFO)).where(column("id") == job_id)
        with self._connect("read_job") as conn:
            row = conn.execute(stmt).mappings().first()
            if row is None:
                return None
            groups = self._group_names(conn)
        ctx = self._job_context(schema, groups)
        return map_job(row, ctx)

    def definitions_by_keys(self, keys: Collection[str]) -> dict[str, LegacyDefinition]:
        ids = sorted({i for i in (parse_int(k.strip()) for k in keys) if i is not None})
        if not ids:
            return {}
        schema = self.schema()
        out: dict[str, LegacyDefinition] = {}
        with self._connect("read_jobs") as conn:
            groups = self._group_names(conn)
            ctx = self._job_context(schema, groups)
            mysql = fast(conn)
            cols = None if mysql else self._job_columns(conn)
            for i in range(0, len(ids), self._batch):
                part = ids[i : i + self._batch]
                if mysql:
                    rows = self._driver_rows(conn, f"`id` IN ({', '.join(['%s'] * len(part))})", part)
                else:
                    rows = list(
                        conn.execute(
                            select(*cols)  # type: ignore[misc, arg-type]
                            .select_from(table(INFO))
                            .where(column("id").in_(part))
                        ).mappings()
                    )
                for row in rows:
                    d = map_job(row, ctx)
                    out[d.source_key] = d
        return out

    def content_digests(self, biz_codes: Collection[str] | None = None) -> Iterator[ContentDigest] | None:
        """Each job's content digest computed by the server (as `definitions` would give
        it to a row without problems), in pages by id; None when the server cannot
        (SQLite): the caller then reads the rows."""
        with self._connect("read_groups") as conn:
            if not fast(conn):
                return None
            groups = self._group_names(conn)
        info = self.schema().info
        digest = digest_sql(info.columns, info.kinds, VOLATILE_COLUMNS).label("digest")
        # as map_job decides it: the exact enum value (binary: no case folding, no pad space)
        route = "executor_route_strategy"
        broadcast = (
            cast(column(route), LargeBinary) == literal(b"SHARDING_BROADCAST") if info.has(route) else literal(False)
        ).label("broadcast")
        group_ids = None
        if biz_codes is not None:
            wanted = set(biz_codes)
            group_ids = [gid for gid, app in groups.items() if app in wanted]
        return self._digest_pages(digest, broadcast, groups, group_ids)

    def _digest_pages(
        self, digest: Any, broadcast: Any, groups: Mapping[int, str], group_ids: list[int] | None
    ) -> Iterator[ContentDigest]:
        if group_ids is not None and not group_ids:
            return
        head: list[str] = []  # the SELECT rendered once

        def page(after: int) -> list[Any]:
            # content_digests is MySQL-only: the page as driver tuples (an unchanged re-run
            # reads every row's digest; Core's rows cost more CPU than the read itself)
            where = "`id` > %s"
            if group_ids is not None:
                where += f" AND `job_group` IN ({', '.join(['%s'] * len(group_ids))})"
            with self._connect("read_digests") as conn:
                if not head:
                    # constants inline (the percent signs doubled: it goes with arguments)
                    head.append(
                        str(
                            select(column("id"), column("job_group"), digest, broadcast)
                            .select_from(table(INFO))
                            .compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
                        )
                    )
                return driver_tuples(
                    conn, f"{head[0]} WHERE {where} ORDER BY `id` LIMIT %s", (after, *(group_ids or ()), self._batch)
                )

        zone, cron = self.zones.cron, self.cron_lineage()
        for rows in self._pages(page, lambda r: int(r[0])):
            for job_id, group, d, b in rows:
                yield ContentDigest(
                    str(job_id),
                    groups.get(group, ""),
                    d,
                    zone,
                    bool(b),
                    cron_dialect=cron.dialect,
                    cron_dialect_fallback=cron.fallback,
                )

    def _pages(self, fetch: Callable[[int], list[Any]], key: Callable[[Any], int]) -> Iterator[list[Any]]:
        """Pages of `fetch(after_key)` until a short one. On a MySQL-compatible server
        reached through an Engine the next page is read on a worker thread while the
        caller works on this one: the server's part of a page (the digests, the scan)
        then overlaps the caller's Python instead of following it. At most two pages
        are held. On a Connection (one snapshot, one thread) pages are read in turn."""
        if isinstance(self._bind, Connection) or not fast(self._bind):
            after = -1
            while True:
                rows = fetch(after)
                yield rows
                if len(rows) < self._batch:
                    return
                after = key(rows[-1])
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="xxl-read-ahead") as pool:
            future = pool.submit(fetch, -1)
            try:
                while True:
                    rows = future.result()  # a read's error is raised here, in the caller
                    more = len(rows) >= self._batch
                    if more:
                        future = pool.submit(fetch, key(rows[-1]))
                    yield rows
                    if not more:
                        return
            finally:
                future.cancel()  # a caller that stopped early: a read under way ends, unused

    def image_decoder(self) -> ImageDecoder:
        """Decode binlog row images of `xxl_job_info` as `definitions_by_keys` would map
        the same rows (group names read now)."""
        return self._images(map_job)

    def image_digester(self) -> ImageDigester:
        """The content digest of a binlog row image of `xxl_job_info` as `image_decoder`
        would give it, without mapping (None: map it). Bound like `image_decoder`."""
        return self._images(job_digest)

    def _images(self, decode: Callable[[Mapping[str, Any], JobContext], T]) -> Callable[[Mapping[str, Any]], T]:
        schema = self.schema()
        with self._connect("read_groups") as conn:
            groups = self._group_names(conn)
            zone = session_zone(conn)
        ctx = self._job_context(schema, groups)
        return shaped_decoder(schema.info.columns, zone, lambda row: decode(row, ctx))

    def _job_context(self, schema: XxlJobSchema, groups: Mapping[int, str]) -> JobContext:
        cron = cron_lineage(schema.lineage, version=self.version, user_token=schema.user_token)
        return JobContext(
            lineage=schema.lineage,
            groups=groups,
            tz=self._tz,
            cron_zone=self.zones.cron,
            text_columns=schema.info.text_columns,
            cron_dialect=cron.dialect,
            cron_dialect_fallback=cron.fallback,
        )

    def reload_schema(self) -> None:
        """Forget the inspected schema (after DDL on the legacy tables): the next read inspects
        again, and may find another lineage."""
        self._schema = None
        self._job_sql = None

    # -- executions -------------------------------------------------------------------

    def executions(self, biz_code: str, since: datetime, until: datetime) -> Iterator[LegacyExecution]:
        """Log rows of one app with `trigger_time` in [since, until), by (trigger_time, id)."""
        schema = self.schema()
        if schema.log is None:
            raise MissingTables(self.system.value, [LOG])
        lo, hi = self._tz.to_wall(since), self._tz.to_wall(until)
        with self._connect("read_groups") as conn:
            groups = self._group_names(conn)
        group_ids = tuple(gid for gid, app in groups.items() if app == biz_code)
        if not group_ids or lo >= hi:
            return
        retry_counts: dict[int, int] = {}
        for rows in pages(lambda cursor: self._log_page(group_ids, lo, hi, cursor), "trigger_time", self._batch):
            self._load_retry_counts(rows, retry_counts)
            ctx = LogContext(tz=self._tz, groups=groups, retry_counts=retry_counts)
            for row in rows:
                yield map_log(row, ctx)

    def _log_page(
        self, group_ids: Sequence[int], lo: datetime, hi: datetime, cursor: Cursor | None
    ) -> list[RowMapping]:
        t: ColumnClause[Any] = column("trigger_time")
        cols: list[Any] = [
            column("id"), column("job_group"), column("job_id"), column("executor_fail_retry_count"),
            t, column("trigger_code"), column("handle_time"), column("handle_code"),
            *self.schema().log.select_list(("executor_sharding_param",)),  # type: ignore[union-attr]
            _binary_prefix("trigger_msg", _TRIGGER_MSG_PREFIX),
            _binary_prefix("handle_msg", _HANDLE_MSG_PREFIX),
        ]  # fmt: skip
        stmt = select(*cols).select_from(table(LOG)).where(column("job_group").in_(group_ids))
        page = window_page(stmt, t, WallTime(), lo, hi, cursor, self._batch)
        with self._connect("read_log") as conn:
            return list(conn.execute(page).mappings())

    def _load_retry_counts(self, rows: Sequence[RowMapping], cache: dict[int, int]) -> None:
        """The configured retry count of each job in a page (attempt = configured -
        remaining), fetched once per job (log_pages.uncached)."""
        wanted = uncached(rows, "job_id", cache, _RETRY_CACHE_LIMIT)
        if not wanted:
            return
        stmt: Select[*tuple[Any, ...]] = (
            select(column("id"), column("executor_fail_retry_count"))
            .select_from(table(INFO))
            .where(column("id").in_(wanted))
        )
        with self._connect("read_retry_counts") as conn:
            for r in conn.execute(stmt).mappings():
                cache[int(r["id"])] = parse_int(r["executor_fail_retry_count"]) or 0


def _binary_prefix(name: str, length: int) -> Any:
    """The first `length` characters of a text column, as bytes (see schema.py)."""
    return cast(func.substr(column(name), 1, length), LargeBinary).label(name)


def db_utc_now(conn: Connection) -> datetime:
    """The database server's clock as aware UTC (registry liveness is judged by it)."""
    utc_now = capabilities(conn).utc_now_sql
    if utc_now is not None:
        value = conn.execute(text(utc_now)).scalar_one()
    else:
        value = conn.execute(select(func.current_timestamp())).scalar_one()
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc)
    return parse_wall(value).replace(tzinfo=timezone.utc)
