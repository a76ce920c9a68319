"""One soak: `python -m tests.soak.run --minutes N --seed S [--shards] [--out DIR]`
(`scripts/soak` runs it). Sets the workload going, lets the nemesis loose, samples
`status --json` and every process's memory, then checks and reports. Exit 0: every check
passed; 1: a check failed (the report says which)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import tracemalloc
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import bindparam, text

from dbkit.errors import StoreError
from dualrun.model import Window
from migrator.legacy_control import PRE_READ as LEGACY_PRE_READ
from readers.batchcenter.reader import BatchCenterReader
from readers.timezones import LegacyTimeZone
from readers.xxljob.reader import XxlJobReader
from switchyard import exitcodes
from switchyard.cli import cli
from switchyard.malloc_arenas import cap_malloc_arenas
from switchyard.wiring import dualrun_store
from tests.soak.checker import (
    Invocation,
    MemorySeries,
    StatusSample,
    audited_switches,
    check_business,
    check_duplicates,
    in_spans,
    owner_at,
    plan_switches,
    problems_of,
    read_invocations,
    set_apart_legacy_outages,
    stop_returns,
)
from tests.soak.nemesis import Nemesis, Recovery
from tests.soak.processes import rss_kib
from tests.soak.report import Report, build_report
from tests.soak.workload import CLI_LOCK, XXL, Action, Business, Workload

SAMPLE_EVERY_S = 5.0
SETTLE_S = 20.0  # after the last fault and operator step: runs under way finish, records land
EDGE = timedelta(seconds=3)  # occurrences this close to the window's ends are not judged
PLANTED = 5  # legacy fires the self-test deletes
# SWITCHYARD_SOAK_TRACEMALLOC=N: trace the driver's Python allocations (N frames) and write
# what grew between warm-up and the end to tracemalloc.txt (the driver grew ~20 % an hour
# in the sixth soak: this finds a Python-level cause; native growth shows in RSS only)
TRACE_FRAMES = int(os.environ.get("SWITCHYARD_SOAK_TRACEMALLOC") or 0)
TRACE_FROM_S = 90.0  # the first snapshot: after the report's warm-up (report.WARM_UP_S)


@dataclass
class Samplers:
    """`status --json` and the RSS of every process, every SAMPLE_EVERY_S, on a thread."""

    w: Workload
    legacy_urls: list[str]
    status: list[StatusSample] = field(default_factory=list)
    memory: dict[tuple[str, int], list[tuple[float, int]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="samplers", daemon=True)

    def _run(self) -> None:
        runner = CliRunner()
        args = ["status", "--url", self.w.target_url, "--json"]
        for u in self.legacy_urls:
            args += ["--legacy-url", u]
        while not self.stop.wait(SAMPLE_EVERY_S):
            at = self.w.clock.now()
            with CLI_LOCK:
                res = runner.invoke(cli, args, catch_exceptions=True)
            if res.exit_code == 0:
                # stdout only: a warning (a URL typed with its password) goes to stderr
                self.status.append(StatusSample(at, problems_of(res.stdout)))
            else:
                self.status.append(StatusSample(at, (), f"exit {res.exit_code}: {res.output[-300:]}"))
            t = self.w.elapsed()
            for p in [*self.w.procs, None]:
                role, pid = ("driver", os.getpid()) if p is None else (p.name, p.pid)
                kb = rss_kib(pid) if pid is not None else None
                if p is None and kb is not None and tracemalloc.is_tracing():
                    kb -= tracemalloc.get_tracemalloc_memory() // 1024  # the traces' own memory is no growth
                if kb is not None:
                    self.memory.setdefault((role, pid), []).append((t, kb))  # type: ignore[arg-type]

    def series(self) -> list[MemorySeries]:
        return [MemorySeries(role, pid, tuple(s)) for (role, pid), s in self.memory.items()]


def recovery_checks(w: Workload) -> Recovery:
    def fires_after(wall: float) -> bool:
        """A fired record persisted after `wall`; or, when no trigger is live on the new
        side, a leader holding the store's epoch (nothing to fire is no failure to fire)."""
        with w.target.connect() as conn:
            live = conn.execute(text("SELECT COUNT(*) FROM dus_job_trigger WHERE state = 'waiting'")).scalar()
            if not live:
                return True
            return bool(
                conn.execute(
                    text("SELECT 1 FROM dus_fired_record WHERE fired_at > :w LIMIT 1"), {"w": int(wall * 1000)}
                ).first()
            )

    def executor_ran(biz: str, wall: float) -> bool:
        """The business's executor took a command (received_at, shadow ones too) after
        `wall`; or none of its triggers is live on the new side (nothing to take)."""
        with w.target.connect() as conn:
            live = conn.execute(
                text("SELECT COUNT(*) FROM dus_job_trigger WHERE biz_code = :b AND state = 'waiting'"), {"b": biz}
            ).scalar()
            if not live:
                return True
            return bool(
                conn.execute(
                    text("SELECT 1 FROM dus_fired_record WHERE biz_code = :b AND received_at > :w LIMIT 1"),
                    {"b": biz, "w": int(wall * 1000)},
                ).first()
            )

    def stream_checkpoint(source: str) -> object:
        with w.target.connect() as conn:
            return conn.execute(
                text("SELECT log_file, log_pos FROM dus_stream_checkpoint WHERE stream_id LIKE :s"),
                {"s": f"{source}@%"},
            ).first()

    def stream_moved(source: str, before: object) -> bool:
        now = stream_checkpoint(source)
        return now is not None and now != before

    return Recovery(fires_after, executor_ran, stream_moved, stream_checkpoint)


def self_test(
    w: Workload,
    window: Window,
    invocations: list[Invocation],
    end: datetime,
    *,
    outages: Sequence[tuple[datetime, datetime]] = (),
    stop_returned: Mapping[tuple[str, int], int] | None = None,
) -> dict[str, int]:
    """The checker must be able to fail, on this run's own data: legacy fires deleted from
    an xxl-job business's log where legacy alone owned them must come back missing, and an
    invocation repeated in its process must come back invoked twice. The fires are chosen
    from the run's own switches (legacy's owner 3 s either side, outside any live
    dual-run): a stretch picked by time alone fell in a live dual-run, where a one-sided
    fire is no miss, and the self-test failed a sound checker. Judged as the run was (its
    database outages set apart, its stops' returns), and none chosen inside an outage, it
    finds the planted fires alone: 5 deleted came back 31 missing in the seventh hour when
    the self-test's check set nothing apart."""
    b = next(b for b in w.businesses if b.source == XXL)
    own = dualrun_store(w.store)
    keys = own.migration.job_codes("xxl-job", b.biz)
    planned, spans = plan_switches(audited_switches(w.store, b.biz), keys, window.start, end)
    zone = LegacyTimeZone("Asia/Shanghai")
    margin = timedelta(seconds=3)

    def legacy_alone(key: str, at: datetime) -> bool:
        return all(
            owner_at(planned, key, t) is False and not in_spans(t, spans) for t in (at - margin, at, at + margin)
        ) and not any(a - margin <= at <= b + margin for a, b in outages)

    lo, hi = window.start + margin, window.end - margin
    with w.xxl.begin() as conn:
        rows = conn.execute(
            text(
                "SELECT l.id, l.job_id, l.trigger_time FROM xxl_job_log l JOIN xxl_job_group g ON g.id = l.job_group "
                "WHERE g.app_name = :b AND l.trigger_time >= :lo AND l.trigger_time < :hi ORDER BY l.trigger_time"
            ),
            {"b": b.biz, "lo": zone.to_wall(lo), "hi": zone.to_wall(hi)},
        ).all()
        chosen = [r.id for r in rows if legacy_alone(str(r.job_id), zone.to_utc(r.trigger_time))][:PLANTED]
        deleted = (
            conn.execute(text("DELETE FROM xxl_job_log WHERE id IN :ids").bindparams(bindparam("ids", expanding=True)),
                         {"ids": chosen}).rowcount
            if chosen
            else 0
        )  # fmt: skip
    found = check_business(
        w.store, XxlJobReader(w.xxl), b.biz, window, invocations, now=end, stop_returned=stop_returned
    )
    set_apart_legacy_outages(found, outages)
    base = list(invocations) or [Invocation(1, "1-1000-0", 1000, 1000, "planted")]  # a run with no handler run
    twice = check_duplicates([*base, base[0]]).twice_in_one_process
    return {"legacy_fires_deleted": deleted, "found_missing": len(found.missing), "found_invoked_twice": len(twice)}


def write_trace_growth(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, path: Path, top: int = 25) -> None:
    """The allocation sites whose live memory grew most between the two snapshots, each
    with its traceback (the driver's own frames and the library's)."""

    def total(snap: tracemalloc.Snapshot) -> float:
        return sum(s.size for s in snap.statistics("filename")) / 2**20

    lines = [f"traced {total(before):.1f} MiB at warm-up, {total(after):.1f} MiB at the end"]
    for stat in after.compare_to(before, "traceback")[:top]:
        lines.append(
            f"\n{stat.size_diff / 1024:+.0f} KiB in {stat.count_diff:+d} blocks (now {stat.size / 1024:.0f} KiB)"
        )
        lines.extend(f"  {line}" for line in stat.traceback.format())
    path.write_text("\n".join(lines) + "\n")


def _operator(w: Workload, b: Business, deadline: float) -> None:
    """One operator per business, each on its own thread (a command takes seconds on a
    loaded machine: one operator for all would leave the businesses mostly idle)."""
    while time.monotonic() < deadline:
        try:
            w.operate(b)
        except StoreError as exc:
            # the driver's own read of the store (the nemesis restarting MariaDB): an
            # operator waits and goes on, as a person would; uncaught, it ended the
            # business's thread and left the business unoperated for the rest of the run
            w.actions.append(Action(w.elapsed(), b.biz, "operator read failed (server restart)", -1, str(exc)[:300]))
            time.sleep(2.0)
        time.sleep(1.0)


def run_soak(minutes: float, seed: int, workdir: Path, *, shards: bool | None = None, keep: bool = False) -> Report:
    """The soak, its checks and its report (written to workdir/report.json)."""
    workdir.mkdir(parents=True, exist_ok=True)
    shards = bool(seed % 2) if shards is None else shards
    private = os.environ.get("SWITCHYARD_SOAK_STACK_DIR")
    with ExitStack() as stack:
        w = Workload(workdir, seed, shards, stack, keep=keep)
        stack.callback(w.dispose)
        w.migrate()
        w.start()
        stack.callback(w.stop)
        samplers = Samplers(w, [w.xxl_url, w.bc_url])
        samplers.thread.start()
        nemesis = Nemesis(seed, w.procs, recovery_checks(w), Path(private) if private else None, t0=w.t0)
        nem = threading.Thread(target=nemesis.run, name="nemesis", daemon=True)
        window_start = w.clock.now() + timedelta(seconds=5)
        nem.start()
        deadline = w.t0 + minutes * 60 - SETTLE_S
        crashes: list[str] = []
        refused: list[str] = []  # exits "unreachable" while the nemesis restarted a server
        operators = [
            threading.Thread(target=_operator, args=(w, b, deadline), name=f"operator-{b.biz}", daemon=True)
            for b in w.businesses
        ]
        for t in operators:
            t.start()
        first_trace: tracemalloc.Snapshot | None = None
        while time.monotonic() < deadline:
            if TRACE_FRAMES and first_trace is None and w.elapsed() >= TRACE_FROM_S:
                first_trace = tracemalloc.take_snapshot()
            for p in w.procs:  # a process that died on its own (not by the nemesis) is a finding
                if not p.in_fault and p.proc is not None and p.proc.poll() is not None:
                    down = nemesis.server_down_lately()
                    if p.proc.returncode == exitcodes.UNREACHABLE and down is not None:
                        refused.append(f"{p.name} exited 3 at {w.elapsed():.0f}s ({down} restarting)")
                    else:
                        crashes.append(f"{p.name} exited {p.proc.returncode} at {w.elapsed():.0f}s")
                    p.ensure_running()
            time.sleep(1.0)
        for t in operators:
            t.join(timeout=300)
        if first_trace is not None:
            write_trace_growth(first_trace, tracemalloc.take_snapshot(), workdir / "tracemalloc.txt")
        nemesis.finish()
        nem.join(timeout=120)
        w.settle()
        window_end = w.clock.now()
        time.sleep(SETTLE_S)
        end = w.clock.now() + timedelta(seconds=1)
        status_end = w.cli("status", "--check", "--legacy-url", w.xxl_url, "--legacy-url", w.bc_url)
        samplers.stop.set()
        samplers.thread.join(timeout=60)
        w.stop()
        invocations = read_invocations(sorted(workdir.glob("invocations-*.log")))
        window = Window(start=window_start + EDGE, end=window_end - EDGE)
        checks = []
        # the database restarts, as wall-clock spans (a fault's `at` counts from t0)
        t0_wall = datetime.now(UTC) - timedelta(seconds=time.monotonic() - w.t0)
        # from the legacy scheduler's pre-read before it: an occurrence its scan had taken
        # (next time moved on) but not yet fired and logged when the server went down is lost
        # with it, as the xxl-job admin's ring would lose it
        outages = [
            (
                t0_wall + timedelta(seconds=f.at) - LEGACY_PRE_READ,
                t0_wall + timedelta(seconds=f.at + (f.recovery_s or 90.0) + 2.0),
            )
            for f in nemesis.faults
            if f.kind == "restart-mariadb"
        ]
        returned = stop_returns(w.actions, t0_wall)
        for b in w.businesses:
            reader = XxlJobReader(w.xxl) if b.source == XXL else BatchCenterReader(w.bc)
            checks.append(check_business(w.store, reader, b.biz, window, invocations, now=end, stop_returned=returned))
            set_apart_legacy_outages(checks[-1], outages)
        report = build_report(
            seed=seed,
            minutes=minutes,
            shards=shards,
            window=window,
            businesses=checks,
            duplicates=check_duplicates(invocations),
            faults=nemesis.faults,
            actions=w.actions,
            status=samplers.status,
            status_end=(status_end.returncode, (status_end.stdout + status_end.stderr)[-2000:]),
            memory=samplers.series(),
            crashes=crashes,
            refused_at_start=refused,
            legacy_errors=[e for loop in w.legacy_loops for e in loop.errors],
            private_stack=private is not None,
        )
        if keep:
            report.databases = {"target": w.target_url, "xxl-job": w.xxl_url, "batch-center": w.bc_url}
        report.self_test = self_test(w, window, invocations, end, outages=outages, stop_returned=returned)
        (workdir / "report.json").write_text(json.dumps(report.as_dict(), indent=2, default=str))
        (workdir / "timeline.json").write_text(
            json.dumps(
                {
                    "faults": [asdict(f) for f in nemesis.faults],
                    "actions": [asdict(a) for a in w.actions],
                    # the RSS curves behind the report's growth figures: a leak climbs to
                    # the end, a cache filling levels off
                    "memory_kib": [
                        {"role": m.role, "pid": m.pid, "samples": [[round(t, 1), kb] for t, kb in m.samples]}
                        for m in samplers.series()
                    ],
                },
                indent=1,
            )
        )
        return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/soak", description=__doc__)
    ap.add_argument("--minutes", type=float, default=3.0)
    ap.add_argument("--seed", type=int, default=None, help="Replays the nemesis's schedule (default: from the time).")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--shards", dest="shards", action="store_true", default=None, help="Two --shards members.")
    mode.add_argument("--single", dest="shards", action="store_false", help="A single leader and a standby.")
    ap.add_argument(
        "--keep", action="store_true", help="Keep the databases for a look afterwards (URLs in the report)."
    )
    ap.add_argument("--out", type=Path, default=None, help="Where the logs and report.json go.")
    args = ap.parse_args(argv)
    # SIGTERM (a `timeout`, an operator's kill) unwinds like an error: the processes the
    # soak started are stopped by its ExitStack, not left running orphaned
    signal.signal(signal.SIGTERM, lambda _sig, _frame: sys.exit(143))
    if TRACE_FRAMES:
        tracemalloc.start(TRACE_FRAMES)
    cap_malloc_arenas()  # the driver runs the operator's commands and the simulators: threads
    seed = args.seed if args.seed is not None else int(time.time()) % 100_000
    out = args.out or Path("test-artifacts") / f"soak-{seed}"
    report = run_soak(args.minutes, seed, out, shards=args.shards, keep=args.keep)
    print(report.table())
    print(f"report: {out / 'report.json'} (seed {seed})")
    return 0 if report.passed else 1


if __name__ == "__main__":
    code = main()
    # Everything the soak started is stopped by now (run_soak's ExitStack). The operator's
    # commands ran in this process, each with a Pulsar client of its own; one whose close
    # failed while the broker restarted leaves C++ threads that abort the interpreter's
    # exit ("terminate called without an active exception", exit 134 after a report had
    # been printed). The exit code is the report's: leave without the C++ destructors.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
