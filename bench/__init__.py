"""Benchmarks (SPEC S18): each module prints one JSON line; run as `python -m bench.<name>`."""
