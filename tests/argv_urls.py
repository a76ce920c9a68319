"""No database password in a process's arguments: every user of the host reads them (`ps`,
/proc/PID/cmdline). The processes the tests start take their URLs as an operator should,
from the environment (`urls_in_env`), and `password_leaks` finds what would break that: a
URL carrying a password, or one of the stack's passwords, in an argument list."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from urllib.parse import urlsplit

# each URL option of the CLI -> the variable it also reads (switchyard.cli.options)
URL_ENV: Mapping[str, str] = {
    "--url": "SWITCHYARD_URL",
    "--target-url": "SWITCHYARD_URL",
    "--legacy-url": "SWITCHYARD_LEGACY_URL",
    "--binlog-url": "SWITCHYARD_BINLOG_URL",
}
# the variables of the shared stack's URLs (scripts/stack writes them), each with a password
STACK_URL_VARS = (
    "SWITCHYARD_MARIADB_URL",
    "SWITCHYARD_MARIADB_ROOT_URL",
    "SWITCHYARD_MARIADB_CDC_URL",
    "SWITCHYARD_MARIADB_SCHED_URL",
)


def _password(url: str) -> str | None:
    try:
        return urlsplit(url.strip()).password
    except ValueError:
        return None


def stack_passwords(environ: Mapping[str, str] | None = None) -> set[str]:
    """The passwords of the stack's database users, from their URLs in the environment."""
    env = os.environ if environ is None else environ
    return {p for var in STACK_URL_VARS if (p := _password(env.get(var, "")))}


def password_leaks(argv: Iterable[str], passwords: Iterable[str] = ()) -> list[str]:
    """The arguments of `argv` that carry a password: a URL with one, or any of
    `passwords` (the argument named by its position, the password never repeated)."""
    known = [p for p in passwords if p]
    out = []
    for i, arg in enumerate(argv):
        if ("://" in arg and _password(arg)) or any(p in arg for p in known):
            out.append(f"argument {i} ({arg.split('://', 1)[0] + '://...' if '://' in arg else '...'})")
    return out


def urls_in_env(args: Sequence[str], env: Mapping[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """`switchyard` arguments and the environment to start them with: each URL option
    whose value carries a password taken out of the arguments (all of its values, when it
    is repeated) and given in its variable instead (several space-separated, as the CLI
    reads them); `env` (default: this process's) otherwise unchanged."""
    out_env = dict(os.environ if env is None else env)
    given: dict[str, list[str]] = {}
    for i, arg in enumerate(args[:-1]):
        if arg in URL_ENV:
            given.setdefault(arg, []).append(args[i + 1])
    moved = {opt for opt, values in given.items() if any(_password(v) for v in values)}
    out_args: list[str] = []
    skip = False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in moved and i + 1 < len(args):
            skip = True
        else:
            out_args.append(arg)
    for opt in moved:
        out_env[URL_ENV[opt]] = " ".join(given[opt])
    return out_args, out_env


__all__ = ["STACK_URL_VARS", "URL_ENV", "password_leaks", "stack_passwords", "urls_in_env"]
