"""The cron dialect per row on the real MariaDB: an xxl-job 2.x admin's database (the 2.4
schema, Quartz 2.3) migrated into a MariaDB store, the dialect stored with each trigger
and honoured when it is read back; a version-1 store upgraded in place by `db init`."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from migrator.mapping import MappingOptions
from readers.xxljob.reader import XxlJobReader
from scheduler_core.occurrences import next_after
from tests.backends import mariadb_database
from tests.migration_env import make_env
from tests.unit.test_cron_dialect_rows import (
    EIGHT_TERMS,
    upgrade_keeps_old_triggers_as_they_were,
)

pytestmark = [pytest.mark.mariadb]


def _migrated(version: str | None, lineage: str) -> tuple[str, str, str | None, str | None]:
    """(ledger status, field/reason, stored cron_dialect, next fire) of one 8-term cron row."""
    with mariadb_database("cdl") as legacy_url, mariadb_database("cdt") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", lineage, MappingOptions())
        try:
            env.migrator.reader = XxlJobReader(env.legacy, version=version)
            seed_xxljob(env.legacy, lineage, groups=1, jobs_per_group=3, bad_rows=0, malformed_crons=0, rng_seed=7)
            with env.legacy.begin() as conn:
                job = conn.execute(text("SELECT MIN(id) FROM xxl_job_info")).scalar_one()
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = :c, glue_type = 'BEAN'"
                        " WHERE id = :i"
                    ),
                    {"c": EIGHT_TERMS, "i": job},
                )
            env.migrator.run()
            with env.store.engine.connect() as conn:
                status, reason, code = conn.execute(
                    text(
                        "SELECT status, COALESCE(reason, ''), target_job_code FROM dus_migration_ledger"
                        " WHERE source_key = :k"
                    ),
                    {"k": str(job)},
                ).one()
                stored = (
                    conn.execute(
                        text("SELECT cron_dialect FROM dus_job_trigger WHERE job_code = :c"), {"c": code}
                    ).scalar_one_or_none()
                    if code
                    else None
                )
            nxt = None
            if code:
                (t,) = [t for t in env.store.triggers_of() if t.job_code == code]
                after = next_after(t, datetime(2027, 3, 1, tzinfo=UTC))
                nxt = after.astimezone(UTC).isoformat() if after else None
            return status, reason, stored, nxt
        finally:
            env.legacy.dispose()
            env.store.engine.dispose()


def test_a_2x_admins_eight_term_cron_migrates_as_quartz_23_and_fires() -> None:
    status, reason, stored, nxt = _migrated(None, "2.4")  # schema 2.4 without user.token: Quartz 2.3
    assert (status, stored) == ("migrated", "2.3"), reason
    # noon in the admin's zone (the reader's default, Asia/Shanghai)
    assert nxt == datetime(2027, 3, 1, 12, tzinfo=ZoneInfo("Asia/Shanghai")).astimezone(UTC).isoformat()


def test_the_same_row_on_a_31_admin_is_quarantined_as_that_admin_refuses_it() -> None:
    status, reason, stored, _ = _migrated("3.1.0", "2.4")
    assert status == "quarantined" and stored is None
    assert "Quartz 2.5" in reason and "too many terms" in reason


def test_db_init_upgrades_a_version_1_store_on_mariadb() -> None:
    with mariadb_database("cdu") as url:
        upgrade_keeps_old_triggers_as_they_were(url)
