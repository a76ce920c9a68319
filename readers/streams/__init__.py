"""Change streams of legacy tables: committed transactions as ChangeBatch records.

* `BinlogChangeStream` (binlog.py): reads the MySQL/MariaDB binlog like a replica; one batch per
  committed transaction, resumable from the position in each batch, owns its reconnects.
* `consistent_snapshot` (snapshot.py): a snapshot transaction and the binlog position to
  stream from after reading it.
* `PollingChangeStream` (polling.py): the weaker fallback without REPLICATION grants
  (update-time polling with an overlap window; deletes via `full_compare`).

Like the rest of `readers`, imports nothing else of Switchyard.
"""

from readers.streams.binlog import BinlogChangeStream, check_binlog_source, check_replication_grants, current_position
from readers.streams.errors import StreamError, StreamPermissionError, StreamStalled, StreamUnreachable
from readers.streams.polling import PollingChangeStream, content_hash
from readers.streams.snapshot import consistent_snapshot

__all__ = [
    "BinlogChangeStream",
    "PollingChangeStream",
    "StreamError",
    "StreamPermissionError",
    "StreamStalled",
    "StreamUnreachable",
    "check_binlog_source",
    "check_replication_grants",
    "consistent_snapshot",
    "content_hash",
    "current_position",
]
