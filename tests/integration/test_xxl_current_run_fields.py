"""The bridge's view of a job's legacy row as it is now (`XxlCurrentRunFields`) on the real
MariaDB: an edit made in the admin after the command was published reaches the next
bridged run (the stand-in executor gets the edited GLUE source and its version time, read
in the admin's database zone), as the xxl-job admin reads the row at every trigger."""

from __future__ import annotations

from datetime import datetime, timezone
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from readers.legacy_ddl.tables import xxljob_metadata
from readers.xxljob.live_rows import XxlCurrentRunFields
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database
from tests.unit.test_bridge_xxljob_threads import V1, V2, glue_params
from tests.unit.test_bridges import Xxl, ctx

pytestmark = pytest.mark.mariadb

SAVED_V1 = datetime(2026, 12, 5, 10, 36, 15)  # admin wall clock (JDBC serverTimezone)
SAVED_V2 = datetime(2026, 12, 5, 10, 46, 20)


def _ms(wall: datetime, tz: str) -> int:
    return int(wall.replace(tzinfo=ZoneInfo(tz)).astimezone(timezone.utc).timestamp() * 1000)


@pytest.mark.parametrize("db_tz", ["Asia/Shanghai", "UTC"])
def test_an_admin_edit_reaches_the_next_bridged_run(db_tz: str) -> None:
    with mariadb_database() as url:
        engine = make_engine(url)
        xxljob_metadata("3.4").create_all(engine)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO xxl_job_info (id, job_group, job_desc, schedule_type, schedule_conf, "
                    "executor_route_strategy, executor_handler, executor_param, executor_block_strategy, executor_timeout, "
                    "glue_type, glue_source, glue_updatetime, trigger_status) VALUES "
                    "(7, 1, 'glue', 'CRON', '5/20 * * * * ?', 'FIRST', '', 'g', 'COVER_EARLY', 0, "
                    "'GLUE_SHELL', :src, :at, 1), "
                    "(8, 1, 'bean', 'CRON', '0 * * * * ?', 'ROUND', 'demoJobHandler', NULL, NULL, 5, 'BEAN', NULL, NULL, 1)"
                ),
                {"src": V1, "at": SAVED_V1},
            )
        current = XxlCurrentRunFields(url, db_tz, refresh_s=0)
        x = Xxl(handler=lambda t: None, current_params=current)
        try:
            assert current(8) == {
                "glue_type": "BEAN",
                "executor_param": "",
                "executor_handler": "demoJobHandler",
                "route_strategy": "ROUND",
                "executor_timeout": 5,
            }
            assert current(99) is None
            published = glue_params(V1, _ms(SAVED_V1, db_tz), executor_param="g", block_strategy="COVER_EARLY")
            assert x.bridge(ctx(published)).ok
            # the operator saves V2 in the admin's GLUE editor (jobcode/save)
            with engine.begin() as conn:
                conn.execute(
                    text("UPDATE xxl_job_info SET glue_source = :src, glue_updatetime = :at WHERE id = 7"),
                    {"src": V2, "at": SAVED_V2},
                )
            assert x.bridge(ctx(published)).ok  # a command published before the edit
            first, second = x.executor.triggers
            assert (first["glueSource"], first["glueUpdatetime"]) == (V1, _ms(SAVED_V1, db_tz))
            assert (second["glueSource"], second["glueUpdatetime"]) == (V2, _ms(SAVED_V2, db_tz))
            assert second["executorBlockStrategy"] == "COVER_EARLY" and second["executorParams"] == "g"
        finally:
            x.close()
            current.close()
            engine.dispose()
