"""A live trigger's schedule edit on the real servers: MariaDB store, Pulsar bus, etcd
election; `switchyard scheduler run` (the leader relays the edit) and `switchyard executor
run` as processes; the edit written by the migrator's target writer (what `migrate
stream` does with an edited legacy row, without a bus), from every 10 s to every 7 s while
the old schedule is published 60 s ahead. Before E = edit + 5 s the old schedule's
occurrences run and the new one's do not; from E on (inclusive: the writer's clock puts
E on a whole second, and the new schedule's phase puts an occurrence exactly at E) only the
new schedule's occurrences run, each once; the superseded commands are never invoked and
their records say why."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from migrator.model import Action
from migrator.target import TargetWriter, Write
from scheduler_core.clock import SystemClock
from scheduler_core.model import FiredState
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import from_ms, to_ms
from switchyard.schema import init_schema
from switchyard.wiring import migrator_store
from tests.argv_urls import urls_in_env
from tests.backends import mariadb_database
from tests.cron_writes import cron_write
from tests.integration.procs import executor_args, start_cli, start_scheduler, stop_process, stream_args
from tests.servers import REPO, server_url

pytestmark = [pytest.mark.mariadb, pytest.mark.pulsar, pytest.mark.etcd]

BIZ = "edited"
UTC = timezone.utc
# no result yet: a fired record stays pending until its executor reports (FiredState)
_NOT_RUN_YET = (FiredState.PENDING, FiredState.PUBLISHED)


class _WholeSeconds(SystemClock):
    """The writer's clock (`migrate stream`'s, another process's) read to the whole second:
    up to 1 s behind, like a host's skew, so that E = edit + 5 s lies on a whole second and
    an occurrence can be due exactly at E."""

    def now(self) -> datetime:
        return super().now().replace(microsecond=0)

    def now_ms(self) -> int:
        return super().now_ms() // 1000 * 1000


def _every_7s_through(at_ms: int) -> str:
    """Every 7 s within the minute, phased so that second `at_ms` is one of its occurrences
    (0/7 fires at :00, :07 .. :56; 3/7 at :03, :10 .. :59)."""
    return f"{from_ms(at_ms).second % 7}/7 * * * * ?"


def _write(cron: str, action: Action, first: datetime) -> Write:
    return cron_write(cron, action, first, biz_code=BIZ, job_code="quick", handler="quick", timeout=timedelta(0))


def _assert_superseded(recs: dict[int, tuple[FiredState, str]], old_ahead: set[int], phase: int = 0) -> None:
    """The old schedule's occurrences published ahead of E that the new one (every 7 s from
    second `phase`) lacks, at least three, were skipped as superseded by the edit."""
    superseded = [t for t in old_ahead if from_ms(t).second % 7 != phase]
    assert len(superseded) >= 3
    for t in superseded:
        state, message = recs[t]
        assert state is FiredState.SKIPPED, (t, state, message)
        assert message.startswith("superseded by a schedule edit at "), (t, message)


def _until(check: Callable[[], bool], within_s: float) -> bool:
    end = time.monotonic() + within_s
    while time.monotonic() < end:
        if check():
            return True
        time.sleep(0.2)
    return check()


def _await_results(
    records: Callable[[], dict[int, tuple[FiredState, str]]], end_ms: int, logs: Callable[[], str]
) -> None:
    """Wait (90 s at most) until `end_ms` is 3 s past and every occurrence before it has
    its result; else fail with `logs()`."""
    assert _until(
        lambda: (
            to_ms(datetime.now(UTC)) > end_ms + 3000
            and all(s not in _NOT_RUN_YET for t, (s, _m) in records().items() if t < end_ms)
        ),
        90,
    ), f"results missing:\n{logs()}"


@pytest.fixture
def store() -> Iterator[tuple[SqlTriggerStore, str]]:
    with mariadb_database() as url:
        engine = make_engine(url)
        init_schema(engine, 4)
        try:
            yield SqlTriggerStore(engine, SystemClock()), url
        finally:
            engine.dispose()


@pytest.mark.parametrize("members", [1, 2], ids=["leader", "shard-registry"])
def test_an_edit_on_the_real_servers_runs_only_the_new_schedule_from_e(
    store: tuple[SqlTriggerStore, str], tmp_path: Path, members: int
) -> None:
    """`members` 1: the elected leader relays the edit; 2: two members of the shard
    registry (`scheduler run --shards`), where the owner of the trigger's partition does."""
    st, url = store
    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    prefix = f"edit{uuid.uuid4().hex[:6]}"
    now = datetime.now(UTC)
    first = now.replace(microsecond=0) + timedelta(seconds=10 - now.second % 10)
    writer_store = SqlTriggerStore(st.engine, _WholeSeconds())
    writer = TargetWriter(writer_store, migrator_store(writer_store))
    writer.apply([_write("0/10 * * * * ?", Action.CREATE, first)])
    invocations = tmp_path / "invocations.txt"
    invocations.touch()
    shards = ["--shards", "--registry-prefix", f"/switchyard-test/{prefix}/shards"] if members > 1 else []
    scheds = [
        start_scheduler(
            f"edit-sched-{i}",
            tmp_path,
            url=url,
            bus=pulsar,
            etcd=etcd,
            key=f"/switchyard-test/{prefix}/leader",
            prefix=prefix,
            # a lease that outlives a starved process on a loaded box: the test is not about expiry
            extra=["--lookahead", "60", *shards, *(["--lease-ttl", "10"] if shards else [])],
        )
        for i in range(members)
    ]

    def sched_logs() -> str:
        return "\n".join(f"--- {s.name}\n{s.log_text()[-3000:]}" for s in scheds)

    ex_log = tmp_path / "executor.log"
    with ex_log.open("wb") as out:
        executor = start_cli(
            executor_args(BIZ, pulsar, prefix, 4, "--handlers", "tests.integration.fence_handlers"),
            out,
            cwd=REPO,
            env={**os.environ, "FENCE_INVOCATIONS": str(invocations), "PYTHONPATH": str(REPO)},
        )

    def records() -> dict[int, tuple[FiredState, str]]:
        recs = st.fired_between(BIZ, first - timedelta(minutes=1), first + timedelta(minutes=10))
        return {to_ms(r.scheduled_at): (r.state, r.message) for r in recs}

    def ran() -> list[tuple[str, int]]:
        return [(p[0], int(p[1])) for line in invocations.read_text().splitlines() if len(p := line.split()) == 3]

    try:

        def ahead() -> int:
            return len([t for t in records() if t >= to_ms(datetime.now(UTC)) + 7000])

        assert _until(lambda: ahead() >= 5, 60), f"the old schedule was not published ahead:\n{sched_logs()}"
        (trig,) = st.triggers_of(biz_code=BIZ)
        new_cron = ""
        for _ in range(100):
            # the operator's edit, read by the stream; a trigger being fired right now keeps
            # its row and the ledger its old hash: the next run (here: the next apply) applies it.
            # Phased to have an occurrence at E, the writer's whole second + the margin
            new_cron = _every_7s_through(writer_store.clock.now_ms() + 5000)
            writer.apply([_write(new_cron, Action.UPDATE, first)])
            if getattr(st.get_trigger(trig.id), "cron", None) == new_cron:  # type: ignore[arg-type]
                break
            time.sleep(0.05)
        edits = SqlSupersedes(st).supersedes()
        assert len(edits) == 1, f"the edit stored no supersede: {edits}"
        e_ms = edits[0].effective_ms
        edit_ms = e_ms - 5000
        phase = int(new_cron.split("/")[0])
        assert e_ms % 1000 == 0 and from_ms(e_ms).second % 7 == phase, (new_cron, from_ms(e_ms))
        old_ahead = {t for t in records() if t >= e_ms}
        end_ms = e_ms + 35_000
        _await_results(records, end_ms, lambda: f"{sched_logs()}\n{ex_log.read_text(errors='replace')[-3000:]}")
    finally:
        stop_process(executor)
        for sched in scheds:
            sched.stop()

    invoked = ran()
    counts = Counter(cid for cid, _t in invoked)
    assert all(n == 1 for n in counts.values()), f"a command invoked twice: {counts}"
    # [edit, E): the old schedule's occurrences (every 10 s) ran, the new one's did not
    span = sorted(t for _c, t in invoked if edit_ms <= t < e_ms)
    assert span == [t for t in range(edit_ms, e_ms, 1000) if from_ms(t).second % 10 == 0], (
        f"[edit, E) ran {[from_ms(t).isoformat() for t in span]}, not the old schedule's"
    )
    # [E, end): the new schedule's, from E inclusive; the one exactly at E once
    after = sorted(t for _c, t in invoked if e_ms <= t < end_ms)
    expected = [t for t in range(e_ms, end_ms, 1000) if from_ms(t).second % 7 == phase]
    assert after == expected, (
        f"from E {from_ms(e_ms).isoformat()} ({new_cron}) ran {[from_ms(t).isoformat() for t in after]}"
    )
    assert Counter(t for _c, t in invoked)[e_ms] == 1, "the occurrence at E ran once"
    _assert_superseded(records(), old_ahead, phase)
    relayed = [s.name for s in scheds if "broadcast the stop of trigger" in s.log_text()]
    assert relayed, "no scheduler broadcast the edit"


def _cli(*args: str) -> tuple[int, str]:
    from click.testing import CliRunner

    from switchyard.cli import cli

    argv, env = urls_in_env(args, {})  # as an operator runs them: the passwords in the environment
    res = CliRunner().invoke(cli, argv, env=env, catch_exceptions=False)
    return res.exit_code, res.output


def test_an_admin_edit_read_by_migrate_stream_runs_only_the_new_schedule_from_e(tmp_path: Path) -> None:
    """Through the CLI: `migrate run`, `dualrun start`, then `migrate stream` (binlog),
    `scheduler run` and `executor run` as processes; the edit is made in the legacy
    database, as the admin's edit form does."""
    import json

    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    from legacy_sim.seed import seed_xxljob
    from tests.migration_env import make_env

    pulsar, etcd = server_url("pulsar"), server_url("etcd")
    cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    prefix = f"edit{uuid.uuid4().hex[:6]}"
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=2, bad_rows=0, malformed_crons=0, rng_seed=3)
        with env.legacy.begin() as conn:
            job_id = int(conn.execute(text("SELECT MIN(id) FROM xxl_job_info")).scalar_one())
            conn.execute(text("UPDATE xxl_job_info SET trigger_status = 0"))
            conn.execute(
                text(
                    "UPDATE xxl_job_info SET schedule_type = 'CRON', schedule_conf = '0/10 * * * * ?', "
                    "trigger_status = 1, trigger_next_time = :n WHERE id = :i"
                ),
                {"i": job_id, "n": int(time.time() * 1000) + 10_000},
            )
        code, out = _cli("migrate", "run", "--source", "xxl-job", "--legacy-url", legacy_url, "--url", target_url)
        assert code == 0, out
        biz = json.loads(_cli("status", "--url", target_url, "--json")[1])[0]["business"]
        code, out = _cli(
            "dualrun",
            "start",
            "--business",
            biz,
            "--url",
            target_url,
            "--legacy-url",
            legacy_url,
            "--actor",
            "test",
            "--bus",
            pulsar,
            "--topic-prefix",
            prefix,
        )
        assert code == 0, out
        st = SqlTriggerStore(make_engine(target_url), SystemClock())
        (trig,) = [t for t in st.triggers_of(biz_code=biz) if t.state.value == "waiting"]
        invocations = tmp_path / "invocations.txt"
        invocations.touch()
        cdc_url = make_url(cdc).set(database=make_url(legacy_url).database).render_as_string(hide_password=False)
        procs: list[subprocess.Popen[bytes]] = []
        sched = start_scheduler(
            "edit-cli-sched",
            tmp_path,
            url=target_url,
            bus=pulsar,
            etcd=etcd,
            key=f"/switchyard-test/{prefix}/leader",
            prefix=prefix,
            extra=["--lookahead", "60"],
        )
        logs = {name: (tmp_path / f"{name}.log") for name in ("executor", "stream")}
        env_vars = {**os.environ, "FENCE_INVOCATIONS": str(invocations), "PYTHONPATH": str(REPO)}
        with logs["executor"].open("wb") as out_ex, logs["stream"].open("wb") as out_st:
            procs.append(
                start_cli(
                    executor_args(biz, pulsar, prefix, 4, "--handlers", "tests.integration.edit_handlers"),
                    out_ex,
                    cwd=REPO,
                    env=env_vars,
                )
            )
            procs.append(
                start_cli(
                    stream_args(
                        "xxl-job",
                        legacy_url,
                        target_url,
                        "--binlog-url",
                        cdc_url,
                        "--server-id",
                        "7411",
                        "--log-level",
                        "INFO",
                    ),
                    out_st,
                    cwd=REPO,
                    env=env_vars,
                )
            )

        def records() -> dict[int, tuple[FiredState, str]]:
            at = datetime.now(UTC)
            recs = st.fired_between(biz, at - timedelta(minutes=10), at + timedelta(hours=1))
            return {to_ms(r.scheduled_at): (r.state, r.message) for r in recs if r.trigger_id == trig.id}

        def tails() -> str:
            return (
                "\n".join(f"--- {n}\n{p.read_text(errors='replace')[-2500:]}" for n, p in logs.items())
                + f"\n--- scheduler\n{sched.log_text()[-2500:]}"
            )

        try:
            assert _until(lambda: len([t for t in records() if t > to_ms(datetime.now(UTC)) + 20_000]) >= 3, 90), (
                f"the old schedule was not published ahead:\n{tails()}"
            )
            time.sleep(3)  # the stream is up (it started before the scheduler published)
            with env.legacy.begin() as conn:  # the operator's edit in the admin
                conn.execute(
                    text("UPDATE xxl_job_info SET schedule_conf = '0/7 * * * * ?' WHERE id = :i"), {"i": job_id}
                )
            assert trig.id is not None
            trig_id = trig.id
            assert _until(lambda: getattr(st.get_trigger(trig_id), "cron", None) == "0/7 * * * * ?", 60), (
                f"the stream applied no edit:\n{tails()}"
            )
            seen_ms = to_ms(datetime.now(UTC))
            edits = SqlSupersedes(st).supersedes()
            # E as the edit stored it (without one: when the edit was seen, + the margin)
            e_ms = edits[0].effective_ms if edits else seen_ms + 5000
            old_ahead = {t for t in records() if t >= e_ms}
            end_ms = e_ms + 35_000
            _await_results(records, end_ms, tails)
        finally:
            for p in procs:
                stop_process(p)
            sched.stop()
            st.engine.dispose()
        invoked = [(f[0], int(f[1])) for line in invocations.read_text().splitlines() if len(f := line.split()) == 3]
        counts = Counter(cid for cid, _t in invoked)
        assert all(n == 1 for n in counts.values()), f"a command invoked twice: {counts}"
        after = sorted(t for _c, t in invoked if e_ms <= t < end_ms)
        assert after and all(from_ms(t).second % 7 == 0 for t in after), (
            f"an old-schedule command ran after E: {[from_ms(t).isoformat() for t in after]}"
        )
        expected = [t for t in range(e_ms - e_ms % 1000, end_ms, 1000) if t >= e_ms and from_ms(t).second % 7 == 0]
        assert after == expected, "an occurrence of the new schedule did not run"
        _assert_superseded(records(), old_ahead)
