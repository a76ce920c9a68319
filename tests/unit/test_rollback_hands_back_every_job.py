"""Issue 27, item 2, on the embedded default (SQLite, the polling change stream): a rollback
hands back every job live on the new side, including one an operator resumed after the
cutover and one resumed while the rollback runs, and the stream never admits a trigger
again from the rollback's own legacy start, whatever the order of its decision, its write
and the rollback's transition."""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import Connection

from legacy_sim.seed import seed_xxljob
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch, links_of
from migrator.legacy_control import XxlJobControl
from migrator.model import BusinessState
from migrator.ownership import PROBLEMS, Firing, GuardOutcome, ownership
from migrator.stream import KeyCompare, StreamMigrator, polling_batches
from migrator.target import Write
from readers.records import LegacyBusiness, LegacyDefinition, SourceSystem
from readers.streams.polling import PollingChangeStream
from scheduler_core.model import TriggerId, TriggerState
from scheduler_core.stops import StopService
from scheduler_core.store.stops import SqlStops
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import to_ms
from switchyard import trigger_actions
from tests.migration_env import MigrationEnv, make_env, ready_switch
from tests.operator import operate, resume

S = TriggerState
TEN_YEARS_S = 10 * 365 * 86400.0  # every row in the polling stream's overlap: a changed row is always seen


def _stopped_then_migrated(tmp_path: Path) -> tuple[MigrationEnv, str, str, TriggerId]:
    """xxl-job on SQLite, one running CRON job stopped in the admin before the migration;
    migrated, in dual-run. The business, the stopped job's key and its trigger id."""
    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=6, bad_rows=0, malformed_crons=0, rng_seed=5)
    with env.legacy.begin() as conn:
        (stopped,) = conn.execute(
            text("SELECT MIN(id) FROM xxl_job_info WHERE trigger_status = 1 AND schedule_type = 'CRON'")
        ).one()
        conn.execute(
            text(
                "UPDATE xxl_job_info SET trigger_status = 0, trigger_next_time = 0, trigger_last_time = 0 WHERE id = :i"
            ),
            {"i": stopped},
        )
    env.migrator.run()
    biz = BusinessRegistry(env.own).all()[0].biz_code
    key = str(stopped)
    tid = {ln.source_key: ln.trigger for ln in links_of(env.store, env.own, biz)}[key].id
    assert tid is not None
    return env, biz, key, tid


def _legacy_live(env: MigrationEnv) -> Callable[[str, Sequence[str]], set[str] | None]:
    def live(source: str, keys: Sequence[str]) -> set[str] | None:
        return XxlJobControl(env.legacy, env.migrator.clock).live(keys)

    return live


def _sides(env: MigrationEnv, biz: str) -> dict[str, Firing]:
    owned = ownership(env.store, env.own, _legacy_live(env), [biz])[0]
    return {j.source_key: j.side for j in owned.jobs}


def _state(env: MigrationEnv, tid: TriggerId) -> S:
    t = env.store.get_trigger(tid)
    assert t is not None
    return t.state


class _WaitsForTheStream(XxlJobControl):
    """The legacy side of a rollback that lets the change stream read its start of the legacy
    jobs before it goes on (the stream polls; on the real binlog it is this quick by itself)."""

    def __init__(self, env: MigrationEnv, decided: threading.Event) -> None:
        super().__init__(env.legacy, env.migrator.clock)
        self.decided = decided

    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        out = super().start(next_due)
        self.decided.wait(30)
        return out


def test_the_polling_stream_never_admits_a_trigger_from_the_rollbacks_own_start(tmp_path: Path) -> None:
    env, biz, key, tid = _stopped_then_migrated(tmp_path)
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "xxl-job@test")
    poller = PollingChangeStream(env.legacy, table="xxl_job_info", key_columns=("id",), overlap_s=TEN_YEARS_S)
    stop, decided, rolled_back, applied = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    held_back: list[str] = []
    errors: list[BaseException] = []
    decide = env.migrator.decide

    def decide_then_wait(
        defs: Sequence[LegacyDefinition],
        legacy_businesses: dict[str, LegacyBusiness],
        conn: Connection | None = None,
        states: Mapping[str, BusinessState] | None = None,
        recheck: Callable[[Collection[str]], Mapping[str, LegacyDefinition]] | None = None,
    ) -> list[Write]:
        """The stream decides on the rollback's legacy start while the business is still cut
        over, and writes after the rollback has ended: the interleaving a real check hit."""
        out = decide(defs, legacy_businesses, conn, states, recheck)
        started = any(d.source_key == key and d.enabled for d in defs)
        if started and (states or {}).get(biz) is BusinessState.CUTOVER and not rolled_back.is_set():
            held_back.append(key)
            decided.set()
            rolled_back.wait(30)
            applied.set()
        return out

    env.migrator.decide = decide_then_wait  # type: ignore[method-assign]

    def follow() -> None:
        try:
            batches = polling_batches(
                poller,
                env.writer,
                SourceSystem.XXL_JOB,
                stop,
                interval_s=0.02,
                compare=KeyCompare(every_s=3600.0),
            )
            sm.follow(batches, stop, max_group=1)
        except BaseException as exc:  # reported by the test
            errors.append(exc)

    follower = threading.Thread(target=follow, daemon=True)
    follower.start()
    try:
        switch = ready_switch(env, control=_WaitsForTheStream(env, decided))
        switch.start_dual_run(biz, shadow=False, actor="ops")
        switch.cutover(biz, actor="ops")
        assert _state(env, tid) is S.PAUSED
        assert resume(env.store, tid)  # live on the new side only
        report = switch.rollback(biz, actor="ops", reason="drill")
        assert report.ok, report.not_handed_back
        assert key in report.handover
        rolled_back.set()
        assert applied.wait(30), f"the stream never decided on the rollback's start while cut over: {errors}"
    finally:
        rolled_back.set()
        stop.set()
        follower.join(timeout=30)
    assert not errors, errors
    assert held_back == [key]
    assert _state(env, tid) is S.CREATED
    sides = _sides(env, biz)
    assert sides[key] is Firing.LEGACY, sides
    assert not set(sides.values()) & set(PROBLEMS), sides


class _ResumedWhileRollingBack(XxlJobControl):
    """The legacy side of a rollback during which an operator resumes a trigger on the new
    side: after the rollback took the triggers off, before it starts the legacy jobs."""

    def __init__(self, env: MigrationEnv, tid: TriggerId) -> None:
        super().__init__(env.legacy, env.migrator.clock)
        self.env, self.tid, self.resumed = env, tid, False

    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        if not self.resumed:
            self.resumed = True
            assert resume(self.env.store, self.tid)
        return super().start(next_due)


def test_a_trigger_resumed_while_the_rollback_runs_is_handed_back_too(tmp_path: Path) -> None:
    env, biz, key, tid = _stopped_then_migrated(tmp_path)
    switch = ready_switch(env)
    switch.start_dual_run(biz, shadow=False, actor="ops")
    switch.cutover(biz, actor="ops")
    assert _state(env, tid) is S.PAUSED  # stopped on both: the operator's
    clock = env.migrator.clock
    racing = BusinessSwitch(env.store, env.own, _ResumedWhileRollingBack(env, tid), clock, switch.gate)
    report = racing.rollback(biz, actor="ops", reason="drill")
    assert report.ok, report.not_handed_back
    assert key in report.handover and any("while the rollback ran" in n for n in report.notes), report.notes
    assert not any(n.startswith(f"{key}: ") for n in report.notes), report.notes  # nothing stale said of it
    assert _state(env, tid) is S.CREATED
    sides = _sides(env, biz)
    assert not set(sides.values()) & set(PROBLEMS), sides
    audit = BusinessRegistry(env.own).audit(biz)
    assert audit[-1].reason.startswith("1 job(s) admitted on the new side while the rollback ran"), audit[-1]


class _StartedInTheAdminWhileRollingBack(XxlJobControl):
    """The legacy side of a rollback during which an operator starts a stopped job in the
    legacy admin and the change stream mirrors it before the rollback's transition (the
    business still in dual-run: the new side admits it too)."""

    def __init__(self, env: MigrationEnv, key: str, sm: StreamMigrator, poller: PollingChangeStream) -> None:
        super().__init__(env.legacy, env.migrator.clock)
        self.key, self.sm, self.poller, self.started = key, sm, poller, False

    def start(self, next_due: Mapping[str, datetime]) -> list[str]:
        if not self.started:
            self.started = True
            with self.engine.begin() as conn:  # `XxlJobServiceImpl.start`, as the admin writes it
                conn.execute(
                    text(
                        "UPDATE xxl_job_info SET trigger_status = 1, trigger_last_time = 0, "
                        "trigger_next_time = :n WHERE id = :i"
                    ),
                    {"i": int(self.key), "n": to_ms(self.clock.now()) + 60_000},
                )
            batches = self.poller.poll()
            assert batches, "the polling stream saw no change"
            self.sm.apply_group(batches)
        return super().start(next_due)


def test_a_job_started_in_the_legacy_admin_and_mirrored_while_the_rollback_runs_is_taken_off(tmp_path: Path) -> None:
    env, biz, key, tid = _stopped_then_migrated(tmp_path)
    switch = ready_switch(env)
    switch.start_dual_run(biz, shadow=False, actor="ops")
    assert _state(env, tid) is S.PAUSED  # stopped on legacy before the migration: off on both
    sm = StreamMigrator(env.reader, env.writer, env.migrator, "xxl-job@test")
    poller = PollingChangeStream(env.legacy, table="xxl_job_info", key_columns=("id",), overlap_s=TEN_YEARS_S)
    sm.apply_group(poller.poll())  # the stream has read every row once
    racing = BusinessSwitch(
        env.store, env.own, _StartedInTheAdminWhileRollingBack(env, key, sm, poller), env.migrator.clock, switch.gate
    )
    report = racing.rollback(biz, actor="ops", reason="drill")
    assert report.ok, report.not_handed_back
    assert any("while the rollback ran" in n for n in report.notes), report.notes
    # live on legacy (the operator's start), taken off the new side
    assert _state(env, tid) is S.CREATED
    sides = _sides(env, biz)
    assert sides[key] is Firing.LEGACY, sides
    assert not set(sides.values()) & set(PROBLEMS), sides


def test_a_resume_whose_guard_read_before_a_rollback_and_wrote_after_it_is_paused_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The window `_hand_back_late` cannot see: `trigger resume` reads the business cut
    over (allowed), the whole rollback runs, then the resume writes. Read again after its
    write, the business is on legacy: the trigger is paused again at once and the resume
    reported refused, never left live on the new side of a business back on legacy."""
    env, biz, key, tid = _stopped_then_migrated(tmp_path)
    switch = ready_switch(env)
    switch.start_dual_run(biz, shadow=False, actor="ops")
    switch.cutover(biz, actor="ops")
    assert _state(env, tid) is S.PAUSED
    real_guard = trigger_actions.guard_trigger_operation
    rolled_back: list[bool] = []

    def guard_then_rollback(*args: Any, **kwargs: Any) -> GuardOutcome:
        outcome = real_guard(*args, **kwargs)
        assert tid in outcome.allowed, "the business is cut over when the guard reads it"
        switch.rollback(biz, actor="ops", reason="drill")  # the whole rollback, between read and write
        rolled_back.append(True)
        return outcome

    monkeypatch.setattr(trigger_actions, "guard_trigger_operation", guard_then_rollback)
    stops = StopService(SqlStops(env.store))
    report, guard = trigger_actions.act(
        env.store,
        env.own,
        stops,
        SqlSupersedes(env.store),
        "resume",
        [tid],
        actor="ops",
        reason="",
        started=env.store.clock.now(),
    )
    assert rolled_back
    assert tid not in report.changed and "rolled back to legacy while it was being resumed" in guard.refused[tid]
    assert _state(env, tid) is S.PAUSED
    sides = _sides(env, biz)
    assert sides[key] is Firing.PAUSED and not set(sides.values()) & set(PROBLEMS), sides


@pytest.mark.parametrize("shadow", [False, True], ids=["live", "shadow"])
def test_a_job_resumed_in_a_dual_run_after_a_rollback_left_it_paused_is_handed_over_by_the_cutover(
    tmp_path: Path, shadow: bool
) -> None:
    """Paused on the new side while cut over, a job is not handed back by the rollback: off on
    both sides, as its operator asked. Resumed in the next dual-run, it is on the new side
    alone (its legacy job is still the one the first cutover stopped); the next cutover
    hands it over to the new side at H. It paused it again, as if the legacy stop were an
    operator's newer word, and the job fired on neither side for ten minutes (the chaos
    soak, seed 23)."""
    env, biz, _stopped, _tid = _stopped_then_migrated(tmp_path)
    switch = ready_switch(env)
    switch.start_dual_run(biz, shadow=False, actor="ops")
    live = {ln.source_key: ln.trigger.id for ln in switch.links(biz) if ln.trigger.state is S.WAITING}
    key, tid = sorted(live.items())[0]
    assert tid is not None
    switch.cutover(biz, actor="ops")
    assert operate(env.store, "pause", tid, reason="downstream down")  # audited: it fires nowhere now
    back = switch.rollback(biz, actor="ops", reason="drill")
    assert key in back.not_handed_back and _state(env, tid) is S.PAUSED  # off on both: the operator's pause
    switch.start_dual_run(biz, shadow=shadow, actor="ops")
    assert resume(env.store, tid) and _state(env, tid) is S.WAITING  # on the new side alone (shadow: recorded)
    report = switch.cutover(biz, actor="ops")
    assert _state(env, tid) is S.WAITING, f"the cutover paused a job resumed on the new side: {report.notes}"
    if shadow:  # rewound to H: from there it fires for real
        t = env.store.get_trigger(tid)
        assert t is not None and t.next_fire_at <= datetime.fromisoformat(report.handover[key])
    assert any(n.startswith(f"{key}: left stopped on legacy by a rollback") for n in report.notes), report.notes
    assert key in report.handover  # the new side's from H: what a boundary check reads
    sides = _sides(env, biz)
    assert sides[key] not in PROBLEMS, sides
