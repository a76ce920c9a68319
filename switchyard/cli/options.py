"""Options shared by several commands."""
from __future__ import annotations

import os

import click

from switchyard.logs import FORMATS
from switchyard.settings import default_store_url

store_url = click.option("--url", default=default_store_url, show_default="$SWITCHYARD_URL or sqlite:///switchyard.db",
                         help="Trigger store URL.")
bus_url = click.option("--bus", "bus_url", default=lambda: os.environ.get("SWITCHYARD_BUS", "memory"),
                       show_default="$SWITCHYARD_BUS or memory", help="'memory' or pulsar://HOST:PORT.")
pulsar_admin = click.option("--pulsar-admin", default=lambda: os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"),
                            help="Pulsar admin REST URL (consumer lag).")
pulsar_token = click.option("--pulsar-token-env", default="SWITCHYARD_PULSAR_TOKEN", show_default=True,
                            help="Environment variable holding a Pulsar token (never pass secrets as arguments).")
topic_prefix = click.option("--topic-prefix", default=lambda: os.environ.get("SWITCHYARD_TOPIC_PREFIX", "switchyard"),
                            show_default="$SWITCHYARD_TOPIC_PREFIX or switchyard",
                            help="Prefix of the Pulsar topic names (one namespace, several installations).")
log_level = click.option("--log-level", default="INFO", show_default=True)
log_format = click.option("--log-format", type=click.Choice(FORMATS), default="text", show_default=True,
                          help="text lines, or one JSON object per line with the fields operators filter on "
                               "(business, partition, epoch, trigger_id, command_id) as keys of their own.")
