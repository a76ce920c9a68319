"""A migrate run's snapshot that straddles a rollback: it read a legacy job stopped (by the
cutover) before the rollback restarted it, and the job's hold after the rollback dropped
it. The cutover's own stop must not be taken for an operator's and pause the trigger (seen
once in tests/integration/test_switch_beside_stream.py under load)."""

from __future__ import annotations

from pathlib import Path

from migrator.apply import Action
from scheduler_core.model import TriggerState
from tests.migration_env import migrated_xxljob, ready_switch


def _paused(writes: list) -> set[str]:  # type: ignore[type-arg]
    return {
        w.source_key
        for w in writes
        if w.action is not Action.QUARANTINE and w.mapped is not None and w.mapped.trigger.state is TriggerState.PAUSED
    }


def test_a_snapshot_read_before_a_rollback_pauses_nothing(tmp_path: Path) -> None:
    env, biz = migrated_xxljob(tmp_path)
    running = {d.source_key for d in env.reader.definitions() if d.enabled}
    sw = ready_switch(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    sw.cutover(biz, actor="ops")
    legacy_biz = {b.biz_code: b for b in env.reader.businesses()}
    before = list(env.reader.definitions())  # the snapshot's read, before the rollback
    stopped_by_cutover = {d.source_key for d in before if not d.enabled} & running
    assert stopped_by_cutover, "the cutover stopped no legacy job"
    sw.rollback(biz, actor="ops")  # restarts the legacy jobs, then drops their holds

    # without reading the rows again, the cutover's stops look like an operator's
    blind = env.migrator.decide(before, legacy_biz)
    assert _paused(blind) & stopped_by_cutover, "the race this guards against did not show"
    seen_again = env.migrator.decide(before, legacy_biz, recheck=env.reader.definitions_by_keys)
    assert not (_paused(seen_again) & stopped_by_cutover)
