"""Bad input never surprises (issue 32): a command given a typo'd store, a URL without its
driver, or a name that does not exist says so in one line naming it, exits 2 (bad input),
and leaves nothing behind: no file, no directory, no stored row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from dualrun.verdict_store import latest
from legacy_sim.seed import seed_batchcenter
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.store.engine import make_engine
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store, open_store


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    engine = make_engine(url)
    init_schema(engine, 2)
    engine.dispose()
    return url


# -- read-only commands never create a store ----------------------------------------------

READ_ONLY = [
    pytest.param(["status", "--url", "{url}"], id="status"),
    pytest.param(["status", "--check", "--url", "{url}"], id="status-check"),
    pytest.param(["report", "--overview", "--out", "{out}", "--url", "{url}"], id="report-overview"),
    pytest.param(["migrate", "quarantine", "--url", "{url}"], id="migrate-quarantine"),
    pytest.param(["scheduler", "stats", "--url", "{url}"], id="scheduler-stats"),
    pytest.param(["console", "--url", "{url}", "--port", "1"], id="console"),
    pytest.param(["trigger", "pause", "1", "--url", "{url}"], id="trigger-pause"),
    pytest.param(["run", "kill", "1-2-0", "--url", "{url}"], id="run-kill"),
    pytest.param(["freeze", "--all", "--reason", "x", "--url", "{url}"], id="freeze"),
]


@pytest.mark.parametrize("args", READ_ONLY)
def test_a_missing_sqlite_store_is_an_error_naming_it_and_nothing_is_created(tmp_path: Path, args: list[str]) -> None:
    typo = tmp_path / "typo" / "x.db"
    fill = {"{url}": f"sqlite:///{typo}", "{out}": str(tmp_path / "out.html")}
    result = CliRunner().invoke(cli, [fill.get(a, a) for a in args])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert f"no store at {typo}" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not typo.parent.exists()


def test_a_missing_legacy_database_is_an_error_naming_it_and_nothing_is_created(tmp_path: Path, store_url: str) -> None:
    typo = tmp_path / "typo" / "legacy.db"
    argv = ["migrate", "plan", "--source", "batch-center", "--legacy-url", f"sqlite:///{typo}"]
    result = CliRunner().invoke(cli, [*argv, "--url", store_url])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert f"no store at {typo}" in result.stderr
    assert not typo.parent.exists()


def test_db_init_still_creates_the_store(tmp_path: Path) -> None:
    path = tmp_path / "new" / "x.db"
    result = CliRunner().invoke(cli, ["db", "init", "--url", f"sqlite:///{path}"])
    assert result.exit_code == 0, result.output
    assert path.exists()


# -- a MySQL URL without a driver ---------------------------------------------------------


@pytest.mark.parametrize("url", ["mysql://u:secret@127.0.0.1:1/x", "mariadb://u@127.0.0.1:1/x"])
def test_a_mysql_url_without_driver_hints_at_pymysql(url: str) -> None:
    result = CliRunner().invoke(cli, ["status", "--url", url])
    assert result.exit_code == exitcodes.USAGE, result.output
    backend = url.split(":", 1)[0]
    assert f"{backend}+pymysql://" in result.stderr
    assert "MySQLdb" not in result.stderr
    assert "secret" not in result.stderr
    lines = result.stderr.strip().splitlines()
    # one line of error; a URL typed with its password also gets that warning (cli.passwords)
    warned = [ln for ln in lines if ln.startswith("warning: the URL given to --url carries a password")]
    assert len(lines) - len(warned) == 1 and len(warned) == ("secret" in url), result.stderr


# -- report --out ---------------------------------------------------------------------------


def test_report_out_dash_writes_to_stdout_and_no_file(
    tmp_path: Path, store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)  # where a file named "-" would land
    runner = CliRunner()
    result = runner.invoke(cli, ["report", "--overview", "--format", "json", "--out", "-", "--url", store_url])
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), dict)
    assert not (cwd / "-").exists()
    html = runner.invoke(cli, ["report", "--overview", "--out", "-", "--url", store_url])
    assert html.exit_code == 0, html.output
    assert html.stdout.lstrip().lower().startswith("<!doctype html")


def test_report_out_with_an_unknown_suffix_is_refused_naming_the_supported_ones(tmp_path: Path, store_url: str) -> None:
    out = tmp_path / "report.pdf"
    result = CliRunner().invoke(cli, ["report", "--overview", "--out", str(out), "--url", store_url])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert "--out" in result.stderr and ".pdf" in result.stderr
    assert all(s in result.stderr for s in (".html", ".md", ".json"))
    assert not out.exists()


# -- an unknown business ---------------------------------------------------------------------

BIZ = "sop-audience"  # a business of the seeded batch center


@pytest.fixture
def migrated(tmp_path: Path, store_url: str) -> tuple[str, str]:
    """(store URL, legacy URL): a seeded batch center migrated into the store."""
    legacy = f"sqlite:///{tmp_path / 'legacy.db'}"
    engine = make_engine(legacy)
    create_legacy_schema(engine, "batch-center")
    seed_batchcenter(engine, businesses=2, tasks_per_business=3, bad_rows=0, malformed_crons=0)
    engine.dispose()
    argv = ["migrate", "run", "--source", "batch-center", "--legacy-url", legacy, "--url", store_url]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    return store_url, legacy


def test_migrate_quarantine_of_an_unknown_business_exits_2_naming_it(migrated: tuple[str, str]) -> None:
    url, _ = migrated
    result = CliRunner().invoke(cli, ["migrate", "quarantine", "--business", "nosuch", "--url", url])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert "no such business: nosuch" in result.stderr
    known = CliRunner().invoke(cli, ["migrate", "quarantine", "--business", BIZ, "--url", url])
    assert known.exit_code == 0, known.output


def test_dualrun_compare_of_an_unknown_business_exits_2_and_stores_nothing(migrated: tuple[str, str]) -> None:
    url, legacy = migrated
    argv = ["dualrun", "compare", "--url", url, "--legacy-url", legacy, "--source", "batch-center"]
    result = CliRunner().invoke(cli, [*argv, "--business", "nosuch"])
    assert result.exit_code == exitcodes.USAGE, result.output
    assert "no such business: nosuch" in result.stderr
    store = open_store(url)
    try:
        assert latest(dualrun_store(store), "nosuch") is None
    finally:
        store.engine.dispose()
    known = CliRunner().invoke(cli, [*argv, "--business", BIZ])
    assert known.exit_code in (exitcodes.OK, exitcodes.FAILED), known.output  # a verdict, ready or not


def test_demo_refuses_a_non_empty_workdir_it_did_not_make_and_wipes_only_its_own(tmp_path: Path) -> None:
    """`demo --workdir` wiped whatever directory it was given: a typo deleted someone's files."""
    from switchyard.cli import cli
    from switchyard.demo import DEMO_MARK, prepare_workdir

    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("keep me")
    res = CliRunner().invoke(cli, ["demo", "--workdir", str(theirs)])
    assert res.exit_code == 2, res.output
    assert "--workdir" in res.output and str(theirs) in res.output and "not empty" in res.output
    assert (theirs / "notes.txt").read_text() == "keep me"
    # the demo's own directory from an earlier run is wiped; a missing or empty one is used
    ours = tmp_path / "ours"
    prepare_workdir(ours)
    assert (ours / DEMO_MARK).is_file()
    (ours / "old.db").write_text("x")
    prepare_workdir(ours)
    assert sorted(p.name for p in ours.iterdir()) == [DEMO_MARK]
    empty = tmp_path / "empty"
    empty.mkdir()
    prepare_workdir(empty)
    assert (empty / DEMO_MARK).is_file()
    # a demo's directory from before the mark (its databases and reports) is the demo's too
    older = tmp_path / "older"
    (older / "reports").mkdir(parents=True)
    for name in ("switchyard.db", "legacy-xxljob.db", "legacy-batchcenter.db"):
        (older / name).write_text("x")
    prepare_workdir(older)
    assert sorted(p.name for p in older.iterdir()) == [DEMO_MARK]


@pytest.mark.parametrize(
    ("args", "option"),
    [
        (["console", "--port", "{port}"], "--port"),
        (["serve", "--handlers", "tests.serve_handlers", "--console", "--console-port", "{port}"], "--console-port"),
        (["serve", "--handlers", "tests.serve_handlers", "--metrics-port", "{port}"], "--metrics-port"),
        (["scheduler", "run", "--election", "local", "--metrics-port", "{port}"], "--metrics-port"),
        (
            ["dualrun", "watch-cutover", "--max-runs", "1", "--legacy-url", "{url}", "--metrics-port", "{port}"],
            "--metrics-port",
        ),
    ],
    ids=["console", "serve-console", "serve-metrics", "scheduler-metrics", "watch-metrics"],
)
def test_a_busy_port_is_one_line_naming_its_option_before_anything_starts(
    tmp_path: Path, args: list[str], option: str
) -> None:
    """A port in use: `console` logged its URL then exited 3, `serve --console` ran on
    without its console, `--metrics-port` said "unexpected error (OSError)"."""
    import socket

    url = f"sqlite:///{tmp_path / 'store.db'}"
    assert CliRunner().invoke(cli, ["db", "init", "--url", url]).exit_code == 0
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen(1)
    port = holder.getsockname()[1]
    try:
        filled = [a.replace("{port}", str(port)).replace("{url}", url) for a in args]
        res = CliRunner().invoke(cli, [*filled, "--url", url])
    finally:
        holder.close()
    assert res.exit_code == exitcodes.USAGE, res.output
    assert f"{option} {port}" in res.output and "cannot listen" in res.output, res.output
    assert len([line for line in res.output.splitlines() if line.strip()]) == 1, res.output
