"""`status --legacy-url` and the console read the legacy switches through engines of
their own: those are released when done, so a caller asking in a loop (the soak's
sampler, a monitoring script on `status --check`) does not leave a pool per call."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from legacy_sim.seed import seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.clock import SystemClock
from switchyard.wiring import legacy_switches


def test_the_legacy_switches_release_their_connections_when_closed(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'legacy.db'}"
    seeded = create_engine(url)
    create_legacy_schema(seeded, "xxl-job", "3.4")
    seed_xxljob(seeded, "3.4", groups=1, jobs_per_group=3, bad_rows=0, malformed_crons=0, rng_seed=1)
    with seeded.connect() as conn:
        keys = [str(i) for (i,) in conn.execute(text("SELECT id FROM xxl_job_info"))]
    seeded.dispose()

    switches = legacy_switches([url], SystemClock())
    assert switches("batch-center", keys) is None  # no URL of that system: unknown, not "none live"
    live = switches("xxl-job", keys)
    assert live is not None and live <= set(keys)
    pool = switches.controls["xxl-job"].engine.pool  # type: ignore[attr-defined]
    assert pool.checkedin() == 1  # the read's connection, pooled
    switches.close()
    assert pool.checkedin() == 0


def test_a_database_that_is_no_legacy_one_is_refused_with_nothing_left_open(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'other.db'}"
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    engine.dispose()
    with pytest.raises(ValueError, match="neither xxl_job_info nor bc_task"):
        legacy_switches([url], SystemClock())
