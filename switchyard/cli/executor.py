"""`switchyard executor run --business B (--handlers MODULE | --bridge xxl-job | --bridge batch-center)`.

With `--bridge`, a migrated business dual-runs with no code of its own: its jobs' handler
names (`xxl-job-bridge`, `batch-center-bridge`) are served by the legacy bridges, which
drive the business's existing xxl-job executors or HTTP callbacks. A `--handlers` module
may be given too: its handlers (registered under job codes) take precedence.
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from datetime import timedelta
from typing import Any

import click

from dbkit.engine import make_engine
from scheduler_core.executor import Executor
from scheduler_core.executor.heartbeat import Heartbeat
from scheduler_core.executor.identity import new_instance_id
from scheduler_core.model import Lane
from scheduler_core.store.executors import SqlExecutorRegistry
from switchyard import exitcodes
from switchyard.cli.bus_reach import require_shared_bus
from switchyard.cli.durations import seconds
from switchyard.cli.errors import CliFailure, cli_errors
from switchyard.cli.exits import exits, exits_as
from switchyard.cli.options import (
    STORE_URL_ENV,
    bus_url,
    legacy_url_option,
    log_format,
    log_level,
    pulsar_admin,
    pulsar_token,
    topic_prefix,
)
from switchyard.cli.passwords import PASSWORD_FILE_ENV, password_file_option, warn_if_typed
from switchyard.cli.signals import stop_event
from switchyard.exitcodes import OK, UNREACHABLE, USAGE
from switchyard.logs import configure_logging
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.wiring import load_handlers, open_bus

log = logging.getLogger(__name__)
DEFAULT_XXL_LISTEN = "127.0.0.1:9300"


@exits(OK, USAGE, UNREACHABLE)
@click.group()
def executor() -> None:
    """Run handlers for a business."""


def _host_port(value: str, option: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise CliFailure(f"{option} {value!r}: expected HOST:PORT", exitcodes.USAGE)
    return host.strip("[]"), int(port)


def _secret(env_name: str | None, option: str) -> str | None:
    """The value of the environment variable an option names (secrets never go on the
    command line); an option given for a variable that is unset is an error."""
    if env_name is None:
        return None
    value = os.environ.get(env_name)
    if value is None:
        raise CliFailure(f"{option} {env_name}: that environment variable is not set", exitcodes.USAGE)
    return value or None


_BRIDGE_OPTIONS = (
    legacy_url_option(
        "Legacy database: xxl-job executor addresses (live xxl_job_registry rows), batch-center tokens.",
        required=False,
    ),
    click.option(
        "--legacy-db-tz",
        default="Asia/Shanghai",
        show_default=True,
        help="Zone the xxl-job admin writes its DATETIME columns in (its JDBC serverTimezone).",
    ),
    click.option(
        "--executor-address",
        "executor_addresses",
        multiple=True,
        help="xxl-job: an executor base URL (repeatable; replaces the registry lookup), in route order.",
    ),
    click.option(
        "--access-token-env",
        default=None,
        metavar="NAME",
        help="xxl-job: environment variable holding the xxl.job.accessToken (e.g. XXL_JOB_ACCESS_TOKEN).",
    ),
    click.option(
        "--listen",
        default=DEFAULT_XXL_LISTEN,
        show_default=True,
        help="xxl-job: HOST:PORT of the admin-facing endpoint (/api/registry, /api/registryRemove, "
        "/api/callback) the executors call back.",
    ),
    click.option("--advertise-host", default=None, help="xxl-job: host name the executors reach the endpoint by."),
    click.option(
        "--forward-to",
        "forward_to",
        multiple=True,
        help="xxl-job: legacy admin base URL to relay legacy callbacks and registrations to (repeatable).",
    ),
    click.option(
        "--bc-token-env",
        default=None,
        metavar="NAME",
        help="batch-center: environment variable holding the X-BC-Token (else bc_biz.access_token from --legacy-url).",
    ),
)


# the executor registry (`switchyard executors`): where the heartbeat goes, and how often
_registry_url = click.option(
    "--url",
    "url",
    envvar=STORE_URL_ENV,
    show_envvar=True,
    default=None,
    callback=warn_if_typed,
    help="The Switchyard store this process heartbeats into (the executor registry, `switchyard executors`); "
    "without it the process is not listed there (config file: url).",
)
_registry_password = password_file_option("url", "--url", "--password-file", PASSWORD_FILE_ENV)


def registry_url(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`--url` of the executor registry, with `--password-file` (switchyard.cli.passwords)."""
    return _registry_url(_registry_password(fn))  # type: ignore[no-any-return]


heartbeat_interval = click.option(
    "--heartbeat-interval",
    type=seconds(0.05, 3600),
    envvar="SWITCHYARD_HEARTBEAT_INTERVAL",
    show_envvar=True,
    default="5s",
    show_default=True,
    help="Time between two heartbeats into the executor registry; lost after 3 missed.",
)


def start_heartbeat(
    registry: SqlExecutorRegistry,
    executors: Callable[[], Sequence[Executor]],
    name: str,
    interval: timedelta,
    instance_id: str,
) -> Heartbeat:
    """The process's heartbeat into `registry` (its own thread;
    a failed beat is a warning, never the executor's end), under the instance id its
    executors name in their results."""

    return Heartbeat(registry, executors, name=name, interval=interval, instance_id=instance_id).start()


# which bridges a process serves (`executor run` and `serve` share it)
bridge_choice = click.option(
    "--bridge",
    "bridges",
    multiple=True,
    type=click.Choice(["xxl-job", "batch-center"]),
    help="Serve migrated jobs through the legacy bridge (repeatable); no handler code needed.",
)


@dataclass(frozen=True)
class BridgeSettings:
    """The values of the legacy bridges' options (_BRIDGE_OPTIONS)."""

    legacy_url: str | None
    legacy_db_tz: str
    executor_addresses: tuple[str, ...]
    access_token_env: str | None
    listen: str
    advertise_host: str | None
    forward_to: tuple[str, ...]
    bc_token_env: str | None


def bridge_options(fn):  # type: ignore[no-untyped-def]
    """The legacy bridges' options (`executor run` and `serve` share them); they reach the
    command as one `bridge_settings` (BridgeSettings)."""

    @functools.wraps(fn)
    def with_settings(*args, **kwargs):  # type: ignore[no-untyped-def]
        given = {f.name: kwargs.pop(f.name) for f in fields(BridgeSettings)}
        return fn(*args, bridge_settings=BridgeSettings(**given), **kwargs)

    out = with_settings
    for opt in reversed(_BRIDGE_OPTIONS):
        out = opt(out)
    return out


class Bridges:
    """The legacy bridges a process serves: one xxl-job endpoint (bound once) and the
    batch center's token lookup, registered on each executor that needs them."""

    def __init__(self, bridges: tuple[str, ...], settings: BridgeSettings) -> None:
        xxl_kw = _xxl_settings(bridges, settings)
        self.bc_tokens = _bc_tokens(bridges, settings.legacy_url, settings.bc_token_env)
        listen, access_token_env = settings.listen, settings.access_token_env
        self.xxl = None
        if xxl_kw is not None:
            from scheduler_core.executor.bridges import XxlJobBridge

            try:
                self.xxl = XxlJobBridge(**xxl_kw)
            except OSError as exc:
                raise CliFailure(
                    f"--listen {listen}: cannot bind the xxl-job endpoint: {exc.strerror or exc}", exitcodes.USAGE
                ) from None
            log.info(
                "xxl-job bridge: endpoint %s (list it first in the executors' xxl.job.admin.addresses)%s",
                self.xxl.callback_url,
                "; access token from $" + access_token_env if access_token_env else "",
            )

    def register(self, ex: Executor) -> None:
        from scheduler_core.executor.bridges import register_batch_center_bridge, register_xxl_job_bridge

        if self.xxl is not None:
            register_xxl_job_bridge(ex, self.xxl)
        if self.bc_tokens is not None:
            register_batch_center_bridge(ex, self.bc_tokens)

    def close(self) -> None:
        if self.xxl is not None:
            self.xxl.close()


@exits_as({OK: "stopped by SIGTERM or SIGINT", USAGE: None, UNREACHABLE: None})
@executor.command("run")
@click.option(
    "--handlers",
    "module_name",
    default=None,
    help="Python module with `register(executor)` or a `HANDLERS = {job_code: fn}` mapping.",
)
@bridge_choice
@click.option("--business", "biz_code", required=True, help="The biz_code whose command topic to consume.")
@bus_url
@pulsar_admin
@pulsar_token
@topic_prefix
@click.option(
    "--concurrency",
    type=click.IntRange(1, 10000),
    default=16,
    show_default=True,
    help="At most this many handlers of the business run at once.",
)
@click.option("--shadow", is_flag=True, help="Receive and record commands without invoking handlers.")
@click.option(
    "--lane",
    "lanes",
    multiple=True,
    type=click.Choice([lane.value for lane in Lane]),
    help="A lane whose command topic to consume (repeatable; each lane gets its own consumer and "
    "--concurrency, so a backlog in one never holds another back). [default: default]",
)
@bridge_options
@registry_url
@heartbeat_interval
@log_level
@log_format
@cli_errors
def run_cmd(
    module_name: str | None,
    bridges: tuple[str, ...],
    biz_code: str,
    bus_url: str,
    pulsar_admin: str | None,
    pulsar_token_env: str,
    topic_prefix: str,
    concurrency: int,
    shadow: bool,
    lanes: tuple[str, ...],
    bridge_settings: BridgeSettings,
    url: str | None,
    heartbeat_interval: timedelta,
    log_level: str,
    log_format: str,
) -> None:
    """Consume the business's commands and run its handlers (a --handlers module's, or the
    legacy bridges'), until SIGTERM; the results go back to the scheduler on the bus."""
    configure_logging(log_level, log_format)
    cap_malloc_arenas()  # before the threads start (switchyard/malloc_arenas.py)
    if not module_name and not bridges:
        raise CliFailure("give --handlers MODULE, or --bridge xxl-job / --bridge batch-center", exitcodes.USAGE)
    if module_name:
        try:
            importlib.import_module(module_name)  # before the bus: a typo is an error, not a connection
        except ImportError as exc:
            raise CliFailure(f"cannot import handlers module {module_name!r}: {exc}", exitcodes.USAGE) from None
    require_shared_bus(bus_url, "scheduler")
    # a typo'd store path is an error now; an unreachable store only costs the heartbeat
    engine = None if url is None else make_engine(url, pool_size=2, must_exist=True)
    # the bridges first: a usage error (an unset token variable, a port in use) before any connection
    legacy = Bridges(bridges, bridge_settings)
    closers = [legacy.close]
    try:
        bus = open_bus(
            bus_url, admin_url=pulsar_admin, token=os.environ.get(pulsar_token_env), topic_prefix=topic_prefix
        )
        closers.append(bus.close)
        executors: list[Executor] = []
        instance_id = new_instance_id()  # the process's: its registry row and its results
        for lane in dict.fromkeys(lanes or (Lane.DEFAULT.value,)):
            ex = Executor(
                bus, biz_code, concurrency=concurrency, shadow=shadow, lane=Lane(lane), instance_id=instance_id
            )
            closers.append(ex.close)
            executors.append(ex)
            legacy.register(ex)
            if module_name:
                try:
                    load_handlers(ex, module_name)
                except ValueError as exc:
                    raise CliFailure(str(exc), exitcodes.USAGE) from None
        stop = stop_event()
        log.info(
            "executor for %s running%s (lanes %s, concurrency %d each)",
            biz_code,
            " in shadow mode" if shadow else "",
            ", ".join(ex.lane.value for ex in executors),
            concurrency,
        )
        beat = (
            None
            if engine is None
            else start_heartbeat(
                SqlExecutorRegistry(engine), lambda: executors, executors[0].name, heartbeat_interval, instance_id
            )
        )
        if beat is None:
            log.info("no store given (--url, SWITCHYARD_URL): this process is not in the executor registry")
        # one receive loop per lane: the first on this thread, the others beside it
        others = [
            threading.Thread(target=ex.run, args=(stop,), name=f"executor-{ex.lane.value}", daemon=True)
            for ex in executors[1:]
        ]
        for t in others:
            t.start()
        try:
            executors[0].run(stop)
        finally:
            stop.set()
            for t in others:
                t.join(timeout=30)
            for ex in executors:
                closers.remove(ex.close)
                ex.close()
            if beat is not None:
                beat.close()  # after the runs in work finished: the row says stopped
    finally:
        if engine is not None:
            engine.dispose()
        for close in reversed(closers):
            close()


def _xxl_settings(bridges: tuple[str, ...], settings: BridgeSettings) -> dict[str, Any] | None:
    if "xxl-job" not in bridges:
        return None
    legacy_url, legacy_db_tz, listen = settings.legacy_url, settings.legacy_db_tz, settings.listen
    executor_addresses, access_token_env = settings.executor_addresses, settings.access_token_env
    forward_to, advertise_host = settings.forward_to, settings.advertise_host
    host, port = _host_port(listen, "--listen")
    token = _secret(access_token_env, "--access-token-env")
    provider = None
    current = None
    if legacy_url:
        from readers.xxljob.live_rows import XxlCurrentRunFields

        # each run takes the job's run fields from its legacy row as it is now, as the
        # admin does at every trigger (an edit made after the commands were published)
        current = XxlCurrentRunFields(legacy_url, legacy_db_tz)
    if executor_addresses:
        given = [a.strip() for a in executor_addresses if a.strip()]
        provider = lambda _app: list(given)  # noqa: E731 - every app: the addresses given
    elif legacy_url:
        from readers.xxljob.live_rows import XxlRegistryAddresses

        provider = XxlRegistryAddresses(legacy_url, legacy_db_tz)
    # else: the executors that register with the bridge's endpoint
    return dict(
        access_token=token,
        callback_host=host,
        callback_port=port,
        address_provider=provider,
        forward_to=tuple(forward_to),
        advertise_host=advertise_host,
        current_params=current,
    )


def _bc_tokens(bridges: tuple[str, ...], legacy_url: str | None, bc_token_env: str | None):  # type: ignore[no-untyped-def]
    if "batch-center" not in bridges:
        return None
    if bc_token_env is not None:
        token = _secret(bc_token_env, "--bc-token-env")
        return lambda _ref: token
    if legacy_url:
        from readers.batchcenter.tokens import batch_center_tokens

        return batch_center_tokens(legacy_url)
    raise CliFailure("--bridge batch-center needs --legacy-url (bc_biz tokens) or --bc-token-env", exitcodes.USAGE)
