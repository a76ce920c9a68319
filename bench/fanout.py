"""Fan-out: commands/s end to end with sharding envelopes.

One one-shot trigger of a job with shard_total S and envelope_size E, due now, on a
fresh database; the scheduler fires it through Pulsar; an Executor (own process,
no-op handler, job timeout 0; one run with 30 s, enforced by the SDK's one watchdog
thread) handles every item and publishes compact per-envelope results, batched.
commands/s = S / (last item handled - first tick). Commands are counted as items.

Fired records: whatever modes the core offers (`SchedulerSettings.page_records` today:
one row per item, or one row per envelope), each measured when `--fired-mode` does
not pick one. The peer is a bare pulsar-client producer and consumer moving the same
envelopes (no store, no decode): what the broker and client could carry.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

from bench.executors import ExecutorHost, HostConfig
from bench.harness import Deadline, Goal, Row, Section, StackEnv, bench_prefix, delete_topics, fresh_database
from bench.workload import (
    available_fired_modes,
    bench_job,
    drive_inline,
    fired_mode_kwargs,
    load_triggers,
    make_store,
    now_ms,
)
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.settings import SchedulerSettings

NAME = "fanout"
TITLE = "fan-out commands/s end to end with sharding envelopes"
GOAL = Goal("value_min", 200_000, "/s")
BIZ = "fan"


def bare_envelopes(env: StackEnv, prefix: str, total: int, envelope: int, timeout_s: float) -> dict[str, Any]:
    """A bare producer + consumer moving total/envelope envelopes of `envelope` items."""
    import pulsar

    from bench.publication import bare_pair
    from scheduler_core.codec import encode_commands
    from scheduler_core.model import Epoch, ExecutionCommand, JobCode, TriggerId, command_id
    from scheduler_core.times import from_ms

    t_ms = now_ms()
    t = from_ms(t_ms)
    topic = f"persistent://public/default/{prefix}-bare{total}x{envelope}"
    with bare_pair(env.pulsar_url, topic) as (consumer, producer):
        payloads = []
        for start in range(0, total, envelope):
            group = [
                ExecutionCommand(
                    command_id=command_id(1, t, i),
                    trigger_id=TriggerId(1),
                    job_code=JobCode("bench-fan"),
                    biz_code=BIZ,
                    handler="bench",
                    scheduled_at=t,
                    item_index=i,
                    item_total=total,
                    epoch=Epoch(1),
                )
                for i in range(start, min(total, start + envelope))
            ]
            payloads.append((encode_commands(group), len(group)))
        got = {"items": 0, "last": 0.0}

        def consume() -> None:
            end = time.monotonic() + timeout_s
            while got["items"] < total and time.monotonic() < end:
                try:
                    msg = consumer.receive(timeout_millis=200)
                except pulsar.Timeout:
                    continue
                got["items"] += int(msg.properties().get("n", "1"))
                consumer.acknowledge(msg)
                got["last"] = time.perf_counter()

        th = threading.Thread(target=consume, daemon=True)
        t0 = time.perf_counter()
        th.start()
        for body, n in payloads:
            producer.send_async(body, None, properties={"n": str(n), "scheduled_at": str(t_ms)}, deliver_at=t_ms)
        producer.flush()
        th.join(timeout_s + 5)
        secs = (got["last"] or time.perf_counter()) - t0
    return {
        "rate": got["items"] / secs if secs > 0 else 0.0,
        "items": got["items"],
        "seconds": secs,
        "messages": len(payloads),
    }


def one_run(
    env: StackEnv,
    total: int,
    envelope: int,
    mode: str | None,
    limit_s: float,
    triggers: int = 1,
    job_timeout: timedelta = timedelta(0),
    processes: int = 1,
) -> dict[str, Any]:
    s_kw: dict[str, Any] = {}
    j_kw: dict[str, Any] = {}
    how = "core default"
    if mode is not None:
        picked = fired_mode_kwargs(mode)
        if picked is not None:
            s_kw, j_kw, how = picked
    # an envelope is cut from one sharding page: a page smaller than the envelope caps it
    settings = SchedulerSettings(sharding_page=max(SchedulerSettings().sharding_page, envelope), **s_kw)
    prefix = bench_prefix("fan")
    per_trigger = total // triggers
    with fresh_database(env.mariadb_url, "bench_fan") as url:
        store = make_store(url, 4)
        jobs = [
            store.put_job(
                bench_job(
                    BIZ,
                    job_code=f"bench-fan-{i}",
                    shard_total=per_trigger,
                    envelope_size=envelope,
                    timeout=job_timeout,
                    **j_kw,
                )
            )
            for i in range(triggers)
        ]
        for job in jobs:
            load_triggers(url, job, 1, first_ms=now_ms() - 1000)
        bus = PulsarBus(env.pulsar_url, admin_url=env.pulsar_admin_url, topic_prefix=prefix)
        cfg = HostConfig(
            env.pulsar_url,
            prefix,
            [BIZ],
            {BIZ: per_trigger * triggers},
            deadline_s=limit_s,
            keep_lags=False,
            processes=processes,
        )
        try:
            with ExecutorHost(cfg) as host:
                started = time.time()
                d = drive_inline(store, bus, settings, triggers, Deadline(limit_s))
                fired_s = time.time() - started
                fig = host.wait(limit_s)[BIZ]
        finally:
            bus.close()
            store.close()
            delete_topics(env.pulsar_admin_url, prefix)
    end = fig.last_handled or time.time()
    secs = end - started
    return {
        "total": per_trigger * triggers,
        "envelope": envelope,
        "triggers": triggers,
        "fired_mode": mode,
        "fired_mode_switch": how,
        "items_handled": fig.items,
        "messages": fig.messages,
        "seconds": secs,
        "rate": fig.items / secs if secs > 0 else 0.0,
        "scheduler_seconds": fired_s,
        "scheduler_rate": (per_trigger * triggers) / fired_s if fired_s > 0 else 0.0,
        "complete": fig.items >= per_trigger * triggers,
        "job_timeout_s": job_timeout.total_seconds(),
        "executor_processes": processes,
        "drive": d.stats,
    }


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    shapes = [(10_000, 100), (10_000, 1_000)] if quick else [(10_000, 100), (100_000, 100), (100_000, 1_000)]
    limit_s = 90.0 if quick else 180.0
    requested = options.get("fired_mode")
    modes: list[str | None]
    have = available_fired_modes()
    if requested:
        modes = [requested]
    elif have:
        modes = list(have) if not quick else [None]
    else:
        modes = [None]
    sec = Section(NAME, TITLE)
    sec.settings = {
        "shapes (shard_total, envelope_size)": shapes,
        "fired_modes": modes or ["core default"],
        "available_fired_modes": have,
        "executor": "1 process, concurrency 16, no-op handler",
        "job_timeout": "0, and one run with 30 s (one watchdog thread per executor)",
        "driver": "SchedulerCore inline",
        "sharding_page": "max(300, envelope_size)",
        "partitions": 4,
    }
    raw: list[dict[str, Any]] = []
    for total, env_size in shapes:
        for mode in modes:
            r = one_run(env, total, env_size, mode, limit_s)
            raw.append(r)
            label = f"S={total:,}, E={env_size}, fired records: {mode or 'core default'}"
            bare_prefix = bench_prefix("fanb")
            try:
                bare = bare_envelopes(env, bare_prefix, total, env_size, limit_s)
            finally:
                delete_topics(env.pulsar_admin_url, bare_prefix)
            r["bare"] = bare
            sec.rows.append(
                Row(
                    label,
                    r["rate"],
                    bare["rate"],
                    "/s",
                    GOAL,
                    note="peer: bare producer+consumer, same envelopes"
                    + ("" if r["complete"] else f"; INCOMPLETE {r['items_handled']:,}/{total:,}"),
                )
            )
    if not quick:
        # the SDK with a job timeout set (the usual case): one watchdog thread enforces it
        total, env_size = shapes[-1]
        mode = modes[0] if len(modes) == 1 else "page"

        def variant(what: str, note: str, **run_kw: Any) -> None:
            r = one_run(env, total, env_size, mode, limit_s, **run_kw)
            raw.append(r)
            incomplete = "" if r["complete"] else f"; INCOMPLETE {r['items_handled']:,}/{total:,}"
            label = f"S={total:,}, E={env_size}, fired records: {mode or 'core default'}, {what}"
            sec.rows.append(Row(label, r["rate"], None, "/s", GOAL, note=note + incomplete))

        variant(
            "job timeout 30 s",
            "enforced by one watchdog thread per executor (was a thread per item)",
            job_timeout=timedelta(seconds=30),
        )
        # executors scaled out: two processes on the same Shared subscription
        variant(
            "2 executor processes",
            "one Shared subscription, two processes on the same 2 cores as broker and scheduler",
            processes=2,
        )
    sec.raw = {"runs": raw}
    sec.notes.append(
        "scheduler side alone (first tick until fired records + publication done): "
        + "; ".join(
            f"S={r['total']:,}/E={r['envelope']}/{r['fired_mode'] or 'default'}: {r['scheduler_rate']:,.0f}/s"
            for r in raw
        )
        + "."
    )
    sec.notes.append(
        "commands = sharding items; time from the first tick to the last item handled in the "
        "executor process; scheduler-side rate (fired records + publication) is in the JSON "
        "(`scheduler_rate`)."
    )
    return sec
