"""Where a database URL's password comes from: never the command line, by choice.

A process's arguments are readable by every user of the host (`ps`, /proc/PID/cmdline),
its environment and its files are not. So a URL option also reads its environment
variable and the config file, and a password file fills the password into a URL given
without one (`--password-file` for the store, `--legacy-password-file` for the legacy
databases, `--binlog-password-file` for `migrate stream`'s binlog user). A URL typed on the command line with a password in it still works, with one
warning on stderr naming the option and the way around it.
"""

from __future__ import annotations

import functools
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
from click.core import ParameterSource
from sqlalchemy.engine import make_url

PASSWORD_FILE_ENV = "SWITCHYARD_PASSWORD_FILE"
LEGACY_PASSWORD_FILE_ENV = "SWITCHYARD_LEGACY_PASSWORD_FILE"
BINLOG_PASSWORD_FILE_ENV = "SWITCHYARD_BINLOG_PASSWORD_FILE"


def has_password(url: str) -> bool:
    """Whether `url` (a database's, or an http one's user-info) carries a password."""
    try:
        return bool(urlsplit(url.strip()).password)
    except ValueError:  # an unparsable URL: the command's own check reports it
        return False


def warn_if_typed(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
    """An option's callback: one warning on stderr when the value given on the command
    line is a URL (or several) carrying a password; the value itself is left as it is."""
    if param.name is None or ctx.get_parameter_source(param.name) is not ParameterSource.COMMANDLINE:
        return value
    values = value if isinstance(value, (tuple, list)) else (value,)
    if any(isinstance(v, str) and has_password(v) for v in values):
        warn_typed(ctx, param.opts[0], param.envvar if isinstance(param.envvar, str) else None)
    return value


def warn_typed(ctx: click.Context, option: str, envvar: str | None) -> None:
    """The warning itself, once per option and command."""
    told: set[str] = ctx.meta.setdefault("switchyard.passwords.told", set())
    if option in told:
        return
    told.add(option)
    ways = [f"set {envvar}" if envvar else None, "use the config file (--config)"]
    file_option = _FILE_OPTION_OF.get(option)
    if file_option:
        ways.append(f"give the URL without its password and the password in {file_option}")
    click.echo(
        f"warning: the URL given to {option} carries a password, which every user of this host "
        f"can read in the process list; {', or '.join(w for w in ways if w)} instead",
        err=True,
    )


def read_password_file(path: Path, option: str) -> str:
    """The password in the file at `path`: its first line, stripped. A file that others
    than its owner and group may read is refused (a password anyone can read is no safer
    than one on the command line), as are a missing, unreadable or empty file."""
    try:
        mode = path.stat().st_mode
        if mode & stat.S_IROTH:
            raise click.BadParameter(
                f"{path} is readable by every user of this host (mode {stat.S_IMODE(mode):o}): "
                f"chmod o-r {path} (600 or 640)",
                param_hint=option,
            )
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise click.BadParameter(f"{path} cannot be read ({exc.strerror or exc})", param_hint=option) from None
    except UnicodeDecodeError:
        raise click.BadParameter(f"{path} is not UTF-8 text", param_hint=option) from None
    password = lines[0].strip() if lines else ""
    if not password:
        raise click.BadParameter(f"{path}: its first line is empty (it must hold the password)", param_hint=option)
    return password


def with_password(url: str, password: str, url_option: str, file_option: str) -> str:
    """`url` with `password` filled in; a usage error when it names no user, or carries a
    password of its own (two passwords: which one is meant cannot be guessed)."""
    try:
        parsed = make_url(url)
    except Exception:
        raise click.BadParameter(f"{file_option} needs a URL in {url_option}; got an unparsable one") from None
    if parsed.password:
        raise click.UsageError(f"{url_option} carries a password and {file_option} gives one too: drop one of them")
    if not parsed.username:
        raise click.UsageError(
            f"{file_option} fills the password of the user {url_option} names, and it names none "
            "(DRIVER://USER@HOST:PORT/DB)"
        )
    return parsed.set(password=password).render_as_string(hide_password=False)


def password_file_option(
    url_param: str, url_option: str, file_option: str, envvar: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Adds `file_option` (PATH, also from `envvar` and the config file) to a command with
    the URL option `url_option` (keyword `url_param`, a string or a tuple of them); given,
    its password is filled into the URL (each of them)."""
    dest = file_option.lstrip("-").replace("-", "_")

    def add(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def filled(*args: Any, **kwargs: Any) -> Any:
            path = kwargs.pop(dest)
            if path is not None:
                password = read_password_file(path, file_option)
                urls = kwargs[url_param]

                def fill(u: str) -> str:
                    return with_password(u, password, url_option, file_option)

                if isinstance(urls, tuple):
                    kwargs[url_param] = tuple(fill(u) for u in urls)
                elif urls:
                    kwargs[url_param] = fill(urls)
                elif click.get_current_context().get_parameter_source(dest) is ParameterSource.COMMANDLINE:
                    # (from the variable or the config file, shared by every command, it is
                    # simply not needed by a command run without this URL)
                    raise click.UsageError(f"{file_option} needs {url_option}: the password of which user?")
            return fn(*args, **kwargs)

        return click.option(
            file_option,
            dest,
            type=click.Path(dir_okay=False, path_type=Path),
            envvar=envvar,
            show_envvar=True,
            default=None,
            help=f"File whose first line is the password of the user {url_option} names (not readable "
            f"by others; config file: {dest}). Keeps the password out of the process list.",
        )(filled)

    return add


# the URL option -> the option of its password file, for the warning's advice
_FILE_OPTION_OF = {
    "--url": "--password-file",
    "--target-url": "--password-file",
    "--legacy-url": "--legacy-password-file",
    "--binlog-url": "--binlog-password-file",
}

__all__ = [
    "BINLOG_PASSWORD_FILE_ENV",
    "LEGACY_PASSWORD_FILE_ENV",
    "PASSWORD_FILE_ENV",
    "has_password",
    "password_file_option",
    "read_password_file",
    "warn_if_typed",
    "warn_typed",
    "with_password",
]
