"""Scheduler settings. Defaults are the original production system's values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from scheduler_core.model import Lane


@dataclass(frozen=True, slots=True)
class LaneBudget:
    """What one lane may take (issue 29): at most `tick_share` of a tick's batch is admitted
    from it (the rest of the tick goes to the other lanes' due triggers), and at most
    `pool_share` of the fire pool's capacity is its in flight. With the adaptive lookahead
    (`SchedulerSettings.adaptive_lookahead`) its window stays within [lookahead_min,
    lookahead_max]: how much a stop may have to skip is what it published ahead, at most
    lookahead_max of its triggers."""

    tick_share: float
    pool_share: float
    lookahead_min: timedelta = timedelta(minutes=2)
    lookahead_max: timedelta = timedelta(minutes=30)

    def __post_init__(self) -> None:
        for name in ("tick_share", "pool_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"lane budget {name} must be in (0, 1], got {getattr(self, name)}")
        if not timedelta(0) < self.lookahead_min <= self.lookahead_max:
            raise ValueError("lane lookahead bounds: 0 < lookahead_min <= lookahead_max")


# `default` may take the whole tick and pool, as every trigger did before lanes: a store
# with one lane admits exactly as then. `burst` is held to half, so an on-the-hour fan-out
# always leaves the other half of each tick to the rest; `bulk` to a quarter.
DEFAULT_LANE_BUDGETS: Mapping[Lane, LaneBudget] = {
    Lane.BURST: LaneBudget(tick_share=0.5, pool_share=0.5),
    Lane.DEFAULT: LaneBudget(tick_share=1.0, pool_share=1.0),
    Lane.BULK: LaneBudget(tick_share=0.25, pool_share=0.25),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerSettings:
    lookahead: timedelta = timedelta(minutes=30)
    idle_wait: timedelta = timedelta(seconds=30)
    jitter: timedelta = timedelta(milliseconds=500)
    misfire_threshold: timedelta = timedelta(hours=2)
    startup_floor: timedelta = timedelta(days=7)
    batch_size: int = 300
    chunk_size: int = 100
    sharding_page: int = 300
    # triggers in the fire pool at once (admitted, not yet recorded), and worker threads
    fire_pool_capacity: int = 6000
    fire_workers: int = 8
    # the largest share of the pool one business may hold, unless biz_budgets
    # names it: a burst in one business cannot starve another (the hot-minute incident)
    biz_share: float = 0.5
    biz_budgets: Mapping[str, int] = field(default_factory=dict)
    # per lane: its share of a tick's batch and of the pool (a lane not named: the default's)
    lane_budgets: Mapping[Lane, LaneBudget] = field(default_factory=lambda: dict(DEFAULT_LANE_BUDGETS))
    # the adaptive lookahead (scheduler_core.lookahead): each lane's window is its
    # lookahead_min when quiet and reaches out to admit a forecast burst by its minute;
    # off: one fixed `lookahead` for every lane, as before
    adaptive_lookahead: bool = False
    # how often the forecast (due triggers per lane and minute, from the due index alone)
    # is read again; the per-business figures (a row read per waiting trigger: the
    # business is not in the index) only every `forecast_business_every`, for the gauges
    forecast_every: timedelta = timedelta(seconds=10)
    forecast_business_every: timedelta = timedelta(seconds=60)
    # the triggers per second one lane's admission sustains, which the forecast plans
    # with (bench/admission measures 2-9K/s on MariaDB); `lead_margin` over it
    admit_rate: float = 2000.0
    lead_margin: float = 1.5
    # an acquisition is the owner's for this long; after it, a newer epoch may reclaim it
    acquire_deadline: timedelta = timedelta(seconds=60)
    reclaim_interval: timedelta = timedelta(seconds=10)
    # how often, in ticks, a partition looks below its window for rows left behind
    stale_sweep_every: int = 20
    submit_retries: int = 3
    submit_retry_wait: timedelta = timedelta(milliseconds=50)
    # jobs with envelope_size > 1 keep one fired record per envelope ("page") instead of
    # one per item: chosen on the numbers (bench/), see the README
    page_records: bool = True
    # runs of one packing job (envelope_size > 1) due within this window of each other
    # share a message delivered at the latest of their T: never early, at most this late.
    # 100 ms is the broker's delayed-delivery tick here (Pulsar's default is 1 s), so it
    # adds no lag the broker does not already add; 0 packs only runs of the same T.
    pack_window: timedelta = timedelta(milliseconds=100)
    # wait after a tick that found work but not a full batch
    busy_wait: timedelta = timedelta(milliseconds=200)
    # the longest wait between two ticks of a partition, whatever the tick asked (a
    # trigger added due soon wakes its partition's loop at once: `scheduler_core.wakeup`)
    max_wait: timedelta = timedelta(seconds=1)
    # a wake-up makes the loop tick by the new trigger's T minus this (at once when that
    # has passed): admitted in time, without a tick per added batch from a loop that
    # ticks often anyway
    wake_lead: timedelta = timedelta(milliseconds=500)
    # a chunk of one-shots admitted less than this before its T is held and fired at T (published
    # when due, delivered at once) instead of now with deliver-at = T, which the broker's
    # delayed-delivery tick makes up to a tick late (`scheduler_core.hold`); 0: off.
    # At most hold_per_window triggers due in one pack_window are held (about what the
    # pool fires in one window: held chunks due together never queue behind each other
    # at T); more, a burst due at one instant, fire now with deliver-at as before.
    hold_within: timedelta = timedelta(seconds=2)
    hold_per_window: int = 500
    # a held chunk is cut by T: triggers due within this of the group's first T are fired
    # together at the group's last T (never early, at most this late). A chunk held to its
    # first T would publish its later triggers ahead of their T, and the broker's tick
    # would deliver those up to a tick late (a tick's chunk often spans two batches of
    # adds 100 ms apart: p99 ~110 ms at 200/s, measured)
    hold_spread: timedelta = timedelta(milliseconds=5)
    # a held chunk is handed to the fire pool this long before its T: the hand-over and the
    # rollback-fence read are done by T, and the publication waits for T (p50 -4 ms at
    # 200/s). A fence raised in this window is met by the executors, which skip what it covers
    hold_read_ahead: timedelta = timedelta(milliseconds=10)

    def __post_init__(self) -> None:
        for name in ("batch_size", "chunk_size", "sharding_page", "fire_pool_capacity", "fire_workers"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if not 0 < self.biz_share <= 1:
            raise ValueError("biz_share must be in (0, 1]")

    def lane_budget(self, lane: Lane) -> LaneBudget:
        return self.lane_budgets.get(lane) or DEFAULT_LANE_BUDGETS[lane]

    def lane_tick_budget(self, lane: Lane) -> int:
        """The triggers of `lane` one tick admits at most."""
        return max(1, int(self.batch_size * self.lane_budget(lane).tick_share))

    def lane_pool_budget(self, lane: Lane) -> int:
        """The triggers of `lane` the fire pool holds at most."""
        return max(1, int(self.fire_pool_capacity * self.lane_budget(lane).pool_share))

    def budget_of(self, biz_code: str) -> int:
        if biz_code in self.biz_budgets:
            return max(1, self.biz_budgets[biz_code])
        return max(1, int(self.fire_pool_capacity * self.biz_share))
