"""novasched's benchmark: ``python -m benchmarks`` (see docs/benchmarks.md)."""
