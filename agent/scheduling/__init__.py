"""Scheduled sweeps: when to sweep, and which replica is allowed to."""
