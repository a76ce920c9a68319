"""Issue 27, item 2: on the real MariaDB with the row binlog stream running, a job stopped
on legacy before migration (migrated paused, kept paused through the cutover) and then
resumed on the new side by an operator is handed back by the rollback: started on legacy,
its new-side trigger taken off, and the stream never turns the rollback's own legacy start
back into a live trigger. Before the fix the stream read that start as an operator's and
the job ended live on both sides (`double`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url

from legacy_sim.seed import seed_xxljob
from migrator.business import BusinessRegistry
from migrator.cutover import links_of
from migrator.model import BusinessState
from migrator.ownership import Firing, ownership
from migrator.stream import StreamMigrator
from migrator.target import Write
from readers.records import LegacyBusiness, LegacyDefinition
from readers.streams import BinlogChangeStream, current_position
from scheduler_core.model import TriggerState
from tests.backends import mariadb_database
from tests.integration.legacy_binlog import legacy_binlog
from tests.migration_env import make_env, ready_switch
from tests.operator import resume
from tests.servers import server_url

pytestmark = pytest.mark.mariadb
UTC = timezone.utc


def _caught_up(sm: StreamMigrator, legacy, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    head = current_position(legacy)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ck = sm.checkpoint()
        if ck is not None and (ck.log_file, ck.log_pos) >= (head.log_file, head.log_pos):
            return
        time.sleep(0.05)
    raise AssertionError(f"the stream did not reach {head} in {timeout} s")


def _legacy_live(legacy):  # type: ignore[no-untyped-def]
    def live(source: str, keys):  # type: ignore[no-untyped-def]
        with legacy.connect() as conn:
            return {
                str(i)
                for (i,) in conn.execute(text("SELECT id FROM xxl_job_info WHERE trigger_status = 1"))
                if str(i) in set(keys)
            }

    return live


@pytest.mark.parametrize("order", ["decided_before_written_after", "as_it_comes"])
def test_rollback_hands_back_a_job_resumed_after_the_cutover_beside_the_stream(order: str) -> None:
    """`decided_before_written_after`: the stream decides on the rollback's legacy start
    while the business is still cut over and writes after the rollback has ended (the
    interleaving the real check hit, forced here by holding the stream between its decision
    and its write); `as_it_comes`: the stream runs free."""
    cdc = server_url("mariadb", "SWITCHYARD_MARIADB_CDC_URL")
    with mariadb_database("legacy") as legacy_url, mariadb_database("target") as target_url:
        env = make_env(legacy_url, target_url, "xxl-job", "3.4")
        stop = threading.Event()
        binlog: BinlogChangeStream | None = None
        follower: threading.Thread | None = None
        errors: list[BaseException] = []
        rolled_back = threading.Event()
        try:
            seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=5)
            with env.legacy.begin() as conn:
                (stopped,) = conn.execute(
                    text("SELECT MIN(id) FROM xxl_job_info WHERE trigger_status = 1 AND schedule_type = 'CRON'")
                ).one()
                # stopped in the admin before the migration
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET trigger_status = 0, trigger_last_time = 0, trigger_next_time = 0"
                        " WHERE id = :i"
                    ),
                    {"i": stopped},
                )
            key = str(stopped)
            env.migrator.run()
            biz = BusinessRegistry(env.own).all()[0].biz_code
            stream_id = f"xxl-job@{make_url(legacy_url).render_as_string(hide_password=True)}"
            sm = StreamMigrator(env.reader, env.migrator.writer, env.migrator, stream_id)
            sm.snapshot(env.reader, current_position(env.legacy))
            checkpoint = sm.checkpoint()
            assert checkpoint is not None
            binlog = legacy_binlog(cdc, legacy_url, checkpoint, stall_timeout_s=30.0)

            def run() -> None:
                try:
                    sm.follow(binlog.batches(idle_timeout_s=600.0), stop=stop, max_group=1)  # type: ignore[union-attr]
                except BaseException as exc:  # reported by the test
                    errors.append(exc)

            held_back: list[str] = []
            decided = threading.Event()
            if order == "decided_before_written_after":
                decide = env.migrator.decide

                def decide_then_wait(
                    defs: Sequence[LegacyDefinition],
                    legacy_businesses: dict[str, LegacyBusiness],
                    conn: Connection | None = None,
                    states: Mapping[str, BusinessState] | None = None,
                    recheck: Callable[[Collection[str]], Mapping[str, LegacyDefinition]] | None = None,
                ) -> list[Write]:
                    out = decide(defs, legacy_businesses, conn, states, recheck)
                    started = any(d.source_key == key and d.enabled for d in defs)
                    if started and (states or {}).get(biz) is BusinessState.CUTOVER and not rolled_back.is_set():
                        held_back.append(key)
                        decided.set()
                        rolled_back.wait(60)  # the rollback ends meanwhile
                    return out

                env.migrator.decide = decide_then_wait  # type: ignore[method-assign]
            follower = threading.Thread(target=run, daemon=True)
            follower.start()
            switch = ready_switch(env, max_verdict_age=timedelta(days=9999))
            switch.start_dual_run(biz, shadow=False, actor="ops")
            trig = {ln.source_key: ln.trigger for ln in links_of(env.store, env.own, biz)}
            tid = trig[key].id
            assert tid is not None and trig[key].state is TriggerState.PAUSED
            switch.cutover(biz, actor="ops")
            _caught_up(sm, env.legacy)
            t = env.store.get_trigger(tid)
            assert t is not None and t.state is TriggerState.PAUSED
            # the operator resumes it on the new side: live there only
            assert resume(env.store, tid)
            if order == "decided_before_written_after":
                # the rollback's transition to legacy waits until the stream has decided on its
                # legacy start (bounded): the interleaving is forced, not left to the binlog's
                # pace on a loaded machine (it once came after the transition in CI)
                transition = switch.registry.transition

                def transition_once_decided(*args: Any, **kw: Any) -> Any:
                    decided.wait(60)
                    return transition(*args, **kw)

                switch.registry.transition = transition_once_decided  # type: ignore[method-assign]
            report = switch.rollback(biz, actor="ops", reason="drill")
            assert report.ok, report.not_handed_back
            assert key in report.handover
            rolled_back.set()
            _caught_up(sm, env.legacy)
            time.sleep(0.5)
            assert not errors, errors
            if order == "decided_before_written_after":
                assert held_back == [key], "the stream never decided on the rollback's start while cut over"
            t = env.store.get_trigger(tid)
            assert t is not None
            assert t.state is TriggerState.CREATED, t.state
            owned = ownership(env.store, env.own, _legacy_live(env.legacy), [biz])[0]
            sides = {j.source_key: j.side for j in owned.jobs}
            assert sides[key] is Firing.LEGACY, owned.jobs
            assert not owned.problems, owned.problems
        finally:
            rolled_back.set()
            stop.set()
            if binlog is not None:
                binlog.close()
            if follower is not None:
                follower.join(timeout=20)
            env.legacy.dispose()
            env.store.engine.dispose()
