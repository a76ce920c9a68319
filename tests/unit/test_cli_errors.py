"""Every `switchyard` command, given bad arguments, a bad URL, an unreachable server or a
store without its schema: ONE clear error line on stderr, the documented exit code
(README / switchyard.exitcodes: 2 bad arguments or input, 3 server unreachable or
credentials refused, 4 schema missing or different), no traceback anywhere in the
output, and the password of a URL (`secret`) never shown.

Short commands run in-process with click's CliRunner, and so do the long-running ones
(scheduler run, executor run) when they fail before they start running; the cases that
get as far as installing signal handlers, or that wait on a server (migrate stream,
dualrun watch, an unreachable etcd or Pulsar), run as real subprocesses, all started
together, each bounded by a timeout (a process still running then is killed by its PID
and the case fails). Wrong credentials against the real MariaDB are in
tests/integration/test_secrets.py.

"One line": click's usage errors print `Usage:` and `Try ... --help` hints around their
`Error:` line, and long-running commands log (timestamped lines) to stderr; those lines
are allowed, every other stderr line is not, and exactly one `Error:` line must be there.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from legacy_sim.seed import seed_batchcenter
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.schema import init_schema
from tests.argv_urls import urls_in_env

SECRET = "secret"
UNREACHABLE = f"mysql+pymysql://u:{SECRET}@127.0.0.1:1/x"  # nothing listens on port 1
BAD = "notaurl"
USAGE, DOWN, SCHEMA = exitcodes.USAGE, exitcodes.UNREACHABLE, exitcodes.SCHEMA
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")
_CLICK_HINT = re.compile(r"^(Usage: |Try '.*--help' for help\.$)")
# the one warning a URL typed with its password earns (switchyard.cli.passwords)
_TYPED_PASSWORD = re.compile(r"^warning: the URL given to --[a-z-]+ carries a password")


@dataclass(frozen=True)
class Paths:
    ok: str  # an initialised store (SQLite)
    empty: str  # a store URL without any schema
    legacy: str  # a batch-center legacy database, migrated into `ok` (sop-audience in dual-run)
    no_legacy: str  # a database without any legacy tables
    a_file: str  # a regular file (where a directory is expected)


BIZ = "sop-audience"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> Paths:
    d = tmp_path_factory.mktemp("cli-errors")
    ok, legacy = f"sqlite:///{d / 'ok.db'}", f"sqlite:///{d / 'legacy.db'}"
    engine = make_engine(ok)
    init_schema(engine, 4)
    engine.dispose()
    leg = make_engine(legacy)
    create_legacy_schema(leg, "batch-center")
    seed_batchcenter(leg, businesses=2, tasks_per_business=3, bad_rows=0, malformed_crons=0)
    leg.dispose()
    (d / "a-file").write_text("x")
    # databases that exist without any tables (a missing file is a bad URL: tests/unit/test_bad_input.py)
    for name in ("empty.db", "none.db"):
        blank = make_engine(f"sqlite:///{d / name}")
        blank.connect().close()
        blank.dispose()
    p = Paths(
        ok=ok,
        empty=f"sqlite:///{d / 'empty.db'}",
        legacy=legacy,
        no_legacy=f"sqlite:///{d / 'none.db'}",
        a_file=str(d / "a-file"),
    )
    result = CliRunner().invoke(
        cli,
        ["migrate", "run", "--source", "batch-center", "--legacy-url", legacy, "--url", ok],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    result = CliRunner().invoke(
        cli, ["dualrun", "start", "--business", BIZ, "--url", ok, "--legacy-url", legacy], catch_exceptions=False
    )
    assert result.exit_code == 0, result.output
    return p


def _fill(args: list[str], p: Paths) -> list[str]:
    subst = {"{ok}": p.ok, "{empty}": p.empty, "{legacy}": p.legacy, "{no_legacy}": p.no_legacy, "{file}": p.a_file}
    return [subst.get(a, a) for a in args]


def check_output(args: list[str], code: int, want: int, out: str, err: str) -> None:
    shown = f"switchyard {' '.join(args)}\nexit {code}\n--- stdout\n{out[-2000:]}\n--- stderr\n{err[-3000:]}"
    assert "Traceback" not in out + err, "a traceback was printed:\n" + shown
    assert SECRET not in out + err, "the URL's password was printed:\n" + shown
    assert code == want, f"exit code {code}, documented {want}:\n" + shown
    lines = [ln for ln in err.splitlines() if ln.strip()]
    errors = [ln for ln in lines if re.match(r"^(Error|error): \S", ln)]
    other = [
        ln
        for ln in lines
        if ln not in errors and not _LOG_LINE.match(ln) and not _CLICK_HINT.match(ln) and not _TYPED_PASSWORD.match(ln)
    ]
    assert len(errors) == 1, f"expected exactly one error line on stderr, got {len(errors)}:\n" + shown
    assert not other, f"stderr carries more than the error line: {other[:3]}\n" + shown


# -- in-process cases (CliRunner) -------------------------------------------------------------


def _migrate(verb: str, source: str, legacy_url: str, target_url: str, *more: str) -> list[str]:
    return ["migrate", verb, "--source", source, "--legacy-url", legacy_url, "--url", target_url, *more]


def _dualrun(command: str, url: str, legacy_url: str, *more: str, biz_code: str = BIZ) -> list[str]:
    return ["dualrun", command, "--business", biz_code, "--url", url, "--legacy-url", legacy_url, *more]


IN_PROCESS: list[tuple[str, list[str], int]] = [
    # bad arguments
    ("top-unknown-option", ["--bogus"], USAGE),
    ("top-unknown-command", ["nosuchcommand"], USAGE),
    ("db-init-partitions-0", ["db", "init", "--url", "{ok}", "--partitions", "0"], USAGE),
    ("db-init-unknown-option", ["db", "init", "--bogus"], USAGE),
    ("db-check-unknown-option", ["db", "check", "--bogus"], USAGE),
    ("cron-next-missing-expr", ["cron", "next"], USAGE),
    ("cron-next-bad-expr", ["cron", "next", "not a cron"], USAGE),
    ("cron-next-bad-tz", ["cron", "next", "0 0 * * * ?", "--tz", "Nowhere/City"], USAGE),
    ("cron-next-count-0", ["cron", "next", "0 0 * * * ?", "--count", "0"], USAGE),
    ("cron-next-bad-after", ["cron", "next", "0 0 * * * ?", "--after", "yesterday"], USAGE),
    ("demo-workdir-is-a-file", ["demo", "--workdir", "{file}"], USAGE),
    ("migrate-plan-missing-source", ["migrate", "plan", "--legacy-url", "{legacy}"], USAGE),
    ("migrate-plan-unknown-source", ["migrate", "plan", "--source", "foo", "--legacy-url", "{legacy}"], USAGE),
    ("migrate-run-missing-legacy", ["migrate", "run", "--source", "xxl-job", "--url", "{ok}"], USAGE),
    ("migrate-quarantine-unknown-option", ["migrate", "quarantine", "--bogus"], USAGE),
    ("migrate-stream-server-id-0", _migrate("stream", "batch-center", "{legacy}", "{ok}", "--server-id", "0"), USAGE),
    ("scheduler-run-ttl-too-small", ["scheduler", "run", "--url", "{ok}", "--lease-ttl", "1"], USAGE),
    ("scheduler-stats-negative-since", ["scheduler", "stats", "--url", "{ok}", "--since", "-1"], USAGE),
    ("executor-run-missing-handlers", ["executor", "run", "--business", "d"], USAGE),
    ("console-beyond-loopback-without-token", ["console", "--url", "{ok}", "--bind", "0.0.0.0"], USAGE),
    ("console-port-0", ["console", "--url", "{ok}", "--port", "0"], USAGE),
    ("serve-missing-handlers", ["serve", "--url", "{ok}"], USAGE),
    ("serve-no-such-module", ["serve", "--url", "{ok}", "--handlers", "nosuchmodule_xyz"], USAGE),
    (
        "serve-console-beyond-loopback-without-token",
        ["serve", "--url", "{ok}", "--handlers", "json", "--console", "--console-bind", "0.0.0.0"],
        USAGE,
    ),
    ("trigger-pause-nothing-named", ["trigger", "pause", "--url", "{ok}"], USAGE),
    ("trigger-resume-not-an-id", ["trigger", "resume", "abc", "--url", "{ok}"], USAGE),
    ("trigger-cancel-unknown-option", ["trigger", "cancel", "--bogus"], USAGE),
    ("trigger-pause-unknown-job", ["trigger", "pause", "--job", "nosuch:job", "--url", "{ok}"], USAGE),
    ("freeze-nothing-named", ["freeze", "--reason", "x", "--url", "{ok}"], USAGE),
    ("freeze-no-reason", ["freeze", "--all", "--url", "{ok}"], USAGE),
    ("freeze-unknown-business", ["freeze", "--business", "nosuch", "--reason", "x", "--url", "{ok}"], USAGE),
    ("unfreeze-both-named", ["unfreeze", "--business", "b", "--all", "--url", "{ok}"], USAGE),
    ("run-kill-nothing-named", ["run", "kill", "--url", "{ok}"], USAGE),
    ("run-kill-both-named", ["run", "kill", "1-2-0", "--job", "j", "--url", "{ok}"], USAGE),
    ("run-kill-no-such-run", ["run", "kill", "1-2-0", "--url", "{ok}"], USAGE),
    ("run-kill-not-a-command-id", ["run", "kill", "abc", "--url", "{ok}"], USAGE),
    ("run-kill-no-such-job", ["run", "kill", "--job", "nosuch:job", "--url", "{ok}"], USAGE),
    ("dualrun-compare-missing-business", ["dualrun", "compare", "--url", "{ok}", "--legacy-url", "{legacy}"], USAGE),
    ("dualrun-compare-bad-since", _dualrun("compare", "{ok}", "{legacy}", "--since", "notatime"), USAGE),
    ("dualrun-compare-bad-window", _dualrun("compare", "{ok}", "{legacy}", "--window", "-1h"), USAGE),
    ("dualrun-compare-unknown-business", _dualrun("compare", "{ok}", "{legacy}", biz_code="ghost"), USAGE),
    ("dualrun-watch-every-0", _dualrun("watch", "{ok}", "{legacy}", "--every", "0s"), USAGE),
    ("dualrun-start-missing-business", ["dualrun", "start", "--url", "{ok}", "--legacy-url", "{legacy}"], USAGE),
    ("dualrun-watch-cutover-every-0", _dualrun("watch-cutover", "{ok}", "{legacy}", "--every", "0s"), USAGE),
    ("dualrun-watch-cutover-not-cut-over", _dualrun("watch-cutover", "{ok}", "{legacy}", "--max-runs", "1"), USAGE),
    ("dualrun-watch-cutover-bad-url", _dualrun("watch-cutover", BAD, "{legacy}", "--max-runs", "1"), USAGE),
    ("dualrun-watch-cutover-unreachable", _dualrun("watch-cutover", UNREACHABLE, "{legacy}", "--max-runs", "1"), DOWN),
    (
        "dualrun-watch-cutover-no-schema",
        _dualrun("watch-cutover", "{empty}", "{legacy}", "--source", "batch-center", "--max-runs", "1"),
        SCHEMA,
    ),
    ("report-unknown-option", ["report", "--bogus"], USAGE),
    ("status-unknown-option", ["status", "--bogus"], USAGE),
    ("cutover-missing-business", ["cutover", "--url", "{ok}", "--legacy-url", "{legacy}"], USAGE),
    (
        "cutover-unknown-business",
        ["cutover", "--business", "ghost", "--url", "{ok}", "--legacy-url", "{legacy}"],
        USAGE,
    ),
    ("rollback-missing-legacy-url", ["rollback", "--business", BIZ, "--url", "{ok}"], USAGE),
    # a bad URL
    ("db-init-bad-url", ["db", "init", "--url", BAD], USAGE),
    ("db-check-bad-url", ["db", "check", "--url", BAD], USAGE),
    ("db-check-bad-port", ["db", "check", "--url", f"mysql+pymysql://u:{SECRET}@127.0.0.1:notaport/x"], USAGE),
    ("db-check-unknown-driver", ["db", "check", "--url", f"mysql+nosuch://u:{SECRET}@127.0.0.1:1/x"], USAGE),
    ("migrate-plan-bad-legacy-url", _migrate("plan", "xxl-job", BAD, "{ok}"), USAGE),
    ("migrate-plan-bad-target-url", _migrate("plan", "xxl-job", "{legacy}", BAD), USAGE),
    ("migrate-run-bad-legacy-url", _migrate("run", "batch-center", BAD, "{ok}"), USAGE),
    ("migrate-quarantine-bad-url", ["migrate", "quarantine", "--url", BAD], USAGE),
    ("scheduler-stats-bad-url", ["scheduler", "stats", "--url", BAD], USAGE),
    ("trigger-pause-bad-url", ["trigger", "pause", "1", "--url", BAD], USAGE),
    ("trigger-resume-bad-url", ["trigger", "resume", "1", "--url", BAD], USAGE),
    ("trigger-cancel-bad-url", ["trigger", "cancel", "1", "--url", BAD], USAGE),
    ("freeze-bad-url", ["freeze", "--all", "--reason", "x", "--url", BAD], USAGE),
    ("run-kill-bad-url", ["run", "kill", "1-2-0", "--url", BAD], USAGE),
    ("dualrun-compare-bad-url", _dualrun("compare", BAD, "{legacy}"), USAGE),
    ("dualrun-compare-bad-legacy-url", _dualrun("compare", "{ok}", BAD), USAGE),
    ("dualrun-watch-bad-url", _dualrun("watch", BAD, "{legacy}", "--max-runs", "1"), USAGE),
    ("dualrun-start-bad-url", ["dualrun", "start", "--business", BIZ, "--url", BAD, "--legacy-url", "{legacy}"], USAGE),
    ("status-bad-url", ["status", "--url", BAD], USAGE),
    ("cutover-bad-url", ["cutover", "--business", BIZ, "--url", BAD, "--legacy-url", "{legacy}"], USAGE),
    ("rollback-bad-url", ["rollback", "--business", BIZ, "--url", BAD, "--legacy-url", "{legacy}"], USAGE),
    ("rollback-bad-legacy-url", ["rollback", "--business", BIZ, "--url", "{ok}", "--legacy-url", BAD], USAGE),
    # a server that cannot be reached
    ("db-init-unreachable", ["db", "init", "--url", UNREACHABLE], DOWN),
    ("db-check-unreachable", ["db", "check", "--url", UNREACHABLE], DOWN),
    ("migrate-plan-unreachable-target", _migrate("plan", "batch-center", "{legacy}", UNREACHABLE), DOWN),
    ("migrate-plan-unreachable-legacy", _migrate("plan", "batch-center", UNREACHABLE, "{ok}"), DOWN),
    ("migrate-run-unreachable-legacy", _migrate("run", "xxl-job", UNREACHABLE, "{ok}"), DOWN),
    ("migrate-quarantine-unreachable", ["migrate", "quarantine", "--url", UNREACHABLE], DOWN),
    ("scheduler-stats-unreachable", ["scheduler", "stats", "--url", UNREACHABLE], DOWN),
    ("trigger-pause-unreachable", ["trigger", "pause", "1", "--url", UNREACHABLE], DOWN),
    ("trigger-resume-unreachable", ["trigger", "resume", "1", "--url", UNREACHABLE], DOWN),
    ("trigger-cancel-unreachable", ["trigger", "cancel", "1", "--url", UNREACHABLE], DOWN),
    ("freeze-unreachable", ["freeze", "--all", "--reason", "x", "--url", UNREACHABLE], DOWN),
    ("unfreeze-unreachable", ["unfreeze", "--all", "--url", UNREACHABLE], DOWN),
    ("run-kill-unreachable", ["run", "kill", "1-2-0", "--url", UNREACHABLE], DOWN),
    ("dualrun-compare-unreachable-store", _dualrun("compare", UNREACHABLE, "{legacy}"), DOWN),
    ("dualrun-compare-unreachable-legacy", _dualrun("compare", "{ok}", UNREACHABLE), DOWN),
    (
        "dualrun-start-unreachable",
        ["dualrun", "start", "--business", BIZ, "--url", UNREACHABLE, "--legacy-url", "{legacy}"],
        DOWN,
    ),
    ("status-unreachable", ["status", "--url", UNREACHABLE], DOWN),
    (
        "cutover-unreachable-store",
        ["cutover", "--business", BIZ, "--url", UNREACHABLE, "--legacy-url", "{legacy}"],
        DOWN,
    ),
    (
        "cutover-forced-unreachable-legacy",
        ["cutover", "--business", BIZ, "--url", "{ok}", "--legacy-url", UNREACHABLE, "--force", "--reason", "test"],
        DOWN,
    ),
    (
        "rollback-unreachable-store",
        ["rollback", "--business", BIZ, "--url", UNREACHABLE, "--legacy-url", "{legacy}"],
        DOWN,
    ),
    (
        "rollback-unreachable-legacy",
        ["rollback", "--business", BIZ, "--url", "{ok}", "--legacy-url", UNREACHABLE],
        DOWN,
    ),
    # a store (or a legacy database) without its schema
    ("db-check-no-schema", ["db", "check", "--url", "{empty}"], SCHEMA),
    ("console-no-schema", ["console", "--url", "{empty}"], SCHEMA),
    ("serve-no-schema", ["serve", "--url", "{empty}", "--handlers", "json"], SCHEMA),
    ("migrate-plan-no-schema", _migrate("plan", "batch-center", "{legacy}", "{empty}"), SCHEMA),
    ("migrate-run-no-schema", _migrate("run", "batch-center", "{legacy}", "{empty}"), SCHEMA),
    ("migrate-plan-no-legacy-tables", _migrate("plan", "batch-center", "{no_legacy}", "{ok}"), SCHEMA),
    ("migrate-run-no-legacy-tables", _migrate("run", "xxl-job", "{no_legacy}", "{ok}"), SCHEMA),
    ("migrate-quarantine-no-schema", ["migrate", "quarantine", "--url", "{empty}"], SCHEMA),
    ("scheduler-stats-no-schema", ["scheduler", "stats", "--url", "{empty}"], SCHEMA),
    ("trigger-pause-no-schema", ["trigger", "pause", "1", "--url", "{empty}"], SCHEMA),
    ("freeze-no-schema", ["freeze", "--all", "--reason", "x", "--url", "{empty}"], SCHEMA),
    ("run-kill-no-schema", ["run", "kill", "1-2-0", "--url", "{empty}"], SCHEMA),
    ("dualrun-compare-no-schema", _dualrun("compare", "{empty}", "{legacy}", "--source", "batch-center"), SCHEMA),
    ("dualrun-check-boundary-settle-0", _dualrun("check-boundary", "{ok}", "{legacy}", "--settle", "0s"), USAGE),
    ("dualrun-check-boundary-bad-url", _dualrun("check-boundary", BAD, "{legacy}"), USAGE),
    (
        "dualrun-check-boundary-no-schema",
        _dualrun("check-boundary", "{empty}", "{legacy}", "--source", "batch-center"),
        SCHEMA,
    ),
    ("dualrun-compare-no-legacy-tables", _dualrun("compare", "{ok}", "{no_legacy}"), SCHEMA),
    (
        "dualrun-start-no-schema",
        ["dualrun", "start", "--business", BIZ, "--url", "{empty}", "--legacy-url", "{legacy}"],
        SCHEMA,
    ),
    ("status-no-schema", ["status", "--url", "{empty}"], SCHEMA),
    ("cutover-no-schema", ["cutover", "--business", BIZ, "--url", "{empty}", "--legacy-url", "{legacy}"], SCHEMA),
    ("rollback-no-schema", ["rollback", "--business", BIZ, "--url", "{empty}", "--legacy-url", "{legacy}"], SCHEMA),
    # jobs and the run log (issue 28): an unknown job, bad input, no schema
    ("job-list-no-schema", ["job", "list", "--url", "{empty}"], SCHEMA),
    ("job-list-unknown-business", ["job", "list", "--business", "nosuch", "--url", "{ok}"], USAGE),
    ("job-show-unknown", ["job", "show", "nosuch", "--url", "{ok}"], USAGE),
    ("job-add-bad-cron", ["job", "add", "b:j", "--handler", "h", "--cron", "not a cron", "--url", "{ok}"], USAGE),
    ("job-add-no-schedule", ["job", "add", "b:j", "--handler", "h", "--url", "{ok}"], USAGE),
    (
        "job-add-bad-block",
        ["job", "add", "b:j", "--handler", "h", "--every", "1m", "--block", "serial_execution", "--url", "{ok}"],
        USAGE,
    ),
    ("job-edit-unknown", ["job", "edit", "nosuch", "--retries", "1", "--url", "{ok}"], USAGE),
    ("job-copy-unknown", ["job", "copy", "nosuch", "other", "--url", "{ok}"], USAGE),
    ("job-delete-unknown", ["job", "delete", "nosuch", "--url", "{ok}"], USAGE),
    ("job-run-unknown", ["job", "run", "nosuch", "--url", "{ok}"], USAGE),
    ("job-start-unknown", ["job", "start", "nosuch", "--url", "{ok}"], USAGE),
    ("job-stop-unknown", ["job", "stop", "nosuch", "--url", "{ok}"], USAGE),
    ("job-default-lane-no-schema", ["job", "default-lane", "b", "--url", "{empty}"], SCHEMA),
    ("job-default-lane-unregistered", ["job", "default-lane", "nosuch", "burst", "--url", "{ok}"], USAGE),
    ("job-default-lane-bad-lane", ["job", "default-lane", "b", "fast", "--url", "{ok}"], USAGE),
    ("runs-bad-since", ["runs", "--since", "soon", "--url", "{ok}"], USAGE),
    ("runs-no-schema", ["runs", "--url", "{empty}"], SCHEMA),
    ("runs-log-unknown", ["runs", "log", "1-2-3", "--url", "{ok}"], USAGE),
    ("runs-log-no-schema", ["runs", "log", "1-2-3", "--url", "{empty}"], SCHEMA),
    ("runs-purge-too-recent", ["runs", "purge", "--older-than", "10m", "--url", "{ok}"], USAGE),
    (
        "runs-purge-unknown-business",
        ["runs", "purge", "--older-than", "30d", "--business", "nosuch", "--url", "{ok}"],
        USAGE,
    ),
    ("runs-purge-no-schema", ["runs", "purge", "--older-than", "30d", "--url", "{empty}"], SCHEMA),
    # the executor registry (issue 28)
    ("executors-no-schema", ["executors", "--url", "{empty}"], SCHEMA),
    ("executors-legacy-not-xxl-job", ["executors", "--url", "{ok}", "--legacy-url", "{no_legacy}"], SCHEMA),
    ("alerts-unknown-job", ["alerts", "--job", "nosuch", "--url", "{ok}"], USAGE),
    ("alerts-no-schema", ["alerts", "--url", "{empty}"], SCHEMA),
    ("alerts-run-bad-grace", ["alerts", "run", "--once", "--grace", "soon", "--url", "{ok}"], USAGE),
    ("alerts-run-no-schema", ["alerts", "run", "--once", "--url", "{empty}"], SCHEMA),
    ("alerts-test-unknown-job", ["alerts", "test", "--job", "nosuch", "--url", "{ok}"], USAGE),
    ("alerts-test-no-job", ["alerts", "test", "--url", "{ok}"], USAGE),
    # long-running commands that fail before they start running (no signal handler is installed yet)
    (
        "scheduler-run-unreachable-store",
        ["scheduler", "run", "--url", UNREACHABLE, "--election", "local", "--bus", "memory"],
        DOWN,
    ),
    ("scheduler-run-bad-url", ["scheduler", "run", "--url", BAD, "--election", "local", "--bus", "memory"], USAGE),
    (
        "scheduler-run-no-schema",
        ["scheduler", "run", "--url", "{empty}", "--election", "local", "--bus", "memory"],
        SCHEMA,
    ),
    ("scheduler-run-bad-bus", ["scheduler", "run", "--url", "{ok}", "--bus", "notabus", "--election", "local"], USAGE),
    ("scheduler-run-bad-election", ["scheduler", "run", "--url", "{ok}", "--election", BAD, "--bus", "memory"], USAGE),
    ("scheduler-run-shards-local", ["scheduler", "run", "--url", "{ok}", "--shards", "--election", "local"], USAGE),
    ("scheduler-members-no-etcd", ["scheduler", "members", "--election", "local"], USAGE),
    ("executor-run-no-such-module", ["executor", "run", "--handlers", "nosuchmodule_xyz", "--business", "d"], USAGE),
    (
        "executor-run-module-without-handlers",
        ["executor", "run", "--handlers", "json", "--business", "d", "--bus", "memory"],
        USAGE,
    ),
    ("executor-run-bad-bus", ["executor", "run", "--handlers", "json", "--business", "d", "--bus", "notabus"], USAGE),
    (
        "executor-run-bad-heartbeat-interval",
        ["executor", "run", "--handlers", "json", "--business", "d", "--heartbeat-interval", "0s"],
        USAGE,
    ),
]


@pytest.mark.parametrize(("args", "want"), [pytest.param(a, w, id=i) for i, a, w in IN_PROCESS])
def test_command_fails_with_one_line_and_its_documented_code(paths: Paths, args: list[str], want: int) -> None:
    argv = _fill(args, paths)
    result = CliRunner().invoke(cli, argv, env={"SWITCHYARD_URL": paths.empty})
    crashed = result.exception if not isinstance(result.exception, SystemExit) else None
    err = result.stderr
    if crashed is not None:  # an exception click did not turn into an error: that is a traceback for a user
        err += f"\nTraceback (uncaught in-process): {type(crashed).__name__}: {crashed}"
    check_output(argv, result.exit_code, want, result.stdout, err)


def test_every_command_and_subcommand_is_covered() -> None:
    """A new command must come with its error cases here."""
    import click

    names: set[str] = set()
    for name, cmd in cli.commands.items():
        if isinstance(cmd, click.Group) and cmd.commands:
            names |= {f"{name} {sub}" for sub in cmd.commands}
        else:
            names.add(name)
    covered = {" ".join(a[:2]) if a[0] in _GROUPS else a[0] for _i, a, _w in IN_PROCESS + SUBPROCESS if a}
    covered |= {a[0] for _i, a, _w in IN_PROCESS + SUBPROCESS if a and a[0] in ("demo", "report")}
    assert names - covered == set(), f"commands without error cases: {sorted(names - covered)}"


_GROUPS = {"db", "cron", "migrate", "scheduler", "executor", "trigger", "run", "runs", "dualrun", "job", "alerts"}


# -- long-running commands, as subprocesses ----------------------------------------------------

SUBPROCESS: list[tuple[str, list[str], int]] = [
    ("scheduler-members-unreachable-etcd", ["scheduler", "members", "--election", "http://127.0.0.1:1"], DOWN),
    (
        "scheduler-run-unreachable-etcd",
        [
            "scheduler",
            "run",
            "--url",
            "{ok}",
            "--election",
            "http://127.0.0.1:1",
            "--lease-ttl",
            "2",
            "--bus",
            "memory",
        ],
        DOWN,
    ),
    (
        "scheduler-run-unreachable-pulsar",
        ["scheduler", "run", "--url", "{ok}", "--bus", "pulsar://127.0.0.1:1", "--election", "local"],
        DOWN,
    ),
    (
        "executor-run-unreachable-pulsar",
        ["executor", "run", "--handlers", "json", "--business", "d", "--bus", "pulsar://127.0.0.1:1"],
        DOWN,
    ),
    ("migrate-stream-unreachable-legacy", _migrate("stream", "batch-center", UNREACHABLE, "{ok}"), DOWN),
    ("migrate-stream-bad-url", _migrate("stream", "batch-center", BAD, "{ok}"), USAGE),
    ("dualrun-watch-unreachable-legacy", _dualrun("watch", "{ok}", UNREACHABLE, "--max-runs", "1"), DOWN),
    ("migrate-stream-no-schema", _migrate("stream", "batch-center", UNREACHABLE, "{empty}"), SCHEMA),
]
# per process, a bound for a hang only (each wait ends when its process exits): > the Pulsar
# client's 30 s operation timeout + the start-up of eight interpreters at once, which import the
# whole CLI; on a loaded 2-core machine none of the eight had printed a line after 90 s
SUBPROCESS_TIMEOUT_S = 300.0


@dataclass
class Finished:
    code: int
    out: str
    err: str


@pytest.fixture(scope="module")
def long_running(paths: Paths, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Finished]]:
    """Every subprocess case started at once (their waits overlap), each ended by PID."""
    d = tmp_path_factory.mktemp("cli-procs")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    env["SWITCHYARD_URL"] = paths.empty
    procs: dict[str, tuple[subprocess.Popen[bytes], Path, Path]] = {}
    started: dict[str, float] = {}
    for case, args, _want in SUBPROCESS:
        started[case] = time.monotonic()
        out, err = d / f"{case}.out", d / f"{case}.err"
        argv, child_env = urls_in_env(_fill(args, paths), env)  # no password in the process list
        with out.open("wb") as o, err.open("wb") as e:
            procs[case] = (
                subprocess.Popen(
                    [sys.executable, "-m", "switchyard", *argv],
                    stdout=o,
                    stderr=e,
                    stdin=subprocess.DEVNULL,
                    env=child_env,
                    cwd=d,
                ),
                out,
                err,
            )
    results: dict[str, Finished] = {}
    try:
        for case, (proc, out, err) in procs.items():
            try:
                code = proc.wait(timeout=max(0.1, started[case] + SUBPROCESS_TIMEOUT_S - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
                code = -9
            text_err = err.read_text(errors="replace")
            if code == -9:
                text_err += f"\n(still running after {SUBPROCESS_TIMEOUT_S:.0f} s: killed)"
            results[case] = Finished(code, out.read_text(errors="replace"), text_err)
        yield results
    finally:
        for proc, _o, _e in procs.values():
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)


# its module fixture waits up to SUBPROCESS_TIMEOUT_S for its processes, with a message of its own
@pytest.mark.timeout(SUBPROCESS_TIMEOUT_S + 120)
@pytest.mark.parametrize(("case", "args", "want"), [pytest.param(i, a, w, id=i) for i, a, w in SUBPROCESS])
def test_long_running_command_fails_with_one_line_and_its_documented_code(
    long_running: dict[str, Finished], paths: Paths, case: str, args: list[str], want: int
) -> None:
    r = long_running[case]
    check_output(_fill(args, paths), r.code, want, r.out, r.err)
