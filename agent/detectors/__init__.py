"""Windowed, explainable waste detectors (the rule engine)."""
