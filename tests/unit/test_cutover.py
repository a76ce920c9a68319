"""The cutover state machine and the legacy switches, on SQLite legacy databases."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from dbkit.errors import StoreUnavailable
from legacy_sim.seed import seed_batchcenter
from migrator.business import BusinessRegistry, TransitionRefused
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import BatchCenterControl, XxlJobControl
from migrator.model import BusinessState
from migrator.ports import GateDecision
from migrator.tables import migrator_tables
from scheduler_core.model import TriggerState
from scheduler_core.times import from_ms
from tests.migration_env import FixedGate, make_env, migrated_xxljob, ready_switch


def _xxl(tmp_path: Path):  # type: ignore[no-untyped-def]
    return migrated_xxljob(tmp_path)


def test_the_state_machine_is_audited_and_gated(tmp_path: Path) -> None:
    env, biz = _xxl(tmp_path)
    clock = env.migrator.clock
    gate = FixedGate(None)
    sw = env.xxl_switch(gate)
    with pytest.raises(TransitionRefused, match="not dual_run"):
        sw.cutover(biz, actor="ops")
    rep = sw.start_dual_run(biz, shadow=False, actor="ops", reason="week 1")
    assert rep.activated > 0
    assert all(
        t.state in (TriggerState.WAITING, TriggerState.PAUSED, TriggerState.COMPLETED)
        for t in env.store.triggers_of(biz_code=biz)
    )
    with pytest.raises(TransitionRefused, match="no comparison verdict"):
        sw.cutover(biz, actor="ops")
    gate.value = GateDecision(ready=False, comparison_id=7, computed_at=clock.now(), reasons=("p99 lag 4.2 s > 1 s",))
    with pytest.raises(TransitionRefused, match=r"p99 lag 4\.2 s"):
        sw.cutover(biz, actor="ops")
    with pytest.raises(TransitionRefused, match="needs --reason"):
        sw.cutover(biz, actor="ops", force=True)
    gate.value = GateDecision(ready=True, comparison_id=8, computed_at=clock.now() - timedelta(hours=2))
    with pytest.raises(TransitionRefused, match="old"):
        sw.cutover(biz, actor="ops")
    gate.value = GateDecision(ready=True, comparison_id=9, computed_at=clock.now())
    rep = sw.cutover(biz, actor="ops", reason="numbers are good")
    assert rep.comparison_id == 9 and not rep.forced
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.CUTOVER  # type: ignore[union-attr]
    sw.rollback(biz, actor="oncall", reason="regression")
    audit = BusinessRegistry(env.own).audit(biz)
    assert [(a.from_state, a.to_state, a.actor) for a in audit] == [
        ("legacy", "dual_run", "ops"),
        ("dual_run", "cutover", "ops"),
        ("cutover", "legacy", "oncall"),
    ]
    assert audit[1].comparison_id == 9 and audit[2].reason == "regression"


def test_forced_cutover_is_audited_as_forced(tmp_path: Path) -> None:
    env, biz = _xxl(tmp_path)
    clock = env.migrator.clock
    sw = BusinessSwitch(
        env.store,
        env.own,
        XxlJobControl(env.legacy, clock),
        clock,
        FixedGate(GateDecision(ready=False, comparison_id=3, computed_at=clock.now(), reasons=("x",))),
    )
    sw.start_dual_run(biz, shadow=False, actor="ops")
    rep = sw.cutover(biz, actor="ops", force=True, reason="vendor deadline")
    assert rep.forced
    last = BusinessRegistry(env.own).audit(biz)[-1]
    assert last.forced and last.reason == "vendor deadline" and last.comparison_id == 3


def test_xxljob_boundary_both_directions(tmp_path: Path) -> None:
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    links = {ln.source_key: ln for ln in sw.links(biz)}
    # the new side ran ahead in shadow: pretend it admitted an hour of occurrences
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 3600000 WHERE state='waiting'"))
    with env.legacy.connect() as conn:
        legacy_next = {
            str(i): ms
            for i, ms in conn.execute(text("SELECT id, trigger_next_time FROM xxl_job_info WHERE trigger_status = 1"))
        }
    rep = sw.cutover(biz, actor="ops", reason="go")
    with env.legacy.connect() as conn:
        status = dict(conn.execute(text("SELECT id, trigger_status FROM xxl_job_info")).all())
    moved = 0
    for key, ln in links.items():
        if key not in legacy_next:
            continue
        assert status[int(key)] == 0, f"legacy job {key} still on after cutover"
        t = env.store.get_trigger(ln.trigger.id)  # type: ignore[arg-type]
        if t.state is TriggerState.WAITING:
            # shadow dual-run: rewound to the first occurrence the legacy side will not fire
            assert t.next_fire_at == from_ms(legacy_next[key]), key
            moved += 1
    assert moved > 0 and rep.rewound == moved
    assert all(not j.shadow for j in (env.store.get_job(ln.job_code) for ln in links.values()) if j)
    # rollback: the legacy side resumes exactly where the new side stopped
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 600000 WHERE state='waiting'"))
    waiting = {k: env.store.get_trigger(ln.trigger.id) for k, ln in links.items()}  # type: ignore[arg-type]
    waiting = {k: t for k, t in waiting.items() if t.state is TriggerState.WAITING}
    sw.rollback(biz, actor="ops", reason="back")
    with env.legacy.connect() as conn:
        rows = {
            str(i): (s, ms)
            for i, s, ms in conn.execute(text("SELECT id, trigger_status, trigger_next_time FROM xxl_job_info"))
        }
    for key, t in waiting.items():
        assert rows[key] == (1, int(t.next_fire_at.timestamp() * 1000)), key
        assert env.store.get_trigger(t.id).state is TriggerState.CREATED  # type: ignore[arg-type, union-attr]


def test_batch_center_boundary(tmp_path: Path) -> None:
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=2, tasks_per_business=12, bad_rows=0, malformed_crons=0, rng_seed=4)
    env.migrator.run()
    clock = env.migrator.clock
    biz = BusinessRegistry(env.own).all()[0].biz_code
    with env.legacy.begin() as conn:  # nothing running, so the pause settles at once
        conn.execute(text("UPDATE bc_task SET status = 0 WHERE status = 1"))
    sw = ready_switch(env, BatchCenterControl(env.legacy, clock))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    with env.legacy.connect() as conn:
        waiting = {
            str(i)
            for (i,) in conn.execute(text("SELECT id FROM bc_task WHERE status = 0 AND biz_code = :b"), {"b": biz})
        }
    sw.cutover(biz, actor="ops", reason="go")
    with env.legacy.connect() as conn:
        after: dict[Any, Any] = dict(
            conn.execute(text("SELECT id, status FROM bc_task WHERE biz_code = :b"), {"b": biz}).all()
        )
    assert all(after[int(k)] == 5 for k in waiting), "every waiting task paused (the documented flag)"
    rep = sw.rollback(biz, actor="ops", reason="back")
    with env.legacy.connect() as conn:
        fire = {
            str(i): (s, ft)
            for i, s, ft in conn.execute(
                text("SELECT id, status, fire_time FROM bc_task WHERE biz_code = :b"), {"b": biz}
            )
        }
    assert rep.legacy_started == len(rep.handover) > 0
    for key, when in rep.handover.items():
        status, wall = fire[key]
        assert status == 0
        expected = datetime.fromisoformat(when).astimezone(__import__("zoneinfo").ZoneInfo("Asia/Shanghai"))
        assert str(wall).startswith(expected.strftime("%Y-%m-%d %H:%M:%S"))


def test_a_batch_center_task_whose_run_ends_while_its_pause_is_refused_is_paused_all_the_same(
    tmp_path: Path,
) -> None:
    """The pause of a RUNNING task is refused; when its run ends (back to WAITING) before
    the switch reads its status, the pause must be retried, not given up: the chaos soak
    (seed 11) saw such a task left firing on legacy through a whole cutover (double)."""
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=1, tasks_per_business=3, bad_rows=0, malformed_crons=0, rng_seed=4)
    with env.legacy.begin() as conn:
        (tid,) = conn.execute(text("SELECT id FROM bc_task ORDER BY id LIMIT 1")).one()
        conn.execute(text("UPDATE bc_task SET status = 1 WHERE id = :id"), {"id": tid})

    class RunEndsMeanwhile(BatchCenterControl):
        looks = 0

        def _statuses(self, ids: Sequence[int]) -> dict[int, int]:
            self.looks += 1
            if self.looks < 2:  # the first look is before the first try, refused
                return super()._statuses(ids)
            with self.engine.begin() as conn:  # the center completes the run: WAITING again
                conn.execute(
                    text("UPDATE bc_task SET status = 0, version = version + 1 WHERE id = :id AND status = 1"),
                    {"id": tid},
                )
            return super()._statuses(ids)

    control = RunEndsMeanwhile(env.legacy, env.migrator.clock, retry_every=timedelta(0))
    control.stop([str(tid)])
    with env.legacy.connect() as conn:
        status = conn.execute(text("SELECT status FROM bc_task WHERE id = :id"), {"id": tid}).scalar_one()
    assert status == 5, "the task was left live on legacy"
    assert control.live([str(tid)]) == set()


def test_rollback_of_a_live_dual_run_never_sends_legacy_back_over_what_it_fired(tmp_path: Path) -> None:
    env, biz = _xxl(tmp_path)
    sw = env.xxl_switch(FixedGate(None))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    links = {ln.source_key: ln for ln in sw.links(biz)}
    waiting = {k: env.store.get_trigger(ln.trigger.id) for k, ln in links.items()}  # type: ignore[arg-type]
    waiting = {k: t for k, t in waiting.items() if t is not None and t.state is TriggerState.WAITING}
    assert waiting
    # legacy ran ahead of a new side that fell behind: its next times are an hour later
    with env.legacy.begin() as conn:
        for key, t in waiting.items():
            conn.execute(
                text("UPDATE xxl_job_info SET trigger_next_time = :ms WHERE id = :id AND trigger_status = 1"),
                {"ms": int(t.next_fire_at.timestamp() * 1000) + 3_600_000, "id": int(key)},
            )
    with env.legacy.connect() as conn:
        legacy_next = {
            str(i): ms
            for i, ms in conn.execute(text("SELECT id, trigger_next_time FROM xxl_job_info WHERE trigger_status = 1"))
        }
    rep = sw.rollback(biz, actor="ops", reason="back")
    with env.legacy.connect() as conn:
        rows = {
            str(i): (s, ms)
            for i, s, ms in conn.execute(text("SELECT id, trigger_status, trigger_next_time FROM xxl_job_info"))
        }
    checked = 0
    for key, t in waiting.items():
        if key not in legacy_next:
            continue
        new_next = int(t.next_fire_at.timestamp() * 1000)
        assert rows[key][0] == 1, key
        assert rows[key][1] == legacy_next[key], f"{key}: legacy, live all through the dual-run, was moved"
        checked += int(legacy_next[key] > new_next)
    # a live dual-run's legacy side never stopped: the rollback leaves it exactly as it runs
    assert checked > 0 and rep.legacy_started == 0 and rep.ok


def test_a_live_cutover_leaves_a_new_side_that_fell_behind_its_backlog(tmp_path: Path) -> None:
    """A live dual-run's new side fires every occurrence; one behind (its broker down for
    minutes, the occurrences before H not fired yet) fires them late after the cutover, as
    the dual-run would have. Moved on to H, it skipped them with no record (the chaos soak,
    seed 23: 138 occurrences fired by legacy alone after a 140 s Pulsar outage)."""
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    links = {ln.source_key: ln for ln in sw.links(biz)}
    with env.legacy.connect() as conn:
        legacy_next = dict(
            conn.execute(text("SELECT id, trigger_next_time FROM xxl_job_info WHERE trigger_status = 1")).all()
        )
    # the new side fell behind: an hour of backlog before the legacy side's next time
    with env.store.engine.begin() as conn:
        for key, ln in links.items():
            if int(key) in legacy_next:
                conn.execute(
                    text("UPDATE dus_job_trigger SET next_fire_at = :ms WHERE id = :id AND state = 'waiting'"),
                    {"ms": legacy_next[int(key)] - 3_600_000, "id": ln.trigger.id},
                )
    behind = {k: env.store.get_trigger(ln.trigger.id) for k, ln in links.items() if int(k) in legacy_next}  # type: ignore[arg-type]
    behind = {k: t for k, t in behind.items() if t is not None and t.state is TriggerState.WAITING}
    assert behind
    rep = sw.cutover(biz, actor="ops", reason="go")
    with env.legacy.connect() as conn:
        status = dict(conn.execute(text("SELECT id, trigger_status FROM xxl_job_info")).all())
    for key, t in behind.items():
        assert status[int(key)] == 0, f"legacy job {key} still on after cutover"
        after = env.store.get_trigger(t.id)  # type: ignore[arg-type]
        assert after is not None and after.state is TriggerState.WAITING
        assert after.next_fire_at == t.next_fire_at, f"{key}: the new side's backlog was skipped unrecorded"
    assert rep.rewound == 0 and rep.handover


def test_a_shadow_cutover_rewinds_only_jobs_that_left_shadow(tmp_path: Path) -> None:
    """The root cause of the occurrence lost at H under load: a trigger rewound to H is
    admitted at once (H is inside the lookahead), and the scheduler reads the job's shadow
    flag as it fires. Every rewind must therefore meet a job already out of shadow: here
    a 'scheduler' reads the flag the instant each rewind commits, as a loaded box lets it."""
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    with env.store.engine.begin() as conn:  # the shadow side ran an hour ahead
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 3600000 WHERE state='waiting'"))
    seen: list[bool] = []
    real_cas = env.store.cas

    def cas_then_fire(tr):  # type: ignore[no-untyped-def]
        won = real_cas(tr)
        if won and tr.next_fire_at:
            for t in won:
                job = env.store.get_jobs([t.job_code])[t.job_code]
                seen.append(job.shadow)  # what a fire right now would publish
        return won

    env.store.cas = cas_then_fire  # type: ignore[method-assign]
    rep = sw.cutover(biz, actor="ops")
    assert rep.rewound > 0 and seen
    assert not any(seen), "a trigger was rewound to H while its job was still in shadow"


def test_a_rewind_that_loses_to_a_scheduler_tick_is_retried(tmp_path: Path) -> None:
    """The scheduler acquires a 1 s trigger about once a second: between the cutover's read
    and its rewind it can take the trigger and fire it. The rewind is retried on the
    trigger as it then is, instead of refusing the cutover half-way (legacy stopped)."""
    from scheduler_core.ports import Transition

    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 3600000 WHERE state='waiting'"))
    real_cas = env.store.cas
    lost: list[int] = []

    def racing_cas(tr):  # type: ignore[no-untyped-def]
        if tr.next_fire_at and tr.from_state is TriggerState.WAITING and len(lost) < 3:
            # a tick takes the trigger, fires an occurrence and puts it back just before the
            # rewind's write, which then finds it changed: lost
            tid = tr.ids[0]
            t = env.store.get_trigger(tid)
            real_cas(Transition(ids=[tid], from_state=TriggerState.WAITING, to_state=TriggerState.ACQUIRED))
            real_cas(
                Transition(
                    ids=[tid],
                    from_state=TriggerState.ACQUIRED,
                    to_state=TriggerState.WAITING,
                    next_fire_at={tid: t.next_fire_at + timedelta(seconds=1)},
                )
            )
            lost.append(tid)
            return []
        return real_cas(tr)

    env.store.cas = racing_cas  # type: ignore[method-assign]
    rep = sw.cutover(biz, actor="ops")
    assert len(lost) == 3 and rep.rewound > 0
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.CUTOVER  # type: ignore[union-attr]


def test_a_live_dual_run_is_refused_for_xxl_job_ids_the_bridge_cannot_mirror(tmp_path: Path) -> None:
    """The bridge runs a job on the business's executors under the mirror of its legacy id
    (so the two sides never share a job thread); ids of 2^30 and up have none. A live
    dual-run is refused before anything changes, naming the job; a shadow one is not."""
    env, biz = _xxl(tmp_path)
    sw = env.xxl_switch(FixedGate(None))
    ledger = migrator_tables().ledger
    with env.store.engine.begin() as conn:
        key = conn.execute(
            text(f"SELECT MIN(source_key) FROM {ledger.name} WHERE business = :b AND status = 'migrated'"), {"b": biz}
        ).scalar_one()
        conn.execute(text(f"UPDATE {ledger.name} SET source_key = '1073741824' WHERE source_key = :k"), {"k": key})
    with pytest.raises(
        TransitionRefused,
        match=r"live dual-run of .* refused: xxl-job job id\(s\) 1073741824 .* "
        r"dual-run with --shadow",
    ):
        sw.start_dual_run(biz, shadow=False, actor="ops")
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.LEGACY  # type: ignore[union-attr]
    assert all(t.state is not TriggerState.WAITING for t in env.store.triggers_of(biz_code=biz))
    assert sw.start_dual_run(biz, shadow=True, actor="ops").activated > 0


def _bc_tasks(tmp_path: Path, tasks: int, waiting: int) -> tuple[Any, list[int]]:
    """A batch center with `tasks` tasks; of the first `waiting + 1`, the first `waiting`
    WAITING (status 0) and the next one RUNNING (status 1). Returns (env, those ids)."""
    env = make_env(f"sqlite:///{tmp_path / 'bc.db'}", f"sqlite:///{tmp_path / 't.db'}", "batch-center")
    seed_batchcenter(env.legacy, businesses=1, tasks_per_business=tasks, bad_rows=0, malformed_crons=0, rng_seed=4)
    with env.legacy.begin() as conn:
        ids = [i for (i,) in conn.execute(text("SELECT id FROM bc_task ORDER BY id LIMIT :n"), {"n": waiting + 1})]
        for i in ids[:waiting]:
            conn.execute(text("UPDATE bc_task SET status = 0 WHERE id = :id"), {"id": i})
        conn.execute(text("UPDATE bc_task SET status = 1 WHERE id = :id"), {"id": ids[waiting]})  # stays running
    return env, ids


def test_a_batch_center_stop_that_cannot_finish_starts_again_what_it_paused(tmp_path: Path) -> None:
    """All or nothing, as the xxl-job control: a task still RUNNING past the patience makes
    the stop fail, and the other tasks run on legacy at their own fire time.
    Left paused (and held), they fired nowhere while the business stayed in its dual-run:
    the chaos soak (seed 23) saw three jobs of a shadow dual-run dark for 50 minutes after a
    cutover failed so."""
    env, ids = _bc_tasks(tmp_path, tasks=3, waiting=1)
    with env.legacy.connect() as conn:
        before = conn.execute(text("SELECT fire_time FROM bc_task WHERE id = :id"), {"id": ids[0]}).scalar_one()
    control = BatchCenterControl(env.legacy, env.migrator.clock, retry_every=timedelta(0), patience=timedelta(0))
    with pytest.raises(RuntimeError, match=r"still running after .*nothing was paused"):
        control.stop([str(i) for i in ids])
    with env.legacy.connect() as conn:
        rows: dict[Any, Any] = dict(
            conn.execute(text("SELECT id, status FROM bc_task WHERE id IN (:a, :b)"), {"a": ids[0], "b": ids[1]}).all()
        )
        after = conn.execute(text("SELECT fire_time FROM bc_task WHERE id = :id"), {"id": ids[0]}).scalar_one()
    assert rows == {ids[0]: 0, ids[1]: 1}, "the stop was left half-way"
    assert str(after)[:19] == str(before)[:19]  # at its own fire time


def test_a_batch_center_stop_pauses_no_task_while_another_one_runs(tmp_path: Path) -> None:
    """Tasks paused while another still ran fired nowhere until that run ended (up to the
    patience, 5 minutes): in a shadow cutover the new side invokes nothing meanwhile. The
    stop pauses them all at one instant, once the run has ended."""
    env, ids = _bc_tasks(tmp_path, tasks=4, waiting=2)
    seen_while_running: list[dict[int, int]] = []

    class RunEndsAfterThreeLooks(BatchCenterControl):
        def _statuses(self, task_ids: Sequence[int]) -> dict[int, int]:
            with self.engine.connect() as conn:
                seen_while_running.append(
                    dict(
                        conn.execute(
                            text("SELECT id, status FROM bc_task WHERE id IN (:a, :b)"), {"a": ids[0], "b": ids[1]}
                        ).all()
                    )
                )
            if len(seen_while_running) == 4:  # the center completes the run: WAITING again
                with self.engine.begin() as conn:
                    conn.execute(
                        text("UPDATE bc_task SET status = 0, version = version + 1 WHERE id = :id"), {"id": ids[2]}
                    )
            return super()._statuses(task_ids)

    control = RunEndsAfterThreeLooks(env.legacy, env.migrator.clock, retry_every=timedelta(0))
    settled = control.stop([str(i) for i in ids])
    assert len(seen_while_running) >= 4
    assert all(set(look.values()) == {0} for look in seen_while_running), "a task was paused while another ran"
    assert control.live([str(i) for i in ids]) == set()
    assert set(settled.next_due) == {str(i) for i in ids}
    assert any("waited for their runs" in n for n in settled.notes)


def test_a_batch_center_stop_that_gives_up_leaves_an_operators_pause_made_meanwhile(tmp_path: Path) -> None:
    """A stop that times out paused nothing; a task an operator paused while it waited
    is the operator's, and the stop's undo must not start it again."""
    env, ids = _bc_tasks(tmp_path, tasks=3, waiting=1)

    class OperatorPausesMeanwhile(BatchCenterControl):
        looks = 0

        def _statuses(self, task_ids: Sequence[int]) -> dict[int, int]:
            self.looks += 1
            if self.looks == 2:  # while the stop waits on the running task
                with self.engine.begin() as conn:
                    conn.execute(
                        text("UPDATE bc_task SET status = 5, version = version + 1 WHERE id = :id"), {"id": ids[0]}
                    )
            return super()._statuses(task_ids)

    wait = timedelta(milliseconds=1)  # one look while it waits
    control = OperatorPausesMeanwhile(env.legacy, env.migrator.clock, retry_every=wait, patience=wait)
    with pytest.raises(RuntimeError, match="nothing was paused"):
        control.stop([str(i) for i in ids])
    with env.legacy.connect() as conn:
        status = conn.execute(text("SELECT status FROM bc_task WHERE id = :id"), {"id": ids[0]}).scalar_one()
    assert status == 5, "the stop's undo started a task an operator had paused"


def test_a_cutover_cut_short_after_it_stopped_legacy_is_finished_by_running_it_again(tmp_path: Path) -> None:
    """A shadow cutover stops the legacy jobs, then takes the new side out of shadow and
    rewinds it to legacy's next times. A database restart in between left the jobs
    stopped on legacy and only recorded (shadow) on the new side: live on neither. Run
    again it finishes, with the handover an uncut one has (a stopped legacy job keeps its
    next time), even when the gate would now refuse a fresh cutover (a verdict grown old
    in the outage): refusing would leave the jobs dark."""
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    with env.store.engine.begin() as conn:  # the shadow side ran an hour ahead
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 3600000 WHERE state='waiting'"))
    with env.legacy.connect() as conn:
        legacy_next = dict(
            conn.execute(text("SELECT id, trigger_next_time FROM xxl_job_info WHERE trigger_status = 1")).all()
        )
    real = env.store.set_shadow

    def restarting(*_a: object) -> None:
        raise StoreUnavailable("the database restarts", "")

    env.store.set_shadow = restarting  # type: ignore[method-assign]
    assert not sw.half_done
    with pytest.raises(StoreUnavailable):
        sw.cutover(biz, actor="ops")
    assert sw.half_done  # legacy is stopped: the command runs it again
    keys = {int(ln.source_key) for ln in sw.links(biz)}
    legacy_next = {k: ms for k, ms in legacy_next.items() if k in keys}
    with env.legacy.connect() as conn:
        on = {i for (i,) in conn.execute(text("SELECT id FROM xxl_job_info WHERE trigger_status = 1"))}
    assert legacy_next and not on & keys  # stopped on legacy, and the new side is in shadow
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.DUAL_RUN  # type: ignore[union-attr]
    env.store.set_shadow = real  # type: ignore[method-assign]
    sw.gate.value = GateDecision(ready=False, comparison_id=2, computed_at=env.migrator.clock.now(), reasons=("x",))  # type: ignore[union-attr]
    rep = sw.cutover(biz, actor="ops")
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.CUTOVER  # type: ignore[union-attr]
    assert rep.warnings and "cut short" in rep.warnings[-1]
    rewound = 0
    for ln in sw.links(biz):
        if int(ln.source_key) in legacy_next:
            t = env.store.get_trigger(ln.trigger.id)  # type: ignore[arg-type]
            assert t.state is TriggerState.WAITING and t.next_fire_at == from_ms(legacy_next[int(ln.source_key)])
            rewound += 1
    assert rewound == rep.rewound > 0
    assert all(not j.shadow for j in (env.store.get_job(ln.job_code) for ln in sw.links(biz)) if j)


def test_a_cutover_that_stopped_nothing_yet_is_still_gated(tmp_path: Path) -> None:
    """Only a cutover that holds legacy jobs it stopped is finished past the gate."""
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    sw.gate.value = GateDecision(ready=False, comparison_id=2, computed_at=env.migrator.clock.now(), reasons=("x",))  # type: ignore[union-attr]
    with pytest.raises(TransitionRefused, match="not ready"):
        sw.cutover(biz, actor="ops")
    assert not sw.half_done


def test_a_dual_run_start_cut_short_after_it_activated_the_new_side_is_finished_by_running_it_again(
    tmp_path: Path,
) -> None:
    """Cut short between the activation and its record, the new side fires beside legacy
    while the business is still recorded on legacy (both, for `status --check`). Run again
    it records the dual-run and leaves every trigger as one uncut start does."""
    env, biz = _xxl(tmp_path)
    sw = ready_switch(env)
    real = sw.registry.transition
    calls = {"n": 0}

    def restarting(*a: Any, **kw: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise StoreUnavailable("the database restarts", "")
        return real(*a, **kw)

    sw.registry.transition = restarting  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailable):
        sw.start_dual_run(biz, shadow=False, actor="ops")
    assert sw.half_done
    active = {t.id for t in env.store.triggers_of(biz_code=biz) if t.state is TriggerState.WAITING}
    assert active and BusinessRegistry(env.own).get(biz).state is BusinessState.LEGACY  # type: ignore[union-attr]
    sw.start_dual_run(biz, shadow=False, actor="ops")
    assert BusinessRegistry(env.own).get(biz).state is BusinessState.DUAL_RUN  # type: ignore[union-attr]
    assert {t.id for t in env.store.triggers_of(biz_code=biz) if t.state is TriggerState.WAITING} == active
    assert [a.to_state for a in BusinessRegistry(env.own).audit(biz)] == ["dual_run"]
