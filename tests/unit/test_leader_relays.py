"""The single leader's control relays (scheduler_core.control) across leadership terms, on
the embedded default (SQLite, the in-process bus, the threaded scheduler on a driven
clock, an election the test hands out): a schedule edit and a rollback fence stored while
this process follows, and never relayed by the leader of the time, are relayed when this
process leads again, however long ago they were stored; a relay round after that sends
nothing twice."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import timedelta
from pathlib import Path

import pytest

from migrator.model import Action
from migrator.target import TargetWriter
from scheduler_core.clock import ManualClock
from scheduler_core.control import Relay, RelayScope
from scheduler_core.errors import BusError
from scheduler_core.fence import decode_fence
from scheduler_core.metrics import SchedulerMetrics
from scheduler_core.model import Epoch
from scheduler_core.ports import Election
from scheduler_core.scheduler import Scheduler
from scheduler_core.stops import Scope, Stop, StopRelay, decode_stop
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes, supersede_relay
from scheduler_core.supersede import RECENT
from scheduler_core.times import to_ms
from switchyard.wiring import migrator_store
from tests.control_away import control_away
from tests.cron_writes import cron_write
from tests.harness import Harness, make_harness
from tests.waiting import until

LOOKAHEAD = timedelta(minutes=10)
AWAY = RECENT + timedelta(minutes=1)  # no leader this long: the edit is no recent change any more


class _Handed(Election):
    """Leads when the test says so: `grant(epoch)` lets the next campaign win with that
    epoch, `depose()` ends the term (a lost lease, seen at the leader's next look)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._granted: Epoch | None = None
        self._leading: Epoch | None = None

    def grant(self, epoch: int) -> None:
        with self._cv:
            self._granted = Epoch(epoch)
            self._cv.notify_all()

    def depose(self) -> None:
        self._leading = None

    def campaign(self, timeout: timedelta) -> Epoch | None:
        with self._cv:
            if not self._cv.wait_for(lambda: self._granted is not None, timeout.total_seconds()):
                return None
            self._leading, self._granted = self._granted, None
            return self._leading

    def is_leader(self) -> bool:
        return self._leading is not None

    def epoch(self) -> Epoch | None:
        return self._leading

    def resign(self) -> None:
        self._leading = None

    def close(self) -> None:
        self.resign()


class _Process:
    """Scheduler process B: the real `Scheduler.run` loop in a thread, with both relays
    and a count of its relay rounds."""

    def __init__(self, h: Harness) -> None:
        self.election = _Handed()
        self.rounds = 0

        def counted() -> None:
            self.rounds += 1

        def relays(scope: RelayScope) -> Sequence[Relay]:
            return [
                supersede_relay(h.store, h.bus, h.settings, SchedulerMetrics(), scope).relay,
                StopRelay(SqlStops(h.store), h.bus, scope).relay,
                counted,  # last: a round counted here has run the relays before it
            ]

        self.sched = Scheduler(h.store, h.bus, self.election, h.clock, h.settings, consume_results=False, relays=relays)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sched.run, args=(self.stop,), daemon=True)

    def lead(self, epoch: int) -> None:
        """Wins the election with `epoch` and has run a relay round since."""
        before = self.rounds
        self.election.grant(epoch)
        assert until(lambda: self.sched.status.epoch == epoch and self.rounds > before + 1, 30, every_s=0.01), (
            f"B did not lead with epoch {epoch} and relay"
        )

    def follow(self) -> None:
        self.election.depose()
        assert until(lambda: not self.sched.status.leader, 30, every_s=0.01), "B kept leading"


@pytest.fixture
def h(tmp_path: Path, clock: ManualClock) -> Harness:
    # a fired cron trigger is acquirable again only at the next tick: short idle waits
    # publish the lookahead's 60 occurrences in a few seconds, not a minute
    return make_harness(tmp_path, clock, lookahead=LOOKAHEAD, idle_wait=timedelta(milliseconds=50))


@pytest.fixture
def b(h: Harness) -> Iterator[_Process]:
    p = _Process(h)
    p.thread.start()
    try:
        yield p
    finally:
        p.stop.set()
        p.thread.join(timeout=30)


def _heard(h: Harness) -> list[bytes]:
    heard: list[bytes] = []
    h.bus.follow_control(heard.append)  # the in-process bus replays what it carried so far
    return heard


def _edits(heard: list[bytes]) -> list[Stop]:
    """The triggers' stops heard (a schedule edit's superseded times are its trigger's stop)."""
    return [s for s in map(decode_stop, list(heard)) if s is not None and s.scope is Scope.TRIGGER]


@pytest.mark.parametrize("a_published", [True, False], ids=["a-published-runs-not-broadcast", "a-relayed-nothing"])
def test_a_leader_again_relays_what_was_stored_while_it_followed(h: Harness, b: _Process, a_published: bool) -> None:
    writer = TargetWriter(h.store, migrator_store(h.store))
    first = h.clock.now().replace(microsecond=0) + timedelta(seconds=10 - h.clock.now().second % 10)
    writer.apply([cron_write("0/10 * * * * ?", Action.CREATE, first)])
    # B leads first: its relays have run (their first whole read is behind them), and the
    # old schedule is published one lookahead ahead
    b.lead(1)
    ahead = h.clock.now() + LOOKAHEAD - timedelta(seconds=10)
    assert until(lambda: len(h.store.fired_between("biz-a", first, ahead)) >= 50, 120), "the old schedule was published"
    b.follow()
    # A leads with epoch 2: the edit and a rollback's fence are stored in its term
    assert h.store.claim_epoch(Epoch(2))
    writer.apply([cron_write("0/7 * * * * ?", Action.UPDATE, first)])
    (edit,) = SqlSupersedes(h.store).supersedes()
    assert edit.pending_ms and edit.skipped_ms
    at = h.clock.now() + timedelta(minutes=5)
    fence, _marked = h.store.raise_business_fence("biz-f", to_ms(at))  # its broadcast failed
    if a_published:
        # A's relay published the new schedule's runs, then its broadcast of the stops failed
        supersede_relay(h.store, h.bus, h.settings, SchedulerMetrics()).relay()
        with pytest.raises(BusError):
            StopRelay(SqlStops(h.store), control_away(h.bus)).relay()
        assert SqlSupersedes(h.store).supersedes()[0].pending_ms == ()
    # A dies; no leader for a while (the store's clock moves on)
    h.clock.advance(AWAY)
    heard = _heard(h)
    assert _edits(heard) == [], "nobody has broadcast the edit yet"
    b.lead(3)
    stored = SqlStops(h.store).stop_of(Scope.TRIGGER, str(edit.trigger_id))
    assert stored is not None and {w.from_ms for w in stored.windows} == set(edit.skipped_ms)
    assert [s.epoch for s in _edits(heard)] == [stored.epoch], "B, leading again, broadcast the edit once"
    assert [f for f in map(decode_fence, list(heard)) if f is not None] == [fence], "B relayed the stored fence"
    assert SqlSupersedes(h.store).supersedes()[0].pending_ms == (), "the new schedule's runs are published"
    recs = {
        to_ms(r.scheduled_at): r
        for r in h.store.fired_between("biz-a", first - timedelta(minutes=1), first + LOOKAHEAD * 2)
    }
    assert set(edit.pending_ms) <= set(recs), "every pending run has its record"
    assert {recs[t].epoch for t in edit.pending_ms} == {Epoch(2) if a_published else Epoch(3)}
    assert all(recs[t].published_at is not None for t in edit.pending_ms), "every pending run was published"
    # later rounds of the same term send nothing again
    rounds = b.rounds
    assert until(lambda: b.rounds >= rounds + 3, 30, every_s=0.01)
    assert len(_edits(heard)) == 1 and sum(decode_fence(p) is not None for p in list(heard)) == 1
