"""A rollback of a trigger the new side is behind on (just resumed, or a leader failing
over: its next occurrence not published yet, and already due) must not hand legacy an
occurrence legacy can no longer pick up. The chaos soak (docs/soak.md, seeds 5 and 7)
found three occurrences fired by neither side: each was F of a job in a rollback that
came within a second of a resume, and F was 1.5-2 s before the rollback's fence.
The new side now publishes its unpublished occurrences before the fence as runs, and
legacy starts at the fence (`BusinessSwitch._run_before_fence`)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from pathlib import Path

from sqlalchemy import text

from migrator.cutover import BusinessSwitch
from migrator.legacy_control import PRE_READ, XxlJobControl
from migrator.ownership import Firing, ownership
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock
from scheduler_core.fence import FenceService
from scheduler_core.model import Trigger, TriggerState
from scheduler_core.ports import Transition
from scheduler_core.store.supersedes import SqlSupersedes
from scheduler_core.times import to_ms
from tests.migration_env import MigrationEnv, migrated_xxljob, ready_switch
from tests.unit.test_handover_edges import S, _cron, _switch


def _every_second_behind(env: MigrationEnv, trigger_id: object, now: datetime) -> datetime:
    """The trigger made every second, its first unpublished occurrence 3 s ago (the new side
    behind: just resumed, a leader failing over); returns that occurrence."""
    behind_at = now.replace(microsecond=0) - 3 * S
    with env.store.engine.begin() as conn:
        conn.execute(
            text("UPDATE dus_job_trigger SET cron_expr = '* * * * * ?', next_fire_at = :at WHERE id = :id"),
            {"at": to_ms(behind_at), "id": trigger_id},
        )
    return behind_at


def _pending_until(env: MigrationEnv, trigger_id: object, behind_at: datetime, fence_at: datetime) -> list[int]:
    """The trigger's pending runs, and every second from `behind_at` up to the fence (want)."""
    (pending,) = [s for s in SqlSupersedes(env.store).supersedes() if s.trigger_id == trigger_id]
    assert list(pending.pending_ms) == [to_ms(behind_at + k * S) for k in range(int((fence_at - behind_at) / S) + 1)
                                         if behind_at + k * S < fence_at]  # fmt: skip
    return list(pending.pending_ms)


def _switch_of(env: MigrationEnv) -> BusinessSwitch:
    return ready_switch(env, fences=FenceService(env.store, InProcessBus(env.migrator.clock)))


def test_legacy_is_never_handed_an_occurrence_already_due(tmp_path: Path) -> None:
    sw = _switch(tmp_path)
    now = sw.clock.now()
    fence_at = sw._handover_instant()  # now + the legacy side's start margin
    behind = _cron("* * * * * ?", now - S)  # due a second ago, never published by the new side
    start = sw._legacy_start(behind, fence_at)
    assert start is not None and start >= fence_at


def test_a_rollback_runs_the_occurrences_the_new_side_is_behind_on_and_legacy_starts_at_the_fence(
    tmp_path: Path,
) -> None:
    """End to end through BusinessSwitch.rollback on a cut-over xxl-job business whose
    every-second job the new side is 3 s behind on: legacy starts at the fence (never a
    time it would lose), and the occurrences from the one behind up to the fence are the
    new side's pending runs (the relay that publishes a resume's backlog publishes them)."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    sw = _switch_of(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops", reason="go")
    (ln, *_) = sw.links(biz)
    now = sw.clock.now()
    behind_at = now.replace(microsecond=0) - 3 * S
    with env.store.engine.begin() as conn:  # every second, first unpublished occurrence 3 s ago
        conn.execute(
            text("UPDATE dus_job_trigger SET cron_expr = '* * * * * ?', next_fire_at = :at WHERE id = :id"),
            {"at": to_ms(behind_at), "id": ln.trigger.id},
        )
    rep = sw.rollback(biz, actor="ops", reason="back")
    fence_at = datetime.fromisoformat(rep.fence_at)  # type: ignore[arg-type]
    with env.legacy.connect() as conn:
        status, next_ms = conn.execute(
            text("SELECT trigger_status, trigger_next_time FROM xxl_job_info WHERE id = :id"),
            {"id": int(ln.source_key)},
        ).one()
    assert status == 1 and next_ms >= to_ms(fence_at), (next_ms, rep.fence_at)
    want = _pending_until(env, ln.trigger.id, behind_at, fence_at)
    # every occurrence accounted for: the new side's runs up to the fence, legacy's from it
    assert want[-1] + 1000 == next_ms


def test_a_rollback_from_a_live_dual_run_runs_what_the_new_side_is_behind_on_up_to_the_fence(
    tmp_path: Path,
) -> None:
    """In a live dual-run both sides fire up to the fence: a rollback right after a resume
    (the new side 3 s behind) left the new side's last occurrences before the fence unrun
    while legacy fired them (chaos soak, seed 7: 6 occurrences). They are its pending runs."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    sw = _switch_of(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    (ln, *_) = sw.links(biz)
    behind_at = _every_second_behind(env, ln.trigger.id, sw.clock.now())
    rep = sw.rollback(biz, actor="ops", reason="back")
    fence_at = datetime.fromisoformat(rep.fence_at)  # type: ignore[arg-type]
    _pending_until(env, ln.trigger.id, behind_at, fence_at)


def test_a_rollback_from_a_shadow_dual_run_never_runs_what_the_new_side_was_behind_on(tmp_path: Path) -> None:
    """In a shadow dual-run the new side invokes nothing: legacy fired every occurrence.
    The chaos soak (seed 11) saw a rollback publish the 98 occurrences the new side was
    behind on as real runs (each ran a second time, at the rollback's instant)."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    sw = _switch_of(env)
    sw.start_dual_run(biz, shadow=True, actor="ops")
    (ln, *_) = sw.links(biz)
    _every_second_behind(env, ln.trigger.id, sw.clock.now())
    rep = sw.rollback(biz, actor="ops", reason="back")
    assert rep.fence_at is not None
    assert [s for s in SqlSupersedes(env.store).supersedes() if s.pending_ms] == []


def test_a_rollback_of_a_trigger_whose_last_occurrences_fall_before_the_fence_runs_them_and_ends_it(
    tmp_path: Path,
) -> None:
    """A trigger with nothing left from the fence on (its end before the fence, or a
    one-shot due before it), not yet published by the new side: handed to legacy, its last
    occurrences would be due inside legacy's start margin, which loses them (fired by
    neither side). The new side runs them, the trigger ends (completed: `status --check`
    says ended, not orphaned, also after a read-back of the legacy rows) and legacy is
    not started (started, it would fire them a second time, or fire on past the end)."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    sw = _switch_of(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops", reason="go")
    ln, other = sw.links(biz)[:2]
    now = sw.clock.now()
    behind_at = now.replace(microsecond=0) - 2 * S
    end_at = behind_at + 3 * S  # before the fence (now + the start margin, seconds ahead)
    assert end_at < sw._handover_instant()
    with env.store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE dus_job_trigger SET cron_expr = '* * * * * ?', next_fire_at = :at, end_at = :end WHERE id = :id"
            ),
            {"at": to_ms(behind_at), "end": to_ms(end_at), "id": ln.trigger.id},
        )
    rep = sw.rollback(biz, actor="ops", reason="back")
    assert ln.source_key not in rep.handover and ln.source_key not in rep.not_handed_back
    assert any(n.startswith(f"{ln.source_key}: every occurrence left is before the fence") for n in rep.notes)
    assert other.source_key in rep.handover  # the business's other job is handed back as ever
    with env.legacy.connect() as conn:
        status = conn.execute(
            text("SELECT trigger_status FROM xxl_job_info WHERE id = :id"), {"id": int(ln.source_key)}
        ).scalar_one()
    assert status == 0, "legacy was started for a job with nothing left to fire"
    t = env.store.get_trigger(ln.trigger.id)  # type: ignore[arg-type]
    assert t is not None and t.state.value == "completed"
    (pending,) = [s for s in SqlSupersedes(env.store).supersedes() if s.trigger_id == ln.trigger.id]
    want, at = [], behind_at
    while at <= end_at:
        want.append(to_ms(at))
        at += S
    assert list(pending.pending_ms) == want
    control = XxlJobControl(env.legacy, env.migrator.clock)
    for step in ("rollback", "read-back"):
        owned = ownership(env.store, env.own, lambda _source, keys: control.live(keys), [biz])[0]
        sides = {j.source_key: j.side for j in owned.jobs}
        assert sides[ln.source_key] is Firing.ENDED, (step, sides)
        assert not owned.problems, (step, owned.problems)
        env.migrator.run()


def test_a_trigger_ending_before_the_fence_that_an_operator_pauses_meanwhile_is_not_said_ended(
    tmp_path: Path,
) -> None:
    """The rollback ends a trigger whose last occurrences fall before the fence by a CAS
    created -> completed. Paused by an operator in between, the CAS lost and the report
    still said "the job ends there": it now says what the trigger is."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    sw = _switch_of(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops", reason="go")
    ln = sw.links(biz)[0]
    behind_at = sw.clock.now().replace(microsecond=0) - 2 * S
    with env.store.engine.begin() as conn:
        conn.execute(
            text(
                "UPDATE dus_job_trigger SET cron_expr = '* * * * * ?', next_fire_at = :at, end_at = :end WHERE id = :id"
            ),
            {"at": to_ms(behind_at), "end": to_ms(behind_at + 3 * S), "id": ln.trigger.id},
        )
    run_before = sw._run_before_fence

    def paused_meanwhile(t: Trigger, fence_at: datetime) -> None:
        run_before(t, fence_at)
        if t.id == ln.trigger.id:
            assert env.store.cas(Transition(ids=[t.id], from_state=TriggerState.CREATED, to_state=TriggerState.PAUSED))  # type: ignore[list-item]

    sw._run_before_fence = paused_meanwhile  # type: ignore[method-assign]
    rep = sw.rollback(biz, actor="ops", reason="back")
    (said,) = [n for n in rep.notes if n.startswith(f"{ln.source_key}: every occurrence left is before the fence")]
    assert "is paused, not ended" in said and "ends there" not in said
    t = env.store.get_trigger(ln.trigger.id)  # type: ignore[arg-type]
    assert t is not None and t.state is TriggerState.PAUSED


def test_a_broker_slow_to_take_the_fence_never_delays_the_legacy_start(tmp_path: Path) -> None:
    """F = now + legacy's start margin, and legacy must be started inside that margin (the
    xxl-job admin fires a job it finds less than its pre-read ahead late, or not at all).
    The rollback broadcast the fence before starting legacy: a broker 7 s slow to take the
    broadcast (the soak's loaded Pulsar) left the first occurrence at F fired by neither
    side. The fence is stored first, legacy started, then the broadcast goes out."""
    env, biz = migrated_xxljob(tmp_path, groups=1, jobs_per_group=2)
    clock = env.migrator.clock
    assert isinstance(clock, ManualClock)
    manual: ManualClock = clock

    class SlowBroker(InProcessBus):
        def publish_control(self, biz_code: str, payload: bytes) -> None:
            manual.advance(7 * S)  # the broadcast takes 7 s
            super().publish_control(biz_code, payload)

    written: list[datetime] = []

    class Recorded(XxlJobControl):
        def start(self, next_due: Mapping[str, datetime]) -> list[str]:
            written.append(clock.now())
            return super().start(next_due)

    sw = ready_switch(env, Recorded(env.legacy, clock), fences=FenceService(env.store, SlowBroker(clock)))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops", reason="go")
    ln = sw.links(biz)[0]
    with env.store.engine.begin() as conn:  # due every second: its first occurrence from F is F's second
        conn.execute(
            text("UPDATE dus_job_trigger SET cron_expr = '* * * * * ?', next_fire_at = :at WHERE id = :id"),
            {"at": to_ms(clock.now().replace(microsecond=0) + S), "id": ln.trigger.id},
        )
    rep = sw.rollback(biz, actor="ops", reason="back")
    assert ln.source_key in rep.handover and written
    first = datetime.fromisoformat(rep.handover[ln.source_key])
    assert first - written[-1] >= PRE_READ, f"legacy started {first - written[-1]} before its first occurrence"
