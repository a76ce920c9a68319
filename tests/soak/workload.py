"""The soak's workload: three businesses from both legacy simulators on the real servers,
moved by an operator through migration, dual-runs (live and shadow), cutovers,
rollbacks, re-migrations with definition edits (through the running `migrate stream`),
pauses, resumes, freezes and kills of running runs: every step a real `switchyard`
command, as an operator types it (the integration tests that do each step alone:
test_cutover_real, test_rollback_fence, test_stops_real, test_run_kill_real,
test_switch_beside_stream).

The legacy schedulers are the simulators (`legacy_sim`) on threads of this process, in
real time, writing their real logs; the new side is real `scheduler run` (single leader
beside a standby, or two `--shards` members), one `executor run` per business, and one
`migrate stream` per legacy database."""

from __future__ import annotations

import os
import random
import subprocess
import threading
import time
import traceback
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import Engine, make_url

from legacy_sim.batchcenter import BatchCenterSimulator
from legacy_sim.seed import seed_batchcenter, seed_xxljob
from legacy_sim.xxljob import XxlJobSimulator
from migrator.business import BusinessRegistry
from readers.legacy_ddl.loader import create_legacy_schema
from readers.timezones import LegacyTimeZone
from scheduler_core.clock import SystemClock
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.times import from_ms
from switchyard.cli import cli
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.backends import mariadb_database
from tests.integration.procs import executor_args, stream_args
from tests.integration.test_binlog_stream import new_server_id
from tests.servers import REPO, server_url
from tests.soak.handlers import is_slow
from tests.soak.processes import Managed

XXL, BC = "xxl-job", "batch-center"
XXL_SCHEDULES = [("CRON", "* * * * * ?"), ("CRON", "0/2 * * * * ?"), ("FIX_RATE", "1"), ("CRON", "0/3 * * * * ?")]
BC_CRONS = ["* * * * * ?", "0/2 * * * * ?", "0/3 * * * * ?", "* * * * * ?"]
BC_CRON_TYPE, BC_WAITING = 2, 0
CLI_LOCK = threading.Lock()  # one in-process command at a time (the status sampler's too)


class LegacyLoop:
    """A legacy simulator stepped in real time on a thread of the soak."""

    def __init__(self, name: str, sim: XxlJobSimulator | BatchCenterSimulator, clock: SystemClock) -> None:
        self.sim, self.clock = sim, clock
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            try:
                self.sim.step(self.clock.now() + timedelta(milliseconds=100))
            except Exception as exc:  # noqa: BLE001 - a server restart: the legacy scheduler retries, as it would
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                self.stop.wait(1.0)

    def finish(self) -> None:
        self.stop.set()
        self.thread.join(timeout=30)


def seed_xxl(legacy: Engine, first_ms: int) -> None:
    """Two xxl-job groups (two businesses) of the four XXL_SCHEDULES jobs, all running
    from `first_ms`: plain routing, no retries, no child jobs, no timeout."""
    create_legacy_schema(legacy, XXL, "3.4")
    seed_xxljob(legacy, "3.4", groups=2, jobs_per_group=len(XXL_SCHEDULES), bad_rows=0, malformed_crons=0, rng_seed=7)
    with legacy.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM xxl_job_info ORDER BY id"))]
        for n, job_id in enumerate(ids):
            kind, conf = XXL_SCHEDULES[n % len(XXL_SCHEDULES)]
            conn.execute(
                text(
                    "UPDATE xxl_job_info SET schedule_type = :k, schedule_conf = :c, misfire_strategy = 'DO_NOTHING', "
                    "executor_route_strategy = 'FIRST', glue_type = 'BEAN', executor_handler = 'tick', "
                    "glue_updatetime = COALESCE(glue_updatetime, NOW()), child_jobid = '', executor_param = 'v0', "
                    "executor_timeout = 0, executor_fail_retry_count = 0, trigger_status = 1, "
                    "trigger_last_time = 0, trigger_next_time = :n WHERE id = :id"
                ),
                {"k": kind, "c": conf, "n": first_ms, "id": job_id},
            )
        conn.execute(text("UPDATE xxl_job_group SET address_type = 0, address_list = '10.9.0.1:9999'"))


def seed_bc(legacy: Engine, first_ms: int) -> None:
    """One batch-center business of the four BC_CRONS tasks, waiting from `first_ms`."""
    create_legacy_schema(legacy, BC, None)
    seed_batchcenter(legacy, businesses=1, tasks_per_business=len(BC_CRONS), bad_rows=0, malformed_crons=0, rng_seed=7)
    wall = LegacyTimeZone("Asia/Shanghai").to_wall(from_ms(first_ms))
    with legacy.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM bc_task ORDER BY id"))]
        for n, task_id in enumerate(ids):
            conn.execute(
                text(
                    "UPDATE bc_task SET task_type = :t, cron_expr = :c, interval_sec = NULL, fire_time = :f, "
                    "end_time = NULL, shard_total = 1, shard_params = NULL, max_retry = 0, misfire_policy = 2, "
                    "status = :w, migrated = 0, payload = '{\"v\": 0}' WHERE id = :id"
                ),
                {"t": BC_CRON_TYPE, "c": BC_CRONS[n % len(BC_CRONS)], "f": wall, "w": BC_WAITING, "id": task_id},
            )
        conn.execute(text("UPDATE bc_biz SET enabled = 1"))


@dataclass
class Business:
    """One business as the operator sees it: its legacy database, phase and plan."""

    biz: str
    source: str
    legacy_url: str
    rng: random.Random
    phase: str = "legacy"  # legacy | dual | new
    phase_until: float = 0.0
    shadow: bool = False
    edits: int = 0
    paused: set[str] = field(default_factory=set)  # job codes the operator paused
    frozen: bool = False


@dataclass
class Action:
    at: float  # seconds since the soak began
    biz: str
    what: str
    code: int
    out: str = ""


class Workload:
    """Everything the soak runs (servers excepted); `operate` is one operator step."""

    def __init__(self, workdir: Path, seed: int, shards: bool, stack: ExitStack, *, keep: bool = False) -> None:
        self.workdir, self.shards = workdir, shards
        self.seed, self.keep = seed, keep
        self.clock = SystemClock()
        self.t0 = time.monotonic()
        self.target_url = stack.enter_context(_database("soakt", keep))
        self.xxl_url = stack.enter_context(_database("soakx", keep))
        self.bc_url = stack.enter_context(_database("soakb", keep))
        self.pulsar, self.etcd = server_url("pulsar"), server_url("etcd")
        self.cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
        self.prefix = f"soak{uuid.uuid4().hex[:6]}"
        self.env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "SWITCHYARD_URL": self.target_url,
            "SWITCHYARD_BUS": self.pulsar,
            "SWITCHYARD_TOPIC_PREFIX": self.prefix,
        }
        self.cli_env = {k: self.env[k] for k in ("SWITCHYARD_URL", "SWITCHYARD_BUS", "SWITCHYARD_TOPIC_PREFIX")}
        self.target = make_engine(self.target_url)
        init_schema(self.target, 4)
        self.store = SqlTriggerStore(self.target, self.clock)
        self.xxl = make_engine(self.xxl_url)
        self.bc = make_engine(self.bc_url)
        first = (self.clock.now_ms() // 1000 + 3) * 1000
        seed_xxl(self.xxl, first)
        seed_bc(self.bc, first)
        self.actions: list[Action] = []
        self.businesses: list[Business] = []
        self.procs: list[Managed] = []
        self.legacy_loops: list[LegacyLoop] = []

    # -- setting up ----------------------------------------------------------------------

    def migrate(self) -> None:
        for source, url in ((XXL, self.xxl_url), (BC, self.bc_url)):
            done = self.cli("migrate", "run", "--source", source, "--legacy-url", url)
            assert done.returncode == 0 and "0 quarantined" in done.stdout, done.stdout + done.stderr
        with self.target.connect() as conn:
            rows = conn.execute(text("SELECT biz_code, source_system FROM dus_business ORDER BY biz_code")).all()
        for biz, source in rows:
            rng = random.Random(self.seed * 7919 + len(self.businesses))  # each business's own plan
            self.businesses.append(Business(str(biz), str(source), self.xxl_url if source == XXL else self.bc_url, rng))
        assert len(self.businesses) == 3, rows

    def start(self) -> None:
        """Legacy simulators, streams, schedulers and executors running."""
        # no history in memory: the checker reads their logs in the database, and an hour of
        # fires kept in lists grew the driver by a fifth (the memory bound it is held to)
        xsim = XxlJobSimulator(self.xxl, lineage="3.4", clock=self.clock, history=False)
        bsim = BatchCenterSimulator(self.bc, clock=self.clock, history=False)
        self.legacy_loops = [LegacyLoop("xxl-admin", xsim, self.clock), LegacyLoop("bc-center", bsim, self.clock)]
        for loop in self.legacy_loops:
            loop.thread.start()
        for source, url in ((XXL, self.xxl_url), (BC, self.bc_url)):
            cdc = make_url(self.cdc).set(database=make_url(url).database).render_as_string(hide_password=False)
            argv = stream_args(source, url, self.target_url, "--binlog-url", cdc, "--server-id", str(new_server_id()))
            self._add("stream", f"stream-{source}", [*argv, "--log-level", "WARNING"])
        key, registry = f"/sy-soak/{uuid.uuid4().hex[:8]}", f"/sy-soak-shards/{uuid.uuid4().hex[:8]}"
        for n in (1, 2):
            self._add("scheduler", f"scheduler-{n}", self._scheduler_args(f"soak-s{n}", key, registry))
        for b in self.businesses:
            env = {**self.env, "SOAK_INVOCATIONS": str(self.workdir / f"invocations-{b.biz}.log")}
            argv = executor_args(b.biz, self.pulsar, self.prefix, 8, "--handlers", "tests.soak.handlers")
            self._add("executor", f"executor-{b.biz}", argv, env)
        self.t0 = time.monotonic()  # the soak starts now: the setup is not part of its minutes
        for b in self.businesses:
            b.phase_until = b.rng.uniform(8, 20)

    def _scheduler_args(self, name: str, key: str, registry: str) -> list[str]:
        args = ["scheduler", "run", "--url", self.target_url, "--bus", self.pulsar, "--election", self.etcd]
        args += ["--election-key", key, "--topic-prefix", self.prefix, "--name", name, "--lease-ttl", "2"]
        args += ["--idle-wait", "0.3", "--acquire-deadline", "5", "--reclaim-interval", "1", "--lookahead", "8"]
        args += ["--log-level", "WARNING"]
        return [*args, "--shards", "--registry-prefix", registry] if self.shards else args

    def _add(self, role: str, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        m = Managed(role, name, argv, self.workdir / f"{name}.log", env or self.env, REPO)
        m.start()
        self.procs.append(m)

    def of_role(self, role: str) -> list[Managed]:
        return [p for p in self.procs if p.role == role]

    def stop(self) -> None:
        for p in self.procs:
            p.stop()
        for loop in self.legacy_loops:
            loop.finish()

    def dispose(self) -> None:
        for e in (self.target, self.xxl, self.bc):
            e.dispose()

    # -- the operator --------------------------------------------------------------------

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """`switchyard ARGS` as an operator types it, run in this process (a new Python per
        command took 8-90 s on the loaded 2-core machine, and the businesses sat idle);
        one at a time: the runner swaps the process's stdout and environment."""
        with CLI_LOCK:
            res = CliRunner().invoke(cli, list(args), env=self.cli_env, catch_exceptions=True)
        err = res.stderr  # apart: the answers on stdout are parsed (JSON), warnings go here
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            err += "".join(traceback.format_exception(res.exception))
        return subprocess.CompletedProcess(list(args), res.exit_code, res.stdout, err)

    def _do(self, b: Business, what: str, *args: str) -> int:
        done = self.cli(*args)
        self.actions.append(Action(self.elapsed(), b.biz, what, done.returncode, (done.stdout + done.stderr)[-4000:]))
        return done.returncode

    def job_codes(self, b: Business) -> list[str]:
        return sorted({str(t.job_code) for t in self.store.triggers_of(biz_code=b.biz)})

    def operate(self, b: Business) -> None:
        """One step of the business's plan, when its phase is due (see docs/soak.md)."""
        now = self.elapsed()
        self._stops(b)
        if now < b.phase_until:
            return
        biz, url = ["--business", b.biz], ["--legacy-url", b.legacy_url]
        if b.phase == "legacy":
            b.shadow = b.rng.random() < 0.35
            if self._do(b, "dualrun start" + (" (shadow)" if b.shadow else ""), "dualrun", "start", *biz, *url,
                        *(["--shadow"] if b.shadow else [])) == 0:  # fmt: skip
                b.phase = "dual"
        elif b.phase == "dual":
            self._lift_all(b)
            if b.rng.random() < 0.8:
                reason = ["--force", "--reason", "soak"]
                if self._do(b, "cutover", "cutover", *biz, *url, *reason, "--stream-wait", "15s") == 0:
                    b.phase = "new"
            elif self._rollback(b):
                self._edit(b)
        elif b.phase == "new":
            self._lift_all(b)
            if self._rollback(b):
                self._edit(b)
        b.phase_until = self.elapsed() + b.rng.uniform(12, 30)

    def _rollback(self, b: Business) -> bool:
        code = self._do(
            b, "rollback", "rollback", "--business", b.biz, "--legacy-url", b.legacy_url, "--reason", "soak"
        )
        # a rollback that failed may have switched all the same (exit 1: on legacy with a
        # job not handed back, each named; the checker finds its misses): the operator
        # reads where the business is. Read as still on the new side, every later rollback
        # was refused "already on legacy" for the rest of the hour (seed 23)
        if code != 0 and self._state(b) != "legacy":
            return False
        b.phase = "legacy"
        return True

    def _state(self, b: Business) -> str | None:
        try:
            rec = BusinessRegistry(migrator_store(self.store)).get(b.biz)
        except Exception:  # noqa: BLE001 - the database restarting: read as unchanged
            return None
        return None if rec is None else rec.state.value

    def _stops(self, b: Business) -> None:
        """In a dual-run or on the new side, now and then: pause or resume a job, freeze or
        unfreeze the business, kill a running run of a slow job."""
        if b.phase not in ("dual", "new") or b.rng.random() > 0.25:
            return
        codes = self.job_codes(b)
        pick = b.rng.random()
        if pick < 0.35 and codes:
            code = b.rng.choice(codes)
            if code in b.paused:
                if self._do(b, "resume", "trigger", "resume", "--job", code) == 0:
                    b.paused.discard(code)
            elif self._do(b, "pause", "trigger", "pause", "--job", code, "--reason", "soak pause") == 0:
                b.paused.add(code)
        elif pick < 0.55:
            if b.frozen:
                b.frozen = self._do(b, "unfreeze", "unfreeze", "--business", b.biz) != 0
            else:
                b.frozen = self._do(b, "freeze", "freeze", "--business", b.biz, "--reason", "soak freeze") == 0
        elif b.phase == "new":
            slow = [c for c in codes if is_slow(c)]
            if slow:
                self._do(b, "run kill", "run", "kill", "--job", b.rng.choice(slow), "--wait", "5s")

    def _lift_all(self, b: Business) -> None:
        """Before a switch: what the operator stopped is resumed (a switch refuses to leave a
        job firing nowhere)."""
        for code in sorted(b.paused):
            if self._do(b, "resume", "trigger", "resume", "--job", code) == 0:
                b.paused.discard(code)
        if b.frozen and self._do(b, "unfreeze", "unfreeze", "--business", b.biz) == 0:
            b.frozen = False

    def _edit(self, b: Business) -> None:
        """A definition edit in the legacy admin (the job's parameter), which the running
        stream re-migrates: the schedules stay, so every occurrence stays comparable."""
        b.edits += 1
        value = f"v{b.edits}"
        if b.source == XXL:
            with self.xxl.begin() as conn:
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET executor_param = :v, update_time = NOW() WHERE job_group = "
                        "(SELECT id FROM xxl_job_group WHERE app_name = :b)"
                    ),
                    {"v": value, "b": b.biz},
                )
        else:
            with self.bc.begin() as conn:
                conn.execute(
                    text("UPDATE bc_task SET payload = :v WHERE biz_code = :b"),
                    {"v": f'{{"v": {b.edits}}}', "b": b.biz},
                )
        self.actions.append(Action(self.elapsed(), b.biz, f"edit definitions ({value})", 0))

    def settle(self) -> None:
        """Before the end: every stop lifted, as an operator leaves a business."""
        for b in self.businesses:
            self._lift_all(b)


@contextmanager
def _database(prefix: str, keep: bool) -> Iterator[str]:
    """A fresh database (tests.backends.mariadb_database); with `keep`, left for a look
    after the run (its URL is in the report)."""
    if not keep:
        with mariadb_database(prefix) as url:
            yield url
        return
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    admin = make_engine(server_url("mariadb"))
    with admin.begin() as conn:
        conn.execute(text(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
    admin.dispose()
    yield make_url(server_url("mariadb")).set(database=name).render_as_string(hide_password=False)
