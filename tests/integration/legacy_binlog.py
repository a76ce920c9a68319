"""The binlog change stream of a legacy database's definition tables, as `migrate stream`
reads them, for tests that follow it in this process beside the shared server's other
databases."""

from __future__ import annotations

from sqlalchemy.engine import make_url

from readers.records import StreamPosition
from readers.streams import BinlogChangeStream
from tests.integration.test_binlog_stream import new_server_id


def legacy_binlog(cdc_url: str, legacy_url: str, start: StreamPosition, stall_timeout_s: float) -> BinlogChangeStream:
    """From `start`, as the CDC user of `cdc_url`, the xxl-job and batch-center definition
    tables of `legacy_url`'s database."""
    u = make_url(cdc_url)
    return BinlogChangeStream(
        {"host": u.host, "port": u.port or 3306, "user": u.username, "password": u.password or ""},
        server_id=new_server_id(),
        schemas=[str(make_url(legacy_url).database)],
        tables=["xxl_job_info", "xxl_job_group", "bc_biz"],
        start=start,
        heartbeat_s=1.0,
        # through the other tests' transactions on the shared server, progress every 0.5 s
        # (not the default 10 s): a test's wait for the head ends on it
        progress_every_s=0.5,
        stall_timeout_s=stall_timeout_s,
    )
