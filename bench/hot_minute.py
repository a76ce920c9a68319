"""Hot minute: K one-shot triggers due in the same second, through real Pulsar; fire-time
lag = executor receipt minus T, p50/p99 per business.

Runs (each on a fresh database, 16 partitions, the threaded production `Scheduler`,
one executor process per business, no-op handlers, job timeout 0):
  same_second  K triggers of one business, T spread over one second;
  mix          a big SOP business (90% of M) and four small ones (2.5% each), all due in
               the same second, sharing every partition (M = 20K full, 5K quick); the
               SOP job packs its runs (envelope_size = PACK, as README advises for a
               business with on-the-hour bursts), the small ones do not;
  small_alone  the four small businesses by themselves (the baseline for "do the small
               ones suffer?");
  packed       same_second with the job's envelope_size = PACK: one-item runs of the job
               due at the same time share messages (fire.py `_pack`), so the broker and
               the executor see K/PACK messages instead of K. Lag per item here is
               handler start minus T (a message's receipt covers all its runs).
  packed_x2    packed, with the business's executor in two processes (scale-out).
The triggers are due `lead` seconds after the scheduler starts, so admission and
publication (deliver-at = T) happen ahead of T, as the 30-min lookahead has them do in
production; when admission had not finished by T the lag includes it, and the table
says so (admission margin).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

from bench.executors import ExecutorHost, HostConfig
from bench.harness import (
    Deadline,
    Goal,
    Row,
    Section,
    StackEnv,
    bench_prefix,
    delete_topics,
    fresh_database,
    lag_summary,
)
from bench.workload import ThreadedScheduler, bench_job, load_triggers, make_store, now_ms
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

NAME = "hot_minute"
TITLE = "hot minute: K triggers due in the same second, executor receipt minus T"
GOAL = Goal("value_max", 1.0, "s")
PARTITIONS = 16
SMALL = ("reminder", "coupon", "report", "push")
DEFAULT_RATE_GUESS = 800.0  # triggers/s admitted+published, when admission did not run first
MAX_LEAD_S = 180.0
PACK = 100  # envelope_size of the packed run


def bare_same_second(env: StackEnv, k: int, limit_s: float) -> dict[str, Any]:
    """The ceiling: a bare producer queues k messages due in one second (deliver_at
    spread over it) ahead of time; a bare consumer (Shared, same prefetch) receives and
    acks them; lag = receive - T."""
    import threading

    import pulsar

    from bench.publication import bare_pair

    prefix = bench_prefix("hotb")
    topic = f"persistent://public/default/{prefix}"
    lags: list[float] = []
    try:
        with bare_pair(env.pulsar_url, topic) as (consumer, producer):
            t0 = now_ms() + 3000 + int(k / 5)  # enough to queue them all first (>= 5K msg/s)
            payload = b"x" * 200

            def consume() -> None:
                end = time.monotonic() + (t0 - now_ms()) / 1000 + limit_s
                while len(lags) < k and time.monotonic() < end:
                    try:
                        msg = consumer.receive(timeout_millis=200)
                    except pulsar.Timeout:
                        continue
                    lags.append((now_ms() - int(msg.properties()["T"])) / 1000)
                    consumer.acknowledge(msg)

            th = threading.Thread(target=consume, daemon=True)
            th.start()
            for i in range(k):
                t = t0 + i % 1000
                producer.send_async(payload, None, properties={"T": str(t)}, deliver_at=t)
            producer.flush()
            queued_before_t = now_ms() < t0
            th.join((t0 - now_ms()) / 1000 + limit_s + 5)
    finally:
        delete_topics(env.pulsar_admin_url, prefix)
    return {"received": len(lags), "queued_before_T": queued_before_t, "lag_s": lag_summary(lags)}


def scenario(
    env: StackEnv,
    counts: dict[str, int],
    lead_s: float,
    limit_s: float,
    envelope_size: int | dict[str, int] = 1,
    processes: int = 1,
) -> dict[str, Any]:
    """`envelope_size`: for every business, or per business (default 1)."""
    sizes = envelope_size if isinstance(envelope_size, dict) else dict.fromkeys(counts, envelope_size)
    prefix = bench_prefix("hot")
    total = sum(counts.values())
    with fresh_database(env.mariadb_url, "bench_hot") as url:
        store = make_store(url, PARTITIONS, pool_size=16)
        hosts: list[ExecutorHost] = []
        bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
        try:
            for biz in counts:
                hosts.append(
                    ExecutorHost(
                        HostConfig(
                            env.pulsar_url,
                            prefix,
                            [biz],
                            {biz: counts[biz]},
                            deadline_s=lead_s + limit_s + 30,
                            processes=processes,
                        )
                    )
                )
            for h in hosts:
                h.__enter__()
            t0 = now_ms() + int(lead_s * 1000)
            for biz, n in counts.items():
                job = store.put_job(bench_job(biz, timeout=timedelta(0), envelope_size=sizes.get(biz, 1)))
                load_triggers(url, job, n, first_ms=t0, spread_ms=1000)
            ts = ThreadedScheduler(store, bus, SchedulerSettings())
            started = time.time()
            ts.start()
            admitted_s = ts.wait_fired(total, Deadline(lead_s + limit_s))
            admitted_at = time.time()
            figs = {}
            for biz, h in zip(counts, hosts, strict=True):
                figs[biz] = h.wait(max(5.0, t0 / 1000 + limit_s - time.time()))[biz]
            ts.close()
        finally:
            for h in hosts:
                h.__exit__(None, None, None)
            bus.close()
            store.close()
            delete_topics(env.pulsar_admin_url, prefix)
    out: dict[str, Any] = {
        "T0_ms": t0,
        "lead_s": lead_s,
        "counts": counts,
        "envelope_size": sizes,
        "executor_processes": processes,
        "admission_seconds": admitted_s,
        "admission_margin_s": t0 / 1000 - admitted_at if admitted_s is not None else None,
        "scheduler_started": started,
        "per_business": {},
    }
    for biz, f in figs.items():
        recv = [v / 1000 for v in f.recv_lag_ms]
        start = [v / 1000 for v in f.start_lag_ms]
        out["per_business"][biz] = {
            "expected": counts[biz],
            "items": f.items,
            "messages": f.messages,
            "receipt_lag_s": lag_summary(recv),
            "handler_start_lag_s": lag_summary(start),
            "last_receipt_after_T0_s": (f.last_recv - t0 / 1000) if f.last_recv else None,
            "executor_cpu_s": f.cpu_s,
            "handling_s": (f.last_handled - f.first_recv) if f.last_handled and f.first_recv else None,
        }
    return out


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    k = 5_000 if quick else 50_000
    mix_total = 5_000 if quick else 20_000
    big = int(mix_total * 0.9)
    small_each = int(mix_total * 0.025)
    rate = profile.get("shared", {}).get("admission_rate_threaded_pulsar") or DEFAULT_RATE_GUESS
    limit_s = 60.0 if quick else 120.0

    # the executors are up before the lead starts; the base covers the scheduler's start
    # (the quick profile's admission was done 10 s before T with 8 s: most of it waiting)
    base_s = 3.0 if quick else 8.0

    def lead_for(n: int) -> float:
        # the admission section's rate had no executors and no other load beside it: 3x margin
        return min(MAX_LEAD_S, base_s + 3.0 * n / rate)

    sec = Section(NAME, TITLE)
    runs: dict[str, Any] = {}
    runs["same_second"] = scenario(env, {"hot": k}, lead_for(k), limit_s)
    runs["bare_same_second"] = bare_same_second(env, k, limit_s)
    runs["packed"] = scenario(env, {"hot": k}, lead_for(k), limit_s, envelope_size=PACK)
    # the business scaled out to two executor processes (one Shared subscription), on the
    # same 2 cores as the broker, the database and the scheduler
    runs["packed_x2"] = scenario(env, {"hot": k}, lead_for(k), limit_s, envelope_size=PACK, processes=2)
    mix_counts = {"sop": big, **{b: small_each for b in SMALL}}
    # the SOP business packs its on-the-hour runs (envelope_size PACK), as a business with
    # such a burst is told to (README); the small ones keep one message per run
    runs["mix"] = scenario(env, mix_counts, lead_for(sum(mix_counts.values())), limit_s, envelope_size={"sop": PACK})
    runs["small_alone"] = scenario(env, {b: small_each for b in SMALL}, lead_for(small_each * len(SMALL)), limit_s)
    sec.settings = {
        "K": k,
        "M": mix_total,
        "mix": mix_counts,
        "partitions": PARTITIONS,
        "scheduler": "threaded Scheduler, defaults",
        "executors": "one process per business, concurrency 16, no-op handler, job timeout 0",
        "T": "spread over one second",
        "lead_rate_assumed_per_s": rate,
        "pulsar": "delayedDeliveryTickTimeMillis=100, strict deliver-at",
    }
    sec.raw = runs

    def p(run_name: str, biz: str, q: str) -> float | None:
        return runs[run_name]["per_business"][biz]["receipt_lag_s"][q]

    def margin(run_name: str) -> str:
        m = runs[run_name]["admission_margin_s"]
        return (
            "admission did not finish"
            if m is None
            else (f"admission done {m:.1f} s before T" if m >= 0 else f"admission finished {-m:.1f} s AFTER T")
        )

    bare = runs["bare_same_second"]["lag_s"]
    sec.rows.append(
        Row(
            f"same second, {k:,} triggers: p50",
            p("same_second", "hot", "p50"),
            bare["p50"],
            "s",
            note=f"{margin('same_second')}; peer: bare producer/consumer",
        )
    )
    sec.rows.append(
        Row(
            f"same second, {k:,} triggers: p99",
            p("same_second", "hot", "p99"),
            bare["p99"],
            "s",
            GOAL,
            note="peer: bare producer/consumer, same k due in one second",
        )
    )
    packed = runs["packed"]["per_business"]["hot"]
    sec.rows.append(
        Row(
            f"same second, {k:,} triggers, envelope_size {PACK}: p99 handler start",
            packed["handler_start_lag_s"]["p99"],
            bare["p99"],
            "s",
            GOAL,
            note=f"{margin('packed')}; {packed['messages']:,} messages for {packed['items']:,} items; "
            f"p50 {packed['handler_start_lag_s']['p50'] or 0:.3f} s; peer: bare client, one message each",
        )
    )
    sop = runs["mix"]["per_business"]["sop"]
    packed2 = runs["packed_x2"]["per_business"]["hot"]
    sec.rows.append(
        Row(
            f"same second, {k:,} triggers, envelope_size {PACK}, 2 executor processes: p99 handler start",
            packed2["handler_start_lag_s"]["p99"],
            bare["p99"],
            "s",
            GOAL,
            note=f"{margin('packed_x2')}; p50 {packed2['handler_start_lag_s']['p50'] or 0:.3f} s; "
            "one Shared subscription; peer: bare client, one message each",
        )
    )
    sec.rows.append(
        Row(
            f"mix: sop ({big:,}, envelope_size {PACK}) p99 handler start",
            sop["handler_start_lag_s"]["p99"],
            None,
            "s",
            GOAL,
            note=f"p50 {sop['handler_start_lag_s']['p50'] or 0:.3f} s; {sop['messages']:,} messages; {margin('mix')}",
        )
    )
    for b in SMALL:
        mix99, alone99 = p("mix", b, "p99"), p("small_alone", b, "p99")
        sec.rows.append(
            Row(
                f"mix: {b} ({small_each:,}) p99, with sop vs alone",
                mix99,
                alone99,
                "s",
                GOAL,
                ratio=(mix99 / alone99) if mix99 is not None and alone99 else None,
                note=f"p50 {p('mix', b, 'p50') or 0:.3f} s with sop, {p('small_alone', b, 'p50') or 0:.3f} s alone",
            )
        )
    sec.notes.append("ratio on the same-second rows = Switchyard lag / the bare client's lag (1.0 = no overhead).")
    sec.notes.append(
        "lag = receive time on the executor's subscription minus the message's scheduled_at (T); "
        "ratio on the small-business rows = p99 with the SOP burst / p99 alone (1.0 = unaffected)."
    )
    sec.notes.append(
        f"same second: {margin('same_second')}; mix: {margin('mix')}; small alone: {margin('small_alone')}."
    )
    return sec
