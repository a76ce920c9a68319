"""Options shared by several commands."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from click.core import ParameterSource

from dbkit.engine import DEFAULT_SQLITE_URL
from dbkit.redact import safe_url
from switchyard.cli.durations import seconds
from switchyard.cli.passwords import LEGACY_PASSWORD_FILE_ENV, PASSWORD_FILE_ENV, password_file_option, warn_if_typed
from switchyard.logs import FORMATS
from switchyard.settings import parse_zones

# The environment variables of the settings every command shares; a config file's keys
# (switchyard.cli.config) name the same settings, and the precedence is click's own: the
# command line, then the variable, then the file (a default_map), then the built-in default.
STORE_URL_ENV = "SWITCHYARD_URL"
LEGACY_URL_ENV = "SWITCHYARD_LEGACY_URL"
BINLOG_URL_ENV = "SWITCHYARD_BINLOG_URL"
BUS_ENV = "SWITCHYARD_BUS"
ETCD_ENV = "SWITCHYARD_ETCD_URL"
IN_PROCESS_BUS = "memory"


def store_url_option(*aliases: str) -> Callable[[Any], Any]:
    """`--url`, the Switchyard store, with `--password-file` and the old names it had in
    some commands: each a hidden option of its own (left out of --help and of shell
    completion) whose value, when given, is the store's."""
    url = click.option(
        "--url",
        "url",
        envvar=STORE_URL_ENV,
        show_envvar=True,
        default=DEFAULT_SQLITE_URL,
        show_default=True,
        callback=warn_if_typed,
        help="The Switchyard store: sqlite:///FILE or mysql+pymysql://USER@HOST:PORT/DB, its password "
        "from --password-file or in the variable, never typed here (config file: url).",
    )
    password_file = password_file_option("url", "--url", "--password-file", PASSWORD_FILE_ENV)

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        dests = {alias: "old_" + alias.lstrip("-").replace("-", "_") for alias in aliases}
        filled = password_file(fn)  # after the old names are merged: it fills the store's URL

        @functools.wraps(filled)
        def merged(*args: Any, url: str, **kwargs: Any) -> Any:
            ctx = click.get_current_context()
            for alias, dest in dests.items():
                old = kwargs.pop(dest)
                if old is None:
                    continue
                if ctx.get_parameter_source("url") is ParameterSource.COMMANDLINE and old != url:
                    raise click.UsageError(
                        f"the store is named twice: --url {safe_url(url)} and {alias} {safe_url(old)}", ctx
                    )
                url = old
            return filled(*args, url=url, **kwargs)

        out = url(merged)
        for alias, dest in dests.items():
            out = click.option(
                alias, dest, hidden=True, default=None, callback=warn_if_typed, help="The old name of --url."
            )(out)
        return out

    return add


store_url = store_url_option()


def legacy_url_option(
    help: str, *, required: bool = True, multiple: bool = False, dest: str = "legacy_url"
) -> Callable[[Any], Any]:
    """`--legacy-url`, a legacy database, with `--legacy-password-file`; several
    (whitespace-separated in the variable, an array in the config file) where a command
    reads one per legacy system."""
    url = click.option(
        "--legacy-url",
        dest,
        required=required,
        multiple=multiple,
        envvar=LEGACY_URL_ENV,
        show_envvar=True,
        callback=warn_if_typed,
        help=help + " Its password from --legacy-password-file or in the variable (config file: legacy_url).",
    )
    password_file = password_file_option(dest, "--legacy-url", "--legacy-password-file", LEGACY_PASSWORD_FILE_ENV)

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        return url(password_file(fn))  # type: ignore[no-any-return]

    return add


bus_url = click.option(
    "--bus",
    "bus_url",
    envvar=BUS_ENV,
    show_envvar=True,
    default=IN_PROCESS_BUS,
    show_default=True,
    help="'memory' (this process only) or pulsar://HOST:PORT (config file: bus).",
)
pulsar_admin = click.option(
    "--pulsar-admin",
    envvar="SWITCHYARD_PULSAR_ADMIN_URL",
    show_envvar=True,
    default=None,
    callback=warn_if_typed,  # http://USER:PW@HOST would put the password in the process list
    help="Pulsar admin REST URL, for consumer lag (config file: pulsar_admin).",
)
pulsar_token = click.option(
    "--pulsar-token-env",
    default="SWITCHYARD_PULSAR_TOKEN",
    show_default=True,
    help="Environment variable holding a Pulsar token; never pass secrets as arguments "
    "(config file: pulsar_token_env).",
)
topic_prefix = click.option(
    "--topic-prefix",
    envvar="SWITCHYARD_TOPIC_PREFIX",
    show_envvar=True,
    default="switchyard",
    show_default=True,
    help="Prefix of the Pulsar topic names: one namespace, several installations (config file: topic_prefix).",
)


def legacy_zone_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--legacy-tz`, `--legacy-db-tz`, `--legacy-cron-tz`, resolved into one
    `legacy_zones: LegacyZones` argument: the same three options as `migrate`, so the
    zones an operator gave the migration are given unchanged to every later command."""

    @functools.wraps(fn)
    def resolved(
        *args: Any, legacy_tz: str | None, legacy_db_tz: str | None, legacy_cron_tz: str | None, **kwargs: Any
    ) -> Any:
        try:
            zones = parse_zones(legacy_tz, legacy_db_tz, legacy_cron_tz)
        except ValueError as exc:
            raise click.UsageError(str(exc)) from None
        return fn(*args, legacy_zones=zones, **kwargs)

    for opt in (
        click.option(
            "--legacy-cron-tz",
            default=None,
            help="xxl-job: zone its crons run in (the admin JVM's; default: the database zone).",
        ),
        click.option(
            "--legacy-db-tz",
            default=None,
            help="xxl-job: zone of its DATETIME columns (JDBC serverTimezone; default: the cron zone).",
        ),
        click.option(
            "--legacy-tz",
            default=None,
            show_default="Asia/Shanghai",
            help="Zone of the legacy DATETIME columns and crons (both).",
        ),
    ):
        resolved = opt(resolved)
    return resolved


# the scheduler's two loop settings, the same for `scheduler run` and `serve`
lookahead = click.option(
    "--lookahead",
    type=seconds(0),
    default="30m",
    show_default=True,
    help="How far ahead commands are published to the bus.",
)
idle_wait = click.option(
    "--idle-wait",
    type=seconds(0),
    default="30s",
    show_default=True,
    help="The longest sleep of a partition's loop with nothing due.",
)
log_level = click.option(
    "--log-level",
    default="INFO",
    show_default=True,
    help="The lowest level of the log lines written to stderr (DEBUG, INFO, WARNING, ERROR).",
)
log_format = click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text lines, or one JSON object per line with the fields operators filter on "
    "(business, partition, epoch, trigger_id, command_id) as keys of their own.",
)
