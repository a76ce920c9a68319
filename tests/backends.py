"""Factories for every implementation of every port: the contract suites run over all."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url

from scheduler_core.clock import SystemClock
from scheduler_core.ports import Clock, Election, MessageBus
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.schema import init_schema
from tests.servers import server_url


@contextmanager
def mariadb_database(prefix: str = "sy", *, server_default: str | None = None) -> Iterator[str]:
    """A fresh database on the real MariaDB; yields its URL (app user), drops it after.

    `server_default` (e.g. "latin1"): the database is made as on a server started with
    that default character set: CREATE DATABASE without a character set, on a session
    whose `character_set_server` is it (the server's global setting is the session's
    default, and the shared server must not change for the other tests). A table made
    without a character set of its own inherits the database's, so this is the same
    inheritance a latin1 server gives."""
    base = server_url("mariadb")
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(base)
    with admin.begin() as conn:
        if server_default is None:
            conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
        else:
            conn.execute(text("SET SESSION character_set_server = :c"), {"c": server_default})
            conn.execute(text(f"CREATE DATABASE `{name}`"))
            conn.execute(text("SET SESSION character_set_server = DEFAULT"))  # the pooled connection is reused
    url = make_url(base).set(database=name).render_as_string(hide_password=False)
    try:
        yield url
    finally:
        with admin.begin() as conn:
            conn.execute(text(f"DROP DATABASE IF EXISTS `{name}`"))
        admin.dispose()


@contextmanager
def sql_store(kind: str, tmp_path: Path, clock: Clock, partitions: int = 4) -> Iterator[SqlTriggerStore]:
    if kind == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'store.db'}")
        init_schema(engine, partitions)
        try:
            yield SqlTriggerStore(engine, clock)
        finally:
            engine.dispose()
        return
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, partitions)
        try:
            yield SqlTriggerStore(engine, clock)
        finally:
            engine.dispose()


@contextmanager
def message_bus(kind: str) -> Iterator[MessageBus]:
    if kind == "memory":
        from scheduler_core.bus.memory import InProcessBus

        bus: MessageBus = InProcessBus(SystemClock())
    else:
        url = server_url("pulsar")
        from scheduler_core.bus.pulsar import PulsarBus

        # a fresh topic prefix per test: topics from other tests never leak in
        bus = PulsarBus(
            url,
            admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"),
            topic_prefix=f"t{uuid.uuid4().hex[:8]}",
        )
    try:
        yield bus
    finally:
        bus.close()


ELECTION_TTL = timedelta(seconds=2)


@contextmanager
def election_candidates(kind: str, count: int, ttl: timedelta = ELECTION_TTL) -> Iterator[list]:  # type: ignore[type-arg]
    """`count` candidates competing for one leadership."""
    if kind == "local":
        from scheduler_core.election.local import LocalElection, LocalElectionGroup

        group = LocalElectionGroup(SystemClock(), ttl=ttl)
        candidates: list[Election] = [
            LocalElection(group, f"c{i}", backoff=timedelta(milliseconds=50)) for i in range(count)
        ]
    else:
        endpoint = server_url("etcd")
        from scheduler_core.election.etcd import EtcdElection

        key = f"/switchyard-test/{uuid.uuid4().hex[:8]}/leader"
        candidates = [
            EtcdElection(endpoint, name=f"c{i}", ttl=ttl, key=key, backoff=timedelta(milliseconds=50))
            for i in range(count)
        ]
    try:
        yield candidates
    finally:
        for c in candidates:
            c.close()
