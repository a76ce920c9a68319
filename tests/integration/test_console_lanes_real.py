"""Issue 29 in the console on the real servers: a `switchyard scheduler run
--adaptive-lookahead` subprocess (MariaDB store, Pulsar bus, etcd election, metrics on a
loopback port) admits two businesses' lanes; the console, reading that scheduler's metrics
(`--scheduler-metrics`) and the store, shows per lane and business the lookahead in use,
the forecast, the fire-time lag percentiles of runs an executor received, the
published-not-yet-due backlog, and a lookahead lag that is not negative."""

from __future__ import annotations

import socket
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from migrator.business import BusinessRegistry
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import FiredState, Job, JobCode, Lane, Trigger, TriggerKind
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.console.app import make_app
from switchyard.console.data import Sources, scraped_members
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.integration.procs import start_scheduler
from tests.servers import server_url
from tests.waiting import until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.mariadb
@pytest.mark.pulsar
@pytest.mark.etcd
def test_the_lanes_page_reads_a_running_scheduler(tmp_path: Path) -> None:
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    prefix = f"cl{uuid.uuid4().hex[:6]}"
    with mariadb_database("clanes") as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        clock = SystemClock()
        store = SqlTriggerStore(engine, clock)
        reg = BusinessRegistry(migrator_store(store))
        for biz in ("small", "sop"):
            reg.register_native(biz, actor="test", reason="lanes page")
        store.put_job(Job(job_code=JobCode("report"), biz_code="small", handler="h"))
        store.put_job(Job(job_code=JobCode("fanout"), biz_code="sop", handler="h", lane=Lane.BURST))
        now = clock.now()

        def once(code: str, biz: str, after_s: float, lane: Lane = Lane.DEFAULT) -> Trigger:
            at = now + timedelta(seconds=after_s)
            return Trigger(job_code=JobCode(code), biz_code=biz, kind=TriggerKind.ONCE, next_fire_at=at, lane=lane)

        # small: 5 runs due within seconds (an executor receives them: the lag), one in 90 s
        # (inside the quiet 2-minute window: published ahead, the backlog); sop: 30 in 10 min
        store.add_triggers([once("report", "small", 6 + i * 0.5) for i in range(5)] + [once("report", "small", 90)])
        store.add_triggers([once("fanout", "sop", 600, Lane.BURST) for _ in range(30)])
        bus = PulsarBus(pulsar, topic_prefix=prefix)
        ex = Executor(bus, "small", clock=clock, concurrency=4)

        @ex.handler()
        def run(ctx: ExecutionContext) -> None:
            pass

        stop = threading.Event()
        worker = threading.Thread(target=ex.run, args=(stop,), daemon=True)
        worker.start()
        port = _free_port()
        proc = start_scheduler(
            "lanes-console",
            tmp_path,
            url=url,
            bus=pulsar,
            etcd=etcd,
            key=f"/sy-clanes/{uuid.uuid4().hex[:6]}",
            prefix=prefix,
            extra=["--metrics-port", str(port), "--adaptive-lookahead"],
        )
        try:

            def received() -> int:
                recs = store.fired_between("small", now, now + timedelta(seconds=20))
                return sum(r.received_at is not None and r.state is not FiredState.SKIPPED for r in recs)

            assert until(lambda: received() >= 5, 60), "runs not received: " + proc.log_text()[-2000:]
            src = Sources(store, members=scraped_members([f"http://127.0.0.1:{port}/"]))
            c = TestClient(make_app(src))

            def answered() -> bool:  # the gauges are set at the scheduler's first forecast
                return bool(c.get("/api/lanes").json()["gauges_from"])

            assert until(answered, 30), proc.log_text()[-2000:]
            body = c.get("/api/lanes", params={"window": "15m"}).json()
            rows = {(r["lane"], r["business"]): r for r in body["rows"]}
            small, sop = rows["default", "small"], rows["burst", "sop"]
            assert small["lookahead_s"] == 120 and sop["lookahead_s"] == 120, body
            assert small["fired"] >= 5 and small["lag_s"]["p50"] is not None and small["lag_s"]["p99"] is not None
            assert small["lag_s"]["p50"] <= small["lag_s"]["p95"] <= small["lag_s"]["p99"]
            assert small["backlog"] == 1, body  # the run due in 90 s, published ahead
            assert sop["forecast"]["15m"] == 30 and sop["backlog"] == 0
            lanes = {x["lane"]: x for x in body["lanes"]}
            assert lanes["default"]["lookahead_lag_s"] is not None and not lanes["default"]["behind"], lanes
            page = c.get("/lanes")
            assert page.status_code == 200 and 'id="lane-burst-sop"' in page.text
        finally:
            proc.stop()
            stop.set()
            worker.join(timeout=40)
            ex.close()
            bus.close()
            engine.dispose()
