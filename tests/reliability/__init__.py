"""Reliability tests: bad inputs, properties, interruption and integrity, safety (tests/reliability/README.md)."""
