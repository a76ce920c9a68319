"""`switchyard console`: the operator console in the browser; read-only unless started
with --writes and tokens that carry a role (viewer, operator, admin)."""

from __future__ import annotations

import contextlib
import ipaddress
import logging
import os
import signal
import threading
from collections.abc import Iterator
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import click

from dbkit.redact import safe_url
from scheduler_core.ports import MessageBus
from switchyard import exitcodes
from switchyard.cli.bus_args import BusArgs, bus_opts
from switchyard.cli.durations import seconds
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import STORE, exits
from switchyard.cli.options import legacy_url_option, log_format, log_level, store_url
from switchyard.cli.ports import ensure_free
from switchyard.console.auth import Token, TokenError, tokens_from_env, tokens_from_file
from switchyard.console.data import Sources, scraped_members
from switchyard.logs import configure_logging
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.wiring import legacy_switches, open_existing_store

log = logging.getLogger(__name__)
TOKEN_ENV = "SWITCHYARD_CONSOLE_TOKEN"
TOKENS_ENV = "SWITCHYARD_CONSOLE_TOKENS"


def is_loopback(bind: str) -> bool:
    if bind == "localhost":
        return True
    try:
        return ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return False


def console_token(bind: str, token_env: str) -> str | None:
    """The bearer token from the environment; required when bound beyond loopback."""
    token = os.environ.get(token_env) or None
    if token is None and not is_loopback(bind):
        raise CliFailure(
            f"bound to {bind}, the console needs a bearer token: put it in ${token_env} (never on the command line)",
            exitcodes.USAGE,
        )
    return token


def console_tokens(tokens_env: str, tokens_file: Path | None) -> list[Token]:
    """The role tokens: from the environment (`name:role:token,...`) and/or a file (one
    `name role token` a line, readable by its owner only). Never from the command line."""
    try:
        found = tokens_from_env(tokens_env)
        if tokens_file is not None:
            found += tokens_from_file(tokens_file)
    except TokenError as exc:
        raise CliFailure(f"console tokens: {exc}", exitcodes.USAGE) from None
    names = [t.name for t in found]
    if len(set(names)) != len(names):
        raise CliFailure(f"console tokens: a name is given both in ${tokens_env} and the file", exitcodes.USAGE)
    return found


def serve_console(
    src: Sources,
    bind: str,
    port: int,
    token: str | None,
    *,
    tokens: list[Token] | None = None,
    writes: bool = False,
    bus: MessageBus | None = None,
) -> object:
    """A uvicorn server for the console (not started): `.run()` here, or in a thread."""
    import uvicorn

    from switchyard.console.app import make_app

    class Server(uvicorn.Server):
        """Stops on SIGTERM/SIGINT like every other command (exit 0): uvicorn's own
        handler raises the signal again once it has shut down, so the process would die
        of it. In a thread (`serve`) it installs nothing: the caller sets should_exit."""

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            old = {s: signal.signal(s, self.handle_exit) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                yield
            finally:
                for s, handler in old.items():
                    signal.signal(s, handler)

    config = uvicorn.Config(
        make_app(src, token, tokens=tokens, writes=writes, bus=bus),
        host=bind,
        port=port,
        log_config=None,
        server_header=False,
        lifespan="off",
    )
    return Server(config)


@exits(*STORE)
@click.command("console")
@store_url
@legacy_url_option(
    "A legacy database to read the legacy switches from (repeatable); else inferred from the store.",
    required=False,
    multiple=True,
    dest="legacy_urls",
)
@click.option(
    "--scheduler-metrics",
    "metrics_urls",
    multiple=True,
    help="A scheduler's metrics URL, e.g. http://127.0.0.1:9464/ (repeatable): members, leader, lookahead lag.",
)
@click.option(
    "--bind",
    default="127.0.0.1",
    show_default=True,
    help=f"Address to listen on; anything but loopback needs ${TOKEN_ENV}.",
)
@click.option("--port", type=click.IntRange(1, 65535), default=8470, show_default=True, help="The port to listen on.")
@click.option(
    "--token-env",
    default=TOKEN_ENV,
    show_default=True,
    help="Environment variable holding the bearer token (never pass secrets as arguments).",
)
@click.option(
    "--tokens-env",
    default=TOKENS_ENV,
    show_default=True,
    help="Environment variable holding role tokens: name:role:token,... (roles: viewer, operator, admin).",
)
@click.option(
    "--tokens-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A file of role tokens, one `name role token` a line, readable by its owner only (chmod 600).",
)
@click.option(
    "--writes",
    is_flag=True,
    help="Serve the writes (job create/edit/copy/delete, start/stop, run now): needs role tokens; "
    "without it the console is read-only whatever the tokens.",
)
@bus_opts
@click.option(
    "--lag-window",
    type=seconds(1),
    default="1h",
    show_default=True,
    help="How far back the fired records the lag percentiles cover go.",
)
@log_level
@log_format
@cli_errors
def console(
    url: str,
    legacy_urls: tuple[str, ...],
    metrics_urls: tuple[str, ...],
    bind: str,
    port: int,
    token_env: str,
    tokens_env: str,
    tokens_file: Path | None,
    writes: bool,
    bus_args: BusArgs,
    lag_window: timedelta,
    log_level: str,
    log_format: str,
) -> None:
    """The console: businesses, verdicts, jobs by live side, lag, scheduler, audit,
    quarantine; with --writes and role tokens also the job admin (every write audited)."""
    configure_logging(log_level, log_format)
    cap_malloc_arenas()  # before the threads start (switchyard/malloc_arenas.py)
    tokens = console_tokens(tokens_env, tokens_file)
    token = os.environ.get(token_env) or None if tokens else console_token(bind, token_env)
    if writes and not tokens:
        raise CliFailure(
            f"--writes needs role tokens: put them in ${tokens_env} or --tokens-file (never on the command line)",
            exitcodes.USAGE,
        )
    ensure_free("--port", port, bind)
    store = open_existing_store(url)
    store.current_epoch()  # a store that cannot be read is a clear error now (exit 3/4), not at the first page
    src = Sources(
        store,
        legacy_switches(legacy_urls, store.clock) if legacy_urls else None,
        scraped_members(metrics_urls) if metrics_urls else None,
        lag_window,
        legacy_urls=legacy_urls,
    )
    mode = "writes served" if writes else "read-only"
    if tokens or token:
        mode += f", bearer token required ({len(tokens) + (1 if token else 0)} token(s))"
    log.info("console of %s on http://%s:%d/ (%s)", safe_url(url), bind, port, mode)
    try:
        with bus_args.opened() if writes and bus_args.reaches_executors else nullcontext() as bus:
            server = serve_console(src, bind, port, token, tokens=tokens, writes=writes, bus=bus)
            server.run()  # type: ignore[attr-defined]
    finally:
        store.close()
