"""The scheduler's metrics (Prometheus). Each scheduler owns a registry, so tests and
several schedulers in one process do not share counters."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800)

# The etcd election's own counters. They are per process, not per registry: the election is
# built before the scheduler's metrics (and every EtcdElection of a process shares one etcd
# event loop), so it counts here and every SchedulerMetrics registry exposes these two.
# Stages: "campaign" (a campaign transaction, a watch for a vacancy), "keepalive" (a lease
# refresh or the re-read of the leader key), "resign" (deleting the key on the way out).
ELECTION_STAGES = ("campaign", "keepalive", "resign")
ELECTION_ERRORS = Counter(
    "switchyard_election_errors",
    "etcd calls of the leader election that failed (refused, lost, timed out), by stage",
    ["stage"],
    registry=None,
)
ELECTION_RECONNECTS = Counter(
    "switchyard_election_reconnects",
    "etcd answering the election again after failed calls (one per outage), by stage",
    ["stage"],
    registry=None,
)
for _stage in ELECTION_STAGES:  # exposed as 0 from the start, so an alert can use increase()
    ELECTION_ERRORS.labels(stage=_stage)
    if _stage != "resign":
        ELECTION_RECONNECTS.labels(stage=_stage)


def election_error(stage: str) -> None:
    ELECTION_ERRORS.labels(stage=stage).inc()


def election_reconnect(stage: str) -> None:
    ELECTION_RECONNECTS.labels(stage=stage).inc()


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.published = Counter(
            "switchyard_commands_published", "Command messages published", ["biz_code"], registry=r
        )
        self.publish_failures = Counter(
            "switchyard_publish_failures", "Messages the bus did not acknowledge", registry=r
        )
        self.acquired = Counter(
            "switchyard_triggers_acquired", "Triggers won by the acquire CAS", ["partition"], registry=r
        )
        self.cas_losses = Counter("switchyard_cas_losses", "Rows lost in a CAS", ["stage"], registry=r)
        self.released = Counter("switchyard_triggers_released", "Acquired triggers released to waiting", registry=r)
        self.reclaimed = Counter(
            "switchyard_triggers_reclaimed", "Expired acquisitions of dead epochs reclaimed", registry=r
        )
        self.misfires = Counter(
            "switchyard_misfires", "Occurrences older than the misfire threshold", ["policy"], registry=r
        )
        self.acquire_cycle = Histogram(
            "switchyard_acquire_cycle_seconds",
            "One acquire tick",
            ["partition"],
            registry=r,
            buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
        )
        self.lookahead_lag = Gauge(
            "switchyard_lookahead_lag_seconds",
            "now - T of the oldest occurrence last fired (negative: ahead)",
            registry=r,
        )
        # what an operator wants from the lookahead gauge above (which reads about -lookahead
        # whenever all is well, since the scheduler fires that far ahead): how far admission
        # is behind the window it must have admitted, now + lookahead
        self.admission_lag = Gauge(
            "switchyard_admission_lag_seconds",
            "now + lookahead minus the newest next_fire_at the last tick admitted when that tick hit "
            "its batch limit (more may be due); 0 when it admitted all that was due; NaN when nothing was due",
            ["partition"],
            registry=r,
        )
        # the lanes and the adaptive lookahead (scheduler_core.lookahead), per lane and business
        self.lane_lookahead = Gauge(
            "switchyard_lane_lookahead_seconds",
            "The lookahead window in use by the business's lane (the lane's, set at each forecast)",
            ["lane", "biz_code"],
            registry=r,
        )
        self.lane_forecast = Gauge(
            "switchyard_lane_forecast_triggers",
            "Waiting triggers of the business's lane due within the lane's lookahead_max (the forecast)",
            ["lane", "biz_code"],
            registry=r,
        )
        self.lane_backlog = Gauge(
            "switchyard_lane_published_not_due",
            "Triggers of the business's lane admitted (published) whose fire time is still ahead",
            ["lane", "biz_code"],
            registry=r,
        )
        self.lane_lookahead_lag = Gauge(
            "switchyard_lane_lookahead_lag_seconds",
            "How far ahead of now the lane's admission has reached (its window when it took all that was "
            "due); negative: admission is behind now (alert)",
            ["lane"],
            registry=r,
        )
        self.fire_lag = Histogram(
            "switchyard_fire_lag_seconds",
            "Executor receipt or handler start minus T",
            ["biz_code", "stage"],
            registry=r,
            buckets=LAG_BUCKETS,
        )
        self.results = Counter(
            "switchyard_results",
            "Results received on the callback topic (duplicates and replays included)",
            ["state"],
            registry=r,
        )
        self.results_applied = Counter("switchyard_results_applied", "Fired records a result moved forward", registry=r)
        self.errors = Counter(
            "switchyard_errors", "Errors by component (store, fire, bus, results)", ["component"], registry=r
        )
        self.leader = Gauge("switchyard_is_leader", "1 while this process leads", registry=r)
        # the shard registry (scheduler_core.shards)
        self.partitions_owned = Gauge("switchyard_partitions_owned", "Partitions this member owns", registry=r)
        self.rebalances = Counter(
            "switchyard_rebalances", "Partitions taken or handed over after a membership change", registry=r
        )
        self.handoff = Histogram(
            "switchyard_handoff_seconds",
            "From a partition's assignment to this member until it owned it (waiting for "
            "the previous owner's release or lease expiry)",
            registry=r,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60),
        )
        # process-wide (see ELECTION_ERRORS); one collector may sit in several registries
        self.election_errors = ELECTION_ERRORS
        self.election_reconnects = ELECTION_RECONNECTS
        r.register(ELECTION_ERRORS)
        r.register(ELECTION_RECONNECTS)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
