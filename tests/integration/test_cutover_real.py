"""cutover / rollback commands on the real MariaDB for one xxl-job business and one
batch-center business: a refused cutover (verdict not ready), a forced one, a rollback."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.procs import forced_cutover_args

pytestmark = pytest.mark.mariadb


def _run(*args: str) -> tuple[int, str]:
    argv, env = urls_in_env(args, {})  # as an operator runs them: the passwords in the environment
    result = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    return result.exit_code, result.output


@pytest.mark.parametrize("source", ["xxl-job", "batch-center"])
def test_refused_forced_cutover_and_rollback(source: str) -> None:
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        legacy = make_engine(legacy_url)
        create_legacy_schema(legacy, source, "3.4" if source == "xxl-job" else None)
        if source == "xxl-job":
            seed_xxljob(legacy, "3.4", groups=2, jobs_per_group=8, bad_rows=0, malformed_crons=0, rng_seed=7)
        else:
            seed_batchcenter(legacy, businesses=2, tasks_per_business=8, bad_rows=0, malformed_crons=0, rng_seed=7)
            with legacy.begin() as conn:
                conn.execute(text("UPDATE bc_task SET status = 0 WHERE status = 1"))
        target = make_engine(target_url)
        init_schema(target, 4)
        code, out = _run("migrate", "run", "--source", source, "--legacy-url", legacy_url, "--url", target_url)
        assert code == 0, out
        code, out = _run("status", "--url", target_url, "--json")
        businesses = json.loads(out)
        biz = businesses[0]["business"]
        assert businesses[0]["state"] == "legacy"

        code, out = _run("dualrun", "start", "--business", biz, "--url", target_url, "--legacy-url", legacy_url)
        assert code == 0, out
        # the new side has fired nothing yet: the comparison cannot say ready
        code, out = _run(
            "dualrun", "compare", "--business", biz, "--url", target_url, "--legacy-url", legacy_url, "--since", "2h"
        )
        assert code == exitcodes.FAILED, out
        code, out = _run("cutover", "--business", biz, "--url", target_url, "--legacy-url", legacy_url)
        assert code == exitcodes.REFUSED and "refused" in out, out
        # a verdict over a window shorter than the minimum (30 min) is no evidence: not
        # ready, and the gate says why
        code, out = _run(
            "dualrun",
            "compare",
            "--business",
            biz,
            "--url",
            target_url,
            "--legacy-url",
            legacy_url,
            "--since",
            "20m",
            "--json",
        )
        assert code == exitcodes.FAILED, out
        assert any("shorter than the minimum" in r for r in json.loads(out)["reasons"]), out
        code, out = _run("cutover", "--business", biz, "--url", target_url, "--legacy-url", legacy_url)
        assert code == exitcodes.REFUSED and "shorter than the minimum" in out, out
        code, out = _run("cutover", "--business", biz, "--url", target_url, "--legacy-url", legacy_url, "--force")
        assert code == exitcodes.REFUSED and "--reason" in out, out
        code, out = _run(*forced_cutover_args(biz, target_url, legacy_url, "tested in staging"))
        assert code == 0, out
        report = json.loads(out)
        assert report["forced"] and report["to_state"] == "cutover"
        with legacy.connect() as conn:
            if source == "xxl-job":
                on = conn.execute(
                    text(
                        "SELECT COUNT(*) FROM xxl_job_info i JOIN xxl_job_group g ON g.id = i.job_group "
                        "WHERE g.app_name = :b AND i.trigger_status = 1"
                    ),
                    {"b": biz},
                ).scalar_one()
            else:
                on = conn.execute(
                    text("SELECT COUNT(*) FROM bc_task WHERE biz_code = :b AND status = 0"), {"b": biz}
                ).scalar_one()
        assert on == 0, "every legacy job of the business switched off"

        code, out = _run(
            "rollback",
            "--business",
            biz,
            "--url",
            target_url,
            "--legacy-url",
            legacy_url,
            "--reason",
            "drill",
            "--json",
        )
        assert code == 0, out
        back = json.loads(out)
        assert back["to_state"] == "legacy" and back["legacy_started"] == len(back["handover"]) > 0
        code, out = _run("status", "--url", target_url, "--json")
        state = {b["business"]: b for b in json.loads(out)}[biz]
        assert state["state"] == "legacy" and state["verdict"] == "not_ready"
        with target.connect() as conn:
            audit = conn.execute(
                text(
                    "SELECT from_state, to_state, forced, reason FROM dus_cutover_audit WHERE biz_code = :b ORDER BY id"
                ),
                {"b": biz},
            ).all()
        assert [(a[0], a[1], a[2]) for a in audit] == [
            ("legacy", "dual_run", 0),
            ("dual_run", "cutover", 1),
            ("cutover", "legacy", 0),
        ]
        legacy.dispose()
        target.dispose()


def test_an_xxljob_stop_waits_for_a_scan_holding_the_schedule_lock() -> None:
    """The admin's scan reads the due jobs, puts their fires in its ring and writes their
    next times (`... AND trigger_status = 1`) under the `schedule_lock` row. A stop that
    committed inside that would leave the next time at a fire the ring still makes: the
    cutover would hand that occurrence to the new side too (doubled at H, seen under
    load). The stop takes the same lock, so it lands between two scans."""
    import threading

    from migrator.legacy_control import XxlJobControl
    from scheduler_core.clock import SystemClock

    with mariadb_database("legacy") as legacy_url:
        legacy = make_engine(legacy_url)
        create_legacy_schema(legacy, "xxl-job", "3.4")
        seed_xxljob(legacy, "3.4", groups=1, jobs_per_group=4, bad_rows=0, malformed_crons=0, rng_seed=7)
        with legacy.connect() as conn:
            ids = [i for (i,) in conn.execute(text("SELECT id FROM xxl_job_info WHERE trigger_status = 1"))]
        assert ids
        control = XxlJobControl(legacy, SystemClock())
        done = threading.Event()
        scan = legacy.connect()
        tx = scan.begin()
        scan.execute(text("SELECT lock_name FROM xxl_job_lock WHERE lock_name = 'schedule_lock' FOR UPDATE"))
        stopper = threading.Thread(target=lambda: (control._stop(ids), done.set()), daemon=True)  # type: ignore[func-returns-value]
        stopper.start()
        try:
            assert not done.wait(1.0), "the stop committed inside a scan holding the schedule lock"
            with legacy.connect() as conn:  # nothing stopped yet
                assert conn.execute(text("SELECT COUNT(*) FROM xxl_job_info WHERE trigger_status = 1")).scalar() == len(
                    ids
                )
        finally:
            tx.commit()  # the scan ends
            scan.close()
        assert done.wait(10.0)
        stopper.join(timeout=5)
        with legacy.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM xxl_job_info WHERE trigger_status = 1")).scalar() == 0
        legacy.dispose()
