"""Benchmarks and benchmark tooling for dstp (not installed with the package)."""
