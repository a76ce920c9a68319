"""Command and callback delivery: the in-process bus (embedded) and Pulsar (real)."""
