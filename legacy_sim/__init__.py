"""Simulators of the two legacy schedulers, for the demo and for cutover / rollback tests.

`XxlJobSimulator` (one xxl-job admin) and `BatchCenterSimulator` (one batch-center
instance) run the schedulers' own loops against their own databases (the legacy
schemas of `readers.legacy_ddl`, on SQLite or MariaDB) on a driven clock: they fire
what the real ones would fire, when they would, and write the execution logs the real
ones write, so the readers, the dual-run comparator and the cutover code see a legacy
system that behaves like production. No HTTP calls: an `outcome(job, scheduled_at,
shard) -> (Result, duration_ms)` function decides each attempt (`legacy_sim.outcomes`).
`legacy_sim.seed` writes the deterministic legacy data they run on.

The package ships in the wheel because `switchyard demo` (switchyard/demo.py) runs on
it; besides the demo only the tests and bench/ use it. The import-linter contract "the
legacy simulators and their seed data only for the demo and tests" holds that rule.
"""

from __future__ import annotations

from legacy_sim.batchcenter import BatchCenterSimulator, BcAttempt, BcFired, BcTaskView
from legacy_sim.outcomes import Outcome, Result, always, fail_times, succeed
from legacy_sim.xxljob import XxlAttempt, XxlFired, XxlJobSimulator, XxlJobView

__all__ = [
    "BatchCenterSimulator",
    "BcAttempt",
    "BcFired",
    "BcTaskView",
    "Outcome",
    "Result",
    "XxlAttempt",
    "XxlFired",
    "XxlJobSimulator",
    "XxlJobView",
    "always",
    "fail_times",
    "succeed",
]
