"""Operators' stops on the real servers (issue 27): MariaDB store, Pulsar bus, a real
`switchyard scheduler run` leader elected in etcd (10 s lookahead: the broker holds the
next ten seconds of commands), and a real executor process (`switchyard executor run`).

The stops are written to the store only, as `switchyard trigger pause` without `--bus`
does, so they reach the executor through the leader's relay. The promise checked
exactly: no handler is invoked for an occurrence at or after S (S = the call + 1 s, as
the CLI chooses), every occurrence from R on runs exactly once, every stopped one is
recorded skipped by the stop; and how long a follower of the control channel (a Pulsar
client of its own, as an executor is) takes to hear each stop, over 20 stops."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from scheduler_core import operations
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.model import FiredRecord, Job, JobCode, MisfirePolicy, Trigger, TriggerId, TriggerKind
from scheduler_core.stops import ALL_KEY, Cause, Scope, StopService, decode_stop, is_stop_skip
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import to_ms
from switchyard.schema import init_schema
from tests.backends import mariadb_database
from tests.harness import stored_id
from tests.integration.procs import SchedulerProc, executor_args, start_cli, start_scheduler, stop_process
from tests.servers import REPO, server_url
from tests.waiting import until

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

BIZ = "stopped"
TRIGGERS = 10  # fixed rate 1 s, anchored 100 ms apart: an occurrence every 100 ms
STOPS = 8  # pause/resume rounds per run; 20 under --long (the bench measures the latency)
STOPS_LONG = 20
LEAD = timedelta(seconds=1)  # S = call + LEAD (the CLI's STOP_LEAD)
RESUME_LEAD = timedelta(seconds=2)
UTC = timezone.utc


def _now() -> datetime:
    return datetime.now(UTC)


@dataclass
class Stack:
    store: SqlTriggerStore
    url: str
    pulsar: str
    etcd: str
    prefix: str
    tmp: Path
    leader: SchedulerProc | None = None
    members: list[SchedulerProc] = field(default_factory=list)

    def _start(self, name: str, extra: list[str]) -> SchedulerProc:
        return start_scheduler(
            name,
            self.tmp,
            url=self.url,
            bus=self.pulsar,
            etcd=self.etcd,
            key=f"/switchyard-test/{self.prefix}/leader",
            prefix=self.prefix,
            extra=["--lookahead", "10", *extra],
        )

    def start_leader(self, name: str) -> SchedulerProc:
        self.leader = self._start(name, [])
        return self.leader

    def start_members(self, n: int) -> None:
        """One elected leader (n = 1), or n members of the shard registry
        (`scheduler run --shards`): the owner of the lowest partition relays the stops."""
        if n == 1:
            self.members = [self.start_leader("stop-leader")]
            return
        shards = ["--shards", "--registry-prefix", f"/switchyard-test/{self.prefix}/shards"]
        # a lease that outlives a starved process on a loaded box: not about expiry here
        self.members = [self._start(f"stop-member-{i}", [*shards, "--lease-ttl", "10"]) for i in range(n)]

    def logs(self) -> str:
        procs = [*self.members, *([self.leader] if self.leader and self.leader not in self.members else [])]
        return "\n".join(f"--- {p.name}\n{p.log_text()[-2000:]}" for p in procs)


class Invocations:
    """`switchyard executor run` with the fence test's handlers: each invocation appended
    to a file as "<command id> <scheduled ms> <wall ms>"."""

    def __init__(self, stack: Stack, name: str = "executor") -> None:
        self.path = stack.tmp / f"{name}-invocations.txt"
        self.path.touch()
        self.log = stack.tmp / f"{name}.log"
        env = {**os.environ, "FENCE_INVOCATIONS": str(self.path), "PYTHONPATH": str(REPO)}
        args = executor_args(BIZ, stack.pulsar, stack.prefix, 8, "--handlers", "tests.integration.fence_handlers")
        with self.log.open("wb") as out:
            self.proc = start_cli(args, out, cwd=REPO, env=env)

    def read(self) -> list[tuple[str, int, int]]:
        out = []
        for line in self.path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:
                out.append((parts[0], int(parts[1]), int(parts[2])))
        return out

    def stop(self) -> None:
        stop_process(self.proc)

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        s = Stack(SqlTriggerStore(engine, SystemClock()), url, pulsar, etcd, f"stop{uuid.uuid4().hex[:6]}", tmp_path)
        try:
            yield s
        finally:
            for p in {id(p): p for p in [*s.members, *([s.leader] if s.leader else [])]}.values():
                p.stop()
            engine.dispose()


def _triggers(store: SqlTriggerStore, policy: MisfirePolicy = MisfirePolicy.SKIP) -> dict[TriggerId, int]:
    store.put_job(Job(job_code=JobCode("quick"), biz_code=BIZ, handler="quick", timeout=timedelta(0)))
    t0 = (_now() + timedelta(seconds=2)).replace(microsecond=0)
    added = store.add_triggers(
        [
            Trigger(
                job_code=JobCode("quick"),
                biz_code=BIZ,
                kind=TriggerKind.FIXED_RATE,
                interval=timedelta(seconds=1),
                next_fire_at=t0 + timedelta(milliseconds=100 * k),
                misfire_policy=policy,
            )
            for k in range(TRIGGERS)
        ]
    )
    return {stored_id(t): to_ms(t.next_fire_at) for t in added}


def _occurrences(anchors: dict[TriggerId, int], start_ms: int, end_ms: int) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    for tid, a in anchors.items():
        first = a + max(0, -(-(start_ms - a) // 1000)) * 1000
        out |= {(tid, at) for at in range(first, end_ms, 1000)}
    return out


def _records(store: SqlTriggerStore, start_ms: int, end_ms: int) -> dict[tuple[int, int], FiredRecord]:
    recs = store.fired_between(
        BIZ, datetime.fromtimestamp(start_ms / 1000, UTC), datetime.fromtimestamp(end_ms / 1000, UTC)
    )
    return {(r.trigger_id, to_ms(r.scheduled_at)): r for r in recs}


@dataclass(frozen=True)
class Round:
    s_ms: int
    r_ms: int
    returned_ms: int
    epochs: dict[str, int]  # trigger key -> the pause's epoch


@pytest.mark.parametrize("members", [1, 2], ids=["leader", "shard-registry"])
def test_pause_and_resume_take_effect_in_seconds_through_the_relay(
    stack: Stack, members: int, request: pytest.FixtureRequest
) -> None:
    """`members` 1: the elected leader relays the stops; 2: two members of the shard
    registry, where the owner of the lowest partition does (8 pauses each, 20 under --long:
    the latency is the bench's to measure, this checks the promise)."""
    store = stack.store
    anchors = _triggers(store)
    ids = list(anchors)
    rounds_wanted = STOPS_LONG if request.config.getoption("--long") else STOPS
    stack.start_members(members)
    stops = StopService(SqlStops(store))  # no bus: as `switchyard trigger pause` without --bus
    probe_bus = PulsarBus(stack.pulsar, topic_prefix=stack.prefix)
    heard: dict[tuple[str, int], int] = {}

    def hear(payload: bytes) -> None:
        stop = decode_stop(payload)
        if stop is not None:
            heard.setdefault((stop.key, stop.epoch), time.time_ns() // 1_000_000)

    probe = probe_bus.follow_control(hear)
    executor: Invocations | None = None
    rounds: list[Round] = []
    try:
        min(anchors.values())

        def ahead() -> int:
            now = to_ms(_now())
            return len(_records(store, now + 2000, now + 60_000))

        assert until(lambda: ahead() >= 5 * TRIGGERS, 30), f"the lookahead was not published:\n{stack.logs()}"
        # 1. a pause before any executor exists: the executor must know it before it runs anything
        first_s = _now() + LEAD
        rep = operations.pause(store, stops, ids, first_s, actor="ops", reason="late joiner")
        assert rep.records >= 3 * TRIGGERS, f"only {rep.records} published commands were recorded skipped"
        executor = Invocations(stack)
        assert until(
            lambda: any(r.received_at for r in _records(store, to_ms(first_s), to_ms(first_s) + 30_000).values()), 30
        ), f"the executor answered nothing:\n{executor.tail()}"
        first_r = _now() + RESUME_LEAD
        operations.resume(store, stops, SqlSupersedes(store), ids, first_r)
        rounds.append(Round(to_ms(first_s), to_ms(first_r), to_ms(first_s), {}))
        assert until(lambda: any(s >= to_ms(first_r) for _c, s, _w in executor.read()), 15), executor.tail()

        # 2. pauses while the executor runs
        for n in range(rounds_wanted):
            s = _now() + LEAD
            rep = operations.pause(store, stops, ids, s, actor="ops", reason=f"round {n}")
            returned = time.time_ns() // 1_000_000
            assert sorted(rep.changed) == sorted(ids), rep
            epochs = {}
            for tid in ids:
                got = SqlStops(store).stop_of(Scope.TRIGGER, str(tid))
                assert got is not None
                epochs[str(tid)] = got.epoch
            time.sleep(1.5)
            r = _now() + RESUME_LEAD
            rep = operations.resume(store, stops, SqlSupersedes(store), ids, r)
            assert sorted(rep.changed) == sorted(ids) and not rep.run_once, rep
            rounds.append(Round(to_ms(s), to_ms(r), returned, epochs))
            time.sleep(RESUME_LEAD.total_seconds() + 0.6)

        stopped = set().union(*(_occurrences(anchors, w.s_ms, w.r_ms) for w in rounds))
        clear = set().union(*(_occurrences(anchors, w.r_ms, n.s_ms) for w, n in itertools.pairwise(rounds)))
        span = (rounds[0].s_ms, rounds[-1].r_ms)

        def settled() -> bool:
            recs = _records(store, *span)
            return all(k in recs and recs[k].state.is_final for k in stopped | clear)

        assert until(settled, 20), "occurrences without a final record"
    finally:
        if executor is not None:
            executor.stop()
        probe.close()
        probe_bus.close()

    invoked = executor.read()
    count = Counter(cid for cid, _s, _w in invoked)
    assert not [c for c, n in count.items() if n > 1], "a command was invoked twice by one executor"
    ran = {(int(cid.split("-")[0]), s) for cid, s, _w in invoked}
    for w in rounds:
        late = [(c, s) for c, s, _w in invoked if w.s_ms <= s < w.r_ms]
        assert not late, f"invoked for an occurrence at or after S = {w.s_ms}: {late[:5]}"
    recs = _records(store, *span)
    for key in stopped:
        rec = recs[key]
        assert is_stop_skip(rec.state, rec.message), f"{key} in a pause is {rec.state.value} {rec.message!r}"
    not_run = sorted(k for k in clear if k not in ran)
    assert not not_run, f"{len(not_run)} occurrence(s) between pauses did not run: {not_run[:5]}"
    assert all(recs[k].state.value == "succeeded" for k in clear)

    # how soon a follower heard each pause (the slowest of its ten triggers), from the return
    latencies = []
    for w in rounds[1:]:
        heard_at = [heard.get((key, epoch)) for key, epoch in w.epochs.items()]
        assert all(g is not None for g in heard_at), "a stop never reached the follower"
        latencies.append(max(g for g in heard_at if g is not None) - w.returned_ms)
    print(
        f"\nstops under {'the single leader' if members == 1 else f'{members} shard members'} (relayed from the "
        f"store): a follower heard each of {rounds_wanted} pauses "
        f"p50 {statistics.median(latencies):.0f} ms, max {max(latencies)} ms after the call returned; "
        f"{len(stopped)} occurrences stopped, none invoked; {len(clear)} between pauses, each run once"
    )
    assert max(latencies) < LEAD.total_seconds() * 1000, "a stop was heard after its S"


def test_freeze_of_everything_survives_a_leader_kill_and_a_long_pause_resumes_once_at_r(stack: Stack) -> None:
    store = stack.store
    anchors = _triggers(store, MisfirePolicy.FIRE_ONCE_NOW)
    ids = list(anchors)
    leader = stack.start_leader("freeze-leader")
    executor = Invocations(stack)
    try:
        start_ms = min(anchors.values())
        assert until(lambda: any(s >= start_ms for _c, s, _w in executor.read()), 30), executor.tail()
        # the CLI, without --bus: stored, relayed by the leader, said so
        res = _cli(stack, "freeze", "--all", "--reason", "incident 9", "--json")
        out = json.loads(res)
        s_ms = to_ms(datetime.fromisoformat(out["at"]))
        assert out["changed"] and out["reach"]["relayed_by"] == "freeze-leader", out
        # kill -9 the leader: a new one takes over and keeps admitting; nothing stopped runs
        leader.kill9()
        stack.start_leader("freeze-leader-2")
        time.sleep(6)
        assert not [s for _c, s, _w in executor.read() if s >= s_ms], "a frozen occurrence ran"
        res = json.loads(_cli(stack, "unfreeze", "--all", "--json"))
        r_ms = to_ms(datetime.fromisoformat(res["at"]))
        assert until(lambda: any(s >= r_ms + 2000 for _c, s, _w in executor.read()), 20), executor.tail()
        frozen = _records(store, s_ms, r_ms)
        assert frozen and all(is_stop_skip(r.state, r.message) or not r.state.is_final for r in frozen.values())
        assert not [s for _c, s, _w in executor.read() if s_ms <= s < r_ms]

        # a pause longer than the lookahead (10 s): resumed under FIRE_ONCE_NOW, one run at R each
        stops = StopService(SqlStops(store))
        p_s = _now() + LEAD
        operations.pause(store, stops, ids, p_s)
        time.sleep(13)
        r = _now() + RESUME_LEAD
        rep = operations.resume(store, stops, SqlSupersedes(store), ids, r)
        assert sorted(rep.run_once) == sorted(ids)
        assert until(lambda: sum(1 for _c, s, _w in executor.read() if s == to_ms(r)) == TRIGGERS, 20), executor.tail()
        time.sleep(3)
        invoked = executor.read()
        assert not [s for _c, s, _w in invoked if to_ms(p_s) <= s < to_ms(r)], "ran inside the pause"
        count = Counter(c for c, _s, _w in invoked)
        assert not [c for c, n in count.items() if n > 1], "a command was invoked twice"
    finally:
        executor.stop()
    assert SqlStops(store).stop_of(Scope.ALL, ALL_KEY) is not None


def _cli(stack: Stack, *args: str) -> str:
    log = stack.tmp / f"cli-{uuid.uuid4().hex[:6]}.log"
    with log.open("wb") as out:
        proc = start_cli([*args, "--url", stack.url], out, cwd=REPO)
        assert proc.wait(timeout=60) == 0, log.read_text()
    text = log.read_text()
    return next(line for line in text.splitlines() if line.startswith("{"))


def test_cancel_a_business_freeze_and_a_pause_across_a_leader_restart(stack: Stack) -> None:
    """A one-shot published ahead is cancelled before its T and never runs; a business
    freeze stops that business only; a pause stands across a kill -9 of the leader and its
    restart, which publishes nothing the pause covers."""
    store = stack.store
    anchors = _triggers(store)
    ids = list(anchors)
    store.put_job(Job(job_code=JobCode("other"), biz_code="other-biz", handler="quick", timeout=timedelta(0)))
    leader = stack.start_leader("cancel-leader")
    executor = Invocations(stack)
    stops = StopService(SqlStops(store))
    try:
        start_ms = min(anchors.values())
        assert until(lambda: any(s >= start_ms for _c, s, _w in executor.read()), 30), executor.tail()
        # the one-shot is added once the leader and the executor run (added with the others,
        # a loaded machine's slow start-up used up its 8 s and the cancel came after its T),
        # published ahead, then cancelled before its T: the premise checked, not assumed
        (one,) = store.add_triggers(
            [
                Trigger(
                    job_code=JobCode("quick"),
                    biz_code=BIZ,
                    kind=TriggerKind.ONCE,
                    next_fire_at=_now() + timedelta(seconds=9),
                )
            ]
        )
        one_ms = to_ms(one.next_fire_at)
        assert until(lambda: (stored_id(one), one_ms) in _records(store, one_ms, one_ms + 1), 8), "not published"
        cancel_at = _now() + LEAD
        assert cancel_at < one.next_fire_at, f"the one-shot was published {one.next_fire_at - cancel_at} before T only"
        rep = operations.cancel(store, stops, [stored_id(one)], cancel_at, actor="ops", reason="wrong amount")
        assert rep.changed == [stored_id(one)]
        # a freeze of another business leaves this one running
        other = stops.stop(Scope.BUSINESS, "other-biz", _now() + LEAD, Cause.FREEZE, "ops", "incident")
        assert other.changed
        time.sleep(2.5)  # this business keeps running meanwhile
        # a pause, then the leader dies and comes back
        s = _now() + LEAD
        operations.pause(store, stops, ids, s, actor="ops", reason="before restart")
        time.sleep(1.5)
        leader.kill9()
        stack.start_leader("cancel-leader-2")
        time.sleep(8)
        invoked = executor.read()
        assert not [x for x in invoked if x[1] >= to_ms(s)], "ran after the pause, across the restart"
        assert [x for x in invoked if other.window.from_ms <= x[1] < to_ms(s)], "another business's freeze stopped it"
        assert not [x for x in invoked if x[1] == one_ms and x[0].startswith(f"{stored_id(one)}-")], "cancelled ran"
        rec = _records(store, one_ms, one_ms + 1)[(stored_id(one), one_ms)]
        assert is_stop_skip(rec.state, rec.message) and "wrong amount" in rec.message
        r = _now() + RESUME_LEAD
        operations.resume(store, stops, SqlSupersedes(store), ids, r)
        assert until(lambda: sum(1 for x in executor.read() if x[1] >= to_ms(r)) >= TRIGGERS, 20), executor.tail()
        count = Counter(c for c, _s, _w in executor.read())
        assert not [c for c, n in count.items() if n > 1], "a command was invoked twice"
    finally:
        executor.stop()
