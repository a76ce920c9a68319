"""Build the ports from URLs: the only place that knows every adapter."""
from __future__ import annotations

from datetime import timedelta

from scheduler_core.clock import SystemClock
from scheduler_core.ports import Clock, Election, MessageBus
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore


def open_store(url: str, clock: Clock | None = None) -> SqlTriggerStore:
    return SqlTriggerStore(make_engine(url), clock or SystemClock())


def open_bus(url: str, *, admin_url: str | None = None, token: str | None = None,
             clock: Clock | None = None, topic_prefix: str = "switchyard") -> MessageBus:
    if url == "memory":
        from scheduler_core.bus.memory import InProcessBus

        return InProcessBus(clock or SystemClock())
    if url.startswith("pulsar://") or url.startswith("pulsar+ssl://"):
        from scheduler_core.bus.pulsar import PulsarBus

        return PulsarBus(url, admin_url=admin_url, token=token, topic_prefix=topic_prefix)
    raise ValueError(f"unknown bus URL {url!r}: use 'memory' or pulsar://HOST:PORT")


def open_election(url: str, name: str, ttl: timedelta, clock: Clock | None = None,
                  key: str = "/switchyard/scheduler/leader") -> Election:
    if url == "local":
        from scheduler_core.election.local import LocalElection, LocalElectionGroup

        return LocalElection(LocalElectionGroup(clock or SystemClock(), ttl), name)
    if url.startswith("http://") or url.startswith("https://"):
        from scheduler_core.election.etcd import EtcdElection

        return EtcdElection(url, name=name, ttl=ttl, key=key)
    raise ValueError(f"unknown election URL {url!r}: use 'local' or http://HOST:PORT (etcd)")
