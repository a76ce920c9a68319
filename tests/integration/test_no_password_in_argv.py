"""No database password in any process's arguments (issue 28, "Writes are safe"): every
user of the host reads them (`ps`, /proc/PID/cmdline). The long-running processes, started
as the tests start them (tests.integration.procs), take their URLs from the environment or
a password file; each one's command line, and its children's, is read back from /proc and
holds none of the stack's passwords, while each process does its work on the real
MariaDB, Pulsar and etcd. A URL typed with its password still works, with a warning.
(Every other process the suite starts is checked by the session guard in tests/conftest.py.)"""

from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import make_url

from legacy_sim.seed import seed_xxljob
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.argv_urls import password_leaks, stack_passwords
from tests.backends import mariadb_database
from tests.integration.procs import executor_args, start_cli, start_scheduler, stop_process, stream_args
from tests.servers import REPO, server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]


def _as(url: str, var: str) -> str:
    """`url`'s database, reached as the user of the stack's URL in `var`."""
    user = make_url(server_url("mariadb", var))
    return user.set(database=make_url(url).database).render_as_string(hide_password=False)


def _password_file(url: str, path: Path) -> tuple[str, Path]:
    """`url` without its password, and a file (mode 600) holding it."""
    parsed = make_url(url)
    path.write_text(f"{parsed.password}\n", encoding="utf-8")
    path.chmod(0o600)
    return parsed._replace(password=None).render_as_string(hide_password=False), path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _with_children(pid: int) -> list[int]:
    """`pid` and every process below it."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # ended meanwhile
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    tree, grew = {pid}, True
    while grew:
        below = {p for p, pp in parent.items() if pp in tree} - tree
        grew = bool(below)
        tree |= below
    return sorted(tree)


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
    return dict(item.split("=", 1) for item in raw.split("\0") if "=" in item)


def _get_json(url: str) -> object:
    try:
        with urllib.request.urlopen(url, timeout=5) as res:
            return json.loads(res.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def test_the_long_running_processes_carry_no_password_in_their_arguments(tmp_path: Path) -> None:
    passwords = stack_passwords()
    assert passwords, "the stack's URLs carry no password: this test would prove nothing"
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"argv{uuid.uuid4().hex[:6]}"
    with mariadb_database("argvlegacy") as legacy_url, mariadb_database("argvstore") as url:
        legacy = make_engine(legacy_url)
        create_legacy_schema(legacy, "xxl-job", "3.4")
        seed = seed_xxljob(legacy, "3.4", groups=1, jobs_per_group=4, bad_rows=0, malformed_crons=0, rng_seed=28)
        store = make_engine(url)
        init_schema(store, 4)
        bare, password_file = _password_file(url, tmp_path / "store.password")
        port = _free_port()
        logs = {name: tmp_path / f"{name}.log" for name in ("stream", "executor", "console")}
        procs = {}
        try:
            sched = start_scheduler(
                "argv-sched", tmp_path, url=url, bus=pulsar, etcd=etcd, key=f"/sy-argv/{prefix}", prefix=prefix
            )
            procs["scheduler run"] = sched.proc
            with logs["stream"].open("wb") as out:  # three users: the legacy app, cdc (binlog), the store
                procs["migrate stream"] = start_cli(
                    stream_args(
                        "xxl-job",
                        legacy_url,
                        url,
                        "--binlog-url",
                        _as(legacy_url, "SWITCHYARD_MARIADB_CDC_URL"),
                        "--server-id",
                        str(7900 + os.getpid() % 1000),
                        "--log-level",
                        "INFO",
                    ),
                    out,
                    cwd=tmp_path,
                )
            with logs["executor"].open("wb") as out:
                procs["executor run"] = start_cli(
                    executor_args(
                        "argv",
                        pulsar,
                        prefix,
                        2,
                        "--handlers",
                        "tests.serve_handlers",
                        "--bridge",
                        "batch-center",
                        "--legacy-url",
                        legacy_url,
                    ),
                    out,
                    cwd=REPO,
                    env={**os.environ, "PYTHONPATH": str(REPO)},
                )
            with logs["console"].open("wb") as out:  # the store's password from a file, as an operator would
                procs["console"] = start_cli(
                    [
                        "console",
                        "--url",
                        bare,
                        "--password-file",
                        str(password_file),
                        "--port",
                        str(port),
                        "--legacy-url",
                        _as(legacy_url, "SWITCHYARD_MARIADB_CDC_URL"),
                    ],
                    out,
                    cwd=REPO,
                )

            def shown() -> str:
                return "".join(f"\n--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in logs.values()) + (
                    f"\n--- scheduler\n{sched.log_text()[-1500:]}"
                )

            def migrated() -> int:
                with store.connect() as conn:
                    return int(conn.execute(text("SELECT COUNT(*) FROM dus_migration_ledger")).scalar_one())

            # each at work on its databases, its URLs given without a password in its arguments
            assert until(lambda: "leading with epoch" in sched.log_text(), 60), shown()
            assert until(lambda: migrated() >= seed.total, 60), shown()
            assert until(lambda: "executor for argv running" in logs["executor"].read_text(errors="replace"), 60), (
                shown()
            )
            businesses: list[object] = []

            def console_lists() -> bool:
                got = _get_json(f"http://127.0.0.1:{port}/api/businesses")
                businesses[:] = got if isinstance(got, list) else []
                return bool(businesses)

            assert until(console_lists, 60), shown()
            for name, proc in procs.items():
                assert proc.poll() is None, f"{name} ended: " + shown()

            leaks, seen = [], 0
            for name, proc in procs.items():
                for pid in _with_children(proc.pid):
                    argv = _cmdline(pid)
                    seen += 1
                    leaks += [f"{name} (pid {pid}): {leak}" for leak in password_leaks(argv, passwords)]
            assert seen >= len(procs) and not leaks, leaks
            # the reading works: the arguments are there, and the URLs reached the processes
            assert "argv-sched" in _cmdline(sched.proc.pid) and "--password-file" in _cmdline(procs["console"].pid)
            sched_env, console_env = _environ(sched.proc.pid), _environ(procs["console"].pid)
            from_variable = sched_env.get("SWITCHYARD_URL") == url  # (compared, never printed)
            assert from_variable, "the scheduler's store URL did not come from SWITCHYARD_URL"
            assert "SWITCHYARD_URL" not in console_env and console_env.get("SWITCHYARD_LEGACY_URL")
        finally:
            for proc in procs.values():
                stop_process(proc)
            store.dispose()
            legacy.dispose()


def test_a_password_file_and_a_typed_url_both_reach_the_real_database(tmp_path: Path) -> None:
    with mariadb_database("argvfile") as url:
        init_schema(make_engine(url), 2)
        bare, password_file = _password_file(url, tmp_path / "pw")
        runner = CliRunner()
        by_file = runner.invoke(cli, ["db", "check", "--url", bare, "--password-file", str(password_file), "--json"])
        assert by_file.exit_code == 0 and json.loads(by_file.stdout)["ok"], by_file.output
        assert "warning" not in by_file.stderr
        by_variable = runner.invoke(cli, ["db", "check", "--json"], env={"SWITCHYARD_URL": url})
        assert by_variable.exit_code == 0 and "warning" not in by_variable.stderr, by_variable.output
        typed = runner.invoke(cli, ["db", "check", "--url", url, "--json"])
        assert typed.exit_code == 0 and json.loads(typed.stdout)["ok"], typed.output
        assert typed.stderr.count("warning: the URL given to --url carries a password") == 1, typed.stderr
        printed = str(make_url(url).password) in typed.output  # (compared, never shown)
        assert not printed, "the password was printed"
        without = runner.invoke(cli, ["db", "check", "--url", bare])  # no password at all: refused by the server
        assert without.exit_code == 3 and "denied" in without.stderr, without.output
