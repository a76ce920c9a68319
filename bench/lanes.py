"""Lanes and the adaptive lookahead (issue 29): the incident, on MariaDB + Pulsar.

Four small businesses fire one-shot triggers at a steady rate (measured: every
1/small_rate s from T0 - 5 s to T0 + tail, around the burst) and have more of them spread over
the next hour (FAR_RATE each, the "quiet hour": published ahead by a long lookahead);
one SOP business has a burst at T0 of one-shot triggers of several sharding items each
(quick: 50,000 items, full: 200,000; spread over one second, its items packed PACK to a
message, as README advises). Run four ways, each on a fresh
database and topics, the threaded production Scheduler, one executor process for the
small businesses and one for SOP (no-op handlers):

  alone           the small businesses only, today's settings (the baseline);
  no_lanes_fixed  today: SOP in the default lane, one global fixed 30-minute lookahead;
  lanes_fixed     SOP in the burst lane (its own tick budget, pool share and topic), fixed 30 min;
  lanes_adaptive  SOP in the burst lane, the adaptive lookahead (each lane 2 min when quiet).

Figures: the small businesses' fire lag (handler start - T) p99 with the burst / alone;
the burst's p99 handler start after T; the minimum admission headroom (the oldest waiting
trigger's T minus now, sampled every 0.25 s from T0 - 5 s: negative = admission behind now); the
small businesses' published-not-yet-due backlog 2 s before T0 (fired records whose T is
ahead: what a stop would have to skip), fixed / adaptive.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from sqlalchemy import text

from bench.executors import ExecutorHost, HostConfig
from bench.harness import Goal, Row, Section, StackEnv, bench_prefix, delete_topics, fresh_database, lag_summary
from bench.workload import ThreadedScheduler, bench_job, load_triggers, make_store, now_ms
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.model import Lane
from scheduler_core.settings import SchedulerSettings

NAME = "lanes"
TITLE = "lanes and the adaptive lookahead: an on-the-hour burst beside four steady businesses"
PARTITIONS = 16
SMALL = ("reminder", "coupon", "report", "push")
PACK = 100
WAYS = ("alone", "no_lanes_fixed", "lanes_fixed", "lanes_adaptive")


def _sizes(quick: bool) -> dict[str, Any]:
    """The burst in sharding items, as the issue sizes it: quick 50,000 (5,000 triggers of
    10 items), full 200,000 (50,000 triggers of 4), items packed PACK to an envelope."""
    if quick:
        return {
            "burst": 5_000, "shards": 10, "small_rate": 10.0, "far_rate": 0.5, "lead_s": 12.0, "tail_s": 5.0,
            "limit_s": 40.0,
        }  # fmt: skip
    return {
        "burst": 50_000, "shards": 4, "small_rate": 20.0, "far_rate": 1.0, "lead_s": 60.0, "tail_s": 10.0,
        "limit_s": 120.0,
    }  # fmt: skip


class _Sampler:
    """Every 0.25 s: the oldest waiting trigger's T minus now; once, at `backlog_at_ms`,
    the small businesses' fired records whose T is still ahead."""

    def __init__(self, store: Any, backlog_at_ms: int, from_ms: int) -> None:
        self.store = store
        self.from_ms = from_ms
        self.backlog_at_ms = backlog_at_ms
        self.headroom: list[float] = []
        self.backlog: int | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True, name="lanes-sampler")

    def _run(self) -> None:
        codes = ", ".join(f"'{b}'" for b in SMALL)
        with self.store.engine.connect() as conn:
            while not self.stop.wait(0.25):
                now = now_ms()
                oldest = conn.execute(
                    text("SELECT MIN(next_fire_at) FROM dus_job_trigger WHERE state = 'waiting'")
                ).scalar_one()
                if oldest is not None and now >= self.from_ms:
                    self.headroom.append((int(oldest) - now) / 1000)
                if self.backlog is None and now >= self.backlog_at_ms:
                    self.backlog = int(
                        conn.execute(
                            text(
                                f"SELECT COUNT(*) FROM dus_fired_record WHERE biz_code IN ({codes})"
                                " AND scheduled_at > :now"
                            ),
                            {"now": now},
                        ).scalar_one()
                    )
                conn.commit()  # a fresh snapshot for the next read

    def __enter__(self) -> _Sampler:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


def scenario(env: StackEnv, way: str, sz: dict[str, Any]) -> dict[str, Any]:
    prefix = bench_prefix("lane")
    lanes = way.startswith("lanes")
    sop_lane = Lane.BURST if lanes else Lane.DEFAULT
    step_ms = int(1000 / sz["small_rate"])
    far_step_ms = int(1000 / sz["far_rate"])
    with fresh_database(env.mariadb_url, "bench_lanes") as url:
        store = make_store(url, PARTITIONS, pool_size=16)
        bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
        # T0 after the load, the executors' start and the lead; the small businesses'
        # measured triggers from 5 s before it (the scheduler's start is not measured)
        t0 = now_ms() + 6_000 + int(sz["lead_s"] * 1000)
        start_ms = t0 - 5_000
        end_ms = t0 + int(sz["tail_s"] * 1000)
        in_run = (end_ms - start_ms) // step_ms
        expected = {b: in_run for b in SMALL}
        hosts = [ExecutorHost(HostConfig(env.pulsar_url, prefix, list(SMALL), expected, deadline_s=sz["limit_s"] + 60))]
        if way != "alone":
            hosts.append(
                ExecutorHost(
                    HostConfig(
                        env.pulsar_url,
                        prefix,
                        ["sop"],
                        {"sop": sz["burst"] * sz["shards"]},
                        deadline_s=sz["limit_s"] + 60,
                        lanes={"sop": sop_lane.value},
                    )
                )
            )
        try:
            for biz in SMALL:
                job = store.put_job(bench_job(biz, timeout=timedelta(0)))
                load_triggers(url, job, in_run, first_ms=start_ms, spread_ms=in_run, step_ms=step_ms)
                far = int(3600 * sz["far_rate"])
                load_triggers(url, job, far, first_ms=end_ms + far_step_ms, spread_ms=far, step_ms=far_step_ms)
            if way != "alone":
                sop = store.put_job(
                    bench_job("sop", timeout=timedelta(0), envelope_size=PACK, lane=sop_lane, shard_total=sz["shards"])
                )
                load_triggers(url, sop, sz["burst"], first_ms=t0, spread_ms=1000)
            for h in hosts:
                h.__enter__()
            settings = SchedulerSettings(lookahead=timedelta(minutes=30), adaptive_lookahead=way == "lanes_adaptive")
            ts = ThreadedScheduler(store, bus, settings)
            with _Sampler(store, t0 - 2_000, start_ms) as sampler:
                ts.start()
                figs: dict[str, Any] = {}
                for h in hosts:
                    figs.update(h.wait(max(5.0, end_ms / 1000 + sz["limit_s"] - time.time())))
            ts.close()
        finally:
            for h in hosts:
                h.__exit__(None, None, None)
            bus.close()
            store.close()
            delete_topics(env.pulsar_admin_url, prefix)
    small_lags = [v / 1000 for b in SMALL for v in figs[b].start_lag_ms]
    out: dict[str, Any] = {
        "way": way,
        "expected_small_each": in_run,
        "small_items": {b: figs[b].items for b in SMALL},
        "small_start_lag_s": lag_summary(small_lags),
        "min_headroom_s": min(sampler.headroom) if sampler.headroom else None,
        "small_backlog_before_T0": sampler.backlog,
    }
    if "sop" in figs:
        f = figs["sop"]
        out["sop_items"] = f.items
        out["sop_messages"] = f.messages
        out["sop_start_lag_s"] = lag_summary([v / 1000 for v in f.start_lag_ms])
    return out


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    sz = _sizes(profile["quick"])
    sec = Section(NAME, TITLE)
    runs = {way: scenario(env, way, sz) for way in WAYS}
    sec.raw = runs
    sec.settings = {
        **sz,
        "partitions": PARTITIONS,
        "small": list(SMALL),
        "sop_envelope_size": PACK,
        "scheduler": "threaded Scheduler; lookahead 30 min fixed, or adaptive (2..30 min per lane)",
        "executors": "one process for the four small businesses, one for SOP (its lane's topic); no-op handlers",
    }
    alone = runs["alone"]["small_start_lag_s"]["p99"]
    for way in WAYS[1:]:
        r = runs[way]
        p99 = r["small_start_lag_s"]["p99"]
        sec.rows.append(
            Row(
                f"{way}: small businesses' p99 fire lag with the burst vs alone",
                p99,
                alone,
                "s",
                Goal("ratio_max", 1.05),
                note=f"items {sum(r['small_items'].values()):,} of {4 * r['expected_small_each']:,}",
            )
        )
        sop = r.get("sop_start_lag_s") or {}
        sec.rows.append(
            Row(
                f"{way}: burst p99 handler start after T",
                sop.get("p99"),
                None,
                "s",
                Goal("value_max", 1.0, "s"),
                note=f"{r.get('sop_items', 0):,} of {sz['burst'] * sz['shards']:,} items "
                f"({sz['burst']:,} triggers x {sz['shards']}), {r.get('sop_messages', 0):,} messages; "
                f"p50 {sop.get('p50') or 0:.3f} s",
            )
        )
        sec.rows.append(
            Row(
                f"{way}: min admission headroom (oldest waiting T - now)",
                r["min_headroom_s"],
                None,
                "s",
                Goal("value_min", 0.0, "s"),
            )
        )
    fixed, adaptive = runs["lanes_fixed"]["small_backlog_before_T0"], runs["lanes_adaptive"]["small_backlog_before_T0"]
    sec.rows.append(
        Row(
            "published-not-yet-due backlog of the small businesses, quiet period: fixed 30 min / adaptive",
            fixed,
            adaptive,
            "",
            Goal("ratio_min", 5.0),
            ratio=(fixed / adaptive) if fixed is not None and adaptive else None,
            note="what a stop of those businesses would have to skip",
        )
    )
    sec.notes.append(
        "fire lag = handler start minus T; the small businesses' p99 alone is the `alone` run's "
        f"({alone if alone is not None else float('nan'):.3f} s)."
    )
    if profile["quick"]:
        sec.notes.append(
            f"quick profile: the burst is {sz['burst'] * sz['shards']:,} sharding items ({sz['burst']:,} triggers), "
            f"{sz['lead_s']:.0f} s ahead; the full profile's is 200,000 items (50,000 triggers of 4), 60 s ahead."
        )
    return sec
