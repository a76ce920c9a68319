"""`switchyard dualrun compare|watch` through click, on the embedded store.

The legacy reader is the one boundary replaced here: the concrete xxl-job and batch-center
readers belong to the readers package (and have their own tests); the CLI is handed an
in-memory reader over the same records the scenario wrote.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import create_engine, func, select, text

from dualrun.tables import dualrun_tables
from dualrun.verdict_store import latest
from scheduler_core.clock import SystemClock
from switchyard.cli import cli
from switchyard.wiring import dualrun_store
from tests.compare_cli import compare_args, patch_reader
from tests.unit.test_dualrun_support import Scenario, identical

cli_dualrun = importlib.import_module("switchyard.cli.dualrun")  # the package attribute is the group

REPO = Path(__file__).resolve().parents[2]


def _iso(at: datetime) -> str:
    return at.astimezone(timezone.utc).isoformat()


def _args(s: Scenario, tmp_path: Path, *extra: str) -> list[str]:
    return compare_args(s, tmp_path, *extra)


@pytest.fixture
def patched(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    def use(s: Scenario) -> None:
        patch_reader(monkeypatch, s)

    return use


def test_compare_ready_exits_0_and_stores_the_verdict(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s, _ = identical(tmp_path)
    patched(s)
    result = CliRunner().invoke(cli, _args(s, tmp_path))
    assert result.exit_code == 0, result.output
    assert result.output.startswith("reminder: READY (xxl-job, dual_run")
    v = latest(dualrun_store(s.store), "reminder")
    assert v is not None and v.is_ready


def test_compare_not_ready_exits_1_with_reasons(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, s.times(d)[:-40])
    patched(s)
    result = CliRunner().invoke(cli, _args(s, tmp_path))
    assert result.exit_code == 1
    assert "NOT READY" in result.output and "40 missing fires of job xxl:reminder:12" in result.output


def test_compare_json_prints_the_full_comparison(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s, _ = identical(tmp_path)
    patched(s)
    result = CliRunner().invoke(cli, _args(s, tmp_path, "--json"))
    assert result.exit_code == 0
    body = json.loads(result.output)
    assert body["verdict"] == "ready" and body["comparison_id"] >= 1 and body["measures"]["new"]["fires"] == 360


def test_compare_reads_per_business_thresholds_from_toml(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s = Scenario.create(tmp_path)
    d = s.job("12", "0/10 * * * * ?")
    s.legacy(d)
    s.new(d, s.times(d)[1:])
    patched(s)
    toml = tmp_path / "thresholds.toml"
    toml.write_text("[business.reminder]\nmissing_abs = 0.01\n")
    assert CliRunner().invoke(cli, _args(s, tmp_path)).exit_code == 1
    assert CliRunner().invoke(cli, _args(s, tmp_path, "--thresholds", str(toml))).exit_code == 0


def test_compare_without_source_or_business_row_is_a_usage_error(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s, _ = identical(tmp_path)
    patched(s)
    args = [a for a in _args(s, tmp_path) if a not in ("--source", "xxl-job")]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2
    assert "has no source system in the store: pass --source" in result.output


def test_compare_on_an_uninitialised_store_is_a_schema_error(tmp_path: Path) -> None:
    (tmp_path / "empty.db").touch()  # a store without tables (a missing file is a bad URL, exit 2)
    result = CliRunner().invoke(
        cli,
        [
            "dualrun",
            "compare",
            "--business",
            "b",
            "--source",
            "xxl-job",
            "--legacy-url",
            "sqlite://",
            "--url",
            f"sqlite:///{tmp_path / 'empty.db'}",
        ],
    )
    assert result.exit_code == 4
    assert "db init" in result.output and "Traceback" not in result.output


def test_watch_with_max_runs_stores_the_series(tmp_path: Path, patched) -> None:  # type: ignore[no-untyped-def]
    s, _ = identical(tmp_path, now=SystemClock().now().replace(microsecond=0))
    patched(s)
    result = CliRunner().invoke(
        cli,
        [
            "dualrun",
            "watch",
            "--business",
            "reminder",
            "--every",
            "1s",
            "--max-runs",
            "2",
            "--legacy-url",
            "sqlite://",
            "--source",
            "xxl-job",
            "--url",
            f"sqlite:///{tmp_path / 'store.db'}",
        ],
    )
    assert result.exit_code == 0, result.output
    t = dualrun_tables().comparison
    with s.store.engine.connect() as conn:
        assert conn.execute(select(func.count()).select_from(t)).scalar_one() == 2
    assert result.output.count(" reminder ready (comparison #") == 2


_CHILD = textwrap.dedent("""
    import importlib
    import sys
    from pathlib import Path
    from scheduler_core.clock import SystemClock
    from switchyard.cli import cli
    from tests.unit.test_dualrun_support import identical
    d = importlib.import_module("switchyard.cli.dualrun")
    root = Path(sys.argv[1])
    s, _ = identical(root, now=SystemClock().now().replace(microsecond=0))
    s.flush()
    d.open_reader = lambda source, url, tz: s.reader()
    cli(["dualrun", "watch", "--business", "reminder", "--every", "1s", "--legacy-url", "sqlite://",
         "--source", "xxl-job", "--url", f"sqlite:///{root / 'store.db'}", "--grace", "300s"], prog_name="switchyard")
""")
# Generous bounds, each a wait on the condition itself (it returns as soon as that holds): on a
# loaded 2-core machine the child took over 200 s to import, build the scenario and store two
# comparisons, and one comparison in flight at SIGTERM took over 30 s to finish (the default
# --grace, 30 s, was the same as the test's wait for the exit: two timers racing).
_STORED_WITHIN_S = 300
_STOPPED_WITHIN_S = 360  # more than the child's --grace: it exits cleanly or reports the abandon


def _communicate_or_dump(proc: subprocess.Popen[str], what: str) -> tuple[str, str]:
    """The child's output once it exits; if it does not within 30 s, a failure with the stack of
    each of its threads (the child runs with PYTHONFAULTHANDLER: SIGABRT dumps them)."""
    try:
        return proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pass
    proc.send_signal(signal.SIGABRT)
    pytest.fail(f"{what}; the child's threads:\n{proc.communicate()[1][-6000:]}")


def test_watch_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    # the child's output goes to files, not pipes: a slow comparison makes the watch log a
    # skipped run every second, which fills a pipe nobody reads and blocks the child
    out_file, err_file = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
    with out_file.open("w") as out_w, err_file.open("w") as err_w:
        proc = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path)], cwd=REPO, env=env, stdout=out_w, stderr=err_w, text=True
        )

    def stopped_within(seconds: float) -> bool:
        try:
            proc.wait(timeout=seconds)
            return True
        except subprocess.TimeoutExpired:
            return False

    def threads_of_the_child() -> str:
        proc.send_signal(signal.SIGABRT)  # PYTHONFAULTHANDLER: where it was, not only that it was late
        proc.wait(30)
        return err_file.read_text()[-6000:]

    engine = create_engine(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        deadline = time.monotonic() + _STORED_WITHIN_S
        stored = 0
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                with engine.connect() as conn:
                    stored = conn.execute(text("SELECT COUNT(*) FROM dus_comparison")).scalar_one()
            except Exception:  # the child has not created the schema yet
                stored = 0
            if stored >= 2:
                break
            time.sleep(0.2)
        if stored < 2 and proc.poll() is None:
            pytest.fail(
                f"no comparison stored within {_STORED_WITHIN_S} s; the child's threads:\n{threads_of_the_child()}"
            )
        assert stored >= 2, err_file.read_text()[-6000:]
        proc.send_signal(signal.SIGTERM)
        if not stopped_within(_STOPPED_WITHIN_S):
            pytest.fail(
                f"the watch did not stop within {_STOPPED_WITHIN_S} s of SIGTERM; the child's threads:\n"
                f"{threads_of_the_child()}"
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        engine.dispose()
    out, err = out_file.read_text(), err_file.read_text()
    assert proc.returncode == 0, err
    assert "watch stopped:" in err and "ready" in out


# The kernel hands a SIGTERM sent to the process to any thread that has it unblocked. Usually
# that is the main thread, but a thread that is starting at that moment (the watch starts one
# per comparison) can take it instead. CPython then runs the Python handler only the next
# time the main thread executes bytecode. Here a worker thread takes the signal once the
# main thread is blocked waiting on the stop event.
_SIGNAL_IN_ANOTHER_THREAD = textwrap.dedent("""
    import signal
    import sys
    import threading
    import time
    from switchyard.cli.signals import stop_event
    stop = stop_event()
    main = threading.main_thread().ident

    def take_sigterm():
        while sys._current_frames()[main].f_code.co_name != "wait":  # until the main thread waits
            time.sleep(0.01)
        time.sleep(0.2)  # and is blocked in it
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # this thread runs the C handler

    threading.Thread(target=take_sigterm, daemon=True).start()
    print("stopped" if stop.wait() else "wait returned unset", flush=True)
""")


def test_stop_event_is_set_when_another_thread_takes_the_signal() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONFAULTHANDLER": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", _SIGNAL_IN_ANOTHER_THREAD],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = _communicate_or_dump(proc, "SIGTERM taken by a worker thread never set the stop event")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0 and out == "stopped\n", err
