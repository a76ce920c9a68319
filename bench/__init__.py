"""Switchyard benchmarks: `python -m bench [--quick]`; see bench/README.md."""
