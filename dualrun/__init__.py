"""Per-business comparison of the legacy and the new path: metrics, matching, verdicts.

- `dualrun.collect.compare_business(store, reader, CompareRequest(...), settings=, now=, probe=)`
  fetches both sides of a window and returns a `dualrun.model.Comparison`;
- `dualrun.verdict_store.put_comparison(store, comparison)` stores it in `dus_comparison`;
- `dualrun.verdict_store.latest(store, biz_code) -> StoredVerdict | None` is what a cutover
  gate reads (`.is_ready`, `.reasons`, `.computed_at`, `.age(now)`, `.is_fresh(now, max_age)`);
- `dualrun.watch.Watch` compares on a schedule (APScheduler 3.x).
"""
