"""The bus options of the commands that tell the executors something (rollback, the
operators' stops): `--bus`, `--pulsar-admin`, `--pulsar-token-env`, `--topic-prefix`,
handed to the command as one `bus_args` (`BusArgs`)."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields

from scheduler_core.ports import MessageBus
from switchyard.cli.options import bus_url, pulsar_admin, pulsar_token, topic_prefix
from switchyard.wiring import open_bus


@dataclass(frozen=True)
class BusArgs:
    """The values of the bus options (bus_opts)."""

    bus_url: str
    pulsar_admin: str | None
    pulsar_token_env: str
    topic_prefix: str

    @property
    def reaches_executors(self) -> bool:
        """False for 'memory': no executor of another process is on this process's
        in-process bus; only the store has what this command writes (and whoever holds
        the bus relays it from there)."""
        return self.bus_url != "memory"

    @contextmanager
    def opened(self) -> Iterator[MessageBus]:
        bus = open_bus(
            self.bus_url,
            admin_url=self.pulsar_admin,
            token=os.environ.get(self.pulsar_token_env),
            topic_prefix=self.topic_prefix,
        )
        try:
            yield bus
        finally:
            bus.close()


def bus_opts(fn):  # type: ignore[no-untyped-def]
    """The bus the executors follow: what the command tells them is broadcast on its
    control channel (with 'memory', only the store has it: no executor in another process
    is on an in-process bus; the scheduler leader or a `switchyard serve` on the same store
    relays it from there within a few hundred ms)."""

    @functools.wraps(fn)
    def with_bus_args(*args, **kwargs):  # type: ignore[no-untyped-def]
        given = {f.name: kwargs.pop(f.name) for f in fields(BusArgs)}
        return fn(*args, bus_args=BusArgs(**given), **kwargs)

    out = with_bus_args
    for opt in (topic_prefix, pulsar_token, pulsar_admin, bus_url):
        out = opt(out)
    return out


__all__ = ["BusArgs", "bus_opts"]
