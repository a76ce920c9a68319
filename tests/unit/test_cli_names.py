"""One name per thing across the CLI (issue 32): the store is `--url` everywhere (the old
`--target-url` still read, hidden), the business is `--business` in every command (the old
positional still read, with a note), a duration is written `30s`/`2h`/`1h30m`/`500ms`
wherever one is taken, the shared settings come from the command line, their environment
variables or a `--config` TOML file in that order, every command and option has help text
and every command's help lists its exit codes, `executor run`/`scheduler run` never end up
on the in-process bus without being told, and an unknown name is exit 2 naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import click
import pytest
from click.testing import CliRunner, Result

from dualrun.verdict_store import latest
from legacy_sim.seed import seed_batchcenter
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.cli.durations import Duration, parse_duration
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store, open_store

BIZ = "sop-audience"  # a business of the seeded batch center
REPO = Path(__file__).resolve().parents[2]
REFUSAL_TIMEOUT_S = 60.0  # the refusal comes before anything starts: seconds on a loaded machine


def _run(*args: str, env: dict[str, str] | None = None) -> Result:
    # the shared settings' variables of the machine running the tests must not leak in
    clean = {k: None for k in ("SWITCHYARD_URL", "SWITCHYARD_LEGACY_URL", "SWITCHYARD_BUS", "SWITCHYARD_CONFIG")}
    return CliRunner().invoke(cli, list(args), env={**clean, **(env or {})})  # type: ignore[dict-item]


def _store(path: Path) -> str:
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    return url


@pytest.fixture
def migrated(tmp_path: Path) -> tuple[str, str]:
    """(store URL, legacy URL): a seeded batch center migrated into the store."""
    url = _store(tmp_path / "store.db")
    legacy = f"sqlite:///{tmp_path / 'legacy.db'}"
    engine = make_engine(legacy)
    create_legacy_schema(engine, "batch-center")
    seed_batchcenter(engine, businesses=2, tasks_per_business=3, bad_rows=0, malformed_crons=0)
    engine.dispose()
    res = _run("migrate", "run", "--source", "batch-center", "--legacy-url", legacy, "--url", url)
    assert res.exit_code == 0, res.output
    return url, legacy


def _commands() -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = []

    def walk(cmd: click.Command, path: str) -> None:
        out.append((path, cmd))
        if isinstance(cmd, click.Group):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())

    walk(cli, "")
    return out


# -- 1. the store is --url everywhere ---------------------------------------------------------


def test_migrate_takes_url_and_the_old_target_url_as_a_hidden_alias(migrated: tuple[str, str]) -> None:
    url, _ = migrated
    for name in ("--url", "--target-url"):
        res = _run("migrate", "quarantine", name, url, "--json")
        assert res.exit_code == 0, (name, res.output)
        assert json.loads(res.stdout) == []
    shown = _run("migrate", "quarantine", "--help").output
    assert "--url" in shown and "--target-url" not in shown
    # the old name wins over the variable (it was given), and two different stores given are refused
    env = {"SWITCHYARD_URL": "sqlite:///nowhere/x.db"}
    assert _run("migrate", "quarantine", "--target-url", url, env=env).exit_code == 0
    twice = _run("migrate", "quarantine", "--url", url, "--target-url", url + "x")
    assert twice.exit_code == exitcodes.USAGE and "named twice" in twice.stderr, twice.output


def test_every_command_that_names_the_store_calls_it_url() -> None:
    for path, cmd in _commands():
        names = [o for p in cmd.params if isinstance(p, click.Option) for o in p.opts]
        assert not any(o in names for o in ("--target-url", "--store-url", "--store")) or "--url" in names, path


# -- 2. the business is --business everywhere --------------------------------------------------

POSITIONAL = [["cutover"], ["rollback"], ["dualrun", "start"], ["report"]]


@pytest.mark.parametrize("command", POSITIONAL, ids=" ".join)
def test_the_commands_that_took_a_positional_business_take_business(command: list[str]) -> None:
    shown = _run(*command, "--help").output
    assert "--business" in shown, shown
    assert "[BUSINESS]" not in shown.splitlines()[0]  # the old form is not documented


def test_business_and_the_deprecated_positional_both_work_the_positional_with_a_note(
    migrated: tuple[str, str],
) -> None:
    url, legacy = migrated
    res = _run("dualrun", "start", "--business", BIZ, "--url", url, "--legacy-url", legacy, "--json")
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["to_state"] == "dual_run"
    assert "deprecated" not in res.stderr
    # the old positional form: the same command, and one line on stderr saying what to write instead
    old = _run("rollback", BIZ, "--url", url, "--legacy-url", legacy, "--reason", "drill", "--json")
    assert old.exit_code == 0, old.output
    assert json.loads(old.stdout)["to_state"] == "legacy"
    note = [line for line in old.stderr.splitlines() if "deprecated" in line]
    assert len(note) == 1 and f"--business {BIZ}" in note[0], old.stderr
    # named twice, differently: refused before anything is done
    both = _run("cutover", "other", "--business", BIZ, "--url", url, "--legacy-url", legacy)
    assert both.exit_code == exitcodes.USAGE and "named twice" in both.stderr, both.output
    missing = _run("cutover", "--url", url, "--legacy-url", legacy)
    assert missing.exit_code == exitcodes.USAGE and "--business" in missing.stderr, missing.output


def test_report_takes_business(migrated: tuple[str, str], tmp_path: Path) -> None:
    url, _ = migrated
    res = _run("report", "--business", BIZ, "--out", str(tmp_path / "r.html"), "--url", url)
    # migrated, never compared: the documented "no comparison stored yet", not an unknown option
    assert res.exit_code == exitcodes.FAILED, res.output
    assert "comparison" in res.stderr


# -- 3. durations ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("500ms", timedelta(milliseconds=500)),
        ("30s", timedelta(seconds=30)),
        ("2h", timedelta(hours=2)),
        ("1h30m", timedelta(minutes=90)),
        ("1m30s", timedelta(seconds=90)),
        ("7d", timedelta(days=7)),
        ("90", timedelta(seconds=90)),  # a bare number: seconds, as these options took before
        ("2.5", timedelta(seconds=2.5)),
    ],
)
def test_a_duration_is_read_in_every_form(text: str, want: timedelta) -> None:
    assert parse_duration(text) == want


@pytest.mark.parametrize("text", ["", "h", "2x", "1h30", "-1s", "1 h", "ms"])
def test_a_bad_duration_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_duration_options_take_units_and_bare_seconds(tmp_path: Path) -> None:
    url = _store(tmp_path / "s.db")
    for since in ("1h30m", "5400", "500ms"):
        res = _run("scheduler", "stats", "--url", url, "--since", since, "--json")
        assert res.exit_code == 0, (since, res.output)
    bad = _run("scheduler", "stats", "--url", url, "--since", "2x")
    assert bad.exit_code == exitcodes.USAGE
    assert "--since" in bad.stderr and "1h30m" in bad.stderr, bad.stderr  # names the option and the forms
    short = _run("scheduler", "run", "--url", url, "--lease-ttl", "1500ms", "--bus", "memory")
    assert short.exit_code == exitcodes.USAGE and "minimum 2s" in short.stderr, short.output


def test_every_duration_option_is_a_duration() -> None:
    """No option left that takes plain seconds as a float, nor one that says "Seconds"."""
    durations = 0
    for path, cmd in _commands():
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            assert not isinstance(p.type, click.FloatRange) and p.type is not click.FLOAT, (path, p.opts)
            assert "seconds" not in (p.help or "").lower().split(":")[0], (path, p.opts, p.help)
            durations += isinstance(p.type, Duration)
    assert durations >= 25  # scheduler run's six, dual-run's seven, ... (a count, so a lost one shows)


# -- 4. environment variables and the config file ----------------------------------------------


def _checked_url(res: Result) -> str:
    assert res.exit_code == 0, res.output
    return str(json.loads(res.stdout)["url"])


def test_the_store_url_comes_from_the_option_then_the_variable_then_the_config_file(tmp_path: Path) -> None:
    a, b, c, d = (_store(tmp_path / f"{n}.db") for n in "abcd")
    config = tmp_path / "switchyard.toml"
    config.write_text(f'url = "{c}"\n')
    default_cwd = tmp_path / "cwd"
    default_cwd.mkdir()
    assert _checked_url(_run("--config", str(config), "db", "check", "--json")) == c
    assert _checked_url(_run("db", "check", "--json", env={"SWITCHYARD_CONFIG": str(config)})) == c
    env = {"SWITCHYARD_CONFIG": str(config), "SWITCHYARD_URL": b}
    assert _checked_url(_run("db", "check", "--json", env=env)) == b
    assert _checked_url(_run("db", "check", "--json", "--url", a, env=env)) == a
    assert _checked_url(_run("--config", str(config), "db", "check", "--json", "--url", d)) == d


def test_the_legacy_url_comes_from_its_variable_or_the_config_file(migrated: tuple[str, str], tmp_path: Path) -> None:
    url, legacy = migrated
    plan = ("migrate", "plan", "--source", "batch-center", "--json")
    by_env = _run(*plan, env={"SWITCHYARD_URL": url, "SWITCHYARD_LEGACY_URL": legacy})
    assert by_env.exit_code == 0, by_env.output
    assert json.loads(by_env.stdout)["counts"]["unchanged"] > 0
    config = tmp_path / "c.toml"
    config.write_text(f'url = "{url}"\nlegacy_url = ["{legacy}"]\nbus = "memory"\n')
    by_file = _run("--config", str(config), *plan)
    assert by_file.exit_code == 0, by_file.output
    assert json.loads(by_file.stdout)["counts"] == json.loads(by_env.stdout)["counts"]
    # status reads every legacy database of the array
    status = _run("--config", str(config), "status", "--check")
    assert status.exit_code == 0, status.output
    # without any of them, the option is still required and says so
    missing = _run(*plan, env={"SWITCHYARD_URL": url})
    assert missing.exit_code == exitcodes.USAGE and "--legacy-url" in missing.stderr, missing.output


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ('urll = "sqlite:///x.db"\n', ["'urll'", "unknown key"]),
        ('url = "sqlite:///x.db"\nurl2 = 1\n', ["'url2'", "unknown key"]),
        ("url = \n", ["not valid TOML", "line 1"]),
        ("url = 3\n", ["'url'", "must be a string"]),
        ("legacy_url = [1]\n", ["'legacy_url'", "array of strings"]),
    ],
    ids=["unknown-key", "unknown-second-key", "not-toml", "wrong-type", "wrong-array"],
)
def test_a_bad_config_file_is_exit_2_naming_the_file_the_key_and_the_reason(
    tmp_path: Path, text: str, words: list[str]
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(text)
    for args, env in (
        (["--config", str(config), "status"], None),
        (["status"], {"SWITCHYARD_CONFIG": str(config)}),
    ):
        res = _run(*args, env=env)
        assert res.exit_code == exitcodes.USAGE, res.output
        assert str(config) in res.stderr and all(w in res.stderr for w in words), res.stderr
        assert len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert not (tmp_path / "x.db").exists()


# -- 5. help text and exit codes ----------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p, _ in _commands()], ids=lambda p: p or "switchyard")
def test_every_command_and_option_has_help_and_the_command_lists_its_exit_codes(path: str) -> None:
    cmd = dict(_commands())[path]
    assert (cmd.help or "").strip(), f"`switchyard {path}` has no help text"
    undocumented = [p.opts for p in cmd.params if isinstance(p, click.Option) and not (p.help or "").strip()]
    assert not undocumented, f"`switchyard {path}`: options without help: {undocumented}"
    res = _run(*path.split(), "--help")
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "Exit codes: 0 " in text, text
    # the codes listed are documented ones, 2 (bad arguments) among them: every command has options
    listed = [part.split(" ", 1)[0] for part in text.split("Exit codes: ", 1)[1].split("; ")]
    assert set(listed) <= {str(c) for c in exitcodes.MEANING} and "2" in listed, text


def test_shell_completion_completes_commands_and_the_unified_options() -> None:
    """What the README's `_SWITCHYARD_COMPLETE=bash_source switchyard` line installs answers."""

    def complete(words: str) -> list[str]:
        env = {"_SWITCHYARD_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1)}
        res = CliRunner().invoke(cli, [], prog_name="switchyard", env=env)
        assert res.exit_code == 0, res.output
        return [line.split(",", 1)[1] for line in res.stdout.splitlines()]

    assert complete("switchyard cut") == ["cutover"]
    assert complete("switchyard cutover --bu") == ["--business"]
    assert "--target-url" not in complete("switchyard migrate run --")  # the hidden alias is not offered


def test_the_readme_documents_shell_completion_and_the_unified_names() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "_SWITCHYARD_COMPLETE=bash_source switchyard" in readme
    cli_section = readme.split("## A business, from legacy to the new center", 1)[1].split("\n## ", 1)[0]
    commands = [line for line in cli_section.splitlines() if line.startswith("switchyard ")]
    assert len(commands) > 20, commands
    for line in commands:
        assert "--target-url" not in line, line
        for old in ("dualrun start B ", "cutover B ", "rollback B ", "report B "):
            assert not line.startswith(f"switchyard {old}"), line
    assert "SWITCHYARD_LEGACY_URL" in readme and "--config" in readme


# -- 6. status --jobs has column headers ----------------------------------------------------------


def test_status_jobs_prints_column_headers(migrated: tuple[str, str]) -> None:
    url, legacy = migrated
    res = _run("status", "--url", url, "--legacy-url", legacy, "--jobs")
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    assert lines[0].split()[:3] == ["BUSINESS", "SOURCE", "STATE"], lines[:3]
    job_header = [i for i, line in enumerate(lines) if "JOB" in line and "FIRES ON" in line]
    assert job_header, res.stdout
    assert lines[job_header[0] + 1].split()[0].isdigit(), lines[job_header[0] : job_header[0] + 2]  # a job row


# -- 7. the separate-process commands and the in-process bus -----------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["scheduler", "run", "--election", "local", "--url", "{url}"],
        ["executor", "run", "--handlers", "tests.serve_handlers", "--business", BIZ],
    ],
    ids=["scheduler-run", "executor-run"],
)
def test_a_separate_process_refuses_the_in_process_bus_unless_told(
    tmp_path: Path, args: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    url = _store(tmp_path / "s.db")
    argv = [url if a == "{url}" else a for a in args]
    # a process of its own, bounded: one that runs on the in-process bus runs until it is stopped
    env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_")}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "switchyard", *argv],
            capture_output=True,
            text=True,
            timeout=REFUSAL_TIMEOUT_S,
            env=env,
            cwd=REPO,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"`switchyard {' '.join(args)}` ran on the in-process bus nobody chose (still running)")
    assert proc.returncode == exitcodes.USAGE, proc.stderr
    assert "--bus pulsar://" in proc.stderr and "SWITCHYARD_BUS" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    # told on purpose (on the command line, in the variable, in the config file): it runs on, with a warning.
    # A bad --url stops it right after that choice, before it runs for ever
    config = tmp_path / "c.toml"
    config.write_text('bus = "memory"\n')
    chosen: list[tuple[list[str], list[str], dict[str, str] | None]] = [
        ([], ["--bus", "memory"], None),  # (before the command, after it, environment)
        ([], [], {"SWITCHYARD_BUS": "memory"}),
        (["--config", str(config)], [], None),
    ]
    for top, extra, variables in chosen:
        caplog.clear()
        if "--url" in argv:
            told = _run(*top, *argv, *extra, "--url", "notaurl", env=variables)
        else:  # executor run takes no store: its handlers module without handlers stops it
            told = _run(*top, *[a if a != "tests.serve_handlers" else "json" for a in argv], *extra, env=variables)
        assert told.exit_code == exitcodes.USAGE, told.output
        assert "no bus given" not in told.stderr, told.stderr
        warned = [r.getMessage() for r in caplog.records if "in-process bus" in r.getMessage()]
        assert len(warned) == 1 and r"--bus memory" in warned[0], caplog.records


def test_serve_and_demo_keep_the_in_process_bus_by_default() -> None:
    for command in (["serve"], ["demo"]):
        names = [o for p in dict(_commands())[" ".join(command)].params for o in getattr(p, "opts", [])]
        assert "--bus" not in names, command  # one process: its own bus, nothing to choose


# -- 8. an unknown business, job or trigger ----------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        ["report", "--business", "nosuch", "--out", "{out}", "--url", "{url}"],
        ["migrate", "plan", "--source", "batch-center", "--business", "nosuch", "--legacy-url", "{legacy}"],
        ["migrate", "run", "--source", "batch-center", "--business", "nosuch", "--legacy-url", "{legacy}"],
        ["dualrun", "watch", "--business", "nosuch", "--max-runs", "1", "--legacy-url", "{legacy}"],
        ["dualrun", "watch-cutover", "--business", "nosuch", "--max-runs", "1", "--legacy-url", "{legacy}"],
        ["cutover", "--business", "nosuch", "--legacy-url", "{legacy}"],
        ["freeze", "--business", "nosuch", "--reason", "x"],
        ["trigger", "pause", "--business", "nosuch"],
        ["serve", "--handlers", "tests.serve_handlers", "--business", "nosuch"],
    ],
    ids=lambda a: "-".join(a[:2]),
)
def test_an_unknown_business_is_exit_2_naming_it_and_nothing_is_stored(
    migrated: tuple[str, str], tmp_path: Path, args: list[str]
) -> None:
    url, legacy = migrated
    fill = {"{url}": url, "{legacy}": legacy, "{out}": str(tmp_path / "r.html")}
    argv = [fill.get(a, a) for a in args]
    res = _run(*argv, *([] if "--url" in argv else ["--url", url]))
    assert res.exit_code == exitcodes.USAGE, res.output
    assert "nosuch" in res.stderr and ("no such business" in res.stderr or "unknown business" in res.stderr), res.stderr
    assert not (tmp_path / "r.html").exists()
    store = open_store(url)
    try:
        assert latest(dualrun_store(store), "nosuch") is None
    finally:
        store.engine.dispose()


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["trigger", "pause", "--job", "nosuch:job"], "no such job: nosuch:job"),
        (["trigger", "resume", "--job", "nosuch:job"], "no such job: nosuch:job"),
        (["trigger", "cancel", "--job", "nosuch:job"], "no such job: nosuch:job"),
        (["trigger", "pause", "987654"], "no such trigger: 987654"),
        (["trigger", "resume", "987654"], "no such trigger: 987654"),
        (["trigger", "cancel", "987654"], "no such trigger: 987654"),
        (["run", "kill", "--job", "nosuch:job"], "no such job: nosuch:job"),
        (["run", "kill", "987654-1-0"], "no such run: 987654-1-0"),
    ],
    ids=lambda a: "-".join(a[:3]) if isinstance(a, list) else None,
)
def test_an_unknown_job_or_trigger_is_exit_2_naming_it(migrated: tuple[str, str], args: list[str], named: str) -> None:
    url, _ = migrated
    res = _run(*args, "--url", url)
    assert res.exit_code == exitcodes.USAGE, res.output
    assert named in res.stderr, res.stderr


def test_a_job_of_another_business_is_exit_2_naming_both(migrated: tuple[str, str]) -> None:
    url, _ = migrated
    store = open_store(url)
    try:
        jobs = {t.biz_code: str(t.job_code) for t in store.triggers_of()}
    finally:
        store.engine.dispose()
    other = next(b for b in jobs if b != BIZ)
    res = _run("trigger", "pause", "--job", jobs[other], "--business", BIZ, "--url", url)
    assert res.exit_code == exitcodes.USAGE, res.output
    assert jobs[other] in res.stderr and BIZ in res.stderr, res.stderr
