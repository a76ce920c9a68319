"""`switchyard executor run --handlers MODULE --domain D`."""
from __future__ import annotations

import importlib
import logging
import os

import click

from scheduler_core.executor import Executor
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard import exitcodes
from switchyard.cli.options import bus_url, pulsar_admin, pulsar_token, topic_prefix
from switchyard.cli.signals import stop_event
from switchyard.wiring import load_handlers, open_bus

log = logging.getLogger(__name__)


@click.group()
def executor() -> None:
    """Run handlers for a business domain."""


@executor.command("run")
@click.option("--handlers", "module_name", required=True,
              help="Python module with `register(executor)` or a `HANDLERS = {job_code: fn}` mapping.")
@click.option("--domain", required=True, help="Business domain whose command topic to consume.")
@bus_url
@pulsar_admin
@pulsar_token
@topic_prefix
@click.option("--concurrency", type=click.IntRange(1, 10000), default=16, show_default=True)
@click.option("--shadow", is_flag=True, help="Receive and record commands without invoking handlers.")
@click.option("--log-level", default="INFO", show_default=True)
@cli_errors
def run_cmd(module_name: str, domain: str, bus_url: str, pulsar_admin: str | None, pulsar_token_env: str, topic_prefix: str,
            concurrency: int, shadow: bool, log_level: str) -> None:
    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        importlib.import_module(module_name)  # before the bus: a typo is an error, not a connection
    except ImportError as exc:
        raise CliFailure(f"cannot import handlers module {module_name!r}: {exc}", exitcodes.USAGE) from None
    bus = open_bus(bus_url, admin_url=pulsar_admin, token=os.environ.get(pulsar_token_env),
                   topic_prefix=topic_prefix)
    ex = Executor(bus, domain, concurrency=concurrency, shadow=shadow)
    try:
        load_handlers(ex, module_name)
    except ValueError as exc:
        raise CliFailure(str(exc), exitcodes.USAGE) from None
    stop = stop_event()
    log.info("executor for %s running%s", domain, " in shadow mode" if shadow else "")
    try:
        ex.run(stop)
    finally:
        ex.close()
        bus.close()
