"""Cutover and rollback with `migrate stream` running and a `migrate run` in a loop beside
them, on the real MariaDB (binlog): the switch's own legacy writes (the stop committed
seconds before the business's new state) are never read back as an operator's stop, so no
new-side trigger is ever paused or cancelled, whatever the interleaving; a stream that has
caught up leaves the business as the switch left it; `status --check` finds nothing
orphaned at any step. What a real xxl-job check saw before: the stream paused every
trigger mid-cutover and the business fired nowhere."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import make_url

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from readers.streams import current_position
from switchyard.cli import cli
from switchyard.wiring import migrator_store
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.procs import forced_cutover_args, start_cli, stream_args
from tests.integration.test_binlog_stream import new_server_id
from tests.migration_env import make_env
from tests.servers import server_url

pytestmark = pytest.mark.mariadb


def _cli(*args: str) -> tuple[int, str]:
    argv, env = urls_in_env(args, {})  # as an operator runs them: the passwords in the environment
    res = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    return res.exit_code, res.output


def _watch_states(target_url: str, biz: str, stop: threading.Event, seen: dict[str, set[str]]) -> None:
    """Every state each trigger of the business is seen in, polled every 20 ms."""
    from scheduler_core.store.engine import make_engine

    eng = make_engine(target_url)
    try:
        while not stop.is_set():
            with eng.connect() as conn:
                for code, state in conn.execute(
                    text("SELECT job_code, state FROM dus_job_trigger WHERE biz_code = :b"), {"b": biz}
                ):
                    seen.setdefault(code, set()).add(state)
            time.sleep(0.02)
    finally:
        eng.dispose()


def _remigrate(source: str, legacy_url: str, target_url: str, stop: threading.Event, runs: list[int]) -> None:
    """`migrate run` in a loop, in-process through the same wiring as the command (the CLI
    runner swaps sys.stdout, so two of them cannot run on two threads at once)."""
    from migrator.apply import Migrator
    from migrator.target import TargetWriter
    from scheduler_core.store.engine import make_engine
    from switchyard.wiring import legacy_reader, open_store

    store = open_store(target_url)
    legacy = make_engine(legacy_url)
    migrator = Migrator(legacy_reader(source, legacy), TargetWriter(store, migrator_store(store)), store.clock)
    try:
        while not stop.is_set():
            migrator.run()
            runs.append(1)
    finally:
        legacy.dispose()
        store.engine.dispose()


# the stream reads every event of the server's binlog (other databases' too) and moves its
# checkpoint over foreign ones every --progress-every (here 0.5 s): behind the concurrent
# re-migration's writes on a loaded machine it took over 60 s to reach the head (3 of 5 runs
# under load, at the default 10 s)
def _caught_up(env, stream_id: str, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
    final = current_position(env.legacy)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ck = env.writer.checkpoint(stream_id)
        if ck is not None and (ck.log_file, ck.log_pos) >= (final.log_file, final.log_pos):
            return
        time.sleep(0.1)
    raise AssertionError(f"the stream did not catch up with {final} in {timeout} s")


@pytest.mark.parametrize("source", ["xxl-job", "batch-center"])
def test_cutover_and_rollback_beside_a_running_stream_pause_nothing(source: str, tmp_path: Path) -> None:
    cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, source, "3.4" if source == "xxl-job" else None)
        if source == "xxl-job":
            seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=10, bad_rows=0, malformed_crons=0, rng_seed=3)
        else:
            seed_batchcenter(env.legacy, businesses=1, tasks_per_business=10, bad_rows=0, malformed_crons=0, rng_seed=3)
            with env.legacy.begin() as conn:  # a running task is the center's until its callback returns
                conn.execute(text("UPDATE bc_task SET status = 0 WHERE status = 1"))
        code, out = _cli("migrate", "run", "--source", source, "--legacy-url", legacy_url, "--url", target_url)
        assert code == 0, out
        biz = json.loads(_cli("status", "--url", target_url, "--json")[1])[0]["business"]
        cdc_url = make_url(cdc).set(database=make_url(legacy_url).database).render_as_string(hide_password=False)
        log = (tmp_path / "stream.log").open("wb")
        stream = start_cli(
            stream_args(
                source,
                legacy_url,
                target_url,
                "--binlog-url",
                cdc_url,
                "--server-id",
                str(new_server_id()),
                "--log-level",
                "WARNING",
                # through the other tests' transactions on the shared server: the waits for
                # the head below end on it (every 10 s by default)
                "--progress-every",
                "0.5s",
            ),
            log,
        )
        stream_id = f"{source}@{make_url(legacy_url).render_as_string(hide_password=True)}"
        stop = threading.Event()
        seen: dict[str, set[str]] = {}
        runs: list[int] = []
        watcher = threading.Thread(target=_watch_states, args=(target_url, biz, stop, seen), daemon=True)
        remigrate = threading.Thread(target=_remigrate, args=(source, legacy_url, target_url, stop, runs), daemon=True)
        try:
            code, out = _cli("dualrun", "start", "--business", biz, "--url", target_url, "--legacy-url", legacy_url)
            assert code == 0, out
            _caught_up(env, stream_id)
            live_before = {c for c, s in _states(target_url, biz).items() if s == "waiting"}
            assert live_before
            seen.clear()
            watcher.start()
            remigrate.start()
            code, out = _cli(*forced_cutover_args(biz, target_url, legacy_url, "beside the stream"))
            assert code == 0, out
            _caught_up(env, stream_id)
            time.sleep(0.5)
            after = _states(target_url, biz)
            assert {c for c in live_before if after[c] != "waiting"} == set(), after
            paused = {c: s for c, s in seen.items() if c in live_before and s - {"waiting", "acquired"}}
            assert paused == {}, f"live triggers left waiting during the cutover: {paused}"
            code, out = _cli("status", "--url", target_url, "--check", "--legacy-url", legacy_url)
            assert code == 0, out

            code, out = _cli("rollback", "--business", biz, "--url", target_url, "--legacy-url", legacy_url, "--json")
            assert code == 0, out
            back = json.loads(out.strip().splitlines()[-1])
            # every live job handed back, or (a one-shot or a task whose end falls before the
            # fence) run by the new side and ended there: handed back, legacy gets it inside
            # its start margin (migrator.cutover._end_before_fence)
            ended = {n.split(":", 1)[0] for n in back["notes"] if "every occurrence left is before the fence" in n}
            assert back["ok"] and not back["not_handed_back"], back
            assert len(back["handover"]) + len(ended) == len(live_before), back
            _caught_up(env, stream_id)
            time.sleep(0.5)
            stop.set()
            remigrate.join(timeout=120)
            watcher.join(timeout=10)
            after = _states(target_url, biz)
            # back on legacy: the triggers wait, not admitted (created), never paused
            assert {c: after[c] for c in live_before if after[c] != "created"} == {
                c: "completed" for c in live_before if c.rsplit(":", 1)[-1] in ended
            }
            assert not {c: s for c, s in seen.items() if c in live_before and {"paused", "cancelled"} & s}
            code, out = _cli("status", "--url", target_url, "--check", "--legacy-url", legacy_url, "--json")
            assert code == 0, out
            assert runs, "the concurrent migrate run never completed"
            assert stream.poll() is None, (tmp_path / "stream.log").read_text()[-2000:]
        finally:
            stop.set()
            stream.send_signal(signal.SIGTERM)
            try:
                stream.wait(timeout=20)
            except subprocess.TimeoutExpired:
                stream.kill()
            env.legacy.dispose()
            env.store.engine.dispose()


def _states(target_url: str, biz: str) -> dict[str, str]:
    from scheduler_core.store.engine import make_engine

    eng = make_engine(target_url)
    try:
        with eng.connect() as conn:
            return dict(
                conn.execute(text("SELECT job_code, state FROM dus_job_trigger WHERE biz_code = :b"), {"b": biz}).all()
            )
    finally:
        eng.dispose()
