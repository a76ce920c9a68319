"""Operators' stops (issue 27): how soon an executor hears a pause written to the store
without a bus, and whether any handler runs for an occurrence at or after S once the
pause call has returned; under the three ways the center runs.

1. the single leader: a `switchyard scheduler run` subprocess elected in etcd, Pulsar bus;
2. `scheduler run --shards`: two member subprocesses on a registry prefix of their own;
3. `switchyard serve`'s embedded center (`EmbeddedCenter`) in this process: SQLite,
   in-process bus, its executors in the process.

Each mode runs the same workload: GROUPS jobs of one business, PER_GROUP fixed-rate (1 s)
triggers each, anchored evenly over the second, so an occurrence falls due every 50 ms;
lookahead 10 s, so every occurrence a pause covers was already published, with deliver-at
= its time, when the pause was called. Then, every PERIOD_S, one job's triggers are paused
(S = the call's start + 1 s, as `switchyard trigger pause` chooses) and the job paused
before is resumed (R = the call's start + 2 s): through `scheduler_core.operations` with a
`StopService` that has no bus, as `trigger pause` without `--bus` writes it, so the stop
reaches the executors only through the relay of whoever holds the bus. The jobs take turns,
so each job's windows [S, R) stay apart (a pause waits, if need be, until its S falls after
the job's last R).

Measured, per pause, from the moment the call returned to the moment the slowest of its
triggers' stops was heard (each trigger's stop has its own epoch):

- by a real `switchyard executor run` process of the business (Pulsar modes), from its own
  log: `--log-format json` stamps each "now following the stop of trigger T epoch E" line
  with the time it was logged, just after the executor's FenceView took it; in `serve`, by
  the embedded executor's `FenceView.heard`;
- by a follower of the control channel of its own (`PulsarBus.follow_control` on a client
  of its own, in the bench process; Pulsar modes).

The executor's handler (this module's `register`, loaded with `--handlers bench.stops`)
records every invocation with its scheduled time; an invocation of an occurrence inside a
window [S, R) is a broken promise (goal: none).

Peer/ceiling, from the same run: the raw control channel. Once per round a stop message of a
scope no trigger has (job RAW_KEY, no window, a new epoch) is put on the bus directly with
`publish_control` (a Pulsar client of its own; in `serve`, the center's in-process bus) and
the same followers' hearing is timed from the start of that call (a publish that waits for
its ack can be heard before it returns). The ratio shows what the store and the relay add.

The full profile also pauses, then resumes, one job of BIG triggers in one call each (as
`trigger pause|resume --job` does), under the single leader and in `serve`: each trigger's
stop is its own transaction and its own relay message, while S and R are fixed at the
call's start + 1 s / + 2 s; the rows say when the last stop was heard against S, whether a
handler ran at or after S, and how many occurrences in [R, R + 2 s) never ran.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from itertools import pairwise
from pathlib import Path
from typing import IO, Any

from bench.harness import REPO, Deadline, Goal, Row, Section, StackEnv, delete_topics, fresh_database, median
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import Job, JobCode, MisfirePolicy, Trigger, TriggerId, TriggerKind
from scheduler_core.stops import Scope, Stop, StopService, decode_stop, encode_stop, is_stop_skip
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import to_ms
from tests.argv_urls import urls_in_env

NAME = "stops"
TITLE = "an operator's stop heard by the executors (relayed from the store) vs the raw control channel"

BIZ = "benchstops"
GROUPS = 5  # jobs taking turns: a job's next pause comes GROUPS rounds after its last
PER_GROUP = 4  # triggers per job: one pause call stops them all (`trigger pause --job`)
PERIOD_S = 0.4  # between two rounds (a pause, the resume of the job paused before, a raw message)
LOOKAHEAD_S = 10  # every occurrence a pause covers is on the bus already
PARTITIONS = 4
SETTLE_MS = 500  # after the last R, before the records are read (then polled until all are final)
RAW_KEY = "bench-raw-ceiling"  # the raw messages' scope: a job no trigger has
BIG = 300  # full profile: one pause (and its resume) of a job of this many triggers
BIG_SETTLE_MS = 2500  # past its R: the occurrences of [R, R + 2 s) that should run have been due
GOAL_MS = 1000.0  # the issue's: every executor hears a stop before S = call + 1 s
INVOCATIONS_ENV = "SWITCHYARD_BENCH_STOP_INVOCATIONS"
UTC = timezone.utc
_HEARD_LINE = re.compile(r"^now following the stop of (trigger|job|business) (\S+) epoch (\d+)")


def _leads() -> tuple[timedelta, timedelta]:
    """S and R as `switchyard trigger pause|resume` choose them (the call's start + 1 s / + 2 s)."""
    from switchyard.trigger_actions import RESUME_LEAD, STOP_LEAD

    return STOP_LEAD, RESUME_LEAD


def now_ms() -> int:
    return time.time_ns() // 1_000_000


# --- the executor's handler (also loaded by `switchyard executor run --handlers bench.stops`) ---

_files: list[IO[str]] = []  # the executor process's invocation file, open for the process's life
_file_lock = threading.Lock()


def register(executor: Executor) -> None:
    """`--handlers bench.stops`: every job of the business runs a handler that appends
    "<command id> <trigger id> <scheduled ms> <invoked wall ms>" to the file named by
    $SWITCHYARD_BENCH_STOP_INVOCATIONS, so the bench sees from outside which occurrence ran."""
    path = os.environ[INVOCATIONS_ENV]
    with _file_lock:
        if not _files:
            _files.append(open(path, "a", buffering=1, encoding="utf-8"))  # noqa: SIM115 - process-long
        out = _files[0]

    def record(ctx: ExecutionContext) -> None:
        line = f"{ctx.command_id} {int(ctx.trigger_id)} {to_ms(ctx.scheduled_at)} {now_ms()}\n"
        with _file_lock:
            out.write(line)

    executor.handler()(record)


# --- the workload -------------------------------------------------------------------------


@dataclass(frozen=True)
class Invocation:
    command_id: str
    trigger_id: int
    scheduled_ms: int
    wall_ms: int


@dataclass
class Workload:
    groups: list[list[TriggerId]]  # per job, its triggers
    anchors: dict[int, int]  # trigger id -> its first occurrence (ms); then every 1 s


def load_workload(store: SqlTriggerStore, groups: int = GROUPS, per_group: int = PER_GROUP) -> Workload:
    n = groups * per_group
    t0 = (datetime.now(UTC) + timedelta(seconds=3)).replace(microsecond=0)
    jobs: list[list[TriggerId]] = []
    anchors: dict[int, int] = {}
    for g in range(groups):
        code = JobCode(f"{BIZ}-g{g}")
        store.put_job(Job(job_code=code, biz_code=BIZ, handler="record", timeout=timedelta(0)))
        added = store.add_triggers(
            [
                Trigger(
                    job_code=code,
                    biz_code=BIZ,
                    kind=TriggerKind.FIXED_RATE,
                    interval=timedelta(seconds=1),
                    next_fire_at=t0 + timedelta(milliseconds=(g * per_group + k) * 1000 // n),
                    misfire_policy=MisfirePolicy.SKIP,
                )
                for k in range(per_group)
            ]
        )
        ids = [TriggerId(int(t.id)) for t in added if t.id is not None]
        jobs.append(ids)
        anchors.update({int(t.id): to_ms(t.next_fire_at) for t in added if t.id is not None})
    return Workload(jobs, anchors)


def published_ahead(store: SqlTriggerStore, wl: Workload, ahead_s: float) -> bool:
    """Every trigger has a fired record (a command published with deliver-at) at least
    `ahead_s` ahead: the scheduler is leading and its lookahead is on the bus."""
    now = datetime.now(UTC)
    recs = store.fired_between(BIZ, now + timedelta(seconds=ahead_s), now + timedelta(seconds=60))
    return {int(r.trigger_id) for r in recs} >= set(wl.anchors)


# --- the rounds ---------------------------------------------------------------------------

Key = tuple[str, str, int]  # (scope, key, epoch): what a follower hears


@dataclass
class Call:
    kind: str  # "pause", "resume" or "raw"
    group: int
    at_ms: int  # S (pause), R (resume); 0 for raw
    started_ms: int
    returned_ms: int
    keys: list[Key]  # every epoch the followers must hear for this call
    records: int = 0  # fired records marked skipped (pause) or revived (resume) by the call
    unchanged: dict[str, str] = field(default_factory=dict)


RawPublish = Callable[[int], Call]  # epoch -> the raw call made


def _epochs(stops: StopService, ids: Sequence[TriggerId]) -> list[Key]:
    out: list[Key] = []
    for tid in ids:
        got = stops.store.stop_of(Scope.TRIGGER, str(tid))
        if got is not None:
            out.append((Scope.TRIGGER.value, str(tid), got.epoch))
    return out


def run_rounds(store: SqlTriggerStore, wl: Workload, pauses: int, raw: RawPublish, dl: Deadline) -> list[Call]:
    """`pauses` rounds, PERIOD_S apart: pause the next job, resume the job paused the
    round before, publish one raw control message; the last job paused is resumed at the
    end. The stops are written with no bus, as `trigger pause` without `--bus` does."""
    from scheduler_core import operations
    from scheduler_core.store.stops import SqlStops
    from scheduler_core.store.supersedes import SqlSupersedes

    lead, resume_lead = _leads()
    stops = StopService(SqlStops(store))  # no bus: the relay of whoever holds the bus carries it
    runs = SqlSupersedes(store)
    calls: list[Call] = []
    last_r: dict[int, int] = {}  # job -> its last window's R (ms)
    paused: int | None = None

    def resume(g: int) -> None:
        started = now_ms()
        r = datetime.now(UTC) + resume_lead
        rep = operations.resume(store, stops, runs, wl.groups[g], r)
        returned = now_ms()
        calls.append(
            Call(
                "resume",
                g,
                to_ms(r),
                started,
                returned,
                _epochs(stops, rep.changed),
                rep.records,
                {str(k): v for k, v in rep.unchanged.items()},
            )
        )
        last_r[g] = to_ms(r)

    tick = time.monotonic()
    for k in range(pauses):
        if dl.expired():
            break
        g = k % len(wl.groups)
        # this job's S must fall after its last R: its windows stay apart (the loaded box
        # can stretch a round)
        wait_ms = last_r.get(g, 0) + 100 - (now_ms() + int(lead.total_seconds() * 1000))
        if wait_ms > 0:
            time.sleep(min(wait_ms / 1000, dl.remaining()))
        started = now_ms()
        s = datetime.now(UTC) + lead
        rep = operations.pause(store, stops, wl.groups[g], s, actor="bench", reason=f"bench stop {k}")
        returned = now_ms()
        calls.append(
            Call(
                "pause",
                g,
                to_ms(s),
                started,
                returned,
                _epochs(stops, rep.changed),
                rep.records,
                {str(t): v for t, v in rep.unchanged.items()},
            )
        )
        if paused is not None:
            resume(paused)
        paused = g
        calls.append(raw(k + 1))
        tick += PERIOD_S
        time.sleep(max(0.0, min(tick - time.monotonic(), dl.remaining())))
    if paused is not None:
        resume(paused)
    return calls


def raw_stop(epoch: int) -> Stop:
    """A stop of a scope no trigger has, with no window: followers take it (a new epoch)
    and it covers nothing."""
    return Stop(scope=Scope.JOB, key=RAW_KEY, windows=(), epoch=epoch)


# --- what the followers heard and the handlers ran -------------------------------------------


def latencies(calls: Sequence[Call], heard: dict[Key, int], kind: str) -> tuple[list[float], int]:
    """Per call of `kind`: from its return (raw: its start) to the moment the slowest of its
    epochs was heard (ms); and how many calls had an epoch never heard."""
    out: list[float] = []
    missing = 0
    for c in calls:
        if c.kind != kind or not c.keys:
            continue
        got = [heard.get(key) for key in c.keys]
        if any(x is None for x in got):
            missing += 1
            continue
        since = c.started_ms if kind == "raw" else c.returned_ms
        out.append(float(max(x for x in got if x is not None) - since))
    return out, missing


@dataclass(frozen=True)
class Span:
    """One pause's window [s_ms, r_ms) of one job, and its call (ms)."""

    group: int
    s_ms: int
    r_ms: int
    started_ms: int
    returned_ms: int

    def covers(self, group: int, scheduled_ms: int) -> bool:
        return group == self.group and self.s_ms <= scheduled_ms < self.r_ms


@dataclass
class Windows:
    spans: list[Span]
    occurrences: int  # occurrences scheduled inside the windows
    marked: int  # fired records the pause calls marked skipped (inside the windows and after them)


def windows_of(calls: Sequence[Call], wl: Workload) -> Windows:
    spans: list[Span] = []
    for i, c in enumerate(calls):
        if c.kind != "pause":
            continue
        nxt = next((d for d in calls[i + 1 :] if d.kind == "resume" and d.group == c.group), None)
        r = nxt.at_ms if nxt is not None else c.at_ms + 3_600_000
        spans.append(Span(c.group, c.at_ms, r, c.started_ms, c.returned_ms))
    occ = 0
    for sp in spans:
        for tid in wl.groups[sp.group]:
            a = wl.anchors[int(tid)]
            first = a + max(0, -(-(sp.s_ms - a) // 1000)) * 1000
            occ += len(range(first, sp.r_ms, 1000))
    return Windows(spans, occ, sum(c.records for c in calls if c.kind == "pause"))


def _job_of(wl: Workload) -> dict[int, int]:
    return {int(t): g for g, ids in enumerate(wl.groups) for t in ids}


def invoked_inside(invocations: Sequence[Invocation], wl: Workload, w: Windows) -> list[tuple[Invocation, Span]]:
    """Invocations of an occurrence inside a window of its job, with that window."""
    job_of = _job_of(wl)
    out = []
    for inv in invocations:
        g = job_of.get(inv.trigger_id)
        span = None if g is None else next((sp for sp in w.spans if sp.covers(g, inv.scheduled_ms)), None)
        if span is not None:
            out.append((inv, span))
    return out


def between_windows(invocations: Sequence[Invocation], wl: Workload, w: Windows) -> tuple[int, int, int]:
    """The occurrences of each job between one of its windows' R and its next S (after a
    resume, before the next pause): (how many, how many never invoked, command ids invoked
    more than once by the executor, over every invocation). A lift heard late would leave
    some not invoked; a double would be a bug of its own."""
    ran = {(i.trigger_id, i.scheduled_ms) for i in invocations}
    total = 0
    missed = 0
    for g in range(len(wl.groups)):
        spans = sorted((sp for sp in w.spans if sp.group == g), key=lambda sp: sp.s_ms)
        for a, b in pairwise(spans):
            for tid in wl.groups[g]:
                anchor = wl.anchors[int(tid)]
                first = anchor + max(0, -(-(a.r_ms - anchor) // 1000)) * 1000
                for at in range(first, b.s_ms, 1000):
                    total += 1
                    missed += (int(tid), at) not in ran
    seen: dict[str, int] = {}
    for i in invocations:
        seen[i.command_id] = seen.get(i.command_id, 0) + 1
    return total, missed, sum(1 for n in seen.values() if n > 1)


def lost_after_resume(invocations: Sequence[Invocation], wl: Workload, w: Windows, span_ms: int) -> tuple[int, int]:
    """Occurrences in [R, R + span_ms) of each window's job, and how many of them were never
    invoked: the resume promised they run (a lift that reached the executors after R leaves
    them skipped)."""
    ran = {(i.trigger_id, i.scheduled_ms) for i in invocations}
    total = 0
    lost = 0
    for sp in w.spans:
        for tid in wl.groups[sp.group]:
            anchor = wl.anchors[int(tid)]
            first = anchor + max(0, -(-(sp.r_ms - anchor) // 1000)) * 1000
            for at in range(first, sp.r_ms + span_ms, 1000):
                total += 1
                lost += (int(tid), at) not in ran
    return total, lost


@dataclass(frozen=True)
class Records:
    inside: int  # fired records of occurrences inside the windows
    final: int  # of them, final (the executor's answer applied)
    skipped: int  # of them, recorded skipped by a stop
    published_before: int  # of them, written (published ahead) before their pause call started


def window_records(store: SqlTriggerStore, wl: Workload, w: Windows) -> Records:
    """The fired records of the occurrences inside the windows: how many the stop recorded
    skipped, and how many were on the bus before the pause was called (the lookahead's: the
    stop had to reach them in the executor, not at admission)."""
    if not w.spans:
        return Records(0, 0, 0, 0)
    start = min(sp.s_ms for sp in w.spans)
    end = max(sp.r_ms for sp in w.spans)
    job_of = _job_of(wl)
    recs = store.fired_between(BIZ, datetime.fromtimestamp(start / 1000, UTC), datetime.fromtimestamp(end / 1000, UTC))
    inside = 0
    final = 0
    skipped = 0
    before = 0
    for r in recs:
        g = job_of.get(int(r.trigger_id))
        at = to_ms(r.scheduled_at)
        span = None if g is None else next((sp for sp in w.spans if sp.covers(g, at)), None)
        if span is None:
            continue
        inside += 1
        final += r.state.is_final
        skipped += is_stop_skip(r.state, r.message)
        before += r.fired_at is not None and to_ms(r.fired_at) < span.started_ms
    return Records(inside, final, skipped, before)


def settle(
    store: SqlTriggerStore, wl: Workload, calls: Sequence[Call], dl: Deadline, settle_ms: int = SETTLE_MS
) -> tuple[Windows, Records]:
    """Past the last window's R (every occurrence inside a window was due, so delivered and
    answered by now), then until every record inside a window is final (the executors'
    answers applied), bounded."""
    last_r = max((c.at_ms for c in calls if c.kind == "resume"), default=now_ms())
    while now_ms() < last_r + settle_ms and not dl.expired():
        time.sleep(0.1)
    w = windows_of(calls, wl)
    bound = Deadline(min(8.0, max(1.0, dl.remaining())))
    recs = window_records(store, wl, w)
    while recs.final < w.occurrences and not bound.expired():
        time.sleep(0.3)
        recs = window_records(store, wl, w)
    return w, recs


def heard_in_log(path: Path) -> dict[Key, int]:
    """What an executor process heard, from its JSON log lines (the time a line was logged:
    just after its FenceView took the stop)."""
    out: dict[Key, int] = {}
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        m = _HEARD_LINE.match(str(rec.get("message", "")))
        if m is None:
            continue
        at = int(datetime.fromisoformat(str(rec["time"])).timestamp() * 1000)
        out.setdefault((m.group(1), m.group(2), int(m.group(3))), at)
    return out


def read_invocations(path: Path) -> list[Invocation]:
    out: list[Invocation] = []
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append(Invocation(parts[0], int(parts[1]), int(parts[2]), int(parts[3])))
    return out


# --- processes ----------------------------------------------------------------------------


def start_cli(args: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`python -m switchyard ARGS` from the repository root, both streams to `log`; a URL
    carrying a password in its environment variable, not in the process list."""
    argv, environ = urls_in_env(args, env)
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "switchyard", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=REPO,
            env=environ,
        )


def end_process(proc: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    """SIGTERM, a bounded wait, then SIGKILL: a process this section started, by its PID."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@contextmanager
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The processes started in the block, each ended by its PID at its end (all signalled
    first, then waited for: their shutdowns overlap)."""
    procs: list[subprocess.Popen[bytes]] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            end_process(p)


def scheduler_args(env: StackEnv, url: str, prefix: str, name: str, keys: str, shards: bool) -> list[str]:
    """`switchyard scheduler run` as the fault tests start it (short lease, idle wait and
    reclaim), lookahead LOOKAHEAD_S; its etcd keys (election, wake-ups, registry) under
    `keys`, nobody else's."""
    assert env.etcd_url
    args = [
        "scheduler",
        "run",
        "--url",
        url,
        "--bus",
        env.pulsar_url,
        "--election",
        env.etcd_url,
        "--election-key",
        f"{keys}/leader",
        "--wake-key",
        f"{keys}/wake",
        "--topic-prefix",
        prefix,
        "--name",
        name,
        "--lease-ttl",
        "2",
        "--idle-wait",
        "0.3",
        "--acquire-deadline",
        "3",
        "--reclaim-interval",
        "0.5",
        "--lookahead",
        str(LOOKAHEAD_S),
        "--log-level",
        "INFO",
        "--log-format",
        "json",
    ]
    if shards:
        args += ["--shards", "--registry-prefix", f"{keys}/shards"]
    return args


def executor_args(env: StackEnv, prefix: str) -> list[str]:
    return [
        "executor",
        "run",
        "--business",
        BIZ,
        "--bus",
        env.pulsar_url,
        "--topic-prefix",
        prefix,
        "--concurrency",
        "8",
        "--handlers",
        "bench.stops",
        "--log-level",
        "INFO",
        "--log-format",
        "json",
    ]


# --- one mode -------------------------------------------------------------------------------


@dataclass
class ModeResult:
    mode: str
    workload: Workload
    calls: list[Call]
    executor_heard: dict[Key, int]
    probe_heard: dict[Key, int] | None  # None: no separate follower (serve)
    invocations: list[Invocation]
    windows: Windows
    records: Records
    load_before: tuple[float, float, float]
    load_after: tuple[float, float, float]
    phases_s: dict[str, float]  # ready, rounds, settle, teardown
    problems: list[str] = field(default_factory=list)
    logs: dict[str, dict[str, Any]] = field(default_factory=dict)  # process -> its warnings and errors
    ready_at: dict[str, float] = field(default_factory=dict)

    def figures(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mode": self.mode}
        for who, heard in (("executor", self.executor_heard), ("probe", self.probe_heard)):
            if heard is None:
                continue
            for kind in ("pause", "resume", "raw"):
                lat, missing = latencies(self.calls, heard, kind)
                out[f"{who}_{kind}_ms"] = lat
                out[f"{who}_{kind}_missing"] = missing
        inside = invoked_inside(self.invocations, self.workload, self.windows)
        gaps, gaps_missed, doubles = between_windows(self.invocations, self.workload, self.windows)
        out.update(
            {
                "occurrences_between_windows": gaps,
                "between_windows_not_invoked": gaps_missed,
                "command_ids_invoked_twice": doubles,
                "pauses": sum(1 for c in self.calls if c.kind == "pause"),
                "invocations": len(self.invocations),
                "invoked_inside_windows": [{**vars(i), "window": vars(sp)} for i, sp in inside],
                # the promise: none once the pause call had returned
                "invoked_after_return": sum(1 for i, sp in inside if i.wall_ms >= sp.returned_ms),
                "occurrences_in_windows": self.windows.occurrences,
                "records_marked_by_pauses": self.windows.marked,
                "records_in_windows": self.records.inside,
                "records_in_windows_skipped_by_stop": self.records.skipped,
                "records_in_windows_published_before_the_call": self.records.published_before,
                "windows": [vars(sp) for sp in self.windows.spans],
                "call_ms": {
                    kind: [c.returned_ms - c.started_ms for c in self.calls if c.kind == kind]
                    for kind in ("pause", "resume", "raw")
                },
                "unchanged": [(c.kind, c.group, c.unchanged) for c in self.calls if c.unchanged],
                "load_before": self.load_before,
                "load_after": self.load_after,
                "phases_s": {k: round(v, 1) for k, v in self.phases_s.items()},
                "ready_at_s": self.ready_at,
                "problems": self.problems,
                "logs": self.logs,
            }
        )
        return out


def pulsar_mode(
    env: StackEnv,
    mode: str,
    members: int,
    pauses: int,
    limit_s: float,
    groups: int = GROUPS,
    per_group: int = PER_GROUP,
    settle_ms: int = SETTLE_MS,
) -> ModeResult:
    """The single leader (members 0) or `--shards` with `members` members, a real executor
    process, a follower of its own; stops written to MariaDB without a bus."""
    from scheduler_core.bus.pulsar import PulsarBus
    from scheduler_core.clock import SystemClock
    from scheduler_core.store.engine import make_engine
    from switchyard.schema import init_schema

    assert env.etcd_url, "the stops bench needs etcd (SWITCHYARD_ETCD_URL)"
    dl = Deadline(limit_s)
    load0 = os.getloadavg()
    t0 = time.monotonic()
    prefix = f"benchstop{uuid.uuid4().hex[:6]}"
    keys = f"/switchyard-bench/stops-{uuid.uuid4().hex[:8]}"
    problems: list[str] = []
    phases: dict[str, float] = {}
    ready_at: dict[str, float] = {}  # s from the mode's start when each start-up condition held
    with fresh_database(env.mariadb_url, "bench_stop") as url, tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        engine = make_engine(url)
        init_schema(engine, PARTITIONS)
        store = SqlTriggerStore(engine, SystemClock())
        probe_heard: dict[Key, int] = {}

        def hear(payload: bytes) -> None:
            try:
                stop = decode_stop(payload)
            except ValueError:
                return
            if stop is not None:
                probe_heard.setdefault((stop.scope.value, stop.key, stop.epoch), now_ms())

        probe_bus = PulsarBus(env.pulsar_url, topic_prefix=prefix)  # the follower's own client
        raw_bus = PulsarBus(env.pulsar_url, topic_prefix=prefix)  # the raw publisher's own client
        probe = probe_bus.follow_control(hear)
        inv_path = tmp / "invocations.txt"
        inv_path.touch()
        exec_log = tmp / "executor.log"
        try:
            with processes() as procs:
                if members:
                    for m in range(members):
                        name = f"bench-stops-m{m}"
                        procs.append(start_cli(scheduler_args(env, url, prefix, name, keys, True), tmp / f"{name}.log"))
                else:
                    procs.append(
                        start_cli(
                            scheduler_args(env, url, prefix, "bench-stops-leader", keys, False), tmp / "leader.log"
                        )
                    )
                exec_env = {**os.environ, INVOCATIONS_ENV: str(inv_path), "PYTHONPATH": str(REPO)}
                procs.append(start_cli(executor_args(env, prefix), exec_log, exec_env))
                # the triggers while the processes start (seconds of imports on the loaded box)
                wl = load_workload(store, groups, per_group)
                # ready: the lookahead on the bus for every trigger, the executor running
                # handlers, the follower in sync with the control channel
                while not dl.expired():
                    if any(p.poll() is not None for p in procs):
                        raise RuntimeError(f"{mode}: a process exited early:\n{_tails(tmp)}")
                    state = {
                        "published_ahead": published_ahead(store, wl, 3.0),
                        "executor_ran": inv_path.stat().st_size > 0,
                        "follower_synced": probe.synced(),
                    }
                    for what, done in state.items():  # when each came true (start-up under load)
                        if done:
                            ready_at.setdefault(what, round(time.monotonic() - t0, 1))
                    if all(state.values()):
                        break
                    time.sleep(0.2)
                else:
                    raise RuntimeError(f"{mode}: not ready within {limit_s:.0f} s:\n{_tails(tmp)}")

                def raw(epoch: int) -> Call:
                    started = now_ms()
                    raw_bus.publish_control(RAW_KEY, encode_stop(raw_stop(epoch)))
                    return Call("raw", -1, 0, started, now_ms(), [(Scope.JOB.value, RAW_KEY, epoch)])

                phases["ready"] = time.monotonic() - t0
                calls = run_rounds(store, wl, pauses, raw, dl)
                phases["rounds"] = time.monotonic() - t0 - phases["ready"]
                w, recs = settle(store, wl, calls, dl, settle_ms)
                phases["settle"] = time.monotonic() - t0 - phases["ready"] - phases["rounds"]
                dead = [p.args for p in procs if p.poll() is not None]
                if dead:
                    problems.append(f"process(es) ended during the run: {dead}")
            phases["teardown"] = time.monotonic() - t0 - sum(phases.values())
        finally:
            probe.close()
            probe_bus.close()
            raw_bus.close()
            engine.dispose()
            delete_topics(env.pulsar_admin_url, prefix)
        logs = {p.stem: log_findings(p) for p in sorted(tmp.glob("*.log"))}
        return ModeResult(
            mode,
            wl,
            calls,
            heard_in_log(exec_log),
            probe_heard,
            read_invocations(inv_path),
            w,
            recs,
            load0,
            os.getloadavg(),
            phases,
            problems,
            logs,
            ready_at,
        )


def log_findings(path: Path) -> dict[str, Any]:
    """A process's JSON log: how many warnings and errors, and the first few of them (the
    report says whether anything went wrong beside the figures)."""
    counts: dict[str, int] = {}
    first: list[str] = []
    for line in path.read_text(errors="replace").splitlines():
        if not line.startswith("{"):
            if line.strip() and len(first) < 5:
                first.append(line[:300])  # a traceback or a line not of the logger
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        level = str(rec.get("level", ""))
        if level in ("WARNING", "ERROR", "CRITICAL"):
            counts[level] = counts.get(level, 0) + 1
            if len(first) < 5:
                first.append(f"{level} {rec.get('logger')}: {str(rec.get('message'))[:300]}")
    return {"counts": counts, "first": first}


def _tails(tmp: Path) -> str:
    return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(tmp.glob("*.log")))


def serve_mode(
    pauses: int,
    limit_s: float,
    groups: int = GROUPS,
    per_group: int = PER_GROUP,
    settle_ms: int = SETTLE_MS,
    mode: str = "serve",
) -> ModeResult:
    """`switchyard serve`'s center in this process (SQLite, in-process bus, its executors in
    the process); the stops written to the same SQLite file through a store of their own,
    as a `trigger pause` run beside `serve` writes them."""
    from scheduler_core.clock import SystemClock
    from scheduler_core.settings import SchedulerSettings
    from scheduler_core.store.engine import make_engine
    from switchyard.embedded import EmbeddedCenter
    from switchyard.schema import init_schema

    dl = Deadline(limit_s)
    load0 = os.getloadavg()
    t0 = time.monotonic()
    invocations: list[Invocation] = []
    inv_lock = threading.Lock()

    def register_here(ex: Executor) -> None:
        def record(ctx: ExecutionContext) -> None:
            inv = Invocation(str(ctx.command_id), int(ctx.trigger_id), to_ms(ctx.scheduled_at), now_ms())
            with inv_lock:
                invocations.append(inv)

        ex.handler()(record)

    problems: list[str] = []
    phases: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp_dir:
        url = f"sqlite:///{Path(tmp_dir) / 'serve.db'}"
        center_engine = make_engine(url)
        init_schema(center_engine, PARTITIONS)
        center_store = SqlTriggerStore(center_engine, SystemClock())
        cli_engine = make_engine(url)  # the operator's command: a store of its own on the same file
        cli_store = SqlTriggerStore(cli_engine, SystemClock())
        wl = load_workload(cli_store, groups, per_group)
        settings = SchedulerSettings(lookahead=timedelta(seconds=LOOKAHEAD_S), idle_wait=timedelta(seconds=0.3))
        center = EmbeddedCenter(
            center_store, settings, register_here, name="bench-stops", biz_codes=(BIZ,), concurrency=8
        )
        stop = threading.Event()
        th = threading.Thread(target=center.run, args=(stop,), name="serve", daemon=True)
        th.start()
        try:
            while not dl.expired():
                with inv_lock:
                    running = bool(invocations)
                if running and BIZ in center.executors and published_ahead(cli_store, wl, 3.0):
                    break
                time.sleep(0.2)
            else:
                raise RuntimeError(f"serve: not ready within {limit_s:.0f} s")
            fences = center.executors[BIZ][0].fences

            def raw(epoch: int) -> Call:
                started = now_ms()
                center.bus.publish_control(RAW_KEY, encode_stop(raw_stop(epoch)))
                return Call("raw", -1, 0, started, now_ms(), [(Scope.JOB.value, RAW_KEY, epoch)])

            phases["ready"] = time.monotonic() - t0
            calls = run_rounds(cli_store, wl, pauses, raw, dl)
            phases["rounds"] = time.monotonic() - t0 - phases["ready"]
            w, recs = settle(cli_store, wl, calls, dl, settle_ms)
            phases["settle"] = time.monotonic() - t0 - phases["ready"] - phases["rounds"]
            heard = dict(fences.heard)
        finally:
            stop.set()
            th.join(timeout=30)
            if th.is_alive():
                problems.append("the embedded center did not stop within 30 s")
            cli_engine.dispose()
            center_engine.dispose()
    phases["teardown"] = time.monotonic() - t0 - sum(phases.values())
    with inv_lock:
        ran = list(invocations)
    return ModeResult(mode, wl, calls, heard, None, ran, w, recs, load0, os.getloadavg(), phases, problems)


# --- the section --------------------------------------------------------------------------------

MODES = (("single leader", 0), ("--shards, 2 members", 2), ("serve", -1))


def _p50(values: Sequence[float]) -> float | None:
    return median(values)


def _max(values: Sequence[float]) -> float | None:
    return max(values) if values else None


def _ms(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f} ms"


def _load(t: tuple[float, float, float]) -> str:
    return f"{t[0]:.1f}"


def rows_of(res: ModeResult) -> list[Row]:
    f = res.figures()
    m = res.mode
    pauses = f["pauses"]
    ex, ex_raw = f["executor_pause_ms"], f["executor_raw_ms"]
    who = "the embedded executor" if res.probe_heard is None else "an executor process"
    missing = f["executor_pause_missing"]
    load = f"load {_load(res.load_before)} -> {_load(res.load_after)}"
    rows = [
        Row(
            f"{m}: {who} hears a pause, max of {pauses}",
            _max(ex),
            _max(ex_raw),
            "ms",
            goal=Goal("value_max", GOAL_MS, "ms"),
            note=f"from the call's return; peer: the raw control channel's max, from the publish call's start; "
            f"{load}" + (f"; {missing} pause(s) NEVER heard" if missing else ""),
        ),
        Row(
            f"{m}: {who} hears a pause, p50",
            _p50(ex),
            _p50(ex_raw),
            "ms",
            note="peer: the raw control channel's p50",
        ),
    ]
    if res.probe_heard is not None:
        pr, pr_raw = f["probe_pause_ms"], f["probe_raw_ms"]
        rows.append(
            Row(
                f"{m}: a follower of its own (PulsarBus.follow_control, own client) hears a pause, max",
                _max(pr),
                _max(pr_raw),
                "ms",
                note=f"p50 {_ms(_p50(pr))} vs raw {_ms(_p50(pr_raw))}"
                + (f"; {f['probe_pause_missing']} NEVER heard" if f["probe_pause_missing"] else ""),
            )
        )
    lift = f["executor_resume_ms"]
    rows.append(
        Row(
            f"{m}: {who} hears the resume (R = call + 2 s), max",
            _max(lift),
            None,
            "ms",
            note=f"p50 {_ms(_p50(lift))}"
            + (f"; {f['executor_resume_missing']} NEVER heard" if f["executor_resume_missing"] else ""),
        )
    )
    inside = len(f["invoked_inside_windows"])
    rows.append(
        Row(
            f"{m}: handlers invoked for an occurrence at or after S after the call returned",
            float(f["invoked_after_return"]),
            None,
            "",
            goal=Goal("value_max", 0),
            note=f"0 of {f['occurrences_in_windows']} occurrences inside the {pauses} windows [S, R) is the "
            f"promise; {f['records_in_windows_published_before_the_call']} of their {f['records_in_windows']} "
            f"records were published before the pause was called, {f['records_in_windows_skipped_by_stop']} "
            f"recorded skipped by the stop; invoked inside a window at all: {inside}; "
            f"{f['invocations']} invocations in all; between a resume's R and the next pause's S "
            f"{f['occurrences_between_windows']} occurrences, {f['between_windows_not_invoked']} not invoked; "
            f"{f['command_ids_invoked_twice']} command id(s) invoked twice",
        )
    )
    return rows


def rows_of_big(res: ModeResult) -> list[Row]:
    """One pause and one resume of a job of BIG triggers: each trigger's stop is its own
    transaction and relay message, so the call and the relay take time S (call + 1 s) and
    R (call + 2 s) do not wait for."""
    m = res.mode
    n = len(res.workload.anchors)
    pause = next(c for c in res.calls if c.kind == "pause")
    resume = next((c for c in res.calls if c.kind == "resume"), None)
    heard = [res.executor_heard.get(k) for k in pause.keys]
    last = None if not heard or any(h is None for h in heard) else max(h for h in heard if h is not None)
    inside = invoked_inside(res.invocations, res.workload, res.windows)
    after = sum(1 for i, sp in inside if i.wall_ms >= sp.returned_ms)
    occ, lost = lost_after_resume(res.invocations, res.workload, res.windows, 2000)
    load = f"load {_load(res.load_before)} -> {_load(res.load_after)}"
    rows = [
        Row(
            f"{m}: one pause call of the {n}: its last stop heard by the executor, after S",
            None if last is None else float(last - pause.at_ms),
            None,
            "ms",
            goal=Goal("value_max", 0.0, "ms"),
            note=f"S = the call's start + 1 s; the call took {pause.returned_ms - pause.started_ms} ms; "
            f"heard {'never' if last is None else f'{last - pause.returned_ms} ms'} after it returned; {load}",
        ),
        Row(
            f"{m}: one pause call of the {n}: handlers invoked for an occurrence at or after S",
            float(len(inside)),
            None,
            "",
            goal=Goal("value_max", 0),
            note=f"{after} of them after the call returned; {res.windows.occurrences} occurrences in [S, R)",
        ),
    ]
    if resume is not None:
        rows.append(
            Row(
                f"{m}: one resume call of the {n} (R = call + 2 s): occurrences in [R, R + 2 s) never invoked",
                float(lost),
                None,
                "",
                goal=Goal("value_max", 0),
                note=f"of {occ}; the resume call took {resume.returned_ms - resume.started_ms} ms",
            )
        )
    return rows


def run(env: StackEnv, profile: dict[str, Any], options: dict[str, Any]) -> Section:
    quick = profile["quick"]
    pauses = 10 if quick else 40
    limit_s = 45.0 if quick else 90.0  # per mode
    sec = Section(NAME, TITLE)
    sec.settings = {
        "pauses_per_mode": pauses,
        "jobs": GROUPS,
        "triggers_per_job": PER_GROUP,
        "big_job_triggers": None if quick else BIG,
        "trigger_interval_s": 1,
        "round_period_s": PERIOD_S,
        "lookahead_s": LOOKAHEAD_S,
        "stop_lead_s": _leads()[0].total_seconds(),
        "resume_lead_s": _leads()[1].total_seconds(),
        "stops_written": "to the store, no bus (as `switchyard trigger pause` without --bus)",
        "load_average_at_start": os.getloadavg(),
    }
    results: list[ModeResult] = []
    for mode, members in MODES:
        try:
            res = serve_mode(pauses, limit_s) if members < 0 else pulsar_mode(env, mode, members, pauses, limit_s)
        except Exception as exc:  # noqa: BLE001 - one mode's failure must not lose the others
            sec.notes.append(f"{mode}: failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
            sec.raw[mode] = {"error": f"{type(exc).__name__}: {exc}"}
            continue
        results.append(res)
        sec.raw[mode] = res.figures()
        sec.rows.extend(rows_of(res))
        for p in res.problems:
            sec.notes.append(f"{mode}: {p}")
    if not quick:
        # one pause of a big job, under the single leader and in serve: what a call of many
        # triggers costs against S and R
        for mode, members in (("single leader", 0), ("serve", -1)):
            label = f"{mode}, a job of {BIG} triggers"
            try:
                res = (
                    serve_mode(1, 120.0, 1, BIG, BIG_SETTLE_MS, label)
                    if members < 0
                    else pulsar_mode(env, label, members, 1, 120.0, 1, BIG, BIG_SETTLE_MS)
                )
            except Exception as exc:  # noqa: BLE001 - reported, the other figures stand
                sec.notes.append(f"{label}: failed: {type(exc).__name__}: {' '.join(str(exc).split())[:300]}")
                sec.raw[label] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            results.append(res)
            sec.raw[label] = res.figures()
            sec.rows.extend(rows_of_big(res))
    for res in results:
        phases = ", ".join(f"{k} {v:.0f} s" for k, v in res.phases_s.items())
        sec.notes.append(
            f"{res.mode}: {sum(res.phases_s.values()):.0f} s ({phases}), load average (1 min) "
            f"{_load(res.load_before)} -> {_load(res.load_after)}"
        )
        for proc, found in res.logs.items():
            if found["counts"]:
                sec.notes.append(f"{res.mode}: {proc}'s log: {found['counts']}; first: {found['first'][:2]}")
    sec.notes.append(
        "legacy reference (not measured here): the xxl-job admin's stop takes effect within its ~5 s pre-read "
        "(its schedule thread reads the triggers due in the next 5 s into its time ring; a stop after that read "
        "does not stop a fire already in the ring)."
    )
    sec.notes.append(
        "`switchyard trigger pause` itself returns only once a relay has recorded the stop (or after 3 s): "
        "these figures start earlier, at the return of the store write (`operations.pause`)."
    )
    if any(r.figure.startswith("serve") for r in sec.rows):
        sec.notes.append(
            "serve: the stop calls run in the center's own process (another store on the same SQLite file), so "
            "they share its GIL; the raw channel there is a synchronous in-process hand-over."
        )
    return sec


__all__ = ["NAME", "TITLE", "register", "run"]
