"""Least-privilege database users on the real MariaDB (users and grants: docs/stack.md).

- `sched` (SELECT, INSERT, UPDATE, DELETE only): cannot CREATE, ALTER or DROP (error
  1142), so the schema is created by the app user first; then `switchyard scheduler run`
  with the sched URL leads, admits, fires and applies results (Pulsar bus, etcd election).
- `cdc` (SELECT, REPLICATION SLAVE, REPLICATION CLIENT): `switchyard migrate stream` of an
  xxl-job database (read-only at the source) takes its snapshot and reads the binlog as
  cdc, and writes the target as sched: the snapshot and later inserts, updates and
  deletes all arrive. cdc cannot write anything.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from legacy_sim.seed import seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.model import FiredState, Job, JobCode, TriggerState
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.counting import CountingExecutor, one_shot_burst
from tests.integration.procs import start_cli, start_scheduler, stop_process
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb]


def as_user(url: str, env: str) -> str:
    """`url`'s database, reached as the user of the stack's `env` URL."""
    user = make_url(server_url("mariadb", env))
    return user.set(database=make_url(url).database).render_as_string(hide_password=False)


def _denied(engine, sql: str) -> int:  # type: ignore[no-untyped-def]
    try:
        with engine.begin() as conn:
            conn.execute(text(sql))
    except DBAPIError as exc:
        return int(exc.orig.args[0])  # type: ignore[union-attr]
    return 0


def test_sched_user_has_no_ddl_rights_and_cdc_user_cannot_write(tmp_path: Path) -> None:
    with mariadb_database("lp") as url:
        app = make_engine(url)
        init_schema(app, 4)
        sched = make_engine(as_user(url, "SWITCHYARD_MARIADB_SCHED_URL"))
        cdc = make_engine(as_user(url, "SWITCHYARD_MARIADB_CDC_URL"))
        try:
            assert _denied(sched, "CREATE TABLE lp_probe (id INT PRIMARY KEY)") == 1142
            assert _denied(sched, "ALTER TABLE dus_job ADD COLUMN lp_probe INT") == 1142
            assert _denied(sched, "DROP TABLE dus_job") == 1142
            assert _denied(sched, "UPDATE dus_fence SET updated_at = updated_at") == 0  # DML is allowed
            for sql in (
                "CREATE TABLE lp_probe (id INT PRIMARY KEY)",
                "UPDATE dus_fence SET updated_at = 1",
                "INSERT INTO dus_meta (name, value) VALUES ('lp', 'x')",
                "DELETE FROM dus_meta",
            ):
                assert _denied(cdc, sql) == 1142, sql
            with sched.connect() as conn:
                grants = " ".join(r[0] for r in conn.execute(text("SHOW GRANTS FOR CURRENT_USER()")))
            assert not any(g in grants for g in ("CREATE", "ALTER", "DROP", "ALL PRIVILEGES")), grants
        finally:
            sched.dispose()
            cdc.dispose()
            app.dispose()
    # `db init` as sched on an empty database: refused with one clear line, no traceback
    with mariadb_database("lpempty") as url:
        argv, env = urls_in_env(["db", "init", "--url", as_user(url, "SWITCHYARD_MARIADB_SCHED_URL")])
        r = subprocess.run(
            [sys.executable, "-m", "switchyard", *argv],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
            stdin=subprocess.DEVNULL,
            cwd=tmp_path,
        )
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode != 0 and "Traceback" not in r.stdout + r.stderr, r.stderr[-3000:]
        assert len(lines) == 1 and "1142" in lines[0] and "denied" in lines[0], r.stderr[-3000:]
        print(f"db init as sched: exit {r.returncode}: {lines[0]}")


@pytest.mark.pulsar
@pytest.mark.etcd
def test_scheduler_runs_as_the_sched_user(tmp_path: Path) -> None:
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"lp{uuid.uuid4().hex[:6]}"
    with mariadb_database("lpsched") as url:
        app = make_engine(url)
        init_schema(app, 4)  # the schema comes from the app user
        clock = SystemClock()
        store = SqlTriggerStore(app, clock)
        store.put_job(Job(job_code=JobCode("lp"), biz_code="lp", handler="h", shard_total=2))
        t0 = clock.now() + timedelta(seconds=4)
        _triggers, expected = one_shot_burst(store, "lp", "lp", t0, timedelta(milliseconds=100), 30, 2)
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        counter = CountingExecutor(bus, "lp", clock)
        got, lock = counter.got, counter.lock
        proc = start_scheduler(
            "lp",
            tmp_path,
            url=as_user(url, "SWITCHYARD_MARIADB_SCHED_URL"),
            bus=pulsar,
            etcd=etcd,
            key=f"/sy-lp/{uuid.uuid4().hex[:6]}",
            prefix=prefix,
        )
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                with lock:
                    delivered = set(got)
                fired = store.get_fired(sorted(expected))
                if (
                    expected <= delivered
                    and len(fired) == len(expected)
                    and all(r.state is FiredState.SUCCEEDED for r in fired.values())
                ):
                    break
                time.sleep(0.25)
        finally:
            proc.stop()
            counter.close()
            bus.close()
        log = proc.log_text()
        tail = f"\n--- scheduler log (as sched)\n{log[-3000:]}"
        assert "leading with epoch" in log, tail
        assert expected <= set(got), f"{len(expected - set(got))} command(s) never delivered" + tail
        states = {r.state for r in store.get_fired(sorted(expected)).values()}
        assert states == {FiredState.SUCCEEDED}, f"results not applied as sched: {states}" + tail
        assert {t.state for t in store.triggers_of()} == {TriggerState.COMPLETED}, tail
        for bad in ("denied", "tick failed", "Traceback"):
            assert bad not in log, f"{bad!r} in the scheduler's log" + tail
        app.dispose()


def test_binlog_stream_runs_as_the_cdc_user(tmp_path: Path) -> None:
    with mariadb_database("lplegacy") as legacy_url, mariadb_database("lptarget") as target_url:
        legacy = make_engine(legacy_url)
        create_legacy_schema(legacy, "xxl-job", "3.4")
        seed = seed_xxljob(legacy, "3.4", groups=2, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=2)
        target = make_engine(target_url)
        init_schema(target, 4)  # the schema comes from the app user
        cdc = as_user(legacy_url, "SWITCHYARD_MARIADB_CDC_URL")
        log = tmp_path / "stream.log"
        with log.open("wb") as out:
            proc = start_cli(
                [
                    "migrate",
                    "stream",
                    "--source",
                    "xxl-job",
                    "--legacy-url",
                    cdc,
                    "--binlog-url",
                    cdc,
                    "--url",
                    as_user(target_url, "SWITCHYARD_MARIADB_SCHED_URL"),
                    "--server-id",
                    str(7700 + os.getpid() % 1000),
                    "--stall-timeout",
                    "20",
                    "--log-level",
                    "INFO",
                ],
                out,
                cwd=tmp_path,
            )

        def count(sql: str, **params: object) -> int:
            with target.connect() as conn:
                return int(conn.execute(text(sql), params).scalar_one())

        def wait(cond, timeout: float = 45) -> bool:  # type: ignore[no-untyped-def]
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if cond() or proc.poll() is not None:
                    break
                time.sleep(0.2)
            return bool(cond())

        try:
            snap = wait(lambda: count("SELECT COUNT(*) FROM dus_migration_ledger") >= seed.total)
            with legacy.begin() as conn:  # changes made by the legacy system (the app user here)
                conn.execute(text("UPDATE xxl_job_info SET executor_timeout = 77 WHERE id = 1"))
                conn.execute(
                    text(
                        "INSERT INTO xxl_job_info (job_group, job_desc, schedule_type, schedule_conf, misfire_strategy, "
                        "executor_route_strategy, executor_handler, executor_param, executor_block_strategy, glue_type, "
                        "trigger_status) VALUES (1, 'added later', 'CRON', '0 0 4 * * ?', 'DO_NOTHING', 'FIRST', "
                        "'lateHandler', '', 'SERIAL_EXECUTION', 'BEAN', 1)"
                    )
                )
                new_id = int(conn.execute(text("SELECT MAX(id) FROM xxl_job_info")).scalar_one())
                conn.execute(text("DELETE FROM xxl_job_info WHERE id = 2"))
            applied = wait(
                lambda: (
                    count("SELECT COUNT(*) FROM dus_job WHERE job_code LIKE :c AND timeout_ms = 77000", c="xxl:%:1")
                    == 1
                    and count("SELECT COUNT(*) FROM dus_job WHERE job_code LIKE :c", c=f"xxl:%:{new_id}") == 1
                    and count("SELECT COUNT(*) FROM dus_migration_ledger WHERE source_key = '2' AND status = 'deleted'")
                    == 1
                )
            )
        finally:
            stop_process(proc, timeout_s=30)
            legacy.dispose()
        out_text = log.read_text(errors="replace")
        tail = f"\n--- migrate stream (cdc / sched) exit {proc.returncode}\n{out_text[-3000:]}"
        assert snap, "the snapshot never reached the target" + tail
        assert applied, "the binlog changes (update, insert, delete) never reached the target" + tail
        assert proc.returncode == 0, tail
        assert "snapshot applied" in out_text and "denied" not in out_text and "Traceback" not in out_text, tail
        target.dispose()
