"""Shared value types and small utilities that agent/, tools/ and sim/ all import; imports none of them.

actions: findings, proposals, decisions, outcomes, history. cluster: jobs, nodes, pools, metric
series. observation: one sweep's reading. durations, files: parsing helpers. redact: secret scrubbing.
"""
