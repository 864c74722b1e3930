"""Scenario suites, scoring, trace replay and benchmarks."""
