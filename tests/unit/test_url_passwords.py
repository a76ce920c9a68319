"""A database password never needs the command line (issue 28, "Writes are safe"): every
URL option also reads its environment variable and the config file, a password file fills
the password into a URL given without one, and a URL typed with its password still works
with one warning naming the option and the way around it. Also the tests' own guard:
`urls_in_env` moves such URLs out of a process's arguments, `password_leaks` finds them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import click
import pytest
from click.testing import CliRunner
from sqlalchemy.engine import make_url

from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.cli.config import config_option
from switchyard.cli.options import legacy_url_option, pulsar_admin, store_url, store_url_option
from switchyard.cli.passwords import has_password, password_file_option, read_password_file, with_password
from tests.argv_urls import password_leaks, stack_passwords, urls_in_env

SECRET = "s3cr-et"
TYPED = f"mysql+pymysql://app:{SECRET}@127.0.0.1:1/store"  # nothing listens on port 1
BARE = "mysql+pymysql://app@127.0.0.1:1/store"
LEGACY_BARE = "mysql+pymysql://ro@127.0.0.1:1/xxl_job"
WARNING = "warning: the URL given to"


@click.group()
@config_option
def probe() -> None:
    """A command of each kind of URL option, printing the URLs it was given."""


@probe.command("show")
@store_url
@legacy_url_option("Legacy.", required=False, multiple=True, dest="legacy_urls")
@pulsar_admin
def show(url: str, legacy_urls: tuple[str, ...], pulsar_admin: str | None) -> None:
    click.echo(json.dumps({"url": url, "legacy": list(legacy_urls), "admin": pulsar_admin}))


@probe.command("binlog")
@click.option("--binlog-url", default=None)
@password_file_option("binlog_url", "--binlog-url", "--binlog-password-file", "SWITCHYARD_TEST_BINLOG_PW")
def binlog(binlog_url: str | None) -> None:
    click.echo(json.dumps({"url": binlog_url}))


@probe.command("old")
@store_url_option("--target-url")
def old(url: str) -> None:
    click.echo(json.dumps({"url": url}))


def _probe(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, object], str]:
    clean = {"SWITCHYARD_URL": None, "SWITCHYARD_LEGACY_URL": None, "SWITCHYARD_PULSAR_ADMIN_URL": None}
    res = CliRunner().invoke(probe, list(args), env={**clean, **(env or {})})  # type: ignore[dict-item]
    body = json.loads(res.stdout) if res.exit_code == 0 else {}
    return res.exit_code, body, res.stderr


def _password_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    f = tmp_path / "pw"
    f.write_text(text, encoding="utf-8")
    f.chmod(mode)
    return f


# -- the warning ------------------------------------------------------------------------------


def test_a_typed_password_works_with_one_warning_naming_the_option_and_the_way_around() -> None:
    code, body, err = _probe("show", "--url", TYPED)
    assert code == 0 and body["url"] == TYPED  # still works
    warnings = [ln for ln in err.splitlines() if ln.startswith(WARNING)]
    assert len(warnings) == 1, err
    assert "--url" in warnings[0] and "SWITCHYARD_URL" in warnings[0] and "--password-file" in warnings[0]
    assert SECRET not in err


def test_each_url_option_warns_once_also_repeated_and_under_its_old_name() -> None:
    code, _body, err = _probe(
        "show", "--legacy-url", TYPED, "--legacy-url", TYPED + "2", "--pulsar-admin", f"http://admin:{SECRET}@h:1"
    )
    warnings = [ln for ln in err.splitlines() if ln.startswith(WARNING)]
    assert code == 0 and len(warnings) == 2, err
    assert "--legacy-url" in warnings[0] and "SWITCHYARD_LEGACY_URL" in warnings[0]
    assert "--legacy-password-file" in warnings[0]
    assert "--pulsar-admin" in warnings[1] and "SWITCHYARD_PULSAR_ADMIN_URL" in warnings[1]
    code, body, err = _probe("old", "--target-url", TYPED)
    assert code == 0 and body["url"] == TYPED and f"{WARNING} --target-url" in err, err


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["scheduler", "stats", "--url", TYPED], exitcodes.UNREACHABLE),  # it went for the server on port 1
        (["scheduler", "members", "--election", f"http://root:{SECRET}@127.0.0.1:1"], exitcodes.UNREACHABLE),
        # warned while the options are read, before the missing store stops it
        (["migrate", "stream", "--source", "xxl-job", "--legacy-url", "sqlite://", "--binlog-url", TYPED], 2),
    ],
    ids=["store", "election", "binlog"],
)
def test_the_real_commands_warn_and_still_take_the_url(argv: list[str], code: int) -> None:
    res = CliRunner().invoke(cli, argv, env={"SWITCHYARD_URL": None})
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith(WARNING)]
    assert len(warnings) == 1 and argv[-2] in warnings[0], res.stderr
    assert res.exit_code == code, res.output
    assert SECRET not in res.output


def test_no_warning_when_the_password_comes_from_the_environment_or_the_config_file(tmp_path: Path) -> None:
    code, body, err = _probe("show", env={"SWITCHYARD_URL": TYPED, "SWITCHYARD_LEGACY_URL": f"{TYPED} {TYPED}x"})
    assert code == 0 and body == {"url": TYPED, "legacy": [TYPED, TYPED + "x"], "admin": None}
    assert WARNING not in err
    config = tmp_path / "switchyard.toml"
    config.write_text(f'url = "{TYPED}"\n')
    code, body, err = _probe("--config", str(config), "show")
    assert code == 0 and body["url"] == TYPED and WARNING not in err
    code, _body, err = _probe("show", "--url", BARE)  # a URL without a password is no concern
    assert code == 0 and WARNING not in err


# -- the password file ------------------------------------------------------------------------


def test_the_password_file_fills_the_url_given_without_one(tmp_path: Path) -> None:
    f = _password_file(tmp_path, "p@ss:w/rd \n second line ignored\n")
    code, body, err = _probe("show", "--url", BARE, "--password-file", str(f))
    assert code == 0 and WARNING not in err, err
    assert body["url"] == "mysql+pymysql://app:p%40ss%3Aw%2Frd@127.0.0.1:1/store"  # escaped, stripped
    code, body, _ = _probe("show", env={"SWITCHYARD_URL": BARE, "SWITCHYARD_PASSWORD_FILE": str(f)})
    assert code == 0 and body["url"] == "mysql+pymysql://app:p%40ss%3Aw%2Frd@127.0.0.1:1/store"
    code, body, _ = _probe("show", "--legacy-url", LEGACY_BARE, "--legacy-password-file", str(f))
    assert code == 0 and body["legacy"] == ["mysql+pymysql://ro:p%40ss%3Aw%2Frd@127.0.0.1:1/xxl_job"]
    assert body["url"] != BARE or "p%40" not in str(body["url"])  # one file per database: the store's untouched


def test_an_optional_url_takes_its_password_file_only_when_given(tmp_path: Path) -> None:
    f = _password_file(tmp_path, "cdcpw")
    code, body, _ = _probe(
        "binlog", "--binlog-url", "mysql+pymysql://cdc@127.0.0.1:1/", "--binlog-password-file", str(f)
    )
    assert code == 0 and body["url"] == "mysql+pymysql://cdc:cdcpw@127.0.0.1:1/"
    code, body, _ = _probe("binlog")
    assert code == 0 and body["url"] is None
    res = CliRunner().invoke(probe, ["binlog", "--binlog-password-file", str(f)])
    assert res.exit_code == 2 and "--binlog-password-file needs --binlog-url" in res.stderr, res.output
    code, body, _ = _probe("binlog", env={"SWITCHYARD_TEST_BINLOG_PW": str(f)})  # shared setting: not needed here
    assert code == 0 and body["url"] is None


def test_the_config_file_names_the_password_files(tmp_path: Path) -> None:
    store_pw = _password_file(tmp_path, "storepw")
    legacy_pw = tmp_path / "legacy.pw"
    legacy_pw.write_text("legacypw\n")
    legacy_pw.chmod(0o640)  # readable by the group: allowed
    config = tmp_path / "switchyard.toml"
    config.write_text(
        f'url = "{BARE}"\npassword_file = "{store_pw}"\n'
        f'legacy_url = ["{LEGACY_BARE}"]\nlegacy_password_file = "{legacy_pw}"\n'
    )
    code, body, err = _probe("--config", str(config), "show")
    assert code == 0, err
    assert body["url"] == "mysql+pymysql://app:storepw@127.0.0.1:1/store"
    assert body["legacy"] == ["mysql+pymysql://ro:legacypw@127.0.0.1:1/xxl_job"]


@pytest.mark.parametrize(
    ("text", "mode", "url", "says"),
    [
        ("pw\n", 0o644, BARE, "readable by every user of this host (mode 644): chmod o-r"),
        ("\n\n", 0o600, BARE, "its first line is empty"),
        ("pw\n", 0o600, TYPED, "--url carries a password and --password-file gives one too"),
        ("pw\n", 0o600, "sqlite:///store.db", "names none"),
    ],
    ids=["world-readable", "empty", "two-passwords", "no-user"],
)
def test_a_password_file_that_cannot_be_used_is_a_usage_error(
    tmp_path: Path, text: str, mode: int, url: str, says: str
) -> None:
    f = _password_file(tmp_path, text, mode)
    res = CliRunner().invoke(
        cli, ["db", "check", "--url", url, "--password-file", str(f)], env={"SWITCHYARD_URL": None}
    )
    assert res.exit_code == exitcodes.USAGE, res.output
    assert says in " ".join(res.stderr.split()), res.stderr
    assert "Traceback" not in res.output and "pw" not in res.stdout


def test_a_missing_password_file_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(click.BadParameter, match="cannot be read"):
        read_password_file(tmp_path / "nowhere", "--password-file")


def test_with_password_and_has_password() -> None:
    for password in ("x y", "p@ss:w/rd", "a%41#?"):
        filled = make_url(with_password(BARE, password, "--url", "--password-file"))
        assert (filled.username, filled.password, filled.database) == ("app", password, "store")
    assert has_password(TYPED) and has_password(f"http://u:{SECRET}@h:1")
    assert not has_password(BARE) and not has_password("sqlite:///a.db") and not has_password("http://h:1")


# -- the tests' own guard ---------------------------------------------------------------------


def test_urls_in_env_moves_only_urls_with_a_password_and_all_values_of_that_option() -> None:
    args = ["status", "--url", TYPED, "--legacy-url", LEGACY_BARE, "--legacy-url", TYPED, "--json"]
    argv, env = urls_in_env(args, {"KEEP": "1"})
    assert argv == ["status", "--json"]
    assert env == {"KEEP": "1", "SWITCHYARD_URL": TYPED, "SWITCHYARD_LEGACY_URL": f"{LEGACY_BARE} {TYPED}"}
    argv, env = urls_in_env(["db", "init", "--url", "sqlite:///a.db"], {})
    assert argv == ["db", "init", "--url", "sqlite:///a.db"] and env == {}
    argv, env = urls_in_env(["migrate", "stream", "--binlog-url", TYPED, "--target-url", TYPED], {})
    assert argv == ["migrate", "stream"]
    assert env == {"SWITCHYARD_BINLOG_URL": TYPED, "SWITCHYARD_URL": TYPED}


def test_password_leaks_finds_a_url_with_a_password_or_a_known_password_without_repeating_it() -> None:
    assert password_leaks(["x", "--url", BARE, "sqlite:///a.db"]) == []
    found = password_leaks(["x", "--url", TYPED, f"--opt={SECRET}"], [SECRET])
    assert found == ["argument 2 (mysql+pymysql://...)", "argument 3 (...)"]
    assert stack_passwords({"SWITCHYARD_MARIADB_URL": TYPED, "OTHER": "mysql://a:b@h/"}) == {SECRET}


def test_the_session_guard_refuses_a_process_started_with_a_password_in_its_arguments(tmp_path: Path) -> None:
    import subprocess
    import sys

    with pytest.raises(AssertionError, match="a password in the arguments of a process the test starts"):
        subprocess.run([sys.executable, "-c", "pass", TYPED], check=False, timeout=30)
    # the same URL through the environment is fine
    argv, env = urls_in_env(["--url", TYPED], {**os.environ})
    done = subprocess.run(
        [sys.executable, "-c", "import os, sys; sys.exit(0 if os.environ['SWITCHYARD_URL'] else 1)", *argv],
        env=env,
        check=False,
        timeout=30,
    )
    assert done.returncode == 0 and argv == []
