"""Windowed, explainable waste detectors (the rule engine), with the evidence text beside them.

Owns idle, zombie, over-provisioned, node health and oversized-pool findings and long-tail
protection (unknown is never idle). Imports only core, agent.config and tools' pure helpers.
"""
