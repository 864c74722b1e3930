"""What GPU Steward remembers: the append-only, hash-chained audit log, approvals (answered exactly once, never
lost), cost and savings; `store.py` opens the SQLite stores read-only instead of failing on a bad data dir.

Imports only core and agent.config.
"""
