"""`switchyard migrate stream` without the REPLICATION grants, end to end on the real
MariaDB (issue 16, "The polling fallback").

The legacy database is read as `sched` (SELECT, INSERT, UPDATE, DELETE: no REPLICATION
SLAVE / CLIENT, docs/stack.md); the legacy system's own writes are made as the app user,
with `update_time` as the admin writes it (wall time in its JDBC zone, Asia/Shanghai).
The command, run as a subprocess without `--poll` and stopped with SIGTERM, falls back
to polling with a one-line notice; inserts, updates and deletes (found by the key
compare, a few keys per pass) arrive; after a restart it resumes from its checkpoint and
applies what changed while it was down; a run over an unchanged source writes nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

from legacy_sim.seed import seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.procs import start_cli, stop_process, stream_args
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb]

SHANGHAI = ZoneInfo("Asia/Shanghai")
WAIT_S = 60


def as_sched(url: str) -> str:
    """`url`'s database reached as `sched`, the stack's user without REPLICATION grants."""
    user = make_url(server_url("mariadb", "SWITCHYARD_MARIADB_SCHED_URL"))
    return user.set(database=make_url(url).database).render_as_string(hide_password=False)


def wall_now() -> str:
    """Now as the admin writes update_time: wall time in its JDBC zone."""
    return datetime.now(timezone.utc).astimezone(SHANGHAI).replace(tzinfo=None, microsecond=0).isoformat(sep=" ")


class Stream:
    """One `switchyard migrate stream` process, its output in a file."""

    def __init__(self, tmp_path: Path, name: str, legacy_url: str, target_url: str) -> None:
        self.log = tmp_path / f"{name}.log"
        with self.log.open("wb") as out:
            self.proc = start_cli(
                stream_args(
                    "xxl-job",
                    as_sched(legacy_url),
                    target_url,
                    "--legacy-db-tz",
                    "Asia/Shanghai",
                    "--legacy-cron-tz",
                    "UTC",
                    "--key-compare-every",
                    "0.5",
                    "--key-compare-batch",
                    "4",
                    "--log-level",
                    "INFO",
                ),
                out,
                cwd=tmp_path,
            )

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, cond: Callable[[], bool], timeout: float = WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond() or self.proc.poll() is not None:
                break
            time.sleep(0.2)
        return bool(cond())

    def stop(self) -> int:
        stop_process(self.proc, timeout_s=30)
        return int(self.proc.returncode)

    def tail(self) -> str:
        return f"\n--- {self.log.name} (exit {self.proc.returncode})\n{self.text()[-4000:]}"


def _scalar(engine: Engine, sql: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(text(sql), params).scalar_one()


def _insert_job(legacy: Engine, desc: str) -> int:
    with legacy.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO xxl_job_info (job_group, job_desc, add_time, update_time, author, schedule_type, "
                "schedule_conf, misfire_strategy, executor_route_strategy, executor_handler, executor_param, "
                "executor_block_strategy, glue_type, glue_updatetime, trigger_status) VALUES (1, :d, :t, :t, 'sy', "
                "'CRON', '0 0 4 * * ?', 'DO_NOTHING', 'FIRST', 'lateHandler', '', 'SERIAL_EXECUTION', 'BEAN', :t, 1)"
            ),
            {"d": desc, "t": wall_now()},
        )
        return int(conn.execute(text("SELECT MAX(id) FROM xxl_job_info")).scalar_one())


def _update_timeout(legacy: Engine, job_id: int, seconds: int) -> None:
    with legacy.begin() as conn:
        conn.execute(
            text("UPDATE xxl_job_info SET executor_timeout = :s, update_time = :t WHERE id = :id"),
            {"s": seconds, "t": wall_now(), "id": job_id},
        )


def _delete(legacy: Engine, job_id: int) -> None:
    with legacy.begin() as conn:
        conn.execute(text("DELETE FROM xxl_job_info WHERE id = :id"), {"id": job_id})


def _target_state(target: Engine) -> dict[str, list[tuple[Any, ...]]]:
    """Every row the migration writes, with its update stamps: equal before and after a
    run that writes nothing."""
    with target.connect() as conn:
        return {
            t: [tuple(r) for r in conn.execute(text(f"SELECT * FROM {t} ORDER BY 1, 2"))]
            for t in ("dus_migration_ledger", "dus_job", "dus_job_trigger", "dus_business")
        }


def test_without_replication_grants_the_stream_polls_and_applies_inserts_updates_and_deletes(tmp_path: Path) -> None:
    with mariadb_database("pollegacy") as legacy_url, mariadb_database("poltarget") as target_url:
        legacy = make_engine(legacy_url)
        target = make_engine(target_url)
        create_legacy_schema(legacy, "xxl-job", "3.4")
        seed = seed_xxljob(legacy, "3.4", groups=2, jobs_per_group=7, bad_rows=0, malformed_crons=0, rng_seed=4)
        init_schema(target, 4)
        assert seed.total == 14

        def ledger(key: int) -> str | None:
            with target.connect() as conn:
                return conn.execute(
                    text("SELECT status FROM dus_migration_ledger WHERE source_key = :k"), {"k": str(key)}
                ).scalar()

        def timeout_ms(key: int) -> int | None:
            with target.connect() as conn:
                return conn.execute(
                    text("SELECT timeout_ms FROM dus_job WHERE job_code LIKE :c"), {"c": f"xxl:%:{key}"}
                ).scalar()

        try:
            # -- first run: the snapshot, then changes while it runs
            first = Stream(tmp_path, "first", legacy_url, target_url)
            try:
                snap = first.wait_for(
                    lambda: _scalar(target, "SELECT COUNT(*) FROM dus_migration_ledger") == seed.total
                )
                assert snap, "the snapshot never reached the target" + first.tail()
                with target.connect() as conn:  # the rows changed below are migrated ones (not GLUE / NONE)
                    ids = sorted(
                        int(k)
                        for k in conn.execute(
                            text("SELECT source_key FROM dus_migration_ledger WHERE status = 'migrated'")
                        ).scalars()
                    )
                assert len(ids) >= 6, ids
                _update_timeout(legacy, ids[0], 77)
                added = _insert_job(legacy, "added while streaming")
                _delete(legacy, ids[1])
                _delete(legacy, ids[-1])  # the last key: found in a later pass of the round-robin compare
                applied = first.wait_for(
                    lambda: (
                        timeout_ms(ids[0]) == 77_000
                        and ledger(added) == "migrated"
                        and ledger(ids[1]) == ledger(ids[-1]) == "deleted"
                    )
                )
            finally:
                code = first.stop()
            out = first.text()
            assert applied, "the polled insert, update and deletes never all reached the target" + first.tail()
            assert code == 0 and "Traceback" not in out, first.tail()
            notices = [ln for ln in out.splitlines() if ln.startswith("notice:")]
            assert len(notices) == 1 and "may not read the binlog" in notices[0] and "polling" in notices[0], (
                first.tail()
            )
            assert "snapshot applied" in out and "gone from xxl_job_info" in out, first.tail()

            # -- changes while it is down, then a restart: it resumes at its checkpoint
            checkpoint = _scalar(target, "SELECT COUNT(*) FROM dus_stream_checkpoint")
            assert checkpoint == 1
            _update_timeout(legacy, ids[2], 55)
            _delete(legacy, ids[3])
            later = _insert_job(legacy, "added while stopped")
            second = Stream(tmp_path, "second", legacy_url, target_url)
            try:
                caught_up = second.wait_for(
                    lambda: timeout_ms(ids[2]) == 55_000 and ledger(ids[3]) == "deleted" and ledger(later) == "migrated"
                )
            finally:
                code = second.stop()
            out = second.text()
            assert caught_up, "changes made while the stream was stopped were not applied" + second.tail()
            assert code == 0 and "Traceback" not in out, second.tail()
            assert "resuming at poll:" in out and "snapshot applied" not in out, second.tail()

            # -- nothing lost: the target holds exactly the legacy rows, with their content
            live = {int(r) for r in (_scalar(legacy, "SELECT GROUP_CONCAT(id) FROM xxl_job_info") or "").split(",")}
            with target.connect() as conn:
                rows: dict[Any, Any] = dict(
                    conn.execute(text("SELECT source_key, status FROM dus_migration_ledger")).all()
                )
            assert {int(k) for k, s in rows.items() if s in ("migrated", "quarantined")} == live
            assert {int(k) for k, s in rows.items() if s == "migrated"} == set(ids) - {ids[1], ids[-1], ids[3]} | {
                added,
                later,
            }
            assert {int(k) for k, s in rows.items() if s == "deleted"} == {ids[1], ids[-1], ids[3]}
            assert (timeout_ms(ids[0]), timeout_ms(ids[2])) == (77_000, 55_000)

            # -- a run over the unchanged source writes nothing
            before = _target_state(target)
            third = Stream(tmp_path, "third", legacy_url, target_url)
            try:
                compared = third.wait_for(lambda: "key compare: first round done" in third.text())
            finally:
                code = third.stop()
            out = third.text()
            assert compared and code == 0 and "Traceback" not in out, third.tail()
            assert "resuming at poll:" in out, third.tail()
            stopped = [ln for ln in out.splitlines() if ln.startswith("stopped:")]
            assert len(stopped) == 1 and " 0 applied" in stopped[0], third.tail()
            assert _target_state(target) == before, "a re-run over an unchanged source wrote the target"
            print(f"{first.log.name}: {notices[0]}")
        finally:
            legacy.dispose()
            target.dispose()


def test_the_grant_check_refuses_a_user_without_replication_and_passes_the_cdc_user() -> None:
    from readers.streams import StreamPermissionError, check_replication_grants

    def settings(env: str) -> dict[str, object]:
        u = make_url(server_url("mariadb", env))
        return {"host": u.host, "port": u.port, "user": u.username, "password": u.password or ""}

    with pytest.raises(StreamPermissionError, match="'sched' may not read the binlog"):
        check_replication_grants(settings("SWITCHYARD_MARIADB_SCHED_URL"))
    check_replication_grants(settings("SWITCHYARD_MARIADB_CDC_URL"))  # SELECT, REPLICATION SLAVE, BINLOG MONITOR


def test_a_grant_missing_past_the_preflight_falls_back_when_the_binlog_refuses(tmp_path: Path) -> None:
    """A grant the preflight cannot see (e.g. one a role was meant to give) is found
    missing by the binlog reader itself: the stream falls back to polling then, with the
    same one-line notice. The preflight is switched off here to get there."""
    preflight_off = (
        "import sys, readers.streams as s; s.check_replication_grants = lambda settings: None; "
        "from switchyard.cli import cli; sys.argv[0] = 'switchyard'; cli()"
    )
    with mariadb_database("pollate") as legacy_url, mariadb_database("pollatet") as target_url:
        legacy = make_engine(legacy_url)
        target = make_engine(target_url)
        create_legacy_schema(legacy, "xxl-job", "3.4")
        seed = seed_xxljob(legacy, "3.4", groups=1, jobs_per_group=5, bad_rows=0, malformed_crons=0, rng_seed=6)
        init_schema(target, 4)
        log = tmp_path / "late.log"
        with log.open("wb") as out:
            argv, env = urls_in_env(
                [
                    "migrate",
                    "stream",
                    "--source",
                    "xxl-job",
                    "--legacy-url",
                    as_sched(legacy_url),
                    "--url",
                    target_url,
                    "--server-id",
                    str(7800 + os.getpid() % 1000),
                    "--log-level",
                    "INFO",
                ]
            )
            proc = subprocess.Popen(
                [sys.executable, "-c", preflight_off, *argv],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                cwd=tmp_path,
            )
        try:
            deadline = time.monotonic() + WAIT_S
            while (
                time.monotonic() < deadline
                and proc.poll() is None
                and _scalar(target, "SELECT COUNT(*) FROM dus_migration_ledger") < seed.total
            ):
                time.sleep(0.2)
            added = _insert_job(legacy, "added after the fallback")
            while (
                time.monotonic() < deadline
                and proc.poll() is None
                and _scalar(target, "SELECT COUNT(*) FROM dus_migration_ledger WHERE source_key = :k", k=str(added))
                == 0
            ):
                time.sleep(0.2)
            arrived = (
                _scalar(target, "SELECT COUNT(*) FROM dus_migration_ledger WHERE source_key = :k", k=str(added)) == 1
            )
        finally:
            stop_process(proc, timeout_s=30)
            legacy.dispose()
            target.dispose()
        out_text = log.read_text(errors="replace")
        tail = f"\n--- migrate stream (exit {proc.returncode})\n{out_text[-3000:]}"
        notices = [ln for ln in out_text.splitlines() if ln.startswith("notice:")]
        assert arrived, "the insert never arrived after the fallback" + tail
        assert proc.returncode == 0 and "Traceback" not in out_text, tail
        assert len(notices) == 1 and "may not read the binlog" in notices[0] and "polling" in notices[0], tail
        # refused by the binlog reader itself (the preflight's refusal names SHOW MASTER STATUS)
        assert "binlog stream" in out_text and "REPLICATION SLAVE privilege" in notices[0], tail
