"""The exact boundary as a property: random switch instants, one-shot, cron and
fixed-rate triggers, both directions. Outside dual-run every occurrence is fired by
exactly one side: zero missing and zero doubled across the switch.

The boundary is judged by the comparator's own matching (`dualrun.boundary`: the legacy
log rows as the readers decode them, the fired records, `dualrun.match`), so a mismatch
the report would show across the switch fails the property; the demo's occurrence
counter (`switchyard.demo._boundary`, over the simulators' own fire lists) is asserted
too. With a rollback, both handovers are checked: the new side owns [cutover H,
rollback F), the legacy side owns F on."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from tempfile import TemporaryDirectory

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from dualrun.boundary import HandoverPlan, check_boundary
from dualrun.model import Window
from migrator.apply import Migrator
from migrator.business import BusinessRegistry
from migrator.cutover import BusinessSwitch
from migrator.target import TargetWriter
from scheduler_core.bus.memory import InProcessBus
from scheduler_core.clock import ManualClock
from scheduler_core.executor import Executor, HandlerResult
from scheduler_core.fence import FenceService
from scheduler_core.store.engine import make_engine
from scheduler_core.store.sql import SqlTriggerStore
from switchyard.demo import (
    START,
    Handover,
    _advance,
    _boundary,
    _fires_after,
    _inline_side,
    _Legacy,
    _rollback_handover,
)
from switchyard.schema import init_schema
from switchyard.wiring import dualrun_store, migrator_store


class AlwaysReady:
    def decision(self, biz_code: str):  # type: ignore[no-untyped-def]
        from migrator.ports import GateDecision

        return GateDecision(ready=True, comparison_id=1, computed_at=None)


def _one_shots(lg: _Legacy, clock: ManualClock, offsets_s: list[int]) -> None:
    """Turn some batch-center tasks into DELAY tasks due around the switch."""
    if lg.source != "batch-center":
        return
    with lg.engine.begin() as conn:
        ids = [
            i for (i,) in conn.execute(text("SELECT id FROM bc_task WHERE status = 0 AND task_type = 2 ORDER BY id"))
        ]
        for task_id, off in zip(ids[-len(offsets_s) :], offsets_s, strict=False):
            wall = (START + timedelta(hours=8, seconds=off)).strftime("%Y-%m-%d %H:%M:%S")
            conn.execute(
                text("UPDATE bc_task SET task_type = 1, cron_expr = NULL, fire_time = :f WHERE id = :id"),
                {"f": wall, "id": task_id},
            )


# the parameters of the property test, in order
_EXAMPLE_FIELDS = (
    "source",
    "dual_s",
    "after_cutover_s",
    "shadow",
    "roll_back",
    "one_shot_offsets",
    "lookahead_min",
    "fenced",
)
# the examples hypothesis always runs, as the test's parameters in _EXAMPLE_FIELDS order
_EXAMPLES = [
    # found by hypothesis: a one-shot task RUNNING at the cutover instant (the control must
    # wait for it while the center runs on)
    ("batch-center", 120, 60, False, False, [60], 30, False),
    # ... and a one-shot due after a shadow cutover, already published (shadow) by the lookahead
    ("batch-center", 120, 60, True, False, [911, 60], 30, False),
    # found by hypothesis (in the check): a one-shot handed to the new side at the cutover and
    # back to legacy by the rollback before it was due, both at its fire time: the later wins
    ("batch-center", 120, 60, False, True, [1102, 60], 3, False),
    ("xxl-job", 300, 300, False, True, [60], 30, True),
    ("batch-center", 300, 300, True, True, [700, 620], 30, True),
]


def _examples(fn):  # type: ignore[no-untyped-def]
    for row in reversed(_EXAMPLES):
        fn = example(**dict(zip(_EXAMPLE_FIELDS, row, strict=True)))(fn)
    return fn


# ~2-3 s per example on the 2-core box: 20 drawn + the explicit ones fit in about a minute
# (80 s with the suite's workers beside it): above the default per-test bound's margin
@pytest.mark.timeout(600)
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.sampled_from(["xxl-job", "batch-center"]),
    dual_s=st.integers(min_value=120, max_value=900),
    after_cutover_s=st.integers(min_value=60, max_value=900),
    shadow=st.booleans(),
    roll_back=st.booleans(),
    one_shot_offsets=st.lists(st.integers(min_value=60, max_value=2400), min_size=1, max_size=2),
    # the default 30 min, or short enough that the legacy side owns occurrences inside
    # the run after a rollback (F, the first occurrence the new side has not admitted,
    # is about one lookahead after the rollback)
    lookahead_min=st.sampled_from([30, 3]),
    # a rollback through the fence (F = now + the legacy start margin; what the new side
    # published from F on is skipped), or without one (F = its first unpublished occurrence)
    fenced=st.booleans(),
)
@_examples
def test_every_occurrence_is_fired_by_exactly_one_side(
    source: str,
    dual_s: int,
    after_cutover_s: int,
    shadow: bool,
    roll_back: bool,
    one_shot_offsets: list[int],
    lookahead_min: int,
    fenced: bool,
) -> None:
    with TemporaryDirectory() as tmp:
        work = Path(tmp)
        clock = ManualClock(START)
        lg = _Legacy(source, f"sqlite:///{work / 'legacy.db'}", clock)
        _one_shots(lg, clock, one_shot_offsets)
        engine = make_engine(f"sqlite:///{work / 't.db'}")
        init_schema(engine, 4)
        store = SqlTriggerStore(engine, clock)
        _advance(clock, timedelta(minutes=5), [lg.sim], None)
        Migrator(lg.reader, TargetWriter(store, migrator_store(store)), clock).run()
        biz = BusinessRegistry(migrator_store(store)).all()[0].biz_code
        bus = InProcessBus(clock)
        sw = BusinessSwitch(
            store,
            migrator_store(store),
            lg.control,
            clock,
            AlwaysReady(),
            max_verdict_age=timedelta(days=9999),
            fences=FenceService(store, bus) if fenced else None,
        )
        sw.start_dual_run(biz, shadow=shadow, actor="prop")
        ex = Executor(bus, biz, clock=clock)
        ex.handler()(lambda ctx: HandlerResult(ok=True))
        side = _inline_side(store, bus, clock, [ex], lookahead=timedelta(minutes=lookahead_min))
        start = clock.now()
        _advance(clock, timedelta(seconds=dual_s), [lg.sim], side)
        cut_at = clock.now()
        rep = sw.cutover(biz, actor="prop", reason="property")
        handover = Handover(to_new=True, first={k: datetime.fromisoformat(v) for k, v in rep.handover.items()})
        switches = [HandoverPlan(rep.handover, to_new=True, at=cut_at)]
        _advance(clock, timedelta(seconds=after_cutover_s), [lg.sim], side)
        if roll_back:
            back_at = clock.now()
            back = sw.rollback(biz, actor="prop", reason="property")
            handover = _rollback_handover(back, sw.links(biz))
            switches.append(HandoverPlan(back.handover, to_new=False, at=back_at))
            _advance(clock, timedelta(minutes=15), [lg.sim], side)
        else:
            _advance(clock, timedelta(minutes=10), [lg.sim], side)
        horizon = clock.now() - timedelta(minutes=1)
        what = f"{source} shadow={shadow} rollback={roll_back} fenced={fenced} lookahead={lookahead_min}m"
        # the report's matching across the switch(es)
        check = check_boundary(
            store,
            dualrun_store(store),
            lg.reader,
            biz,
            switches,
            window=Window(start=start, end=horizon),
            now=clock.now(),
        )
        assert check.owned > 0, f"{what}: no occurrence after the handover inside the run"
        assert check.clean, (
            f"{what}: {check.missing} missing, {check.doubled} doubled, {check.stray} stray "
            "across the switch:\n" + "\n".join(map(str, check.issues[:20]))
        )
        # and the demo's own count, from the simulators' fire lists (the last switch)
        legacy, new = _fires_after(store, migrator_store(store), lg, biz, start)
        triggers = {ln.source_key: ln.trigger for ln in sw.links(biz)}
        _checked, missing, doubled = _boundary(handover, legacy, new, horizon=horizon, triggers=triggers)
        assert (missing, doubled) == (0, 0), f"{what}: {missing} missing, {doubled} doubled across the switch"
        ex.close()
        side[0].shutdown()
        engine.dispose()
        lg.engine.dispose()
