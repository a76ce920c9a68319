"""A set of businesses in every state, built with the project's own APIs (seed, migrate,
dual-run, compare, cutover, rollback), for the console's tests: one left on legacy, one
dual-running, one cut over with an orphaned job (a half-done switch: its trigger taken
off the scheduler, the legacy job stopped), one cut over and rolled back."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import text

from dualrun.collect import CompareRequest, compare_business
from dualrun.model import Window
from dualrun.settings import CompareSettings
from dualrun.verdict_store import put_comparison
from legacy_sim.seed import seed_xxljob
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch
from migrator.legacy_control import XxlJobControl
from migrator.ports import GateDecision
from scheduler_core.clock import ManualClock
from scheduler_core.model import TriggerState
from tests.migration_env import FixedGate, MigrationEnv, make_env


@dataclass
class ConsoleState:
    env: MigrationEnv
    legacy: str  # business codes by state
    dual_run: str
    cutover: str
    rolled_back: str
    orphan_key: str  # legacy key of the orphaned job (in `cutover`)
    orphan_code: str


def build_state(
    legacy_url: str, target_url: str, *, groups: int = 4, jobs_per_group: int = 8, bad_rows: int = 2
) -> ConsoleState:
    env = make_env(legacy_url, target_url, "xxl-job", "3.4")
    seed_xxljob(
        env.legacy,
        "3.4",
        groups=groups,
        jobs_per_group=jobs_per_group,
        bad_rows=bad_rows,
        malformed_crons=0,
        rng_seed=7,
    )
    env.migrator.run()
    clock = env.migrator.clock
    assert isinstance(clock, ManualClock)  # make_env drives the migration on a manual clock
    codes = [b.biz_code for b in BusinessRegistry(env.own).all()]
    legacy, dual, cut, back = codes[:4]
    switch = BusinessSwitch(
        env.store,
        env.own,
        XxlJobControl(env.legacy, clock),
        clock,
        FixedGate(GateDecision(ready=True, comparison_id=1, computed_at=clock.now())),
    )
    for code in (dual, cut, back):
        switch.start_dual_run(code, shadow=False, actor="ops", reason="console test")
    clock.advance(timedelta(minutes=40))
    window = Window(start=clock.now() - timedelta(minutes=35), end=clock.now())
    for code in (dual, cut, back):  # real verdicts (not ready: nothing fired in this setup), with reasons
        put_comparison(
            env.dual,
            compare_business(
                env.store,
                env.dual,
                env.reader,
                CompareRequest(biz_code=code, window=window),
                settings=CompareSettings(),
                now=clock.now(),
            ),
        )
    switch.cutover(cut, actor="alice", reason="verdict reviewed")
    switch.cutover(back, actor="alice", reason="verdict reviewed")
    switch.rollback(back, actor="bob", reason="failures on the new path")
    link = next(
        ln
        for ln in switch.links(cut)
        if (t := env.store.get_trigger(ln.trigger.id)) is not None  # type: ignore[arg-type]
        and t.state is TriggerState.WAITING
    )
    with env.store.engine.begin() as conn:  # a half-done switch: off the scheduler, legacy stopped
        conn.execute(text("UPDATE dus_job_trigger SET state = 'created' WHERE id = :i"), {"i": link.trigger.id})
    return ConsoleState(env, legacy, dual, cut, back, link.source_key, link.job_code)
