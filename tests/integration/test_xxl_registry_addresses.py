"""The xxl-job bridge's executor addresses from the legacy `xxl_job_registry` on the real
MariaDB: live EXECUTOR rows of the app only (heard from within 90 s, in the admin's
database zone), sorted as the admin sorts them."""

from __future__ import annotations

from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text

from readers.xxljob.live_rows import XxlRegistryAddresses
from scheduler_core.store.engine import make_engine
from tests.backends import mariadb_database

pytestmark = pytest.mark.mariadb


@pytest.mark.parametrize("db_tz", ["Asia/Shanghai", "UTC"])
def test_live_rows_of_the_app_sorted(db_tz: str) -> None:
    with mariadb_database() as url:
        engine = make_engine(url)
        now = datetime.now(ZoneInfo(db_tz)).replace(tzinfo=None, microsecond=0)
        with engine.begin() as conn:
            conn.execute(
                text(
                    "CREATE TABLE xxl_job_registry (id bigint AUTO_INCREMENT PRIMARY KEY, "
                    "registry_group varchar(50) NOT NULL, registry_key varchar(255) NOT NULL, "
                    "registry_value varchar(255) NOT NULL, update_time datetime NULL)"
                )
            )
            rows = [
                ("EXECUTOR", "demo-app", "http://10.0.0.2:9999/", now),
                ("EXECUTOR", "demo-app", "http://10.0.0.1:9999/", now - timedelta(seconds=30)),
                ("EXECUTOR", "demo-app", "http://10.0.0.3:9999/", now - timedelta(seconds=200)),  # dead
                ("EXECUTOR", "other-app", "http://10.0.0.4:9999/", now),
                ("ADMIN", "demo-app", "http://10.0.0.5:8080/", now),
            ]
            for g, k, v, t in rows:
                conn.execute(
                    text(
                        "INSERT INTO xxl_job_registry (registry_group, registry_key, registry_value, "
                        "update_time) VALUES (:g, :k, :v, :t)"
                    ),
                    {"g": g, "k": k, "v": v, "t": t},
                )
        try:
            addresses = XxlRegistryAddresses(url, db_tz, refresh_s=0)
            assert addresses("demo-app") == ["http://10.0.0.1:9999/", "http://10.0.0.2:9999/"]
            assert addresses("missing-app") == []
        finally:
            engine.dispose()
