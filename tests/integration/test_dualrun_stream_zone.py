"""`dualrun compare`'s change-stream check on a MariaDB legacy followed by the polling stream
counts the definition rows edited after the stream's high water, reading the legacy
DATETIMEs in the database zone of the source's zone pair (the check was once handed the
pair itself, which ZoneInfo refuses with a TypeError). Real MariaDB for the legacy side."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pytest
from sqlalchemy import text

from dualrun.settings import CompareSettings
from migrator.catchup import POLL_FILE
from readers.legacy_ddl.loader import create_legacy_schema
from readers.records import SourceSystem
from readers.timezones import LegacyZones
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.cli.dualrun import ComparisonInputs
from switchyard.wiring import dualrun_store, migrator_store, open_store
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb

HIGH_WATER = datetime(2026, 12, 2, 6, 0, tzinfo=timezone.utc)


def _store_url(tmp_path: Path) -> str:
    from click.testing import CliRunner

    url = f"sqlite:///{tmp_path / 'target.db'}"
    result = CliRunner().invoke(cli, ["db", "init", "--url", url])
    assert result.exit_code == 0, result.output
    return url


@pytest.mark.parametrize(
    ("db_zone", "pending"),
    [
        # 07:30 on the legacy's wall clock: 06:30 UTC in Berlin (after the 06:00 UTC high water),
        # 23:30 UTC the day before in Shanghai (before it)
        ("Europe/Berlin", 1),
        ("Asia/Shanghai", 0),
    ],
)
def test_the_stream_check_reads_legacy_datetimes_in_the_database_zone(
    tmp_path: Path, db_zone: str, pending: int
) -> None:
    with mariadb_database("sy_zone") as legacy_url:
        legacy = make_engine(legacy_url)
        try:
            create_legacy_schema(legacy, "xxl-job", "3.4", tz=db_zone)
            with legacy.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO xxl_job_info (job_group, job_desc, glue_type, update_time) "
                        "VALUES (1, 'edited', 'BEAN', '2026-12-02 07:30:00')"
                    )
                )
        finally:
            legacy.dispose()
        url = _store_url(tmp_path)
        store = open_store(url)
        try:
            with store.engine.begin() as conn:
                conn.execute(
                    text(
                        "INSERT INTO dus_stream_checkpoint (stream_id, log_file, log_pos, gtid, "
                        "events_applied, updated_at) VALUES (:s, :f, :p, NULL, 0, :u)"
                    ),
                    {
                        "s": "xxl-job@legacy",
                        "f": POLL_FILE,
                        "p": int(HIGH_WATER.timestamp() * 1000),
                        "u": int(datetime.now(timezone.utc).timestamp() * 1000),
                    },
                )
            # the cron zone differs from the database zone: only the database zone may count
            zones = LegacyZones(db=db_zone, cron="America/New_York")
            sources = ComparisonInputs(
                store=store,
                own=dualrun_store(store),
                migrator=migrator_store(store),
                legacy_url=legacy_url,
                legacy_tz=zones,
                source=SourceSystem.XXL_JOB,
                settings_file={},
                base=CompareSettings(),
                probe=None,
                readers={},
            )
            state = sources.stream_state("any-business", SourceSystem.XXL_JOB, datetime.now(timezone.utc))
        finally:
            store.engine.dispose()
    assert state is not None and state.stream_id == "xxl-job@legacy"
    assert state.caught_up is (pending == 0), state.sentence
