"""Configuration: the operator's policy file (validated) and the settings object (env STEWARD_*).

Imports only core and agent.assets.
"""
