"""The scheduler's metrics (Prometheus). Each scheduler owns a registry, so tests and
several schedulers in one process do not share counters."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LAG_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 1800)


class SchedulerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.published = Counter("switchyard_commands_published", "Command messages published", ["domain"], registry=r)
        self.publish_failures = Counter("switchyard_publish_failures", "Messages the bus did not acknowledge", registry=r)
        self.acquired = Counter("switchyard_triggers_acquired", "Triggers won by the acquire CAS", ["partition"], registry=r)
        self.cas_losses = Counter("switchyard_cas_losses", "Rows lost in a CAS", ["stage"], registry=r)
        self.released = Counter("switchyard_triggers_released", "Acquired triggers released to waiting", registry=r)
        self.reclaimed = Counter("switchyard_triggers_reclaimed", "Expired acquisitions of dead epochs reclaimed", registry=r)
        self.misfires = Counter("switchyard_misfires", "Occurrences older than the misfire threshold", ["policy"], registry=r)
        self.acquire_cycle = Histogram("switchyard_acquire_cycle_seconds", "One acquire tick", ["partition"], registry=r,
                                       buckets=(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5))
        self.lookahead_lag = Gauge("switchyard_lookahead_lag_seconds", "now - T of the oldest occurrence last fired (negative: ahead)", registry=r)
        self.fire_lag = Histogram("switchyard_fire_lag_seconds", "Executor receipt or handler start minus T", ["domain", "stage"],
                                  registry=r, buckets=LAG_BUCKETS)
        self.results = Counter("switchyard_results", "Results received on the callback topic (duplicates and replays included)",
                               ["state"], registry=r)
        self.results_applied = Counter("switchyard_results_applied", "Fired records a result moved forward", registry=r)
        self.errors = Counter("switchyard_errors", "Errors by component (store, bus, election)", ["component"], registry=r)
        self.leader = Gauge("switchyard_is_leader", "1 while this process leads", registry=r)

    def serve(self, port: int, addr: str = "127.0.0.1") -> None:
        start_http_server(port, addr=addr, registry=self.registry)
