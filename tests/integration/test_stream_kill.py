"""The binlog stream process killed with SIGKILL at random points while the legacy
tables change, on the real MariaDB: after the last resume the target equals the source
(a fresh plan finds nothing to create, update or delete), no change lost or doubled."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from legacy_sim.seed import seed_batchcenter
from migrator.model import Action
from readers.streams import current_position
from tests.backends import mariadb_database
from tests.integration.procs import start_cli, stream_args
from tests.migration_env import make_env
from tests.servers import server_url

pytestmark = pytest.mark.mariadb


def _start(tmp: Path, n: int, legacy_url: str, target_url: str, cdc_url: str) -> subprocess.Popen[bytes]:
    log = (tmp / f"stream{n}.log").open("wb")
    return start_cli(
        stream_args(
            "batch-center",
            legacy_url,
            target_url,
            "--binlog-url",
            cdc_url,
            "--server-id",
            str(7000 + n),
            "--stall-timeout",
            "20",
            "--log-level",
            "WARNING",
        ),
        log,
    )


def _churn(legacy_url: str, stop: threading.Event, rng: random.Random, counts: dict[str, int]) -> None:
    from scheduler_core.store.engine import make_engine

    eng = make_engine(legacy_url)
    try:
        while not stop.is_set():
            with eng.begin() as conn:
                ids = [i for (i,) in conn.execute(text("SELECT id FROM bc_task WHERE status = 0 ORDER BY id"))]
                op = rng.random()
                if op < 0.5 and ids:
                    conn.execute(
                        text(
                            "UPDATE bc_task SET max_retry = (max_retry + 1) % 5, version = version + 1 WHERE id = :id"
                        ),
                        {"id": rng.choice(ids)},
                    )
                    counts["update"] += 1
                elif op < 0.8:
                    n = counts["insert"]
                    conn.execute(
                        text(
                            "INSERT INTO bc_task (biz_code, task_key, task_name, task_type, cron_expr, fire_time, "
                            "callback_url, payload) SELECT biz_code, :k, 'churn', 2, '0 0/5 * * * ?', "
                            "'2026-12-03 08:00:00', '/cb', '{}' FROM bc_biz ORDER BY biz_code LIMIT 1"
                        ),
                        {"k": f"churn-{n}"},
                    )
                    counts["insert"] += 1
                elif ids:
                    conn.execute(text("DELETE FROM bc_task WHERE id = :id"), {"id": rng.choice(ids)})
                    counts["delete"] += 1
            time.sleep(rng.uniform(0.005, 0.03))
    finally:
        eng.dispose()


def _kill_loop(kills: int, tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, "batch-center")
        seed_batchcenter(env.legacy, businesses=3, tasks_per_business=30, rng_seed=seed)
        cdc_url = make_url(cdc).set(database=make_url(legacy_url).database).render_as_string(hide_password=False)
        counts = {"insert": 0, "update": 0, "delete": 0}
        stop = threading.Event()
        churn = threading.Thread(target=_churn, args=(legacy_url, stop, rng, counts), daemon=True)
        proc = _start(tmp_path, 0, legacy_url, target_url, cdc_url)
        churn.start()
        try:
            for k in range(kills):
                time.sleep(rng.uniform(0.3, 1.5))
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                proc = _start(tmp_path, k + 1, legacy_url, target_url, cdc_url)
            time.sleep(1.0)
        finally:
            stop.set()
            churn.join(timeout=10)
        # wait until the stream has applied everything up to the legacy's current position
        final = current_position(env.legacy)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ck = env.writer.checkpoint(_stream_id(env.writer, legacy_url))
            if ck is not None and (ck.log_file, ck.log_pos) >= (final.log_file, final.log_pos):
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        logs = "\n".join((tmp_path / f"stream{i}.log").read_text(errors="replace")[-1500:] for i in range(kills + 1))
        assert ck is not None and (ck.log_file, ck.log_pos) >= (final.log_file, final.log_pos), logs
        plan = env.migrator.plan()
        assert plan.counts["create"] == plan.counts["update"] == plan.counts["delete"] == 0, (
            f"target differs from source after {kills} kill(s): {plan.counts}; churn {counts}\n"
            + "\n".join(f"{r.action} {r.source_key}" for r in plan.rows if r.action is not Action.QUARANTINE)[:2000]
        )
        assert counts["insert"] > 0 and counts["update"] > 0
        print(f"kills={kills} churn={counts} checkpoint={ck}")
        env.legacy.dispose()
        env.store.engine.dispose()


def _stream_id(writer, legacy_url: str) -> str:  # type: ignore[no-untyped-def]
    return f"batch-center@{make_url(legacy_url).render_as_string(hide_password=True)}"


def test_stream_killed_three_times_target_equals_source(tmp_path: Path) -> None:
    _kill_loop(3, tmp_path, seed=4)


@pytest.mark.slow
def test_stream_killed_twenty_times_target_equals_source(tmp_path: Path) -> None:
    _kill_loop(20, tmp_path, seed=20)
