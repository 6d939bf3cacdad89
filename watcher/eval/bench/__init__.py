"""Benchmarks behind `compactd bench NAME` (each prints JSON; see docs/BENCHMARKS.md)."""
