"""The config file (`--config PATH` or $SWITCHYARD_CONFIG, TOML): the settings every
command would otherwise be told again and again, the store's URL, the legacy databases'
and the bus's.

    url = "mysql+pymysql://switchyard@db:3306/switchyard"
    password_file = "/etc/switchyard/store.password"  # first line: the password of `switchyard`
    legacy_url = "mysql+pymysql://ro@legacy:3306/xxl_job"  # or an array, one per legacy system
    legacy_password_file = "/etc/switchyard/legacy.password"
    bus = "pulsar://pulsar:6650"
    topic_prefix = "switchyard"
    pulsar_admin = "http://pulsar:8080"
    pulsar_token_env = "SWITCHYARD_PULSAR_TOKEN"
    election = "http://etcd:2379"

Each key is the default of the option of the same name (`legacy_url`: `--legacy-url`) in
every command that has it, through click's own default_map: the command line wins, then
the option's environment variable, then the file, then the built-in default. A file that
does not parse, a key it does not know or a value of the wrong type is a usage error
(exit 2) naming the file, the key and the reason: a typo'd key silently ignored would
leave a command on its built-in default (a SQLite file, the in-process bus). A URL may
carry its password here (keep the file unreadable by others), or take it from a password
file (switchyard.cli.passwords).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

CONFIG_ENV = "SWITCHYARD_CONFIG"
# key -> the option it is the default of
OPTION_OF: Mapping[str, str] = {
    "url": "--url",
    "password_file": "--password-file",
    "legacy_url": "--legacy-url",
    "legacy_password_file": "--legacy-password-file",
    "binlog_url": "--binlog-url",
    "binlog_password_file": "--binlog-password-file",
    "bus": "--bus",
    "topic_prefix": "--topic-prefix",
    "pulsar_admin": "--pulsar-admin",
    "pulsar_token_env": "--pulsar-token-env",
    "election": "--election",
}
_LISTS = frozenset({"legacy_url"})  # keys that may hold an array (one per legacy system)


class ConfigError(ValueError):
    def __init__(self, path: Path, key: str | None, reason: str) -> None:
        where = f"config file {path}" + (f": key {key!r}" if key else "")
        super().__init__(f"{where}: {reason}")


def load(path: Path) -> dict[str, str | list[str]]:
    """The settings of the file at `path`; ConfigError naming the file, the key and why."""
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(path, None, f"cannot be read ({exc.strerror or exc})") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(path, None, f"not valid TOML: {exc}") from None
    out: dict[str, str | list[str]] = {}
    for key, value in raw.items():
        if key not in OPTION_OF:
            raise ConfigError(path, key, f"unknown key (known: {', '.join(OPTION_OF)})")
        if isinstance(value, str):
            out[key] = value
        elif key in _LISTS and isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            out[key] = list(value)
        else:
            want = "a string or a non-empty array of strings" if key in _LISTS else "a string"
            raise ConfigError(path, key, f"must be {want}, not {type(value).__name__} {value!r}")
    return out


def _fitted(value: str | list[str], multiple: bool) -> str | list[str] | None:
    """A setting as the option takes it: an array for a repeatable option; for a single
    one, a string or an array of one (with several, the command must be told which)."""
    if multiple:
        return [value] if isinstance(value, str) else value
    if isinstance(value, str):
        return value
    return value[0] if len(value) == 1 else None


def default_map(command: click.Command, settings: Mapping[str, str | list[str]]) -> dict[str, Any]:
    """click's default_map for `command` and every command below it: each setting keyed
    by the name of every option it is the default of."""
    out: dict[str, Any] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name is None:
            continue
        for key, value in settings.items():
            if OPTION_OF[key] in param.opts:
                fitted = _fitted(value, param.multiple)
                if fitted is not None:
                    out[param.name] = fitted
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            below = default_map(sub, settings)
            if below:
                out[name] = below
    return out


def apply_config(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
    """The root group's `--config` callback (eager: before any command's options)."""
    if value is None:
        return
    try:
        settings = load(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param_hint="--config") from None
    ctx.default_map = {**(ctx.default_map or {}), **default_map(ctx.command, settings)}


config_option = click.option(
    "--config",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    envvar=CONFIG_ENV,
    show_envvar=True,
    is_eager=True,
    expose_value=False,
    callback=apply_config,
    help="TOML file of shared settings (url, password_file, legacy_url, legacy_password_file, "
    "binlog_url, binlog_password_file, bus, topic_prefix, pulsar_admin, pulsar_token_env, election); an option given "
    "or its environment variable wins over it.",
)

__all__ = ["CONFIG_ENV", "OPTION_OF", "ConfigError", "config_option", "default_map", "load"]
