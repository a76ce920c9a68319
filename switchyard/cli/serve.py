"""`switchyard serve`: the whole center in one process on the embedded default."""

from __future__ import annotations

import logging
import os
import socket
import threading
from datetime import timedelta
from pathlib import Path

import click

from dbkit.redact import safe_url
from scheduler_core.executor import Executor
from scheduler_core.settings import SchedulerSettings
from switchyard import exitcodes
from switchyard.alerts.loop import Alerter, AlertSettings
from switchyard.alerts.send import Sender
from switchyard.cli.alerts import alert_options, smtp_settings
from switchyard.cli.console import TOKEN_ENV, TOKENS_ENV, console_token, console_tokens, serve_console
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.executor import (
    Bridges,
    BridgeSettings,
    bridge_choice,
    bridge_options,
    heartbeat_interval,
    start_heartbeat,
)
from switchyard.cli.exits import STORE, exits_as
from switchyard.cli.names import known_business
from switchyard.cli.options import idle_wait, log_format, log_level, lookahead, store_url
from switchyard.cli.ports import ensure_free
from switchyard.cli.signals import stop_event
from switchyard.console.data import Sources, registry_members
from switchyard.embedded import EmbeddedCenter
from switchyard.exitcodes import OK
from switchyard.logs import configure_logging
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.wiring import alert_store, executor_registry, load_handlers, migrator_store, open_store

log = logging.getLogger(__name__)


@exits_as({**dict.fromkeys(STORE), OK: "stopped by SIGTERM or SIGINT"})
@click.command("serve")
@store_url
@click.option(
    "--handlers",
    "modules",
    multiple=True,
    help="Python module with `register(executor)` or `HANDLERS = {job_code: fn}` (repeatable).",
)
@bridge_choice
@bridge_options
@click.option(
    "--business",
    "biz_codes",
    multiple=True,
    help="Run executors for these businesses only (biz_code, repeatable); default: every business in the "
    "store, looked for again every few seconds.",
)
@click.option(
    "--concurrency", type=click.IntRange(1, 10000), default=16, show_default=True, help="Handler threads per business."
)
@click.option("--name", default=lambda: f"{socket.gethostname()}-{os.getpid()}", help="This process's name.")
@lookahead
@idle_wait
@heartbeat_interval
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, help="Prometheus port on 127.0.0.1 (0: off).")
@click.option("--console", "with_console", is_flag=True, help="Serve the console too.")
@click.option(
    "--console-bind",
    default="127.0.0.1",
    show_default=True,
    help=f"The console's address; anything but loopback needs ${TOKEN_ENV}.",
)
@click.option(
    "--console-port",
    type=click.IntRange(1, 65535),
    default=8470,
    show_default=True,
    help="The console's port (with --console).",
)
@click.option(
    "--no-alerts",
    is_flag=True,
    help="Run no alerter here (one runs elsewhere: `switchyard alerts run`). [default: alerts sent from here]",
)
@alert_options("alert-")
@click.option(
    "--console-tokens-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"The console's role tokens, one `name role token` a line (chmod 600); or ${TOKENS_ENV}.",
)
@click.option(
    "--console-writes",
    is_flag=True,
    help="The console serves the job admin's writes (needs role tokens); else it is read-only.",
)
@log_level
@log_format
@cli_errors
def serve(
    url: str,
    modules: tuple[str, ...],
    bridges: tuple[str, ...],
    biz_codes: tuple[str, ...],
    concurrency: int,
    name: str,
    lookahead: timedelta,
    idle_wait: timedelta,
    heartbeat_interval: timedelta,
    metrics_port: int,
    with_console: bool,
    console_bind: str,
    console_port: int,
    console_tokens_file: Path | None,
    console_writes: bool,
    log_level: str,
    log_format: str,
    bridge_settings: BridgeSettings,
    no_alerts: bool,
    alert_settings: AlertSettings,
) -> None:
    """Scheduler, executors, result consumer, the alerter (and console) in one process,
    in-process bus. Alert mail goes through SWITCHYARD_SMTP_HOST, _PORT, _FROM."""
    configure_logging(log_level, log_format)
    cap_malloc_arenas()  # before the threads start (switchyard/malloc_arenas.py)
    if not modules and not bridges:
        raise CliFailure("give --handlers MODULE, or --bridge xxl-job / --bridge batch-center", exitcodes.USAGE)
    tokens = console_tokens(TOKENS_ENV, console_tokens_file) if with_console else []
    token = (
        (os.environ.get(TOKEN_ENV) or None if tokens else console_token(console_bind, TOKEN_ENV))
        if with_console
        else None
    )
    if console_writes and not tokens:
        raise CliFailure(
            f"--console-writes needs role tokens: put them in ${TOKENS_ENV} or --console-tokens-file", exitcodes.USAGE
        )
    smtp = None if no_alerts else smtp_settings()
    ensure_free("--metrics-port", metrics_port)
    if with_console:
        ensure_free("--console-port", console_port, console_bind)
    store = open_store(url)
    store.current_epoch()  # a store without the schema is a clear error now (`switchyard db init`)
    # a typo'd --business would start executors for nothing and wait silently for ever
    own = migrator_store(store)
    unknown = [b for b in dict.fromkeys(biz_codes) if not known_business(store, own, b)]
    if unknown:
        store.close()
        raise CliFailure(f"no such business: {', '.join(unknown)}", exitcodes.USAGE)

    def register(ex: Executor) -> None:
        legacy.register(ex)  # the handlers modules' own registrations (below) take precedence
        for module in modules:
            load_handlers(ex, module)

    for module in modules:
        try:
            __import__(module)
        except ImportError as exc:
            raise CliFailure(f"cannot import handlers module {module!r}: {exc}", exitcodes.USAGE) from None
    legacy = Bridges(bridges, bridge_settings)
    settings = SchedulerSettings(lookahead=lookahead, idle_wait=idle_wait)
    center = EmbeddedCenter(store, settings, register, name=name, biz_codes=biz_codes, concurrency=concurrency)
    if metrics_port:
        center.metrics.serve(metrics_port)
    console_server = None
    console_thread = None
    if with_console:
        src = Sources(
            store,
            members=registry_members(name, center.metrics.registry),
            # the executors page lists the xxl-job admin's registrations beside this process
            legacy_urls=(bridge_settings.legacy_url,) if bridge_settings.legacy_url else (),
            legacy_db_tz=bridge_settings.legacy_db_tz,
        )
        console_server = serve_console(
            src, console_bind, console_port, token, tokens=tokens, writes=console_writes, bus=center.bus
        )
        console_thread = threading.Thread(target=console_server.run, name="console", daemon=True)  # type: ignore[attr-defined]

    # the alerter on a thread of its own: a slow receiver holds its sends, never a fire
    alert_stop = threading.Event()
    alert_thread = None
    if not no_alerts:
        alerter = Alerter(store, alert_store(store), Sender(smtp), alert_settings)
        alert_thread = threading.Thread(target=alerter.run, args=(alert_stop,), name="alerter", daemon=True)

    def started() -> None:
        if console_thread is not None:
            console_thread.start()
        if alert_thread is not None:
            alert_thread.start()
        log.info(
            "serve %s running on %s%s",
            name,
            safe_url(url),
            f"; console on http://{console_bind}:{console_port}/" if with_console else "",
        )

    stop = stop_event()
    # one row in the executor registry for the process, whatever businesses it finds
    beat = start_heartbeat(
        executor_registry(store),
        lambda: [ex for ex, _th in list(center.executors.values())],
        name,
        heartbeat_interval,
        center.instance_id,
    )
    try:
        center.run(stop, on_started=started)
    finally:
        beat.close()
        alert_stop.set()
        if alert_thread is not None and alert_thread.is_alive():
            alert_thread.join(timeout=10)
        if console_server is not None and console_thread is not None:
            console_server.should_exit = True  # type: ignore[attr-defined]
            console_thread.join(timeout=10)
        legacy.close()
        store.close()
