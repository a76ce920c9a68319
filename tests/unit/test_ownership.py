"""Never leave a business with nothing firing, on the embedded default (SQLite legacy
databases and store): re-migration after cutover, the switch's own stop vs an operator's,
stopped legacy jobs, rollback hand-over and its refusals, the orphan check, the trigger
operations' guard."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text
from sqlalchemy.engine import Engine

from legacy_sim.seed import seed_batchcenter, seed_xxljob
from migrator.business import BusinessRegistry, TransitionRefused
from migrator.cutover import BusinessSwitch
from migrator.holds import LegacyHolds
from migrator.legacy_control import BatchCenterControl, XxlJobControl
from migrator.model import BusinessState
from migrator.ownership import Firing, classify, ownership
from scheduler_core.model import JobCode
from scheduler_core.model import TriggerState as S
from scheduler_core.occurrences import next_after
from scheduler_core.times import from_ms, to_ms
from switchyard.cli import cli
from tests.backends import mariadb_database
from tests.migration_env import MigrationEnv, make_env, ready_switch

B = BusinessState


@pytest.fixture(params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mariadb)])
def urls(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(legacy URL, target URL): the embedded default, and the real MariaDB for both."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'legacy.db'}", f"sqlite:///{tmp_path / 't.db'}"
        return
    with mariadb_database("legacy") as legacy, mariadb_database("target") as target:
        try:
            yield legacy, target
        finally:
            # a pooled connection left in a transaction would hold the DROP DATABASE back
            while _ENVS:
                env = _ENVS.pop()
                env.legacy.dispose()
                env.store.engine.dispose()


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


_ENVS: list[MigrationEnv] = []


def _env(urls: tuple[str, str], system: str, lineage: str | None = None) -> MigrationEnv:
    env = make_env(urls[0], urls[1], system, lineage)
    _ENVS.append(env)
    return env


def _migrated(urls: tuple[str, str]) -> tuple[MigrationEnv, str]:
    """An xxl-job 3.4 database seeded and migrated; with its first business."""
    env = _env(urls, "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=2, jobs_per_group=12, bad_rows=0, malformed_crons=0, rng_seed=2)
    env.migrator.run()
    return env, BusinessRegistry(env.own).all()[0].biz_code


class RecordingFences:
    """A FencePort that records what the switch asked (the real one is scheduler_core's)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, datetime]] = []

    def raise_fence(self, biz_code: str, at: datetime) -> int:
        self.calls.append(("raise", biz_code, at))
        return 0

    def store_fence(self, biz_code: str, at: datetime) -> int:
        return self.raise_fence(biz_code, at)

    def broadcast_fence(self, biz_code: str) -> None:
        pass

    def lift_fence(self, biz_code: str, at: datetime) -> None:
        self.calls.append(("lift", biz_code, at))


def _switch(env: MigrationEnv, fences: RecordingFences | None = None) -> BusinessSwitch:
    return ready_switch(env, fences=fences)


def _cut_over(
    urls: tuple[str, str], fences: RecordingFences | None = None, *, shadow: bool = False
) -> tuple[MigrationEnv, str, BusinessSwitch]:
    env, biz = _migrated(urls)
    sw = _switch(env, fences)
    sw.start_dual_run(biz, shadow=shadow, actor="ops")
    sw.cutover(biz, actor="ops", reason="test")
    return env, biz, sw


def _states(env: MigrationEnv, biz: str) -> dict[str, S]:
    return {t.job_code: t.state for t in env.store.triggers_of(biz_code=biz)}


def _legacy(env: MigrationEnv) -> dict[str, tuple[int, int]]:
    with env.legacy.connect() as conn:
        return {
            str(i): (int(s), int(n))
            for i, s, n in conn.execute(text("SELECT id, trigger_status, trigger_next_time FROM xxl_job_info"))
        }


def test_remigration_after_cutover_updates_definitions_and_never_pauses(urls: tuple[str, str]) -> None:
    env, biz, sw = _cut_over(urls)
    before = _states(env, biz)
    live = [c for c, s in before.items() if s is S.WAITING]
    legacy = _legacy(env)
    assert live and all(legacy[ln.source_key][0] == 0 for ln in sw.links(biz))  # every legacy job is off now
    summary = env.migrator.run([biz])
    assert summary.counts["update"] == 0, "the cutover's own stop was read as an edit"
    assert _states(env, biz) == before
    # an operator edits a cron in the admin after the cutover: the definition follows,
    # the trigger stays live and keeps what it published
    link = next(ln for ln in sw.links(biz) if ln.trigger.state is S.WAITING and ln.trigger.cron)
    with env.legacy.begin() as conn:
        conn.execute(
            text("UPDATE xxl_job_info SET schedule_conf = '0 0/7 * * * ?' WHERE id = :i"), {"i": int(link.source_key)}
        )
    summary = env.migrator.run([biz])
    assert summary.counts["update"] == 1
    after = env.store.get_trigger(link.trigger.id)  # type: ignore[arg-type]
    assert after is not None and after.cron == "0 0/7 * * * ?" and after.state is S.WAITING
    assert after.next_fire_at >= link.trigger.next_fire_at  # never back over what was published
    assert {c: s for c, s in _states(env, biz).items()} == before


def test_the_switchs_own_stop_is_not_an_operators_stop(urls: tuple[str, str]) -> None:
    """Mid-cutover (the business still dual_run, the legacy jobs already stopped), a
    re-migration or the stream reads `trigger_status = 0`: held, it is the switch's own and
    nothing is paused; the same stop without a hold is an operator's and is mirrored."""
    env, biz = _migrated(urls)
    sw = _switch(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    before = _states(env, biz)
    keys = [ln.source_key for ln in sw.links(biz)]
    running = sw.control.live(keys)
    LegacyHolds(env.own).add("xxl-job", biz, running)
    with env.legacy.begin() as conn:
        conn.execute(text("UPDATE xxl_job_info SET trigger_status = 0"))
    env.migrator.run([biz])
    assert _states(env, biz) == before, "the switch's own stop paused the new side"
    LegacyHolds(env.own).remove("xxl-job", running)  # the same stop, now an operator's
    env.migrator.run([biz])
    assert all(s in (S.PAUSED, S.COMPLETED, S.CANCELLED) for s in _states(env, biz).values())


def test_a_stopped_legacy_job_migrates_paused_and_the_cutover_keeps_it_resumable(urls: tuple[str, str]) -> None:
    env, biz = _migrated(urls)
    sw = _switch(env)
    link = next(ln for ln in sw.links(biz) if ln.trigger.state is S.CREATED)
    with env.legacy.begin() as conn:  # xxl-job's own stop: status 0, next time 0
        conn.execute(
            text("UPDATE xxl_job_info SET trigger_status = 0, trigger_next_time = 0 WHERE id = :i"),
            {"i": int(link.source_key)},
        )
    env.migrator.run([biz])
    assert env.store.get_trigger(link.trigger.id).state is S.PAUSED  # type: ignore[arg-type, union-attr]
    sw.start_dual_run(biz, shadow=False, actor="ops")
    rep = sw.cutover(biz, actor="ops")
    assert env.store.get_trigger(link.trigger.id).state is S.PAUSED  # type: ignore[arg-type, union-attr]
    assert link.source_key not in rep.handover
    assert link.source_key not in LegacyHolds(env.own).of_business(biz)  # an operator's stop, not ours
    url = _url(env.store.engine)
    res = CliRunner().invoke(cli, ["trigger", "resume", str(link.trigger.id), "--url", url, "--json"])
    assert res.exit_code == 0, res.output
    assert env.store.get_trigger(link.trigger.id).state is S.WAITING  # type: ignore[arg-type, union-attr]


def test_rollback_hands_over_behind_the_fence_at_the_legacy_start_margin(urls: tuple[str, str]) -> None:
    fences = RecordingFences()
    env, biz, sw = _cut_over(urls, fences)
    # the new side published an hour ahead (its lookahead)
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET next_fire_at = next_fire_at + 3600000 WHERE state='waiting'"))
    published = {t.job_code: t for t in env.store.triggers_of(biz_code=biz) if t.state is S.WAITING}
    now = env.migrator.clock.now()
    rep = sw.rollback(biz, actor="ops", reason="regression")
    raised = [c for c in fences.calls if c[0] == "raise"]
    assert rep.ok and rep.handover and len(raised) == 1
    fence_at = raised[0][2]
    assert fence_at == now + XxlJobControl.start_margin
    legacy = _legacy(env)
    checked = 0
    for ln in sw.links(biz):
        if ln.job_code not in published:
            continue
        status, nxt = legacy[ln.source_key]
        start = from_ms(nxt)
        assert status == 1
        # legacy takes over at the first occurrence at or after F, long before what the
        # new side had published (those are skipped by the fence)
        t = published[JobCode(ln.job_code)]
        assert fence_at <= start <= t.next_fire_at
        if t.cron:
            assert start == next_after(t, fence_at - timedelta(milliseconds=1))
        checked += int(start < t.next_fire_at)
    assert checked > 0
    assert LegacyHolds(env.own).of_business(biz) == set()
    assert BusinessRegistry(env.own).get(biz).state is B.LEGACY  # type: ignore[union-attr]
    # a dual-run started again lifts the fence at its start: what the new side published
    # ahead of it runs once, and each trigger resumes at its first unpublished occurrence
    later = env.migrator.clock.now()
    sw.start_dual_run(biz, shadow=False, actor="ops")
    assert fences.calls[-1] == ("lift", biz, later)
    resumed = {t.job_code: t for t in env.store.triggers_of(biz_code=biz)}
    assert all(
        resumed[c].next_fire_at == t.next_fire_at
        for c, t in published.items()
        if t.next_fire_at > later and resumed[c].state is S.WAITING
    )


def test_rollback_of_paused_jobs_is_not_a_success_and_says_so_per_job(urls: tuple[str, str]) -> None:
    """What a real xxl-job check saw: after a cutover every new trigger paused (then by a
    re-migration's bug) and the rollback returned exit 0 with an empty hand-over."""
    env, biz, _sw = _cut_over(urls, RecordingFences())
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET state = 'paused' WHERE state = 'waiting'"))
    url = _url(env.store.engine)
    res = CliRunner().invoke(
        cli, ["rollback", "--business", biz, "--url", url, "--legacy-url", _url(env.legacy), "--json"]
    )
    assert res.exit_code == 1, res.output
    body = json.loads(res.output.strip().splitlines()[-1])
    assert body["ok"] is False and body["not_handed_back"]
    assert all("paused on the new side" in why for why in body["not_handed_back"].values())


def test_rollback_refuses_and_changes_nothing_when_a_job_would_fire_nowhere(urls: tuple[str, str]) -> None:
    env, biz, sw = _cut_over(urls, RecordingFences())
    link = next(ln for ln in sw.links(biz) if env.store.get_trigger(ln.trigger.id).state is S.WAITING)  # type: ignore[arg-type, union-attr]
    with env.legacy.begin() as conn:
        conn.execute(text("DELETE FROM xxl_job_info WHERE id = :i"), {"i": int(link.source_key)})
    before = _states(env, biz)
    with pytest.raises(TransitionRefused, match=f"job {link.source_key} .*legacy row is gone"):
        sw.rollback(biz, actor="ops")
    assert _states(env, biz) == before
    assert BusinessRegistry(env.own).get(biz).state is B.CUTOVER  # type: ignore[union-attr]
    assert [c for c in sw.fences.calls if c[0] == "raise"] == []  # type: ignore[union-attr]


def test_status_check_finds_orphans_and_doubles(urls: tuple[str, str]) -> None:
    env, biz, sw = _cut_over(urls)
    url, legacy_url = _url(env.store.engine), _url(env.legacy)
    ok = CliRunner().invoke(cli, ["status", "--url", url, "--check", "--legacy-url", legacy_url])
    assert ok.exit_code == 0, ok.output
    link = next(ln for ln in sw.links(biz) if env.store.get_trigger(ln.trigger.id).state is S.WAITING)  # type: ignore[arg-type, union-attr]
    # a half-done switch: the trigger taken off the scheduler, the legacy job still stopped
    with env.store.engine.begin() as conn:
        conn.execute(text("UPDATE dus_job_trigger SET state = 'created' WHERE id = :i"), {"i": link.trigger.id})
    res = CliRunner().invoke(cli, ["status", "--url", url, "--check", "--json"])
    assert res.exit_code == 1
    rows = {r["business"]: r for r in json.loads(res.stdout)}
    assert [(p["source_key"], p["side"]) for p in rows[biz]["problems"]] == [(link.source_key, "orphaned")]
    # an operator switches another job back on in the legacy admin: it fires on both sides
    other = next(ln for ln in sw.links(biz) if env.store.get_trigger(ln.trigger.id).state is S.WAITING)  # type: ignore[arg-type, union-attr]
    with env.legacy.begin() as conn:
        conn.execute(text("UPDATE xxl_job_info SET trigger_status = 1 WHERE id = :i"), {"i": int(other.source_key)})
    res = CliRunner().invoke(cli, ["status", "--url", url, "--check", "--json", "--legacy-url", legacy_url])
    sides = {p["source_key"]: p["side"] for p in json.loads(res.stdout)[0]["problems"]}
    assert res.exit_code == 1 and sides == {link.source_key: "orphaned", other.source_key: "double"}


@pytest.mark.parametrize(
    "state, shadow, trig, legacy, held, side",
    [
        (B.DUAL_RUN, False, S.WAITING, True, False, Firing.BOTH),
        (B.DUAL_RUN, True, S.WAITING, True, False, Firing.LEGACY),
        (B.DUAL_RUN, True, S.WAITING, False, True, Firing.ORPHANED),
        (B.CUTOVER, False, S.WAITING, False, True, Firing.NEW),
        (B.CUTOVER, False, S.WAITING, True, True, Firing.DOUBLE),
        (B.CUTOVER, False, S.CREATED, False, True, Firing.ORPHANED),
        (B.CUTOVER, False, S.PAUSED, False, False, Firing.PAUSED),
        (B.CUTOVER, False, S.CANCELLED, False, False, Firing.ENDED),
        (B.LEGACY, False, S.CREATED, True, False, Firing.LEGACY),
        (B.LEGACY, False, S.CREATED, False, True, Firing.ORPHANED),
        (B.LEGACY, False, S.WAITING, True, False, Firing.DOUBLE),
    ],
)
def test_which_side_fires_a_job(state: B, shadow: bool, trig: S, legacy: bool, held: bool, side: Firing) -> None:
    assert classify(state, shadow, trig, legacy, held)[0] is side


def test_trigger_operations_that_would_leave_a_job_nowhere_are_refused_or_audited(urls: tuple[str, str]) -> None:
    env, biz, sw = _cut_over(urls)
    url = _url(env.store.engine)
    tid = next(t.id for t in env.store.triggers_of(biz_code=biz) if t.state is S.WAITING)
    res = CliRunner().invoke(cli, ["trigger", "pause", str(tid), "--url", url])
    assert res.exit_code == 5 and "--reason" in res.output
    assert env.store.get_trigger(tid).state is S.WAITING  # type: ignore[arg-type, union-attr]
    res = CliRunner().invoke(
        cli, ["trigger", "pause", str(tid), "--url", url, "--reason", "vendor outage", "--actor", "alice"]
    )
    assert res.exit_code == 0, res.output
    last = BusinessRegistry(env.own).audit(biz)[-1]
    assert (last.actor, last.reason, last.detail["triggers"]) == ("alice", "vendor outage", [tid])
    # paused on both by an audited decision: not an orphan
    assert CliRunner().invoke(cli, ["status", "--url", url, "--check"]).exit_code == 0
    sw.rollback(biz, actor="ops")
    res = CliRunner().invoke(cli, ["trigger", "resume", str(tid), "--url", url])
    assert res.exit_code == 5 and "on legacy" in res.output


def test_batch_center_cancel_after_cutover_is_reported_not_applied(urls: tuple[str, str]) -> None:
    env = _env(urls, "batch-center")
    seed_batchcenter(env.legacy, businesses=1, tasks_per_business=8, bad_rows=0, malformed_crons=0)
    env.migrator.run()
    biz = BusinessRegistry(env.own).all()[0].biz_code
    clock = env.migrator.clock
    sw = ready_switch(env, BatchCenterControl(env.legacy, clock))
    sw.start_dual_run(biz, shadow=False, actor="ops")
    with env.legacy.begin() as conn:  # a running task is the center's until its callback returns
        conn.execute(text("UPDATE bc_task SET status = 0 WHERE status = 1"))
    sw.cutover(biz, actor="ops")
    before = _states(env, biz)
    assert env.migrator.run([biz]).counts["update"] == 0  # the pause (status 5) was the switch's
    link = next(ln for ln in sw.links(biz) if before[ln.job_code] is S.WAITING)
    with env.legacy.begin() as conn:
        conn.execute(text("UPDATE bc_task SET status = 4 WHERE id = :i"), {"i": int(link.source_key)})
    summary = env.migrator.run([biz])
    assert _states(env, biz) == before
    assert any(link.source_key in n and "not applied" in n for n in summary.notes), summary.notes


def test_the_orphan_check_with_only_the_store_infers_legacy(urls: tuple[str, str]) -> None:
    env, biz, _sw = _cut_over(urls)
    owned = {bo.biz_code: bo for bo in ownership(env.store, env.own)}[biz]
    assert not owned.problems and owned.counts()["new"] > 0
    assert to_ms(env.migrator.clock.now()) > 0


def test_a_cutover_run_again_after_it_stopped_half_way_pauses_nothing(urls: tuple[str, str]) -> None:
    """The legacy jobs were stopped (and held) by a cutover that then failed aligning a
    trigger: run again, it must treat them as its own stop, not an operator's."""
    env, biz = _migrated(urls)
    sw = _switch(env)
    sw.start_dual_run(biz, shadow=False, actor="ops")
    live = {c for c, s in _states(env, biz).items() if s is S.WAITING}
    keys = [ln.source_key for ln in sw.links(biz)]
    running = sw.control.live(keys)
    sw.holds.add("xxl-job", biz, running)
    sw.control.stop(keys)  # what the first attempt did before it failed
    sw.cutover(biz, actor="ops", reason="again")
    assert {c for c, s in _states(env, biz).items() if s is S.WAITING} == live
