"""What GPU Steward remembers: the append-only audit log, pending approvals, cost and savings.

Imports only core and agent.config.
"""
