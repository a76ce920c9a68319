"""Per-business comparison of the legacy and the new path: metrics, matching, verdicts.

- `dualrun.collect.compare_business(store, own, reader, CompareRequest(...), settings=, now=, probe=)`
  fetches both sides of a window and returns a `dualrun.model.Comparison`;
- `dualrun.verdict_store.put_comparison(own, comparison)` stores it in `dus_comparison`;
- `dualrun.verdict_store.latest(own, business) -> StoredVerdict | None` is what a cutover
  gate reads (`.is_ready`, `.reasons`, `.computed_at`, `.age(now)`, `.is_fresh(now, max_age)`);
- `dualrun.watch.Watch` compares on a schedule (APScheduler 3.x).

`store` is the trigger store (the new side's fired records, through its port and
scheduler_core.store.reads); `own` is dual-run's store (`dualrun.store.DualRunStore`: its
comparison table, and the migrator's records through `dualrun.ports.MigrationRecords`),
which the composition root builds (`switchyard.wiring.dualrun_store`).
"""
