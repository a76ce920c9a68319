"""The errors a change stream raises. Each message says what happened and what to do."""

from __future__ import annotations


class StreamError(Exception):
    """A change stream cannot go on (bad configuration, lost position, too many reconnects)."""


class StreamStalled(StreamError):
    """Nothing (no event, no heartbeat) arrived for longer than the stall timeout."""


class StreamUnreachable(StreamError):
    """The binlog source does not answer (refused, timed out, unknown host)."""


class StreamPermissionError(StreamError):
    """The stream's user lacks a grant it needs."""


#: what a binlog CDC user needs, in the server's own words
REPLICATION_GRANTS = (
    "REPLICATION SLAVE (read the binlog; MariaDB >= 10.5 also calls it REPLICATION REPLICA), "
    "REPLICATION CLIENT (SHOW MASTER STATUS; MariaDB >= 10.5: BINLOG MONITOR) "
    "and SELECT (column names for servers without binlog_row_metadata=FULL)"
)


def permission_message(user: str | None, detail: str) -> str:
    who = f"user {user!r}" if user else "the stream's user"
    return (
        f"{who} may not read the binlog: {detail}. A binlog change stream needs {REPLICATION_GRANTS}: "
        f"GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO <user>; "
        "without them use the polling stream (readers.streams.polling.PollingChangeStream)"
    )
