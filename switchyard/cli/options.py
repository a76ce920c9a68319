"""Options shared by several commands."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

import click

from switchyard.logs import FORMATS
from switchyard.settings import default_store_url, parse_zones

store_url = click.option(
    "--url",
    default=default_store_url,
    show_default="$SWITCHYARD_URL or sqlite:///switchyard.db",
    help="Trigger store URL.",
)
bus_url = click.option(
    "--bus",
    "bus_url",
    default=lambda: os.environ.get("SWITCHYARD_BUS", "memory"),
    show_default="$SWITCHYARD_BUS or memory",
    help="'memory' or pulsar://HOST:PORT.",
)
pulsar_admin = click.option(
    "--pulsar-admin",
    default=lambda: os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"),
    help="Pulsar admin REST URL (consumer lag).",
)
pulsar_token = click.option(
    "--pulsar-token-env",
    default="SWITCHYARD_PULSAR_TOKEN",
    show_default=True,
    help="Environment variable holding a Pulsar token (never pass secrets as arguments).",
)
topic_prefix = click.option(
    "--topic-prefix",
    default=lambda: os.environ.get("SWITCHYARD_TOPIC_PREFIX", "switchyard"),
    show_default="$SWITCHYARD_TOPIC_PREFIX or switchyard",
    help="Prefix of the Pulsar topic names (one namespace, several installations).",
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


log_level = click.option("--log-level", default="INFO", show_default=True)
log_format = click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="text lines, or one JSON object per line with the fields operators filter on "
    "(business, partition, epoch, trigger_id, command_id) as keys of their own.",
)
