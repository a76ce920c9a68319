"""The adaptive lookahead (issue 29): how far ahead each lane admits, from a forecast.

One global window (30 minutes) keeps half an hour of every business's commands in the
broker, quiet or not, and is still too short for a burst whose admission takes longer
than the window. Here each lane's window is its `lookahead_min` when quiet (few commands
published ahead, little for a stop to skip) and reaches out to a forecast burst early
enough that it is admitted by its minute, never past `lookahead_max`.

The forecast is a grouped count of waiting triggers per lane and minute over [now, now +
the largest lookahead_max], read from the due index alone every `forecast_every` (the
per-business count behind the gauges reads a row per trigger, so only every
`forecast_business_every`). For
each lane, with the triggers due up to the end of minute k counted as cum(k), admitting
them takes lead(k) = cum(k) / admit_rate * lead_margin; minute k must be in the window as
soon as end(k) - lead(k) <= lookahead_min. The window is the latest such end.

Exported per lane and business: the lookahead in use, the forecast (triggers due within
the lane's lookahead_max), the published-not-yet-due backlog (admitted triggers whose T
is still ahead), and per lane the lookahead lag: how far the newest admitted fire time is
ahead of now when admission could not take all that was due (negative: admission is
behind now; logged and alerted on).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Lane, Trigger
from scheduler_core.ports import Clock, TriggerStore
from scheduler_core.settings import SchedulerSettings
from scheduler_core.times import from_ms, to_ms

log = logging.getLogger(__name__)
MINUTE_MS = 60_000


def lane_window(
    counts: Mapping[int, int], now_ms: int, lo_ms: int, hi_ms: int, rate_per_s: float, margin: float
) -> int:
    """The window (ms) a lane needs now: `counts` are its due triggers per minute bucket
    (bucket start ms -> count). See the module doc."""
    window = lo_ms
    cum = 0
    for start in sorted(counts):
        cum += counts[start]
        end = start + MINUTE_MS - now_ms  # the bucket's end, from now
        if end > hi_ms:
            break
        lead = cum / rate_per_s * 1000 * margin
        if end - lead <= lo_ms:
            window = max(window, end)
    return min(window, hi_ms)


@dataclass(frozen=True, slots=True)
class Forecast:
    read_ms: int
    # lane -> {minute bucket start ms: waiting triggers due in it}
    buckets: Mapping[Lane, Mapping[int, int]]


class AdaptiveLookahead:
    """Each lane's window, shared by a scheduler's partition acquirers (their ticks are
    serialized by `acquire.Admission`; the lock guards the gauges' readers)."""

    def __init__(
        self, store: TriggerStore, clock: Clock, settings: SchedulerSettings, metrics: SchedulerMetrics
    ) -> None:
        self.store = store
        self.clock = clock
        self.settings = settings
        self.metrics = metrics
        self.forecast: Forecast | None = None
        self._windows: dict[Lane, int] = {}
        self._lock = threading.Lock()
        # (business, lane) -> {T in whole seconds: admitted triggers}: the published-not-yet-due backlog
        self._ahead: dict[tuple[str, Lane], Counter[int]] = defaultdict(Counter)
        self._behind_logged: dict[Lane, float] = {}
        self.refreshed_elsewhere = False  # a maintenance loop calls refresh_if_due
        self._businesses_read_ms: int | None = None
        self._businesses: set[tuple[str, Lane]] = set()  # (business, lane) the gauges name

    def windows(self, now: datetime) -> dict[Lane, datetime]:
        """Each lane's window end now. The forecast is kept fresh by `refresh_if_due`, off
        the admission path: read inside a tick, its grouped count (tens to hundreds of ms
        over a waiting burst) held every lane's admission, as ticks are serialized. A tick
        reads it itself only when nobody else does (a core driven by hand) or when it has
        gone three periods stale (that loop stalled)."""
        now_ms = to_ms(now)
        if self._stale(now_ms, 3 if self.refreshed_elsewhere else 1):
            self.refresh(now_ms)
            self.backlog(now)
        with self._lock:
            windows = self._windows
        return {lane: from_ms(now_ms + w) for lane, w in windows.items()}

    def refresh_if_due(self, now: datetime) -> None:
        """The forecast read again when it is `forecast_every` old: called by the leader's
        (or a shard member's) maintenance loop, beside the reclaim."""
        self.refreshed_elsewhere = True
        now_ms = to_ms(now)
        if self._stale(now_ms, 1):
            self.refresh(now_ms)
            self.backlog(now)

    def _stale(self, now_ms: int, periods: int) -> bool:
        forecast = self.forecast
        every_ms = int(self.settings.forecast_every.total_seconds() * 1000)
        return forecast is None or now_ms - forecast.read_ms >= periods * every_ms

    def refresh(self, now_ms: int) -> None:
        s = self.settings
        hi = max(int(s.lane_budget(lane).lookahead_max.total_seconds() * 1000) for lane in Lane)
        start = now_ms - now_ms % MINUTE_MS
        by_lane: dict[Lane, Counter[int]] = defaultdict(Counter)
        for lane, bucket, n in self.store.due_forecast_by_lane(start, now_ms + hi, MINUTE_MS):
            by_lane[lane][bucket] += n
        self.forecast = Forecast(now_ms, by_lane)
        windows: dict[Lane, int] = {}
        for lane in Lane:
            budget = s.lane_budget(lane)
            lo = int(budget.lookahead_min.total_seconds() * 1000)
            lane_hi = int(budget.lookahead_max.total_seconds() * 1000)
            windows[lane] = lane_window(by_lane.get(lane, {}), now_ms, lo, lane_hi, s.admit_rate, s.lead_margin)
        with self._lock:
            self._windows = windows
        every_ms = int(s.forecast_business_every.total_seconds() * 1000)
        if self._businesses_read_ms is None or now_ms - self._businesses_read_ms >= every_ms:
            self._businesses_read_ms = now_ms
            self._business_forecast(start, now_ms, hi)
        for biz, lane in self._businesses:  # the window in use, fresh at every read
            self.metrics.lane_lookahead.labels(lane=lane.value, biz_code=biz).set(windows[lane] / 1000)

    def _business_forecast(self, start: int, now_ms: int, hi: int) -> None:
        """Per business and lane, the forecast within the lane's lookahead_max (a gauge)."""
        buckets: dict[tuple[str, Lane], dict[int, int]] = defaultdict(dict)
        for biz, lane, bucket, n in self.store.due_forecast(start, now_ms + hi, MINUTE_MS):
            buckets[biz, lane][bucket] = n
        for (biz, lane), counts in buckets.items():
            lane_hi = now_ms + int(self.settings.lane_budget(lane).lookahead_max.total_seconds() * 1000)
            self.metrics.lane_forecast.labels(lane=lane.value, biz_code=biz).set(
                sum(n for b, n in counts.items() if b <= lane_hi)
            )
        for biz, lane in self._businesses - buckets.keys():  # nothing due any more
            self.metrics.lane_forecast.labels(lane=lane.value, biz_code=biz).set(0)
        self._businesses |= set(buckets)

    def window_of(self, lane: Lane) -> timedelta:
        with self._lock:
            return timedelta(milliseconds=self._windows.get(lane, 0))

    def admitted(self, triggers: Iterable[Trigger]) -> None:
        """Count admitted triggers into the published-not-yet-due backlog."""
        with self._lock:
            for t in triggers:
                self._ahead[t.biz_code, t.lane][to_ms(t.next_fire_at) // 1000] += 1

    def backlog(self, now: datetime) -> dict[tuple[str, Lane], int]:
        """Admitted triggers whose T is still ahead of `now`, per business and lane (and
        the gauges set to it)."""
        now_s = to_ms(now) // 1000
        out: dict[tuple[str, Lane], int] = {}
        with self._lock:
            for key, ahead in self._ahead.items():
                for second in [sec for sec in ahead if sec <= now_s]:
                    del ahead[second]
                out[key] = sum(ahead.values())
        for (biz, lane), n in out.items():
            self.metrics.lane_backlog.labels(lane=lane.value, biz_code=biz).set(n)
        return out

    def observe(self, lane: Lane, now: datetime, frontier: datetime | None, full: bool) -> None:
        """The lane's last tick: `frontier` the newest fire time it admitted, `full` whether
        more was due behind it. The lookahead lag is frontier - now while full (how far
        ahead of now admission has reached), the window while not; negative: behind now."""
        window = self.window_of(lane)
        lag = (frontier - now).total_seconds() if full and frontier is not None else window.total_seconds()
        self.metrics.lane_lookahead_lag.labels(lane=lane.value).set(lag)
        if lag < 0:
            last = self._behind_logged.get(lane, float("-inf"))
            mono = self.clock.monotonic()
            if mono - last >= 30:
                self._behind_logged[lane] = mono
                log.warning(
                    "lane %s: admission is %.1f s behind now (lookahead lag negative; window %.0f s)",
                    lane.value,
                    -lag,
                    window.total_seconds(),
                )
