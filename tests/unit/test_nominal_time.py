"""The nominal fire time of an xxl-job log row (`dualrun.match.assign_nominal`): xxl-job
logs only the whole-second trigger_time, so a row belongs to the latest expected
occurrence at or before trigger_time + `early`."""

from __future__ import annotations

import numpy as np

from dualrun.frames import NONE, SCHEDULE
from dualrun.match import Table, assign_nominal
from dualrun.settings import MatchSettings

S = 1000
T0 = 1_796_592_952_000  # a whole second


def _nominal(trig: list[int], expected: list[int]) -> list[int]:
    n = len(trig)
    leg = Table(
        {
            "sched": np.full(n, NONE, dtype=np.int64),
            "kind": np.full(n, SCHEDULE, dtype=np.int64),
            "trig": np.asarray(trig, dtype=np.int64),
            "job": np.zeros(n, dtype=np.int64),
            "shard": np.zeros(n, dtype=np.int64),
            "status": np.zeros(n, dtype=np.int64),
        }
    )
    exp = Table({"sched": np.asarray(expected, dtype=np.int64), "job": np.zeros(len(expected), dtype=np.int64)})
    return [int(v) for v in assign_nominal(leg, exp, MatchSettings())]


def test_a_job_due_every_second_keeps_each_fire_on_its_own_occurrence() -> None:
    """With `early` a whole second, the row of T was read as T + 1 s: at a rollback the
    first legacy fire looked like the one after it, and the handover occurrence "fired by
    neither side" (the chaos soak, every xxl-job rollback of its every-second jobs)."""
    every_second = [T0 + k * S for k in range(-3, 6)]
    fired = [T0, T0 + S, T0 + 2 * S]
    assert _nominal(fired, every_second) == fired


def test_a_2x_fix_rate_fire_up_to_999_ms_early_still_finds_its_occurrence() -> None:
    """A 2.x FIX_RATE next time keeps a millisecond part and fires at the start of its
    second: logged at that whole second, before its nominal time."""
    nominal = [T0 + 700, T0 + 10 * S + 700]
    assert _nominal([T0, T0 + 10 * S], nominal) == nominal
    assert _nominal([T0 + 2 * S], nominal) == [T0 + 700]  # late by 1.3 s: still that one
