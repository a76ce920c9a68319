"""`switchyard scheduler run|stats`."""

from __future__ import annotations

import json
import logging
import os
import socket
from datetime import timedelta
from functools import partial

import click

from scheduler_core.control import Relay, RelayScope
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.ports import MessageBus
from scheduler_core.scheduler import Scheduler
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stats import lag_stats
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from switchyard.cli.bus_reach import require_shared_bus
from switchyard.cli.durations import seconds
from switchyard.cli.errors import cli_errors
from switchyard.cli.exits import STORE, exits, exits_as
from switchyard.cli.options import (
    ETCD_ENV,
    bus_url,
    idle_wait,
    log_format,
    log_level,
    lookahead,
    pulsar_admin,
    pulsar_token,
    store_url,
    topic_prefix,
)
from switchyard.cli.passwords import warn_if_typed
from switchyard.cli.ports import ensure_free
from switchyard.cli.signals import stop_event
from switchyard.exitcodes import OK, UNREACHABLE, USAGE
from switchyard.logs import configure_logging
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.wiring import open_bus, open_election, open_existing_store, open_wakeups

log = logging.getLogger(__name__)


@exits(*STORE)
@click.group()
def scheduler() -> None:
    """Run the scheduler (leader or follower) and read its figures."""


@exits_as({**dict.fromkeys(STORE), OK: "stopped by SIGTERM or SIGINT"})
@scheduler.command("run")
@store_url
@bus_url
@pulsar_admin
@pulsar_token
@topic_prefix
@click.option(
    "--election",
    "election_url",
    envvar=ETCD_ENV,
    show_envvar=True,
    callback=warn_if_typed,
    default="local",
    show_default=True,
    help="'local' (this process only) or an etcd URL http://HOST:PORT (config file: election).",
)
@click.option(
    "--election-key",
    default="/switchyard/scheduler/leader",
    show_default=True,
    help="The etcd key the candidates campaign on (one per scheduler cluster).",
)
@click.option("--name", default=lambda: f"{socket.gethostname()}-{os.getpid()}", help="This candidate's name.")
@click.option(
    "--lease-ttl",
    type=seconds(2, 600),
    default="10s",
    show_default=True,
    help="How long a leadership (a shard membership) outlives its holder's silence.",
)
@lookahead
@click.option(
    "--adaptive-lookahead",
    is_flag=True,
    help="Each lane's lookahead adapts (issue 29): short when quiet, reaching out before a forecast "
    "burst; --lookahead is then unused.",
)
@idle_wait
@click.option(
    "--max-wait",
    type=seconds(0.05),
    default="1s",
    show_default=True,
    help="The longest wait between two ticks of a partition (a trigger added due soon wakes "
    "its partition's loop at once).",
)
@click.option(
    "--wake-key",
    default="/switchyard/wake",
    show_default=True,
    help="The etcd key wake-ups for short delays travel on (with an etcd --election).",
)
@click.option(
    "--acquire-deadline",
    type=seconds(1),
    default="1m",
    show_default=True,
    help="How long an acquisition is its owner's; after it a newer leader epoch may reclaim it.",
)
@click.option(
    "--reclaim-interval",
    type=seconds(0.1),
    default="10s",
    show_default=True,
    help="How often triggers acquired past the deadline are looked for.",
)
@click.option(
    "--batch", type=click.IntRange(1), default=300, show_default=True, help="Triggers acquired per partition tick."
)
@click.option(
    "--fire-workers",
    type=click.IntRange(1),
    default=8,
    show_default=True,
    help="Threads that fire acquired triggers (publish their commands).",
)
@click.option(
    "--shards",
    is_flag=True,
    help="Join the etcd shard registry and own a share of the partitions (with the other members) "
    "instead of campaigning for the single leadership.",
)
@click.option(
    "--registry-prefix",
    default="/switchyard/shards",
    show_default=True,
    help="The shard registry's etcd key prefix (with --shards).",
)
@click.option("--metrics-port", type=click.IntRange(0, 65535), default=0, help="Prometheus port on 127.0.0.1 (0: off).")
@log_level
@log_format
@cli_errors
def run_cmd(
    url: str,
    bus_url: str,
    pulsar_admin: str | None,
    pulsar_token_env: str,
    topic_prefix: str,
    election_url: str,
    election_key: str,
    name: str,
    lease_ttl: timedelta,
    lookahead: timedelta,
    adaptive_lookahead: bool,
    idle_wait: timedelta,
    max_wait: timedelta,
    wake_key: str,
    acquire_deadline: timedelta,
    reclaim_interval: timedelta,
    batch: int,
    fire_workers: int,
    shards: bool,
    registry_prefix: str,
    metrics_port: int,
    log_level: str,
    log_format: str,
) -> None:
    """Campaign for leadership (or, with --shards, join the registry); while leading (for the
    partitions owned), admit and fire; always apply results."""
    configure_logging(log_level, log_format)
    cap_malloc_arenas()  # before the threads start (switchyard/malloc_arenas.py)
    if shards and not election_url.startswith("http://"):
        raise click.BadParameter(
            "--shards needs an etcd URL http://HOST:PORT (the registry lives in etcd)", param_hint="--election"
        )
    ensure_free("--metrics-port", metrics_port)
    require_shared_bus(bus_url, "executor")
    store = open_existing_store(url)
    # a trigger added due soon, by this process or (through etcd) another, wakes its
    # partition's loop here when this process runs it
    store.wakeups = wakeups = open_wakeups(election_url, key=wake_key)
    bus = open_bus(bus_url, admin_url=pulsar_admin, token=os.environ.get(pulsar_token_env), topic_prefix=topic_prefix)
    settings = SchedulerSettings(
        lookahead=lookahead,
        adaptive_lookahead=adaptive_lookahead,
        idle_wait=idle_wait,
        max_wait=max_wait,
        acquire_deadline=acquire_deadline,
        reclaim_interval=reclaim_interval,
        batch_size=batch,
        fire_workers=fire_workers,
    )
    # a bus that cannot be reached at start is a clear error (exit 3), not a process that
    # runs on without applying results; later outages are ridden out with retries
    from scheduler_core.codec import CALLBACK_TOPIC

    bus.subscribe(CALLBACK_TOPIC, "scheduler-results").close()
    metrics = SchedulerMetrics()
    if metrics_port:
        metrics.serve(metrics_port)
    stop = stop_event()
    if shards:
        from scheduler_core.election.registry import EtcdRegistry  # etcd's client only when used
        from scheduler_core.shards import ShardedScheduler

        registry = EtcdRegistry(
            election_url,
            member=name,
            ttl=lease_ttl,
            prefix=registry_prefix,
            info={"pid": os.getpid(), "host": socket.gethostname()},
        )
        # the members relay the schedule edits `migrate stream`/`run` wrote to the store (no
        # bus there), each those of its partitions' triggers, and the stored rollback fences
        # (the owner of the lowest partition): scheduler_core.control
        member = ShardedScheduler(
            store,
            bus,
            registry,
            store.clock,
            settings=settings,
            metrics=metrics,
            relays=lambda scope: _relays(store, bus, settings, metrics, scope, name),
            stops=SqlStops(store),
        )
        log.info("scheduler %s joining the shard registry (store %d partitions)", name, len(store.partitions()))
        try:
            member.run(stop)
        finally:
            registry.close()
            wakeups.close()
            bus.close()
            store.close()
        log.info(
            "scheduler %s stopped (%d incarnation(s), %d rebalance(s))",
            name,
            member.status.incarnations,
            member.status.rebalances,
        )
        return
    election = open_election(election_url, name, lease_ttl, key=election_key)
    # the leader relays the schedule edits `migrate stream`/`run` wrote to the store (no bus
    # there), and the stored rollback fences (a rollback whose own broadcast failed); each
    # leadership won reads them whole again (what a dead leader did not relay)
    sched = Scheduler(
        store,
        bus,
        election,
        store.clock,
        settings=settings,
        metrics=metrics,
        relays=lambda scope: _relays(store, bus, settings, metrics, scope, name),
        stops=SqlStops(store),
    )
    log.info("scheduler %s starting (store %d partitions)", name, len(store.partitions()))
    try:
        sched.run(stop)
    finally:
        election.close()
        wakeups.close()
        bus.close()
        store.close()
    log.info("scheduler %s stopped after %d term(s)", name, sched.status.terms)


def _relays(
    store: SqlTriggerStore,
    bus: MessageBus,
    settings: SchedulerSettings,
    metrics: SchedulerMetrics,
    scope: RelayScope,
    name: str,
) -> list[Relay]:
    from scheduler_core import operations
    from scheduler_core.stops import StopRelay
    from scheduler_core.store.kills import kill_relay
    from scheduler_core.store.supersedes import supersede_relay

    return [
        StopRelay(SqlStops(store), bus, scope, name, settle=partial(operations.settle, store, SqlStops(store))).relay,
        supersede_relay(store, bus, settings, metrics, scope).relay,
        kill_relay(store, bus, scope).relay,  # `run kill` requests stored without a bus (scheduler_core.kills)
    ]


@exits(OK, USAGE, UNREACHABLE)
@scheduler.command("members")
@click.option(
    "--election",
    "election_url",
    envvar=ETCD_ENV,
    show_envvar=True,
    callback=warn_if_typed,
    default="",
    help="The etcd URL http://HOST:PORT of the shard registry (config file: election).",
)
@click.option(
    "--registry-prefix",
    default="/switchyard/shards",
    show_default=True,
    help="The shard registry's etcd key prefix.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def members_cmd(election_url: str, registry_prefix: str, as_json: bool) -> None:
    """The shard registry's live members, the partitions each owns (with their epochs), and
    partitions waiting for an owner."""
    if not election_url.startswith("http://"):
        raise click.BadParameter("an etcd URL http://HOST:PORT is needed", param_hint="--election")
    from scheduler_core.election.registry import read_registry

    view = read_registry(election_url, registry_prefix)
    members = {m: {"info": dict(info), "partitions": {}} for m, info in sorted(view.members.items())}
    orphans: dict[int, dict[str, object]] = {}
    for index, own in sorted(view.owners.items()):
        if own.member in members:
            members[own.member]["partitions"][index] = own.epoch  # type: ignore[index]
        else:
            orphans[index] = {"member": own.member, "epoch": own.epoch}
    if as_json:
        click.echo(
            json.dumps(
                {
                    "revision": view.revision,
                    "members": [
                        {
                            "member": m,
                            "info": body["info"],
                            "partitions": [{"partition": p, "epoch": e} for p, e in body["partitions"].items()],
                        }  # type: ignore[attr-defined]
                        for m, body in members.items()
                    ],
                    "owned_by_departed": [{"partition": p, **o} for p, o in orphans.items()],
                }
            )
        )
        return
    click.echo(f"shard registry {registry_prefix} at revision {view.revision}: {len(members)} member(s)")
    for m, body in members.items():
        parts = body["partitions"]
        shown = ", ".join(f"p{p}@{e}" for p, e in parts.items()) or "-"  # type: ignore[attr-defined]
        click.echo(f"  {m:<28} {len(parts):>4} partition(s)  {shown}")  # type: ignore[arg-type]
    for p, o in orphans.items():
        click.echo(f"  partition {p}: still held by {o['member']} (epoch {o['epoch']}), not a live member")


@exits(*STORE)
@scheduler.command("stats")
@store_url
@click.option(
    "--since",
    type=seconds(0),
    default="1h",
    show_default=True,
    help="How far back from now (by scheduled time).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON instead of text.")
@cli_errors
def stats_cmd(url: str, since: timedelta, as_json: bool) -> None:
    """Trigger states and per-business fire-time lag percentiles from fired records."""
    store = open_existing_store(url)
    try:
        now = store.clock.now()
        records = store.fired_between(None, now - since, now + timedelta(days=1))
        states: dict[str, int] = {}
        for t in store.triggers_of():
            states[t.state.value] = states.get(t.state.value, 0) + 1
        biz_codes = lag_stats(records)
        epoch = store.current_epoch()
    finally:
        store.close()
    body = {"epoch": epoch, "triggers": states, "businesses": [d.as_dict() for d in biz_codes.values()]}
    if as_json:
        click.echo(json.dumps(body))
        return
    click.echo(f"leader epoch {epoch}; triggers {states}")
    for d in biz_codes.values():
        lag = d.received_lag_s
        fmt = lambda v: "-" if v is None else f"{v:.3f}s"  # noqa: E731
        click.echo(
            f"  {d.biz_code:<20} {d.commands:>8} cmds  lag p50 {fmt(lag.get('p50'))} p99 {fmt(lag.get('p99'))} "
            f"max {fmt(lag.get('max'))}  {dict(d.states)}"
        )
