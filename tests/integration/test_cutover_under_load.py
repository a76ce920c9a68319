"""A per-business cutover and rollback under steady load, on the real servers.

One xxl-job 3.4 business on a real MariaDB legacy database, run in real time by the
xxl-job admin simulator (`legacy_sim.xxljob`: scan with its 5 s pre-read, time ring,
trigger, callbacks); the business migrated into a real MariaDB trigger store; a real
`switchyard scheduler run` subprocess (etcd election, Pulsar bus); an executor on the real
Pulsar command topic recording every handler invocation.

Five jobs fire every second (three FIX_RATE 1 s, one cron `* * * * * ?`) or every two
(one cron `0/2 * * * * ?`). While they fire: a dual-run, a cutover to the new scheduler,
then a rollback to legacy. Every occurrence of every job from the first fire to the end
of the window must be fired by the side that owns it, exactly once: legacy before the
cutover's handover time H, the new scheduler from H up to the rollback's handover time
F, legacy again from F on. In a shadow dual-run the new side only records (the executor
does not invoke), so that holds across the whole window; in a live dual-run both sides
fire the occurrences from the new side's first one D up to H, each exactly once (that
double is the dual-run itself, by design). No gap and no double at either boundary; an
occurrence the new side delivered more than once (at-least-once) must carry one command
id.

Bounded: about 45 s of real time on an idle machine; every wait has a generous limit.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections import Counter, defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from legacy_sim.xxljob import XxlJobSimulator
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from migrator.model import BusinessState
from migrator.target import TargetWriter
from readers.legacy_ddl.loader import create_legacy_schema
from readers.seed import seed_xxljob
from readers.xxljob.reader import XxlJobReader
from scheduler_core.bus.pulsar import PulsarBus
from scheduler_core.clock import SystemClock
from scheduler_core.executor import ExecutionContext, Executor
from scheduler_core.model import FiredState, Trigger, TriggerKind, parse_command_id
from scheduler_core.occurrences import next_after
from scheduler_core.store.admin import init_schema
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms, to_ms
from tests.backends import mariadb_database
from tests.integration.procs import SchedulerProc, start_scheduler
from tests.servers import server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

# (schedule_type, schedule_conf) of the business's five jobs
SCHEDULES = [("FIX_RATE", "1"), ("FIX_RATE", "1"), ("FIX_RATE", "1"), ("CRON", "* * * * * ?"),
             ("CRON", "0/2 * * * * ?")]
# The new side's lookahead. The rollback hands the legacy side F, the first occurrence the
# new side has not admitted, about a lookahead ahead; the xxl-job admin, idle while the
# business was off, scans only every 5 s (its pre-read) and fires a job it finds late
# once, then FIX_RATE goes on from *now* (skipping the grid in between: legacy
# behaviour). A lookahead above pre-read + one scan keeps F ahead of the admin's scan.
LOOKAHEAD_S = 8.0
LEGACY_ONLY_S = 3.0
DUAL_RUN_S = 4.0
NEW_ONLY_S = 5.0
AFTER_F_S = 4.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LegacyAdmin:
    """The xxl-job admin simulator on a thread, in real time."""

    def __init__(self, engine, clock: SystemClock) -> None:  # type: ignore[no-untyped-def]
        self.sim = XxlJobSimulator(engine, lineage="3.4", clock=clock)
        self.clock = clock
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="xxl-admin", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                self.sim.step(self.clock.now() + timedelta(milliseconds=100))
        except BaseException as exc:  # noqa: BLE001 (reported by the test)
            self.error = exc

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


@dataclass
class Invocations:
    """What the executor ran: (trigger id, T ms) -> command id -> invocations."""

    by_occurrence: dict[tuple[int, int], Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    lag_s: dict[str, float] = field(default_factory=dict)  # command id -> first start minus T
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, ctx: ExecutionContext, now: datetime) -> None:
        trigger_id, ms, _item = parse_command_id(ctx.command_id)
        with self.lock:
            self.by_occurrence[(int(trigger_id), ms)][ctx.command_id] += 1
            self.lag_s.setdefault(ctx.command_id, (now - ctx.scheduled_at).total_seconds())

    def snapshot(self) -> dict[tuple[int, int], Counter[str]]:
        with self.lock:
            return {k: Counter(v) for k, v in self.by_occurrence.items()}


def _seed_business(legacy, first_ms: int) -> None:  # type: ignore[no-untyped-def]
    """One xxl-job group (the business) with the five jobs of SCHEDULES, all running, due
    from `first_ms` on; plain routing, no retries, no child jobs, no timeout."""
    create_legacy_schema(legacy, "xxl-job", "3.4")
    seed_xxljob(legacy, "3.4", groups=1, jobs_per_group=len(SCHEDULES), bad_rows=0, malformed_crons=0,
                executors_per_group=1, rng_seed=5)
    with legacy.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM xxl_job_info ORDER BY id"))]
        assert len(ids) == len(SCHEDULES), ids
        for job_id, (kind, conf) in zip(ids, SCHEDULES):
            conn.execute(text(
                "UPDATE xxl_job_info SET schedule_type = :k, schedule_conf = :c, misfire_strategy = 'DO_NOTHING', "
                "executor_route_strategy = 'FIRST', glue_type = 'BEAN', executor_handler = 'tick', "
                "glue_updatetime = COALESCE(glue_updatetime, NOW()), child_jobid = '', "
                "executor_timeout = 0, executor_fail_retry_count = 0, trigger_status = 1, "
                "trigger_last_time = 0, trigger_next_time = :n WHERE id = :id"),
                {"k": kind, "c": conf, "n": first_ms, "id": job_id})
        conn.execute(text("UPDATE xxl_job_group SET address_type = 0, address_list = '10.9.0.1:9999'"))


def _grid(trigger: Trigger, start: datetime, end: datetime) -> list[int]:
    """Every occurrence of the schedule in [start, end], in epoch ms."""
    anchored = replace(trigger, next_fire_at=start) if trigger.kind is TriggerKind.FIXED_RATE else trigger
    out: list[int] = []
    cursor = next_after(anchored, start - timedelta(milliseconds=1))
    if trigger.kind is TriggerKind.FIXED_RATE:
        cursor = start
    while cursor is not None and cursor <= end and len(out) < 10_000:
        out.append(to_ms(cursor))
        cursor = next_after(anchored, cursor)
    return out


def _wait(cond, timeout_s: float, step_s: float = 0.2) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(step_s)
    return bool(cond())


@pytest.mark.parametrize("shadow", [True, False], ids=["shadow-dual-run", "live-dual-run"])
def test_cutover_then_rollback_under_steady_fires_fires_every_occurrence_once(tmp_path: Path, shadow: bool) -> None:
    etcd, pulsar = server_url("etcd"), server_url("pulsar")
    clock = SystemClock()
    started = time.monotonic()
    prefix = f"cu{uuid.uuid4().hex[:6]}"
    with mariadb_database("cutl") as legacy_url, mariadb_database("cutt") as target_url:
        legacy = make_engine(legacy_url)
        target = make_engine(target_url)
        init_schema(target, 4)
        store = SqlTriggerStore(target, clock)
        # G0: the first occurrence, on an even second, far enough ahead for the migration
        # and the scheduler's start (it only matters that the legacy side fires it)
        g0_ms = (clock.now_ms() // 2000 + 4) * 2000
        _seed_business(legacy, g0_ms)
        run = Migrator(XxlJobReader(legacy), TargetWriter(store), clock).run()
        assert run.counts["create"] == len(SCHEDULES) and run.counts["quarantine"] == 0, run.counts
        biz = BusinessRegistry(store).all()[0].biz_code
        control = XxlJobControl(legacy, clock)
        switch = BusinessSwitch(store, control, clock, None)
        links = {ln.trigger.id: ln for ln in switch.links(biz)}
        assert len(links) == len(SCHEDULES)
        key_of = {tid: ln.source_key for tid, ln in links.items()}

        admin = LegacyAdmin(legacy, clock)
        bus = PulsarBus(pulsar, admin_url=os.environ.get("SWITCHYARD_PULSAR_ADMIN_URL"), topic_prefix=prefix)
        ex = Executor(bus, biz, clock=clock, concurrency=8)
        ran = Invocations()

        @ex.handler()
        def tick(ctx: ExecutionContext) -> None:
            ran.record(ctx, clock.now())

        stop_ex = threading.Event()
        ex_thread = threading.Thread(target=ex.run, args=(stop_ex,), name="executor", daemon=True)
        proc: SchedulerProc | None = None
        phases: dict[str, float] = {}
        try:
            admin.start()  # the legacy side runs from the start, as it does in production
            admin_started_ms = clock.now_ms()
            ex_thread.start()
            proc = start_scheduler("cut", tmp_path, url=target_url, bus=pulsar, etcd=etcd,
                                   key=f"/sy-cutover/{uuid.uuid4().hex[:6]}", prefix=prefix,
                                   extra=["--lookahead", str(LOOKAHEAD_S), "--acquire-deadline", "15",
                                          "--reclaim-interval", "1", "--metrics-port", str(_free_port())])
            assert _wait(lambda: store.current_epoch() > 0, 60), "no leader: " + proc.log_text()[-3000:]
            # 1. legacy alone
            legacy_from_ms = max(g0_ms, admin_started_ms + 2000)
            assert _wait(lambda: clock.now_ms() >= legacy_from_ms + LEGACY_ONLY_S * 1000, 60)
            assert admin.sim.fired, f"the legacy admin fired nothing ({admin.error!r})"
            # 2. shadow dual-run: the new side publishes, the executor records without invoking
            t = time.monotonic()
            dual_from = clock.now()
            switch.start_dual_run(biz, shadow=shadow, actor="test", reason="load test")
            dual_to = clock.now()
            phases["dual_run_start"] = time.monotonic() - t
            time.sleep(DUAL_RUN_S)
            # 3. cutover (forced: no comparison here; the gate is tested elsewhere)
            t = time.monotonic()
            cut = switch.cutover(biz, actor="test", force=True, reason="cutover under load")
            phases["cutover"] = time.monotonic() - t
            cut_done_ms = clock.now_ms()
            time.sleep(NEW_ONLY_S)
            # 4. rollback while the new side fires
            t = time.monotonic()
            rollback_ms = clock.now_ms()
            back = switch.rollback(biz, actor="test", reason="rollback under load")
            phases["rollback"] = time.monotonic() - t
            h = {k: datetime.fromisoformat(v) for k, v in cut.handover.items()}
            f = {k: datetime.fromisoformat(v) for k, v in back.handover.items()}
            assert set(h) == set(f) == set(key_of.values()), (cut.handover, back.handover)
            last_f_ms = max(to_ms(v) for v in f.values())
            assert _wait(lambda: clock.now_ms() >= last_f_ms + AFTER_F_S * 1000, 60)
            end = clock.now()
            admin.finish()
            assert admin.error is None, f"the legacy admin simulator failed: {admin.error!r}"
            horizon = end - timedelta(milliseconds=1500)
            # From G0, unless a slow machine started the admin after it: a FIX_RATE job the
            # admin finds late fires once and goes on from its scan (legacy behaviour, not
            # the switch's), so the window then starts 2 s after the admin did.
            window_start = from_ms(-(-legacy_from_ms // 2000) * 2000)

            # D: the new side's first occurrence per job (its first fired record), which must
            # be the first one due from the dual-run start on
            triggers = {tid: store.get_trigger(tid) for tid in key_of}
            first_fired: dict[int, datetime] = {}
            for r in store.fired_between(biz, window_start, end):
                if r.trigger_id in key_of and (r.trigger_id not in first_fired or r.scheduled_at < first_fired[r.trigger_id]):
                    first_fired[int(r.trigger_id)] = r.scheduled_at
            d: dict[str, datetime] = {}
            for tid, trig in triggers.items():
                assert trig is not None and tid in first_fired, f"the new side never fired trigger {tid}"
                earliest = _grid(trig, window_start, dual_from + timedelta(seconds=60))
                lo = next(ms for ms in earliest if ms >= to_ms(dual_from))
                hi = next(ms for ms in earliest if ms >= to_ms(dual_to))
                assert lo <= to_ms(first_fired[tid]) <= hi, (
                    f"trigger {tid}: first new fire {first_fired[tid]} is not the first occurrence due from the "
                    f"dual-run start ({from_ms(lo)} .. {from_ms(hi)})")
                d[key_of[tid]] = first_fired[tid]
            # the occurrences each side owns
            expected: dict[tuple[str, int], str] = {}
            for tid, trig in triggers.items():
                assert trig is not None
                key = key_of[tid]
                for ms in _grid(trig, window_start, horizon):
                    if to_ms(h[key]) <= ms < to_ms(f[key]):
                        expected[(key, ms)] = "new"
                    elif not shadow and to_ms(d[key]) <= ms < to_ms(h[key]):
                        expected[(key, ms)] = "both"
                    else:
                        expected[(key, ms)] = "legacy"
            new_owned = {k for k, side in expected.items() if side in ("new", "both")}
            tid_of = {v: k for k, v in key_of.items()}

            def new_side_done() -> bool:
                got = ran.snapshot()
                return all((tid_of[k], ms) in got for k, ms in new_owned)

            _wait(new_side_done, 30)  # commands due before F still arriving (bounded)
            invoked = ran.snapshot()
            legacy_fires = Counter((str(x.job_id), int(x.scheduled_ms)) for x in admin.sim.fired
                                   if window_start <= from_ms(int(x.scheduled_ms)) <= horizon)
            new_fires: dict[tuple[str, int], Counter[str]] = {}
            for (tid, ms), cids in invoked.items():
                if tid in key_of and window_start <= from_ms(ms) <= horizon:
                    new_fires[(key_of[tid], ms)] = cids

            # missing: a side that owns the occurrence did not fire it; doubled: fired by a side
            # that does not own it, or twice by the legacy side
            missing, doubled, split_ids = [], [], []
            for occ, owner in sorted(expected.items()):
                want_legacy, want_new = owner in ("legacy", "both"), owner in ("new", "both")
                n_legacy = legacy_fires.get(occ, 0)
                on_new = occ in new_fires
                if (want_legacy and n_legacy == 0) or (want_new and not on_new):
                    missing.append((occ, owner, n_legacy, on_new))
                if n_legacy > 1 or (n_legacy and not want_legacy) or (on_new and not want_new):
                    doubled.append((occ, owner, n_legacy, dict(new_fires.get(occ, {}))))
                if on_new and len(new_fires[occ]) > 1:
                    split_ids.append((occ, dict(new_fires[occ])))
            both = sum(1 for o in expected.values() if o == "both")
            strays = sorted({*legacy_fires, *new_fires} - set(expected))
            redelivered = sum(n - 1 for cids in new_fires.values() for n in cids.values())
            cut_ms = {k: to_ms(v) for k, v in h.items()}
            near_cut = [o for o in expected if abs(o[1] - cut_ms[o[0]]) <= 3000]
            lags = sorted(ran.lag_s[next(iter(new_fires[o]))] for o in new_owned if o in new_fires)
            summary = (
                f"window {window_start:%H:%M:%S}..{horizon:%H:%M:%S} ({(horizon - window_start).total_seconds():.0f} s), "
                f"{'shadow' if shadow else 'live'} dual-run; {len(expected)} occurrences: legacy only "
                f"{len(expected) - len(new_owned)}, new only {len(new_owned) - both}, both (live dual-run) {both}; "
                f"legacy fired {sum(legacy_fires.values())}, new invoked {len(new_fires)} (redelivered "
                f"{redelivered}); missing {len(missing)}, doubled {len(doubled)}, "
                f"strays {len(strays)}, split command ids {len(split_ids)}; "
                f"{len(near_cut)} occurrences within 3 s of H; new-side start lag p50 "
                f"{lags[len(lags) // 2] if lags else float('nan'):.3f}s max {lags[-1] if lags else float('nan'):.3f}s; "
                f"H - cutover end {min(cut_ms.values()) - cut_done_ms} .. {max(cut_ms.values()) - cut_done_ms} ms, "
                f"rewound {cut.rewound}; F - rollback start {min(to_ms(v) for v in f.values()) - rollback_ms} .. "
                f"{last_f_ms - rollback_ms} ms; "
                f"phases {', '.join(f'{k} {v:.1f}s' for k, v in phases.items())}; total "
                f"{time.monotonic() - started:.1f}s")
            print(summary)
            detail = (f"\n{summary}\nmissing {missing[:8]}\ndoubled {doubled[:8]}\n"
                      f"strays {strays[:8]}\nH {cut.handover}\nF {back.handover}\n--- scheduler log (tail)\n"
                      f"{proc.log_text()[-3000:] if proc else ''}")
            # every phase saw fires on its side
            for key in key_of.values():
                assert sum(1 for (k, ms), o in expected.items() if k == key and o == "new") >= 3, detail
                if not shadow:
                    assert any(k == key and o == "both" for (k, ms), o in expected.items()), detail
                assert any(k == key and ms >= to_ms(f[key]) for k, ms in legacy_fires), \
                    f"job {key}: the legacy side fired nothing after the rollback" + detail
            assert not missing, f"{len(missing)} occurrence(s) not fired by the side that owns them" + detail
            assert not doubled, f"{len(doubled)} occurrence(s) fired twice or by a side that does not own them" + detail
            assert not strays, f"{len(strays)} fire(s) off the schedule" + detail
            assert not split_ids, "an occurrence delivered under two command ids" + detail
            # the store's view of the new side: one fired record per occurrence, each succeeded
            cids = {next(iter(new_fires[o])) for o in new_owned}

            def records_final() -> bool:
                recs = {r.command_id: r for r in store.fired_between(biz, window_start, end)}
                return all(c in recs and recs[c].state is FiredState.SUCCEEDED for c in cids)

            assert _wait(records_final, 30), "fired records of the new side's occurrences not all succeeded" + detail
            state = BusinessRegistry(store).get(biz)
            assert state is not None and state.state is BusinessState.LEGACY
        finally:
            admin.finish()
            if proc is not None:
                proc.stop()
            stop_ex.set()
            ex_thread.join(timeout=30)
            ex.close()
            bus.close()
            legacy.dispose()
            target.dispose()
