"""Secrets never leak, and hostile values are stored as data, on the real MariaDB.

A realistic flow: a batch-center legacy database (and an xxl-job `master` one, whose
groups carry access tokens too) whose businesses carry access tokens like
`tok-SECRET-123`, database URLs with the real passwords, a Pulsar token in
SWITCHYARD_PULSAR_TOKEN, and the commands an operator runs: `db init`, `db check
--json`, `migrate plan --json`, `migrate run` (text and --json), `migrate quarantine
--json`, `dualrun start`, `dualrun compare --json`, `status --json`, `scheduler stats
--json`, a `scheduler run` (DEBUG logs, Pulsar with the token, etcd) and a `migrate
stream` on the binlog with the cdc user (DEBUG logs), wrong credentials and other failing
commands, an in-process migration with its logs captured, and the reprs and messages of
the objects that hold URLs. Every output, log, JSON document, exception text and every
text column of every table of the target database (the ledger's raw excerpts included)
is scanned: no password, no access token, no Pulsar token may appear.

Hostile values (quotes, `;`, `--`, `/* */`) in legacy rows and in CLI arguments
round-trip through the migration into dus_job, dus_migration_ledger, dus_business and
dus_cutover_audit unchanged, and no statement they are in does anything but store them.

Wrong credentials, per command: one error line, exit 3 (credentials refused), no
traceback, no password.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url

from dbkit.redact import safe_url
from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.target import TargetWriter
from readers.batchcenter.reader import BatchCenterReader
from readers.legacy_ddl.loader import create_legacy_schema
from scheduler_core.clock import SystemClock
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.wiring import migrator_store, open_bus, open_store
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.integration.procs import stop_process
from tests.servers import server_url
from tests.unit.test_cli_errors import check_output

pytestmark = [pytest.mark.mariadb]

TOKENS = {"sop-audience": "tok-SECRET-123", "reminder": "tok-SECRET-456", "coupon": "tok-SECRET-789"}
XXL_TOKEN = "tok-SECRET-XXL-321"
PULSAR_TOKEN = "pulsar-SECRET-token-0f1e2d3c4b5a"
WRONG_PASSWORD = "Wrong-SECRET-pw-42"
HOSTILE_BIZ = "h'q\";--/*x*/"
HOSTILE_TOKEN = "tok-SECRET-HOSTILE-999"
HOSTILE_KEY = "k'; DROP TABLE dus_job; --"
HOSTILE_NAME = "Robert'); DROP TABLE bc_task;-- /* */"
HOSTILE_PAYLOAD = json.dumps({"q": "' OR '1'='1", "c": "/* x */ -- ;", "d": '"; DELETE FROM dus_job; --'})
HOSTILE_CRON = "0 0 0 * * ?'; DELETE FROM dus_job; --"
HOSTILE_ACTOR = "o'; DROP TABLE dus_cutover_audit; --"
HOSTILE_REASON = "/* r */ ; UPDATE dus_business SET state='cutover'; --"


def _with_db(base: str, database: str, password: str | None = None) -> str:
    u = make_url(base).set(database=database)
    if password is not None:
        u = u.set(password=password)
    return u.render_as_string(hide_password=False)


@dataclass
class Flow:
    tmp: Path
    legacy: str
    xxl: str
    target: str
    cdc_legacy: str
    secrets: dict[str, str]
    env: dict[str, str]
    outputs: dict[str, str] = field(default_factory=dict)

    def run(self, name: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        argv, env = urls_in_env(args, self.env)
        r = subprocess.run(
            [sys.executable, "-m", "switchyard", *argv],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
        )
        # the passwords travel in the environment: what the command printed is scanned
        self.outputs[name] = f"--- stdout\n{r.stdout}\n--- stderr (exit {r.returncode})\n{r.stderr}"
        return r

    def run_many(
        self, cases: dict[str, list[str]], timeout: float = 120
    ) -> dict[str, subprocess.CompletedProcess[str]]:
        """Independent commands at once (each ended by its PID if it overstays)."""
        started = {n: urls_in_env(a, self.env) for n, a in cases.items()}
        procs = {
            n: subprocess.Popen(
                [sys.executable, "-m", "switchyard", *argv],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
            )
            for n, (argv, env) in started.items()
        }
        done = {}
        for n, proc in procs.items():
            try:
                out, err = proc.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                out, err = proc.communicate(timeout=10)
                err += f"\n(still running after {timeout:.0f} s: killed)"
            done[n] = subprocess.CompletedProcess(cases[n], proc.returncode, out, err)
            self.outputs[n] = f"--- stdout\n{out}\n--- stderr (exit {proc.returncode})\n{err}"
        return done

    def ok(self, name: str, *args: str) -> str:
        r = self.run(name, *args)
        assert r.returncode == 0, f"{name} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
        return r.stdout


@pytest.fixture
def flow(tmp_path: Path) -> Iterator[Flow]:
    base = server_url("mariadb")
    cdc_base = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    with (
        mariadb_database("seclegacy") as legacy,
        mariadb_database("secxxl") as xxl,
        mariadb_database("sectarget") as target,
    ):
        secrets = {
            "app password": make_url(base).password or "",
            "cdc password": make_url(cdc_base).password or "",
            "wrong password": WRONG_PASSWORD,
            "pulsar token": PULSAR_TOKEN,
            "xxl token": XXL_TOKEN,
            "hostile business token": HOSTILE_TOKEN,
            **{f"token of {b}": t for b, t in TOKENS.items()},
        }
        assert all(len(s) >= 8 for s in secrets.values()), "the stack's passwords are too short to scan for"
        env = {k: v for k, v in os.environ.items() if not k.startswith("SWITCHYARD_") or k == "SWITCHYARD_STACK_DIR"}
        env["SWITCHYARD_PULSAR_TOKEN"] = PULSAR_TOKEN
        yield Flow(tmp_path, legacy, xxl, target, _with_db(cdc_base, make_url(legacy).database or ""), secrets, env)


def _seed(flow: Flow) -> dict[str, int]:
    leg = make_engine(flow.legacy)
    create_legacy_schema(leg, "batch-center")
    seed_batchcenter(leg, businesses=3, tasks_per_business=8, rng_seed=11)
    with leg.begin() as conn:
        for biz, tok in TOKENS.items():
            conn.execute(text("UPDATE bc_biz SET access_token = :t WHERE biz_code = :b"), {"t": tok, "b": biz})
        conn.execute(
            text(
                "INSERT INTO bc_biz (biz_code, biz_name, callback_base_url, access_token, enabled) "
                "VALUES (:b, :n, 'http://hostile.svc.local/bc', :t, 1)"
            ),
            {"b": HOSTILE_BIZ, "n": HOSTILE_NAME, "t": HOSTILE_TOKEN},
        )
        ids = {}
        for name, cron, key in (("good", "0 0/5 * * * ?", HOSTILE_KEY), ("bad", HOSTILE_CRON, HOSTILE_KEY + " 2")):
            res = conn.execute(
                text(
                    "INSERT INTO bc_task (biz_code, task_key, task_name, task_type, cron_expr, fire_time, callback_url, "
                    "payload) VALUES (:b, :k, :n, 2, :c, '2026-12-03 08:00:00', :u, :p)"
                ),
                {
                    "b": HOSTILE_BIZ,
                    "k": key,
                    "n": HOSTILE_NAME,
                    "c": cron,
                    "u": "/cb?x=';--&y=/*z*/",
                    "p": HOSTILE_PAYLOAD,
                },
            )
            ids[name] = int(res.lastrowid)
    leg.dispose()
    xe = make_engine(flow.xxl)
    create_legacy_schema(xe, "xxl-job", "master")
    seed_xxljob(xe, "master", groups=2, jobs_per_group=5, rng_seed=3)
    with xe.begin() as conn:
        conn.execute(text("UPDATE xxl_job_group SET access_token = :t"), {"t": XXL_TOKEN})
    xe.dispose()
    return ids


def _table_texts(url: str) -> dict[str, str]:
    """Every text column of every table of a database, as one string per table."""
    engine = make_engine(url)
    out: dict[str, str] = {}
    try:
        with engine.connect() as conn:
            cols = conn.execute(
                text(
                    "SELECT TABLE_NAME, COLUMN_NAME FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() "
                    "AND DATA_TYPE IN ('char', 'varchar', 'tinytext', 'text', 'mediumtext', 'longtext', 'json') "
                    "ORDER BY TABLE_NAME, ORDINAL_POSITION"
                )
            ).all()
            by_table: dict[str, list[str]] = {}
            for t, c in cols:
                by_table.setdefault(t, []).append(c)
            for t, names in by_table.items():
                # identifiers from information_schema, quoted; no value is ever interpolated
                select_list = ", ".join(f"`{n}`" for n in names)
                rows = conn.execute(text(f"SELECT {select_list} FROM `{t}`")).all()
                out[t] = "\n".join("\t".join("" if v is None else str(v) for v in r) for r in rows)
    finally:
        engine.dispose()
    return out


def _leaks(texts: dict[str, str], secrets: dict[str, str]) -> list[str]:
    found = []
    for where, body in texts.items():
        for what, secret in secrets.items():
            if secret and secret in body:
                i = body.index(secret)
                found.append(f"{what} in {where}: ...{body[max(0, i - 80) : i + len(secret) + 40]!r}...")
    return found


def _source(legacy_url: str, target_url: str, source: str = "batch-center") -> list[str]:
    """The `--source`, `--legacy-url` and `--url` arguments of the migrate commands."""
    return ["--source", source, "--legacy-url", legacy_url, "--url", target_url]


def _start(flow: Flow, name: str, args: list[str]) -> tuple[str, subprocess.Popen[bytes], float, Path]:
    log = flow.tmp / f"{name.split()[0]}-{len(flow.outputs)}-{uuid.uuid4().hex[:4]}.log"
    argv, env = urls_in_env(args, flow.env)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "switchyard", *argv],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=flow.tmp,
        )
    return name, proc, time.monotonic(), log


def _finish(flow: Flow, name: str, proc: subprocess.Popen[bytes], _started: float, log: Path) -> str:
    """SIGTERM (by its PID), a bounded wait, SIGKILL; the whole output is kept for the scan."""
    stop_process(proc, timeout_s=30)
    body = log.read_text(errors="replace")
    flow.outputs[name] = f"--- output (exit {proc.returncode})\n{body}"
    return body


def _read_and_fail(flow: Flow, src: list[str], wrong_target: str, wrong_legacy: str) -> None:
    """The read-only commands and the failing ones (wrong credentials, a database that
    does not exist, a wrong binlog password), all at once."""
    done = flow.run_many(
        {
            "migrate quarantine --json": ["migrate", "quarantine", "--url", flow.target, "--json"],
            "dualrun compare --json": [
                "dualrun",
                "compare",
                "--business",
                "reminder",
                "--url",
                flow.target,
                "--legacy-url",
                flow.legacy,
                "--since",
                "1h",
                "--json",
            ],
            "status --json": ["status", "--url", flow.target, "--json"],
            "status": ["status", "--url", flow.target],
            "scheduler stats --json": ["scheduler", "stats", "--url", flow.target, "--json"],
            "db check": ["db", "check", "--url", flow.target],
            "db check wrong password": ["db", "check", "--url", wrong_target],
            "migrate plan wrong legacy password": [
                "migrate",
                "plan",
                *src[:2],
                "--legacy-url",
                wrong_legacy,
                "--url",
                flow.target,
                "--json",
            ],
            "status no such database": ["status", "--url", _with_db(flow.target, "no_such_db_here")],
            "migrate stream wrong cdc password": [
                "migrate",
                "stream",
                *src,
                "--binlog-url",
                _with_db(flow.cdc_legacy, make_url(flow.legacy).database or "", WRONG_PASSWORD),
                "--stall-timeout",
                "5",
            ],
        }
    )
    for name in ("migrate quarantine --json", "status --json", "status", "scheduler stats --json", "db check"):
        assert done[name].returncode == 0, f"{name}: {done[name].stderr[-2000:]}"
    assert json.loads(done["migrate quarantine --json"].stdout), "the seed has bad rows"
    json.loads(done["status --json"].stdout)
    json.loads(done["scheduler stats --json"].stdout)
    assert done["dualrun compare --json"].returncode in (0, 1), done["dualrun compare --json"].stderr[-2000:]
    json.loads(done["dualrun compare --json"].stdout)  # ready or not ready: both print the comparison


@pytest.mark.pulsar
@pytest.mark.etcd
def test_no_secret_in_any_output_log_json_exception_or_table(flow: Flow, caplog: pytest.LogCaptureFixture) -> None:
    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    _seed(flow)
    src = _source(flow.legacy, flow.target)
    flow.ok("db init", "db", "init", "--url", flow.target, "--partitions", "4")
    json.loads(flow.ok("db check --json", "db", "check", "--url", flow.target, "--json"))
    json.loads(flow.ok("migrate plan --json", "migrate", "plan", *src, "--json"))
    flow.ok("migrate run", "migrate", "run", *src)
    json.loads(flow.ok("migrate run --json", "migrate", "run", *src, "--json"))
    xsrc = _source(flow.xxl, flow.target, "xxl-job")
    json.loads(flow.ok("migrate run xxl --json", "migrate", "run", *xsrc, "--json"))
    flow.ok(
        "dualrun start", "dualrun", "start", "--business", "reminder", "--url", flow.target, "--legacy-url", flow.legacy
    )
    wrong_target = _with_db(flow.target, make_url(flow.target).database or "", WRONG_PASSWORD)
    wrong_legacy = _with_db(flow.legacy, make_url(flow.legacy).database or "", WRONG_PASSWORD)
    sched_args = [
        "scheduler",
        "run",
        "--url",
        flow.target,
        "--bus",
        pulsar,
        "--election",
        etcd,
        "--election-key",
        f"/sy-secrets/{uuid.uuid4().hex[:6]}",
        "--topic-prefix",
        f"sec{uuid.uuid4().hex[:6]}",
        "--name",
        "secrets",
        "--lease-ttl",
        "2",
        "--idle-wait",
        "0.3",
        "--log-level",
        "DEBUG",
    ]
    stream_args = [
        "migrate",
        "stream",
        *src,
        "--binlog-url",
        flow.cdc_legacy,
        "--server-id",
        str(9100 + os.getpid() % 500),
        "--log-level",
        "DEBUG",
        "--stall-timeout",
        "30",
    ]
    # long-running commands with DEBUG logs, for a while: the scheduler (Pulsar with the
    # token, etcd) and the binlog stream (cdc user) ...
    long_running = [
        _start(flow, "scheduler run (DEBUG)", sched_args),
        _start(flow, "migrate stream (DEBUG)", stream_args),
    ]
    try:
        _read_and_fail(flow, src, wrong_target, wrong_legacy)
    finally:
        time.sleep(max(0.0, 8.0 - (time.monotonic() - long_running[0][2])))
        for started in long_running:
            _finish(flow, *started)

    # in process: a migration with every log record captured, and what objects show of their URLs
    caplog.set_level(logging.DEBUG)
    store = SqlTriggerStore(make_engine(flow.target), SystemClock())
    legacy_engine = make_engine(flow.legacy)
    try:
        summary = Migrator(
            BatchCenterReader(legacy_engine), TargetWriter(store, migrator_store(store)), store.clock
        ).plan()
        flow.outputs["in-process plan"] = json.dumps(summary.as_dict(), default=str)
        flow.outputs["reprs"] = "\n".join(
            [
                repr(store.engine),
                repr(legacy_engine),
                str(store.engine.url),
                safe_url(flow.target),
                repr(open_bus(pulsar, token=PULSAR_TOKEN)),
                repr(BatchCenterReader(legacy_engine).businesses()),
            ]
        )
        try:
            open_store(wrong_target).current_epoch()
        except Exception as exc:  # the exception an embedding program would log
            flow.outputs["exception (wrong password)"] = f"{type(exc).__name__}: {exc}\n{exc!r}"
        else:
            pytest.fail("a wrong password was accepted")
    finally:
        legacy_engine.dispose()
        store.engine.dispose()
    flow.outputs["captured logs"] = caplog.text

    leaks = _leaks(flow.outputs, flow.secrets) + _leaks(
        {f"table {t}": body for t, body in _table_texts(flow.target).items()}, flow.secrets
    )
    assert not leaks, f"{len(leaks)} secret(s) leaked:\n" + "\n".join(leaks[:20])
    # the scan looked at real content
    assert (
        HOSTILE_BIZ in flow.outputs["status --json"] or json.dumps(HOSTILE_BIZ)[1:-1] in flow.outputs["status --json"]
    )
    assert "leading with epoch" in flow.outputs["scheduler run (DEBUG)"], flow.outputs["scheduler run (DEBUG)"][-3000:]
    assert "snapshot applied" in flow.outputs["migrate stream (DEBUG)"], flow.outputs["migrate stream (DEBUG)"][-3000:]


def test_wrong_credentials_give_one_line_and_exit_3(flow: Flow) -> None:
    """Wrong credentials against the real MariaDB, for every command that opens a database."""
    _seed(flow)
    flow.ok("db init", "db", "init", "--url", flow.target, "--partitions", "4")
    # the business the comparison and the switch name exists in the target (as after a
    # migration): a wrong legacy password must be the one error, not an unknown name (exit 2)
    known = open_store(flow.target)
    try:
        BusinessRegistry(migrator_store(known)).ensure("reminder", "batch-center")
    finally:
        known.engine.dispose()
    wrong_t = _with_db(flow.target, make_url(flow.target).database or "", WRONG_PASSWORD)
    wrong_l = _with_db(flow.legacy, make_url(flow.legacy).database or "", WRONG_PASSWORD)
    ok_t, ok_l = flow.target, flow.legacy
    cases = {
        "db init": ["db", "init", "--url", wrong_t],
        "db check": ["db", "check", "--url", wrong_t],
        "migrate plan (target)": ["migrate", "plan", *_source(ok_l, wrong_t)],
        "migrate plan (legacy)": ["migrate", "plan", *_source(wrong_l, ok_t)],
        "migrate run (legacy)": ["migrate", "run", *_source(wrong_l, ok_t)],
        "migrate quarantine": ["migrate", "quarantine", "--url", wrong_t],
        "migrate stream (legacy)": ["migrate", "stream", *_source(wrong_l, ok_t)],
        "migrate stream (binlog user)": [
            "migrate",
            "stream",
            *_source(ok_l, ok_t),
            "--binlog-url",
            _with_db(flow.cdc_legacy, make_url(flow.legacy).database or "", WRONG_PASSWORD),
        ],
        "scheduler stats": ["scheduler", "stats", "--url", wrong_t],
        "scheduler run": ["scheduler", "run", "--url", wrong_t, "--election", "local", "--bus", "memory"],
        "trigger pause": ["trigger", "pause", "1", "--url", wrong_t],
        "status": ["status", "--url", wrong_t],
        "dualrun compare (store)": [
            "dualrun",
            "compare",
            "--business",
            "reminder",
            "--url",
            wrong_t,
            "--legacy-url",
            ok_l,
        ],
        "dualrun compare (legacy)": [
            "dualrun",
            "compare",
            "--business",
            "reminder",
            "--source",
            "batch-center",
            "--url",
            ok_t,
            "--legacy-url",
            wrong_l,
        ],
        "cutover": ["cutover", "--business", "reminder", "--url", wrong_t, "--legacy-url", ok_l],
        "rollback": ["rollback", "--business", "reminder", "--url", wrong_t, "--legacy-url", ok_l],
    }
    failures = []
    for name, r in flow.run_many(cases, timeout=90).items():
        out, err = r.stdout, r.stderr
        shown = [a.replace(flow.secrets["app password"], "***") for a in cases[name]]
        try:
            check_output(
                shown, r.returncode, 3, out.replace(WRONG_PASSWORD, "secret"), err.replace(WRONG_PASSWORD, "secret")
            )
        except AssertionError as exc:
            failures.append(f"[{name}] {exc}")
    assert not failures, f"{len(failures)} of {len(cases)} command(s) mishandle wrong credentials:\n" + "\n\n".join(
        f[:1500] for f in failures
    )
    # nothing half-written: a wrong binlog user is refused before the snapshot writes a checkpoint
    engine = make_engine(flow.target)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM dus_stream_checkpoint")).scalar() == 0
            assert conn.execute(text("SELECT COUNT(*) FROM dus_job")).scalar() == 0
    finally:
        engine.dispose()


def test_hostile_values_in_rows_and_arguments_are_stored_as_data(flow: Flow) -> None:
    ids = _seed(flow)
    src = _source(flow.legacy, flow.target)
    flow.ok("db init", "db", "init", "--url", flow.target, "--partitions", "4")
    plan = json.loads(flow.ok("plan hostile business", "migrate", "plan", *src, "--business", HOSTILE_BIZ, "--json"))
    assert {r["business"] for r in plan["rows"]} == {HOSTILE_BIZ}, plan["rows"]
    flow.ok("run hostile business", "migrate", "run", *src, "--business", HOSTILE_BIZ)
    flow.ok(
        "dualrun start hostile",
        "dualrun",
        "start",
        HOSTILE_BIZ,
        "--url",
        flow.target,
        "--legacy-url",
        flow.legacy,
        "--actor",
        HOSTILE_ACTOR,
        "--reason",
        HOSTILE_REASON,
    )
    r = flow.run("trigger pause hostile job", "trigger", "pause", "--job", HOSTILE_KEY, "--url", flow.target)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr  # names nothing: refused as input
    flow.ok(
        "trigger pause hostile business",
        "trigger",
        "pause",
        "--business",
        HOSTILE_BIZ,
        "--url",
        flow.target,
        "--actor",
        HOSTILE_ACTOR,
        "--reason",
        HOSTILE_REASON,
    )
    status = json.loads(flow.ok("status --json", "status", "--url", flow.target, "--json"))

    engine = make_engine(flow.target)
    try:
        with engine.connect() as conn:
            job = (
                conn.execute(
                    text("SELECT job_code, biz_code, params FROM dus_job WHERE biz_code = :b"), {"b": HOSTILE_BIZ}
                )
                .mappings()
                .all()
            )
            ledger = (
                conn.execute(
                    text(
                        "SELECT source_key, business, status, field, reason, raw_excerpt "
                        "FROM dus_migration_ledger WHERE business = :b ORDER BY source_key"
                    ),
                    {"b": HOSTILE_BIZ},
                )
                .mappings()
                .all()
            )
            biz = (
                conn.execute(text("SELECT biz_code, state FROM dus_business WHERE biz_code = :b"), {"b": HOSTILE_BIZ})
                .mappings()
                .all()
            )
            audit = (
                conn.execute(
                    text("SELECT actor, reason, to_state FROM dus_cutover_audit WHERE biz_code = :b"),
                    {"b": HOSTILE_BIZ},
                )
                .mappings()
                .all()
            )
            trig = conn.execute(text("SELECT state FROM dus_job_trigger WHERE biz_code = :b"), {"b": HOSTILE_BIZ}).all()
            tables = {t for (t,) in conn.execute(text("SHOW TABLES"))}
    finally:
        engine.dispose()
    assert {"dus_job", "dus_job_trigger", "dus_cutover_audit", "dus_business", "dus_migration_ledger"} <= tables
    assert [j["job_code"] for j in job] == [f"bc:{HOSTILE_BIZ}:{ids['good']}"], job
    params = json.loads(job[0]["params"])
    assert params["payload"] == HOSTILE_PAYLOAD and params["callback_url"].endswith("/cb?x=';--&y=/*z*/"), params
    by_key = {r["source_key"]: r for r in ledger}
    assert by_key[str(ids["good"])]["status"] == "migrated"
    bad = by_key[str(ids["bad"])]
    assert bad["status"] == "quarantined" and bad["field"] == "cron" and "DELETE FROM dus_job" in bad["reason"], bad
    excerpt = json.loads(bad["raw_excerpt"])
    assert (excerpt["cron_expr"], excerpt["task_key"], excerpt["task_name"], excerpt["payload"]) == (
        HOSTILE_CRON,
        HOSTILE_KEY + " 2",
        HOSTILE_NAME,
        HOSTILE_PAYLOAD,
    ), excerpt
    assert HOSTILE_TOKEN not in bad["raw_excerpt"]
    assert [(b["biz_code"], b["state"]) for b in biz] == [(HOSTILE_BIZ, "dual_run")]
    # the dual-run start, then the pause (an operator action on a business in dual-run is audited)
    assert [(a["actor"], a["reason"], a["to_state"]) for a in audit] == [
        (HOSTILE_ACTOR, HOSTILE_REASON, "dual_run")
    ] * 2
    assert trig == [("paused",)], trig
    assert {"business": HOSTILE_BIZ, "state": "dual_run"}.items() <= next(
        row for row in status if row["business"] == HOSTILE_BIZ
    ).items()
