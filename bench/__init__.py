"""Benchmarks (`make bench`): they measure, they do not assert. Results: docs/BENCHMARKS.md."""
