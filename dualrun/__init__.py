"""Per-business comparison of the legacy and the new path: metrics, matching, verdicts."""
