"""The ownership invariant over the switch, as a table (issue 27): every state a job can be
in before the cutover (on or off on legacy x waiting, paused or cancelled on the new side),
resumed on the new side after the cutover or not, with a change stream's read-back of the
legacy rows between the steps or not. After the cutover, after the resume and after the
rollback the job fires on exactly one side, or on neither by an operator's decision on
record: a stop in the legacy admin, or a pause or cancel on the new side with its reason
(and the forced cutover's reason when that cutover is what left it off). `status --check
--legacy-url` (the checker an alert runs) passes at every step."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlalchemy import text

from legacy_sim.seed import seed_xxljob
from migrator.business import BusinessRegistry, TransitionRefused
from migrator.cutover import BusinessSwitch, links_of
from migrator.legacy_control import XxlJobControl
from migrator.model import BusinessState
from migrator.ownership import Firing, ownership
from scheduler_core.model import TriggerId
from switchyard.cli import cli
from tests.migration_env import MigrationEnv, make_env, migrated_xxljob_urls, ready_switch
from tests.operator import operate

PAUSE_REASON = "vendor outage: the new handler stays off"
FORCED = "cut over with the paused job left off on purpose"


def _job(tmp_path: Path) -> tuple[MigrationEnv, str, str, TriggerId]:
    env = make_env(f"sqlite:///{tmp_path / 'xxl.db'}", f"sqlite:///{tmp_path / 't.db'}", "xxl-job", "3.4")
    seed_xxljob(env.legacy, "3.4", groups=1, jobs_per_group=4, bad_rows=0, malformed_crons=0, rng_seed=5)
    with env.legacy.connect() as conn:
        (key,) = conn.execute(
            text("SELECT MIN(id) FROM xxl_job_info WHERE trigger_status = 1 AND schedule_type = 'CRON'")
        ).one()
    env.migrator.run()
    biz = BusinessRegistry(env.own).all()[0].biz_code
    tid = {ln.source_key: ln.trigger.id for ln in links_of(env.store, env.own, biz)}[str(key)]
    assert tid is not None
    return env, biz, str(key), tid


def _stop_in_the_admin(env: MigrationEnv, key: str) -> None:
    """`XxlJobServiceImpl.stop`, as the legacy admin writes it."""
    with env.legacy.begin() as conn:
        conn.execute(
            text(
                "UPDATE xxl_job_info SET trigger_status = 0, trigger_last_time = 0, trigger_next_time = 0 WHERE id = :i"
            ),
            {"i": int(key)},
        )


def _side(env: MigrationEnv, biz: str, key: str) -> Firing:
    control = XxlJobControl(env.legacy, env.migrator.clock)
    owned = ownership(env.store, env.own, lambda _source, keys: control.live(keys), [biz])[0]
    return next(j.side for j in owned.jobs if j.source_key == key)


def _checked(tmp_path: Path, step: str) -> None:
    """`switchyard status --check --legacy-url`: nothing orphaned, nothing double."""
    url, legacy = migrated_xxljob_urls(tmp_path)[1], migrated_xxljob_urls(tmp_path)[3]
    res = CliRunner().invoke(cli, ["status", "--url", url, "--legacy-url", legacy, "--check"])
    assert res.exit_code == 0, f"after {step}: {res.output}"


def _off_on_record(env: MigrationEnv, biz: str, legacy_on: bool) -> None:
    """Off on both sides: only by an operator's decision on record."""
    if not legacy_on:
        return  # stopped in the legacy admin by the operator (the cutover mirrors it)
    reasons = {a.reason for a in BusinessRegistry(env.own).audit(biz)}
    assert PAUSE_REASON in reasons and FORCED in reasons, reasons


def _readback(env: MigrationEnv, biz: str, key: str, on: bool) -> None:
    """What `migrate stream` or `migrate run` does with the legacy rows after the switch's
    own writes and the operator's new-side actions: nothing to the side."""
    if on:
        before = _side(env, biz, key)
        env.migrator.run()
        assert _side(env, biz, key) is before


@pytest.mark.parametrize("readback", [False, True], ids=["no-stream", "read-back"])
@pytest.mark.parametrize("resumed", [False, True], ids=["kept", "resumed"])
@pytest.mark.parametrize("new", ["waiting", "paused", "cancelled"])
@pytest.mark.parametrize("legacy_on", [True, False], ids=["legacy-on", "legacy-off"])
def test_one_live_side_or_none_on_record(
    tmp_path: Path, legacy_on: bool, new: str, resumed: bool, readback: bool
) -> None:
    env, biz, key, tid = _job(tmp_path)
    switch = ready_switch(env)
    switch.start_dual_run(biz, shadow=False, actor="ops")
    # the state before the switch
    if new != "waiting":
        assert operate(env.store, "pause" if new == "paused" else "cancel", tid, PAUSE_REASON)
    if not legacy_on:
        _stop_in_the_admin(env, key)
    if readback:
        # during the dual-run the read-back mirrors the operator's stop in the legacy admin
        env.migrator.run()
        if not legacy_on and new == "waiting":
            assert _side(env, biz, key) is Firing.PAUSED
    _checked(tmp_path, "the dual-run")

    # the cutover: one that would leave a job running on legacy fire nowhere is refused, nothing changed
    if legacy_on and new != "waiting":
        with pytest.raises(TransitionRefused, match=rf"would fire on neither side: {key} \(.*, {new}\)"):
            switch.cutover(biz, actor="ops")
        assert BusinessRegistry(env.own).get(biz).state is BusinessState.DUAL_RUN  # type: ignore[union-attr]
        assert key in XxlJobControl(env.legacy, env.migrator.clock).live([key])
        switch.cutover(biz, actor="ops", force=True, reason=FORCED)
    else:
        switch.cutover(biz, actor="ops")
    expected = Firing.NEW if legacy_on and new == "waiting" else Firing.ENDED if new == "cancelled" else Firing.PAUSED
    assert _side(env, biz, key) is expected
    if expected is not Firing.NEW:
        _off_on_record(env, biz, legacy_on)
    _readback(env, biz, key, readback)
    _checked(tmp_path, "the cutover")

    if resumed:
        # the operator resumes it on the new side (a paused job only: the others are not paused)
        assert operate(env.store, "resume", tid) is (expected is Firing.PAUSED)
        expected = Firing.NEW if expected is Firing.PAUSED else expected
        assert _side(env, biz, key) is expected
        _readback(env, biz, key, readback)
        _checked(tmp_path, "the resume")

    report = BusinessSwitch(
        env.store, env.own, XxlJobControl(env.legacy, env.migrator.clock), env.migrator.clock
    ).rollback(biz, actor="ops", reason="drill")
    if expected is Firing.NEW:
        # live on the new side: handed back, started on legacy, its trigger taken off
        assert key in report.handover and key not in report.not_handed_back, report
        assert _side(env, biz, key) is Firing.LEGACY
    else:
        # off on both by the operator: it stays off; when the cutover stopped it on legacy,
        # the rollback says so (not a success: the job is named)
        assert _side(env, biz, key) is expected
        assert (key in report.not_handed_back) is legacy_on, report
        _off_on_record(env, biz, legacy_on)
    _readback(env, biz, key, readback)
    _checked(tmp_path, "the rollback")
