"""A consistent snapshot of the legacy tables, and the binlog position that goes with it.

The hand-off: read every legacy row inside the snapshot transaction, apply it, then stream
the binlog from the snapshot's position. Nothing committed before the position is missed by
the snapshot, nothing committed after it is missed by the stream.

How the position is obtained, best first:

* MariaDB (exact, no extra grant): `START TRANSACTION WITH CONSISTENT SNAPSHOT`, then in the
  same session `SHOW STATUS LIKE 'binlog_snapshot_%'`. MariaDB's `Binlog_snapshot_file` /
  `Binlog_snapshot_position` are the binlog coordinates of exactly the commits the snapshot
  sees (verified on our 10.11: a row committed by another session after the START stays
  invisible to the snapshot and the variables keep their value while SHOW MASTER STATUS moves
  on). The GTID is `BINLOG_GTID_POS(file, pos)`. Neither needs REPLICATION CLIENT, so the
  snapshot can run as the read-only legacy user.
* `FLUSH TABLES WITH READ LOCK` + SHOW MASTER STATUS + snapshot + UNLOCK is exact on MySQL too,
  but needs RELOAD and stops every writer of the legacy server for a moment: not done here.
* MySQL / others (`exact=False`): read the position (SHOW MASTER STATUS, needs REPLICATION
  CLIENT) *before* starting the snapshot transaction. Commits that land between the two are
  then in the snapshot AND in the stream: the stream replays them from the earlier position.
  That is safe because the apply is idempotent (ledger keyed by source key with content
  hashes: an insert of a row already there with the same content is a no-op, an update to the
  content already there is a no-op, a delete of a missing row is a no-op). Position AFTER the
  snapshot would lose those commits, so the order is never reversed.
* TiDB has no MySQL binlog for this library (TiCDC is separate): not supported here.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy.engine import Connection, Engine

from dbkit.capabilities import capabilities
from readers.records import StreamPosition
from readers.streams.binlog import current_position
from readers.streams.errors import StreamError

log = logging.getLogger(__name__)


def _is_mariadb(conn: Connection) -> bool:
    version = conn.exec_driver_sql("SELECT VERSION()").scalar() or ""
    return "mariadb" in str(version).lower()


def _snapshot_status(conn: Connection) -> tuple[str, int] | None:
    rows: dict[Any, Any] = dict(conn.exec_driver_sql("SHOW SESSION STATUS LIKE 'binlog_snapshot_%%'").fetchall())
    file_, pos = rows.get("Binlog_snapshot_file"), rows.get("Binlog_snapshot_position")
    if not file_ or pos in (None, ""):
        return None
    return str(file_), int(pos)


@contextmanager
def consistent_snapshot(engine_or_connection: Engine | Connection) -> Iterator[tuple[Connection, StreamPosition]]:
    """Yield (connection inside a REPEATABLE READ consistent-snapshot transaction, position).

    Read the legacy rows through the yielded connection only; the transaction is rolled back at
    the end (it never writes). A Connection passed in must not be inside a transaction (START
    TRANSACTION would silently commit it). After the block, stream from the position: every
    commit after it is in the stream, every commit before it is in the snapshot (MariaDB exact;
    elsewhere a few may be in both, see the module doc).
    """
    owned = isinstance(engine_or_connection, Engine)
    if owned:
        conn = engine_or_connection.connect()  # type: ignore[union-attr]
    elif isinstance(engine_or_connection, Connection):
        conn = engine_or_connection
        if conn.in_transaction():
            raise StreamError(
                "consistent_snapshot needs a connection outside any transaction "
                "(START TRANSACTION WITH CONSISTENT SNAPSHOT would commit the open one); "
                "commit or roll back first, or pass the Engine"
            )
    else:
        raise TypeError(f"expected a SQLAlchemy Engine or Connection, got {type(engine_or_connection)!r}")
    try:
        if not capabilities(conn).binlog:
            raise StreamError(f"consistent_snapshot needs a MySQL/MariaDB source, not {conn.dialect.name}")
        mariadb = _is_mariadb(conn)
        conn.rollback()  # end the implicit transaction SQLAlchemy began for the probe
        before: StreamPosition | None = None
        if not mariadb:
            before = current_position(conn)  # fallback: the position BEFORE the snapshot
            conn.rollback()
        conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        conn.exec_driver_sql("START TRANSACTION WITH CONSISTENT SNAPSHOT")
        position: StreamPosition
        if mariadb:
            status = _snapshot_status(conn)
            if status is None:
                raise StreamError("MariaDB reported no Binlog_snapshot_file/position: is log_bin on?")
            gtid: Any = conn.exec_driver_sql("SELECT BINLOG_GTID_POS(%s, %s)", status).scalar()
            position = StreamPosition(status[0], status[1], str(gtid) if gtid else None)
            log.info(
                "consistent snapshot at %s:%s (gtid %s), exact (MariaDB binlog_snapshot_*)",
                position.log_file,
                position.log_pos,
                position.gtid,
            )
        else:
            assert before is not None
            position = before
            log.info(
                "consistent snapshot: stream from %s:%s, read BEFORE the snapshot began; commits in "
                "between are replayed by the stream (idempotent apply)",
                position.log_file,
                position.log_pos,
            )
        yield conn, position
    finally:
        try:
            conn.rollback()
        finally:
            if owned:
                conn.close()
