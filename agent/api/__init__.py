"""The HTTP API behind `steward serve`: runtime, auth, routes, chat and metrics (server.py assembles them)."""
