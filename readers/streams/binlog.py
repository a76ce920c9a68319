"""Binlog change stream: the committed transactions of legacy tables, read as a replica would.

Built on mysql-replication (`pymysqlreplication`) 1.0.17, with its measured traps handled here
(see the team notes, shared/notes/infra-probe.md §1.3-1.4):

1. `is_mariadb=True` without `auto_position` ignores log_file/log_pos  -> we always resume by
   file/pos on the MySQL code path (`is_mariadb=False`); MariaDB still sends its GTID events
   because the library sets `@mariadb_slave_capability=4`.
2. `resume_stream=False` ignores log_pos                                -> always `resume_stream=True`.
3. MariaDB GTID mode + `blocking=False` replays forever                  -> never GTID mode, always
   `blocking=True` (the stall timeout and the heartbeats bound every read instead).
4. the library reconnects by itself (2006/2013) from a stale position   -> our connections turn
   those errors into a private exception the library does not catch (no global is touched), and
   `batches()` reopens a fresh reader from the last transaction boundary it passed (everything
   before it was yielded or touched no selected table), with bounded exponential back-off.
5. resuming mid-statement silently drops rows                           -> positions are only
   ever taken at a commit (XidEvent, QueryEvent COMMIT) or after a standalone statement (DDL).
6. column names need `binlog_row_metadata=FULL`                          -> checked before the
   first read (StreamError otherwise) and every decoded row is checked for `UNKNOWN_COL`.

Row images: read by `readers.streams.row_decoder` (a per-table plan, ~3x the library's
decoding speed, values identical to the library's) for tables whose column types it covers;
the library's `event.rows` for the rest, and for any event the plan cannot read.

Progress through foreign transactions (committed, but touching none of the selected tables): the
position advances internally at each of them (a reconnect resumes after them), but an empty
ChangeBatch carrying it is yielded only when `progress_every_txns` of them have passed, or when
at least one is pending and `progress_every_s` have passed since the last yield (checked at each
event and heartbeat, so an idle stream reports its foreign progress within about `heartbeat_s`
after `progress_every_s`). That lets a caller checkpoint without one write per foreign
transaction; after a restart at most that many foreign transactions are re-scanned (harmless).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Collection, Iterator
from datetime import datetime, timezone
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication import row_event as _row_event
from pymysqlreplication.constants import FIELD_TYPE
from pymysqlreplication.event import (
    GtidEvent,
    HeartbeatLogEvent,
    MariadbGtidEvent,
    QueryEvent,
    RotateEvent,
    XAPrepareEvent,
    XidEvent,
)
from pymysqlreplication.row_event import DeleteRowsEvent, TableMapEvent, UpdateRowsEvent, WriteRowsEvent

from dbkit.translate import lost_in_cut_packet
from readers.records import ChangeBatch, ChangeOp, RowChange, StreamPosition
from readers.streams.errors import (
    StreamError,
    StreamPermissionError,
    StreamStalled,
    StreamUnreachable,
    permission_message,
)
from readers.streams.row_decoder import RowPlan, event_images, plan_for

log = logging.getLogger(__name__)

# client-side "connection lost / gone away" codes (CR_SERVER_GONE_ERROR, CR_SERVER_LOST, ..._EXTENDED)
_LOST_CODES = frozenset({2006, 2013, 2055})
# server errors that no reconnect will fix: grants, credentials
_PERMISSION_CODES = frozenset({1044, 1045, 1142, 1143, 1227, 1370, 1698})
# 1236 ER_MASTER_FATAL_ERROR_READING_BINLOG: position purged / impossible / not a binlog
_FATAL_CODES = frozenset({1236})
_MARIADB_GTID_STANDALONE = 0x01  # FL_STANDALONE: the group has no BEGIN/COMMIT (DDL)
_DDL_RE = re.compile(r"^\s*(ALTER|CREATE|DROP|RENAME|TRUNCATE)\b", re.IGNORECASE)
_COMMENT_RE = re.compile(r"/\*.*?\*/|--[^\n]*|#[^\n]*", re.DOTALL)
_NAME_RE = re.compile(r"(`(?:[^`]|``)+`|[A-Za-z0-9_$]+)(?:\s*\.\s*(`(?:[^`]|``)+`|[A-Za-z0-9_$]+))?")

_EVENTS = [
    WriteRowsEvent,
    UpdateRowsEvent,
    DeleteRowsEvent,
    TableMapEvent,
    XidEvent,
    XAPrepareEvent,
    QueryEvent,
    MariadbGtidEvent,
    GtidEvent,
    RotateEvent,
    HeartbeatLogEvent,
]


class _ConnectionLost(Exception):
    """The stream's socket broke or timed out. Deliberately NOT a pymysql error, so the
    library's own retry (which restarts from a stale position) never sees it."""

    def __init__(self, code: int | None, message: str, timed_out: bool) -> None:
        super().__init__(f"({code}) {message}")
        self.code = code
        self.timed_out = timed_out


class _StreamConnection(pymysql.connections.Connection):
    """A PyMySQL connection whose lost-connection errors surface to us, not to the library."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "db" in kwargs:  # the library still passes the deprecated name for its control connection
            kwargs.setdefault("database", kwargs.pop("db"))
        super().__init__(*args, **kwargs)

    def _read_packet(self, packet_type=pymysql.connections.MysqlPacket):  # type: ignore[no-untyped-def, attr-defined]
        try:
            return super()._read_packet(packet_type)
        except pymysql.err.OperationalError as exc:
            code = exc.args[0] if exc.args else None
            if code in _LOST_CODES:
                timed_out = isinstance(exc.__context__, TimeoutError)
                raise _ConnectionLost(code, str(exc.args[1] if len(exc.args) > 1 else exc), timed_out) from exc
            raise


class _Reconnect(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _unquote(name: str) -> str:
    return name[1:-1].replace("``", "`") if name.startswith("`") else name


def ddl_tables(query: str, default_schema: str | None) -> set[tuple[str | None, str]]:
    """The (schema, name) pairs a DDL statement may name; over-approximates (column names of an
    ALTER are included), which only costs a log line. Empty for non-DDL statements."""
    q = _COMMENT_RE.sub(" ", query)
    if not _DDL_RE.match(q):
        return set()
    out: set[tuple[str | None, str]] = set()
    for m in _NAME_RE.finditer(q):
        first, second = m.group(1), m.group(2)
        if second is not None:
            out.add((_unquote(first), _unquote(second)))
        else:
            out.add((default_schema, _unquote(first)))
    return out


class _Tx:
    __slots__ = ("changes", "gtid", "open")

    def __init__(self) -> None:
        self.changes: list[RowChange] = []
        self.gtid: str | None = None
        self.open = False  # inside BEGIN ... COMMIT (MariaDB: a non-standalone GTID group)


def _settings(connection: dict[str, Any]) -> dict[str, Any]:
    allowed = {"host", "port", "user", "password", "charset", "unix_socket", "ssl", "connect_timeout"}
    out = {k: v for k, v in connection.items() if k in allowed and v is not None}
    if "passwd" in connection and "password" not in out:
        out["password"] = connection["passwd"]
    out.setdefault("host", "127.0.0.1")
    out["port"] = int(out.get("port", 3306))
    return out


def _code(exc: BaseException) -> int | None:
    args = getattr(exc, "args", ())
    return args[0] if args and isinstance(args[0], int) else None


def _query(connection: dict[str, Any] | Any, sql: str, args: tuple[Any, ...] | None = None) -> list[tuple[Any, ...]]:
    """Run one statement on a dict of settings (own short connection) or on a SQLAlchemy
    Engine / Connection."""
    if isinstance(connection, dict):
        try:
            conn = pymysql.connect(**_settings(connection), autocommit=True)
            try:
                with conn.cursor() as cur:
                    cur.execute(sql, args)
                    return list(cur.fetchall())
            finally:
                conn.close()
        except AssertionError as exc:
            # a packet cut short by a server restarting: the lost connection it is (2013),
            # not an "unexpected error" that ended `migrate stream` with exit 1 (the soak)
            if (lost := lost_in_cut_packet(exc)) is None:
                raise
            raise lost from exc
    from sqlalchemy.engine import Connection, Engine

    if isinstance(connection, Engine):
        with connection.connect() as sa_conn:
            return [tuple(r) for r in sa_conn.exec_driver_sql(sql, args or ()).fetchall()]
    if isinstance(connection, Connection):
        return [tuple(r) for r in connection.exec_driver_sql(sql, args or ()).fetchall()]
    raise TypeError(
        f"expected a dict of connection settings or a SQLAlchemy Engine/Connection, got {type(connection)!r}"
    )


def current_position(connection: dict[str, Any] | Any) -> StreamPosition:
    """The server's binlog position now: `SHOW MASTER STATUS` (file, pos) and the GTID of that
    very position (MariaDB: `BINLOG_GTID_POS(file, pos)`, exact; otherwise `@@gtid_binlog_pos` /
    `@@gtid_executed`, read just after and possibly a little ahead). Needs REPLICATION CLIENT
    (MariaDB >= 10.5: BINLOG MONITOR). `connection`: dict(host, port, user, password) or a
    SQLAlchemy Engine/Connection."""
    user = connection.get("user") if isinstance(connection, dict) else None
    try:
        rows = _query(connection, "SHOW MASTER STATUS")
    except Exception as exc:  # noqa: BLE001 - classified below
        if _code(exc) in _PERMISSION_CODES or _code(getattr(exc, "orig", None) or exc) in _PERMISSION_CODES:
            raise StreamPermissionError(permission_message(user, f"SHOW MASTER STATUS failed: {exc}")) from exc
        raise
    if not rows or rows[0][0] in (None, ""):
        raise StreamError("the server has no binary log (log_bin is off): a binlog stream cannot run; use polling")
    log_file, log_pos = str(rows[0][0]), int(rows[0][1])
    gtid: str | None = None
    for sql, args in (
        ("SELECT BINLOG_GTID_POS(%s, %s)", (log_file, log_pos)),
        ("SELECT @@GLOBAL.gtid_binlog_pos", None),
        ("SELECT @@GLOBAL.gtid_executed", None),
    ):
        try:
            value = _query(connection, sql, args)[0][0]
        except Exception:  # noqa: BLE001 - not this server kind; try the next
            continue
        if value:
            gtid = value.decode() if isinstance(value, bytes) else str(value)
            break
    return StreamPosition(log_file, log_pos, gtid)


def check_binlog_source(connection: dict[str, Any]) -> None:
    """Refuse a server whose binlog cannot give us full, named row images, or a user who cannot
    log in: raises StreamPermissionError / StreamError. Callers run it before a snapshot so a
    wrong binlog user fails before anything is written."""
    settings = _settings(connection)
    user = settings.get("user")
    try:
        rows = _query(
            dict(settings),
            "SHOW GLOBAL VARIABLES WHERE Variable_name IN "
            "('log_bin', 'binlog_format', 'binlog_row_image', 'binlog_row_metadata')",
        )
    except pymysql.err.MySQLError as exc:
        if _code(exc) in _PERMISSION_CODES:
            raise StreamPermissionError(permission_message(user, str(exc))) from exc
        raise StreamUnreachable(
            f"cannot reach the binlog source {settings.get('host')}:{settings.get('port')}: {exc}"
        ) from exc
    values = {str(k).lower(): str(v).upper() for k, v in rows}
    problems = []
    if values.get("log_bin", "ON") not in ("ON", "1"):
        problems.append("log_bin is OFF")
    if values.get("binlog_format", "ROW") != "ROW":
        problems.append(f"binlog_format={values['binlog_format']} (need ROW)")
    if values.get("binlog_row_image", "FULL") != "FULL":
        problems.append(f"binlog_row_image={values['binlog_row_image']} (need FULL: complete before images)")
    if values.get("binlog_row_metadata") != "FULL":
        problems.append(
            f"binlog_row_metadata={values.get('binlog_row_metadata', 'unsupported')} (need FULL: column names "
            "in the binlog, correct across ALTER TABLE; MariaDB >= 10.5 / MySQL >= 8.0.14)"
        )
    if problems:
        raise StreamError("the binlog source cannot feed a change stream: " + "; ".join(problems))


_REPLICA_GRANT = re.compile(r"REPLICATION (SLAVE|REPLICA)\b|ALL PRIVILEGES ON \*\.\*", re.IGNORECASE)
_ROLE_GRANT = re.compile(r"^GRANT\s+`[^`]*`(@`[^`]*`)?\s+TO\b", re.IGNORECASE)


def check_replication_grants(connection: dict[str, Any]) -> None:
    """Refuse a user who cannot read the binlog, before anything is written:
    StreamPermissionError. REPLICATION CLIENT (BINLOG MONITOR) is tried (SHOW MASTER
    STATUS); REPLICATION SLAVE cannot be tried without opening a replication connection,
    so it is read from SHOW GRANTS: a user with a granted role is let through (the role's
    privileges are not listed there; the stream itself then reports a missing grant)."""
    current_position(connection)
    user = connection.get("user")
    try:
        grants = [str(r[0]) for r in _query(connection, "SHOW GRANTS FOR CURRENT_USER()")]
    except pymysql.err.MySQLError as exc:
        if _code(exc) in _PERMISSION_CODES:
            raise StreamPermissionError(permission_message(user, str(exc))) from exc
        raise StreamUnreachable(f"cannot read the grants of the binlog user: {exc}") from exc
    if any(_ROLE_GRANT.match(g) for g in grants) or any(_REPLICA_GRANT.search(g) for g in grants):
        return
    raise StreamPermissionError(permission_message(user, "its grants have no REPLICATION SLAVE"))


class BinlogChangeStream:
    """One ChangeBatch per committed transaction touching `schemas` x `tables`.

    `schemas` and `tables` filter like the library does: a row event is kept when its schema is
    in `schemas` AND its table name is in `tables`. `start` must be a transaction boundary (a
    position this stream yielded, `current_position()`, or a snapshot position).

    Row values are as the library decodes them: DATETIME naive wall time (the legacy's zone),
    TIMESTAMP as an *aware* UTC datetime (the binlog stores epoch seconds; the library gives
    naive UTC via utcfromtimestamp, which this stream marks as UTC so that nobody takes it for
    wall time: `readers.images` turns it into the wall time a SQL read shows), JSON parsed,
    DECIMAL as Decimal. `committed_at` is the commit event's timestamp (whole
    seconds, aware UTC).

    One consumer at a time: `batches()` owns the reader; calling it again continues from
    `resume_position`. `stop` and `idle_timeout_s` are noticed at the next event or heartbeat
    (<= `heartbeat_s` on an idle server).
    """

    def __init__(
        self,
        connection: dict[str, Any],
        *,
        server_id: int,
        schemas: Collection[str],
        tables: Collection[str],
        start: StreamPosition,
        heartbeat_s: float = 5.0,
        stall_timeout_s: float = 30.0,
        progress_every_txns: int = 1000,
        progress_every_s: float = 10.0,
        max_reconnects: int = 8,
        backoff_initial_s: float = 0.2,
        backoff_max_s: float = 10.0,
    ) -> None:
        if not start.log_file or start.log_file == "poll" or start.log_pos is None:
            raise ValueError(f"a binlog stream needs a binlog file and position to start from, got {start!r}")
        if not schemas or not tables:
            raise ValueError("name at least one schema and one table to stream")
        if heartbeat_s <= 0 or stall_timeout_s <= 2 * heartbeat_s:
            raise ValueError(
                f"stall_timeout_s ({stall_timeout_s}) must exceed twice heartbeat_s ({heartbeat_s}): "
                "an idle but healthy stream would otherwise be reported stalled"
            )
        self._settings = _settings(connection)
        self._user = self._settings.get("user")
        self.server_id = int(server_id)
        self.schemas = frozenset(schemas)
        self.tables = frozenset(tables)
        self.heartbeat_s = float(heartbeat_s)
        self.stall_timeout_s = float(stall_timeout_s)
        self.progress_every_txns = max(1, int(progress_every_txns))
        self.progress_every_s = float(progress_every_s)
        self.max_reconnects = int(max_reconnects)
        self.backoff_initial_s = float(backoff_initial_s)
        self.backoff_max_s = float(backoff_max_s)
        self._boundary = start  # last transaction boundary passed: where a reconnect resumes
        self._yielded: StreamPosition | None = None
        self._last_gtid = start.gtid
        self._reader: BinLogStreamReader | None = None
        self._checked = False
        self._columns: dict[tuple[str, str], tuple[str, ...]] = {}
        # table id -> its TIMESTAMP columns and row plan; present once the id's column names were checked
        self._tables: dict[int, _TableMeta] = {}
        self.fast_rows = True  # read row images with readers.streams.row_decoder where it covers the table
        self.library_rows = 0  # row changes the library decoded (tables or events the row decoder does not cover)
        self.reconnects = 0  # total reconnects made, for metrics and tests
        self.heartbeats = 0  # heartbeats received (the server sends them when it has nothing else)
        self.schema_changes: list[tuple[StreamPosition, str]] = []  # DDL seen on the selected tables

    # ------------------------------------------------------------------ public

    @property
    def position(self) -> StreamPosition | None:
        """The position of the last batch yielded (None before the first)."""
        return self._yielded

    @property
    def resume_position(self) -> StreamPosition:
        """The last transaction boundary passed (>= `position`): where the next read starts."""
        return self._boundary

    @property
    def connection_id(self) -> int | None:
        """The server-side id of the current binlog dump connection (SHOW PROCESSLIST Id)."""
        conn = getattr(self._reader, "_stream_connection", None) if self._reader is not None else None
        try:
            return int(conn.thread_id()) if conn is not None else None
        except Exception:  # noqa: BLE001
            return None

    def close(self) -> None:
        if self._reader is not None:
            try:
                self._reader.close()
            except Exception:  # noqa: BLE001 - closing a broken socket
                pass
            self._reader = None

    def batches(
        self,
        stop: threading.Event | None = None,
        max_batches: int | None = None,
        idle_timeout_s: float | None = None,
    ) -> Iterator[ChangeBatch]:
        """Yield one ChangeBatch per committed transaction on the selected tables, plus an empty
        one now and then for foreign progress (see the module doc).

        Ends when `stop` is set, after `max_batches`, or when no batch was yielded for
        `idle_timeout_s` (on an idle server that is noticed at the next heartbeat, so it can
        be up to `heartbeat_s` late); a pending uncommitted transaction is dropped. Raises
        StreamStalled, StreamPermissionError, StreamError.
        """
        if max_batches is not None and max_batches <= 0:
            return
        if not self._checked:
            self._preflight()
        emitted = 0
        last_yield = time.monotonic()
        pending_foreign = 0
        failures = 0
        while True:
            if stop is not None and stop.is_set():
                return
            tx = _Tx()
            try:
                self._open(self._boundary)
                assert self._reader is not None
                while True:
                    if stop is not None and stop.is_set():
                        return
                    now = time.monotonic()
                    if idle_timeout_s is not None and now - last_yield >= idle_timeout_s:
                        return
                    event = self._fetch()
                    if isinstance(event, HeartbeatLogEvent):
                        self.heartbeats += 1
                        failures = 0
                        if pending_foreign and now - last_yield >= self.progress_every_s:
                            pending_foreign = 0
                            yield ChangeBatch(changes=(), position=self._mark_yielded())
                            emitted += 1
                            last_yield = time.monotonic()
                            if max_batches is not None and emitted >= max_batches:
                                return
                        continue
                    result = self._handle(event, tx)
                    if result is None:
                        continue
                    failures = 0
                    if result.changes:
                        pending_foreign = 0
                    else:
                        pending_foreign += 1
                        if not (
                            pending_foreign >= self.progress_every_txns or now - last_yield >= self.progress_every_s
                        ):
                            continue
                        pending_foreign = 0
                    self._yielded = result.position
                    yield result
                    emitted += 1
                    last_yield = time.monotonic()
                    if max_batches is not None and emitted >= max_batches:
                        return
            except _Reconnect as why:
                failures += 1
                if failures > self.max_reconnects:
                    raise StreamError(
                        f"binlog stream gave up after {self.max_reconnects} reconnects in a row "
                        f"(last: {why.reason}); resume from {self._boundary}"
                    ) from why
                delay = min(self.backoff_max_s, self.backoff_initial_s * (2 ** (failures - 1)))
                self.reconnects += 1
                dropped = f", dropping {len(tx.changes)} uncommitted row changes" if tx.changes else ""
                log.warning(
                    "binlog stream (server_id %s) lost its connection: %s; reconnecting from %s:%s "
                    "(last transaction boundary) in %.1f s, attempt %d/%d%s",
                    self.server_id,
                    why.reason,
                    self._boundary.log_file,
                    self._boundary.log_pos,
                    delay,
                    failures,
                    self.max_reconnects,
                    dropped,
                )
                self.close()
                if stop is not None:
                    if stop.wait(delay):
                        return
                else:
                    time.sleep(delay)
            finally:
                self.close()

    # ------------------------------------------------------------------ internals

    def _mark_yielded(self) -> StreamPosition:
        self._yielded = self._boundary
        return self._boundary

    def _preflight(self) -> None:
        check_binlog_source(self._settings)
        self._checked = True

    def _open(self, position: StreamPosition) -> None:
        self.close()
        # table ids are the server's in-memory ids: a new reader (after a reconnect, maybe
        # to a restarted server) may see the same id name another table
        self._tables.clear()
        settings = dict(self._settings)
        settings["read_timeout"] = self.stall_timeout_s  # a silent socket beyond this = stalled
        settings.setdefault("connect_timeout", min(10, max(1, int(self.stall_timeout_s))))
        log.info("binlog stream (server_id %s) opening at %s:%s", self.server_id, position.log_file, position.log_pos)
        self._reader = BinLogStreamReader(
            connection_settings=settings,
            server_id=self.server_id,
            blocking=True,  # trap 3: never the non-blocking GTID path
            resume_stream=True,  # trap 2: otherwise log_pos is ignored
            log_file=position.log_file,
            log_pos=position.log_pos,
            is_mariadb=False,  # trap 1: the MariaDB path ignores log_file/log_pos
            only_schemas=sorted(self.schemas),
            only_tables=sorted(self.tables),
            only_events=_EVENTS,
            slave_heartbeat=self.heartbeat_s,
            pymysql_wrapper=_StreamConnection,  # trap 4: the library never retries on its own
            freeze_schema=True,  # speed: a known table id skips its TableMap re-parse; DDL drops the id (_schema_changed)
            enable_logging=False,
        )

    def _fetch(self) -> Any:
        assert self._reader is not None
        try:
            event = self._reader.fetchone()
        except _ConnectionLost as exc:
            if exc.timed_out:
                raise StreamStalled(
                    f"binlog stream (server_id {self.server_id}) received no event and no heartbeat for "
                    f"{self.stall_timeout_s:.0f} s (heartbeats were asked every {self.heartbeat_s:.0f} s) at "
                    f"{self._boundary.log_file}:{self._boundary.log_pos}: the server or the network is stuck; "
                    "restart the stream from its last checkpoint"
                ) from exc
            raise _Reconnect(f"connection lost ({exc})") from exc
        except pymysql.err.MySQLError as exc:
            code = _code(exc)
            if code in _PERMISSION_CODES:
                raise StreamPermissionError(permission_message(self._user, str(exc))) from exc
            if code in _FATAL_CODES:
                raise StreamError(
                    f"the server refuses to stream from {self._boundary.log_file}:{self._boundary.log_pos}: {exc}. "
                    "The binlog there may be purged (expire_logs_days): take a new snapshot"
                ) from exc
            raise _Reconnect(f"{type(exc).__name__} {exc}") from exc
        except OSError as exc:
            raise _Reconnect(f"{type(exc).__name__} {exc}") from exc
        except AssertionError as exc:
            # pymysql's packet reader asserts a packet's length: a server that died while
            # sending one (a restart) leaves it short. The stream exited 1 on it in the
            # chaos soak; it is a lost connection like any other
            raise _Reconnect(f"a truncated packet ({str(exc).splitlines()[0]})") from exc
        if event is None:  # EOF packet: the server ended the dump
            raise _Reconnect("the server ended the binlog dump (EOF)")
        return event

    def _commit(self, tx: _Tx, event: Any) -> ChangeBatch:
        assert self._reader is not None
        if tx.gtid is not None:
            self._last_gtid = tx.gtid
        self._boundary = StreamPosition(str(self._reader.log_file), int(self._reader.log_pos), self._last_gtid)
        ts = getattr(event, "timestamp", 0) or 0
        batch = ChangeBatch(
            changes=tuple(tx.changes),
            position=self._boundary,
            committed_at=datetime.fromtimestamp(ts, timezone.utc) if ts else None,
        )
        tx.changes = []
        tx.gtid = None
        tx.open = False
        return batch

    def _handle(self, event: Any, tx: _Tx) -> ChangeBatch | None:
        """Feed one event; returns a batch at each transaction boundary (empty when foreign)."""
        if isinstance(event, (WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent)):
            tx.changes.extend(self._row_changes(event))
            return None
        if isinstance(event, XidEvent):
            return self._commit(tx, event)
        if isinstance(event, XAPrepareEvent):
            if tx.changes:
                raise StreamError(
                    f"an XA transaction changed {len(tx.changes)} rows of the selected tables (XA PREPARE before "
                    f"{self._reader.log_file if self._reader else '?'}:{self._reader.log_pos if self._reader else '?'}); "
                    "XA transactions are not supported by this stream: it stops here rather than lose or guess "
                    "them (an XA transaction commits or rolls back later, in another binlog group)"
                )
            return self._commit(tx, event)  # an XA PREPARE on other tables: a boundary
        if isinstance(event, MariadbGtidEvent):
            self._new_group(tx, event.gtid, opens=not (event.flags & _MARIADB_GTID_STANDALONE))
            return None
        if isinstance(event, GtidEvent):  # MySQL: BEGIN follows as a QueryEvent
            self._new_group(tx, getattr(event, "gtid", None), opens=False)
            return None
        if isinstance(event, QueryEvent):
            return self._query_event(event, tx)
        if isinstance(event, TableMapEvent):
            self._table_map(event)
            return None
        if isinstance(event, RotateEvent):
            if event.timestamp:  # a real rotation (the one sent at connect has timestamp 0)
                self._tables.clear()  # the library forgets its table ids here too (a restart rotates)
                log.info("binlog stream (server_id %s) rotated to %s", self.server_id, event.next_binlog)
            return None
        return None

    def _new_group(self, tx: _Tx, gtid: str | None, *, opens: bool) -> None:
        if tx.changes:
            log.error(
                "binlog stream: a new transaction began before the previous one committed; "
                "dropping %d row changes that had no commit (a truncated binlog group?)",
                len(tx.changes),
            )
        tx.changes = []
        tx.gtid = gtid
        tx.open = opens

    def _query_event(self, event: QueryEvent, tx: _Tx) -> ChangeBatch | None:
        query = event.query.strip()
        head = query[:16].upper()
        if head.startswith("BEGIN") or head.startswith("START TRANSACTION"):
            tx.open = True
            return None
        if head.startswith("COMMIT"):  # non-transactional tables (MyISAM ...) commit by query
            return self._commit(tx, event)
        if head.startswith("ROLLBACK") and not head.startswith("ROLLBACK TO"):
            if tx.changes:
                # in ROW format only non-transactional changes reach the binlog before a ROLLBACK,
                # and a replica keeps them: so do we
                log.warning(
                    "binlog stream: %d row changes logged before a ROLLBACK (non-transactional "
                    "tables); emitting them as committed",
                    len(tx.changes),
                )
            return self._commit(tx, event)
        schema = event.schema.decode() if isinstance(event.schema, bytes) else (event.schema or None)
        touched: set[tuple[str | None, str]] = {
            (s, t) for s, t in ddl_tables(query, schema) if t in self.tables and (s in self.schemas)
        }
        if touched:
            self._schema_changed(touched, query, tx.gtid or self._last_gtid)
        if tx.open:
            return None  # a statement inside a transaction (SAVEPOINT, ...): not a boundary
        return self._commit(tx, event)  # a standalone statement (DDL): a boundary, nothing emitted

    def _schema_changed(self, touched: set[tuple[str | None, str]], query: str, gtid: str | None) -> None:
        """DDL on a selected table: forget the cached table maps and column names so the next
        rows decode with the metadata of their own TableMap (FULL metadata carries the names)."""
        assert self._reader is not None
        names = sorted(f"{s}.{t}" for s, t in touched)
        for table_id, table in list(self._reader.table_map.items()):
            if (table.schema, table.table) in touched:
                del self._reader.table_map[table_id]
                self._tables.pop(table_id, None)
        cache = getattr(_row_event, "_COLUMN_NAME_CACHE", None)  # only used without FULL metadata
        for s, t in touched:
            if isinstance(cache, dict):
                cache.pop(f"{s}.{t}", None)
        after = StreamPosition(str(self._reader.log_file), int(self._reader.log_pos), gtid)
        self.schema_changes.append((after, query))
        if query.lstrip()[:8].upper().startswith("TRUNCATE"):
            log.warning(
                "binlog stream: TRUNCATE on %s at %s:%s - its row deletions are NOT in the binlog; "
                "run a full compare of that table",
                ", ".join(names),
                after.log_file,
                after.log_pos,
            )
        else:
            log.warning(
                "binlog stream: DDL on %s at %s:%s, column metadata reloaded: %s",
                ", ".join(names),
                after.log_file,
                after.log_pos,
                " ".join(query.split())[:300],
            )

    def _table_map(self, event: TableMapEvent) -> None:
        key = (event.schema, event.table)
        names = tuple(c.name for c in event.columns)
        if any(not n for n in names):
            raise StreamError(
                f"the binlog carries no column names for {event.schema}.{event.table}: set "
                "binlog_row_metadata=FULL on the source (rows would decode as UNKNOWN_COL0..n)"
            )
        old = self._columns.get(key)
        if old != names:
            if old is not None:
                log.info("binlog stream: columns of %s.%s are now %s (were %s)", *key, names, old)
            self._columns[key] = names

    def _table_meta(self, event: Any) -> _TableMeta:
        """Worked out once per table id (the columns are the TableMap's, the same for every row
        event under that id): that the binlog names the columns, which are TIMESTAMPs, and
        the plan that reads the images (None: a column type only the library reads)."""
        if any(not c.name or c.name.startswith("UNKNOWN_COL") for c in event.columns):
            raise StreamError(
                f"rows of {event.schema}.{event.table} decoded without column names: set "
                "binlog_row_metadata=FULL on the source"
            )
        utc = tuple(c.name for c in event.columns if c.type in (FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2))
        meta = _TableMeta(utc, plan_for(event.columns) if self.fast_rows else None)
        self._tables[event.table_id] = meta
        return meta

    def _row_changes(self, event: Any) -> list[RowChange]:
        # the row dicts are handed on as they are (no copy): each is decoded fresh for this
        # event and referenced by nothing else
        meta = self._tables.get(event.table_id) or self._table_meta(event)
        schema, table = event.schema, event.table
        images = None
        if meta.plan is not None:
            try:
                images = event_images(event, meta.plan)
            except Exception:  # noqa: BLE001 - a decoder bug must not stop the stream: the library reads it
                log.exception(
                    "binlog stream: the row decoder failed on %s.%s at %s:%s; reading this table "
                    "with the library from now on",
                    schema,
                    table,
                    self._reader.log_file if self._reader else "?",
                    self._reader.log_pos if self._reader else "?",
                )
                meta.plan = None
        if images is None:
            images = _library_images(event)
            self.library_rows += len(images)
        if isinstance(event, UpdateRowsEvent):
            op = ChangeOp.UPDATE
        elif isinstance(event, WriteRowsEvent):
            op = ChangeOp.INSERT
        else:
            op = ChangeOp.DELETE
        out = [RowChange(op=op, schema=schema, table=table, before=before, after=after) for before, after in images]
        if meta.utc:
            for ch in out:
                for image in (ch.before, ch.after):
                    if image is None:
                        continue
                    for name in meta.utc:
                        value = image.get(name)
                        if isinstance(value, datetime) and value.tzinfo is None:
                            image[name] = value.replace(tzinfo=timezone.utc)
        return out


class _TableMeta:
    __slots__ = ("plan", "utc")

    def __init__(self, utc: tuple[str, ...], plan: RowPlan | None) -> None:
        self.utc = utc
        self.plan = plan


def _library_images(event: Any) -> list[tuple[dict[str, Any] | None, dict[str, Any] | None]]:
    """(before, after) per row as the library decodes them (the path for what the row
    decoder does not cover)."""
    if isinstance(event, UpdateRowsEvent):
        return [(row["before_values"], row["after_values"]) for row in event.rows]
    if isinstance(event, WriteRowsEvent):
        return [(None, row["values"]) for row in event.rows]
    return [(row["values"], None) for row in event.rows]
