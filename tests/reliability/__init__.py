"""Reliability tests: bad inputs, properties, interruption and integrity, safety (benchmarks/reliability.md)."""
