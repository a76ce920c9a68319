"""`switchyard migrate run --source batch-center` sets the documented `migrated` flag only
after the target commit, and a flag a crash left unset is repaired by the next run
without writing the target again."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import text

from legacy_sim.seed import seed_batchcenter
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.schema import init_schema


def _migrate(legacy: str, target: str) -> dict[str, object]:
    result = CliRunner().invoke(
        cli,
        ["migrate", "run", "--source", "batch-center", "--legacy-url", legacy, "--url", target, "--json"],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    return json.loads(result.output.strip().splitlines()[-1])


def test_a_lost_migrated_flag_is_set_again_by_the_next_run(tmp_path: Path) -> None:
    target, legacy = f"sqlite:///{tmp_path / 'target.db'}", f"sqlite:///{tmp_path / 'legacy.db'}"
    engine = make_engine(target)
    init_schema(engine, 4)
    engine.dispose()
    leg = make_engine(legacy)
    create_legacy_schema(leg, "batch-center")
    seed_batchcenter(leg, businesses=2, tasks_per_business=4, bad_rows=0, malformed_crons=0)
    try:
        first = _migrate(legacy, target)
        with leg.connect() as conn:
            flagged = conn.execute(text("SELECT COUNT(*) FROM bc_task WHERE migrated = 1")).scalar_one()
        assert flagged > 0
        # a crash after the target commit and before the flag: the flag is lost
        with leg.begin() as conn:
            conn.execute(text("UPDATE bc_task SET migrated = 0"))
        second = _migrate(legacy, target)
        with leg.connect() as conn:
            again = conn.execute(text("SELECT COUNT(*) FROM bc_task WHERE migrated = 1")).scalar_one()
        assert again == flagged, "the next run must repair the flag"
        counts = second["counts"]
        assert isinstance(counts, dict) and counts.get("create", 0) == 0 and counts.get("update", 0) == 0, (
            f"repairing the flag must not write the target again: {second}"
        )
        assert first["counts"] != counts
    finally:
        leg.dispose()
