"""A schedule edit stored while the relaying process follows, on the real servers (MariaDB,
Pulsar, etcd; two `switchyard scheduler run` processes under one etcd election): s0 leads
first; it hangs past its lease and s1 takes over, s0 resumes as a follower; the edit is
stored while s1 hangs (so s1 never relays it), then s1 is killed. s0 wins the election
again and relays the edit: the new schedule's pending runs are published with its new
epoch, and the superseded times reach the control channel. In the second case s1 had
published the pending runs and its broadcast failed, and the edit is older than the
relays' window of recent changes when s0 leads again (its `updated_at` set back, as if
stored minutes ago): s0 reads every stored edit at each leadership it wins."""

from __future__ import annotations

import os
import signal
import uuid
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from sqlalchemy import update

from migrator.model import Action
from migrator.target import TargetWriter
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.errors import BusError
from scheduler_core.executor.fences import FenceView
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import TriggerId, TriggerState
from scheduler_core.settings import SchedulerSettings
from scheduler_core.stops import StopRelay
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes, supersede_relay
from scheduler_core.supersede import RECENT
from scheduler_core.times import to_ms
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.control_away import control_away
from tests.cron_writes import cron_write
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

BIZ = "relayed"
TTL_S = 10  # the lease: a paused process loses it after this long
AGE = RECENT + timedelta(minutes=1)
LOOKAHEAD = timedelta(seconds=120)


def _caught_up(st: SqlTriggerStore, trigger_id: TriggerId) -> bool:
    """Waiting, its next occurrence less than one period short of the lookahead."""
    t = st.get_trigger(trigger_id)
    ahead = datetime.now(UTC) + LOOKAHEAD - timedelta(seconds=10)
    return t is not None and t.state is TriggerState.WAITING and t.next_fire_at > ahead


def _leads(p: SchedulerProc, epoch: int) -> bool:
    return f"leading with epoch {epoch}" in p.log_text()


@pytest.mark.parametrize("s1_published", [False, True], ids=["s1-relayed-nothing", "s1-published-runs-not-broadcast"])
def test_a_former_leader_elected_again_relays_an_edit_stored_while_it_followed(
    tmp_path: Path, s1_published: bool
) -> None:
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        try:
            _failover(SqlTriggerStore(engine, SystemClock()), url, tmp_path, s1_published)
        finally:
            engine.dispose()


def _failover(st: SqlTriggerStore, url: str, tmp_path: Path, s1_published: bool) -> None:
    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    prefix = f"rl{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC)
    first = now.replace(microsecond=0) + timedelta(seconds=10 - now.second % 10)
    writer = TargetWriter(st, migrator_store(st))

    def write(cron: str, action: Action) -> None:
        writer.apply([cron_write(cron, action, first, biz_code=BIZ, job_code="quick", handler="quick")])

    write("0/10 * * * * ?", Action.CREATE)
    (trig,) = st.triggers_of(biz_code=BIZ)
    assert trig.id is not None
    tid = trig.id

    # both under one election key, with a lookahead the edit's pending runs fall inside
    lookahead = ["--lookahead", str(int(LOOKAHEAD.total_seconds())), "--lease-ttl", str(TTL_S)]
    key = f"/switchyard-test/{prefix}/leader"
    start = partial(
        start_scheduler, tmp=tmp_path, url=url, bus=pulsar, etcd=etcd, key=key, prefix=prefix, extra=lookahead
    )

    s0 = start("s0")
    procs = [s0]

    def logs() -> str:
        return "\n".join(f"--- {p.name}\n{p.log_text()[-3000:]}" for p in procs)

    bus = PulsarBus(pulsar, topic_prefix=prefix)
    try:
        assert until(lambda: st.current_epoch() > 0, 60), f"no leader:\n{logs()}"
        e0 = st.current_epoch()
        assert _leads(s0, e0)
        ahead = to_ms(datetime.now(UTC)) + 60_000
        assert until(
            lambda: (
                len(
                    [
                        r
                        for r in st.fired_between(BIZ, first, first + timedelta(minutes=3))
                        if to_ms(r.scheduled_at) > ahead
                    ]
                )
                >= 3
            ),
            60,
        ), f"the old schedule was not published ahead:\n{logs()}"
        s1 = start("s1")
        procs.append(s1)
        # s0 hangs past its lease: s1 takes over; s0 resumes as a follower
        os.kill(s0.pid, signal.SIGSTOP)
        try:
            assert until(lambda: st.current_epoch() > e0, 60), f"s1 did not take over:\n{logs()}"
        finally:
            os.kill(s0.pid, signal.SIGCONT)
        e1 = st.current_epoch()
        assert _leads(s1, e1)
        assert until(lambda: "lost leadership of epoch" in s0.log_text(), 60), f"s0 still leads:\n{logs()}"
        # s1 hangs (relays nothing); the edit is stored meanwhile; then s1 dies. A trigger
        # s1 hangs while firing stays acquired (the edit waits for its fire): s1 hangs at a
        # moment its trigger waits, caught up with the lookahead (acquired for a few ms
        # every 10 s then)
        for _ in range(20):
            assert until(lambda: _caught_up(st, tid), 60), f"s1 did not catch up:\n{logs()}"
            os.kill(s1.pid, signal.SIGSTOP)
            if _caught_up(st, tid):
                break
            os.kill(s1.pid, signal.SIGCONT)
        write("0/7 * * * * ?", Action.UPDATE)
        edits = SqlSupersedes(st).supersedes()
        assert len(edits) == 1, f"the edit was not applied: {st.get_trigger(tid)}, now {datetime.now(UTC)}"
        (edit,) = edits
        if s1_published:
            # s1's relay published the new schedule's runs (epoch e1), then its broadcast of
            # the trigger's stop (the superseded times) failed
            supersede_relay(st, bus, SchedulerSettings(), SchedulerMetrics()).relay()
            with pytest.raises(BusError):
                StopRelay(SqlStops(st), control_away(bus)).relay()
            assert SqlSupersedes(st).supersedes()[0].pending_ms == ()
            ts, stops = st.t.trigger_supersede, st.t.stop
            with st.engine.begin() as conn:
                age = int(AGE.total_seconds() * 1000)
                conn.execute(update(ts).where(ts.c.trigger_id == tid).values(updated_at=ts.c.updated_at - age))
                conn.execute(
                    update(stops)
                    .where(stops.c.scope == "trigger", stops.c.scope_key == str(tid))
                    .values(updated_at=stops.c.updated_at - age)
                )
        assert st.current_epoch() == e1, "s0 took over before the edit was stored: the test proves nothing"
        assert edit.pending_ms and edit.skipped_ms
        s1.kill9()
        assert until(lambda: st.current_epoch() > e1, 60), f"s0 did not take over again:\n{logs()}"
        e2 = st.current_epoch()
        assert _leads(s0, e2), f"s0 is not the new leader:\n{logs()}"
        assert until(lambda: SqlSupersedes(st).supersedes()[0].pending_ms == (), 60), (
            f"the pending runs were not published:\n{logs()}"
        )
        view = FenceView(bus)  # an executor's view of the control channel, from its start
        try:
            assert until(lambda: view.superseded_ms(tid) == set(edit.skipped_ms), 30), (
                f"the edit never reached the bus:\n{logs()}"
            )
        finally:
            view.close()
        assert f"broadcast the stop of trigger {tid}" in s0.log_text().split(f"leading with epoch {e2}")[1]
        recs = {
            to_ms(r.scheduled_at): r
            for r in st.fired_between(BIZ, first - timedelta(minutes=1), first + timedelta(minutes=5))
        }
        assert {recs[t].epoch for t in edit.pending_ms} == {e1 if s1_published else e2}, "the publisher's epoch"
        assert all(recs[t].published_at is not None for t in edit.pending_ms)
    finally:
        for p in procs:
            p.stop()
        bus.close()
