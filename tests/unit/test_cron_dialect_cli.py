"""`migrate plan|run --xxl-job-version`: the admin's version picks the Quartz dialect its
crons migrate under; without it the schema tells (SQLite legacy, the 2.4 schema)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.unit.test_cron_dialect_rows import EIGHT_TERMS


def _legacy(tmp_path: Path) -> tuple[str, int]:
    url = f"sqlite:///{tmp_path / 'xxl24.db'}"
    engine = make_engine(url)
    create_legacy_schema(engine, "xxl-job", "2.4")
    seed_xxljob(engine, "2.4", groups=1, jobs_per_group=3, bad_rows=0, malformed_crons=0, rng_seed=3)
    with engine.begin() as conn:
        job = conn.execute(text("SELECT MIN(id) FROM xxl_job_info")).scalar_one()
        conn.execute(
            text(
                "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = :c, glue_type = 'BEAN' WHERE id = :i"
            ),
            {"c": EIGHT_TERMS, "i": job},
        )
    engine.dispose()
    return url, int(job)


def _target(tmp_path: Path, name: str) -> str:
    url = f"sqlite:///{tmp_path / name}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    return url


def _run(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.output


def test_the_version_picks_the_dialect_and_the_plan_says_which(tmp_path: Path) -> None:
    legacy, job = _legacy(tmp_path)
    base = ["--source", "xxl-job", "--legacy-url", legacy, "--legacy-tz", "UTC"]
    code, out = _run("migrate", "plan", *base, "--url", _target(tmp_path, "a.db"))
    assert code == 0, out
    assert "crons follow Quartz 2.3 (the 2.4 schema without xxl_job_user.token" in out
    assert f"quarantine xxl-job:{job} " not in out
    code, out = _run(
        "migrate", "plan", *base, "--url", _target(tmp_path, "b.db"), "--xxl-job-version", "3.1.0", "--json"
    )
    assert code == 0, out
    plan = json.loads(out.strip().splitlines()[-1])
    assert plan["cron_dialect"] == {"quartz": "2.5", "why": "xxl-job 3.1.0 (given)"}
    (row,) = [r for r in plan["rows"] if r["source_key"] == str(job)]
    assert row["action"] == "quarantine" and "too many terms" in row["reason"]


def test_a_version_the_reader_cannot_use_is_a_usage_error(tmp_path: Path) -> None:
    legacy, _ = _legacy(tmp_path)
    target = _target(tmp_path, "c.db")
    code, out = _run(
        "migrate",
        "run",
        "--source",
        "xxl-job",
        "--legacy-url",
        legacy,
        "--url",
        target,
        "--xxl-job-version",
        "2.0.1",
    )
    assert code == 2 and "before 2.1.0" in out
    code, out = _run(
        "migrate",
        "run",
        "--source",
        "batch-center",
        "--legacy-url",
        legacy,
        "--url",
        target,
        "--xxl-job-version",
        "2.4.2",
    )
    assert code == 2 and "--xxl-job-version is for --source xxl-job" in out
