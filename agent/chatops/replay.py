"""Durable memory of callbacks already taken, so a captured request cannot be played again, even after a restart.

A key is kept `keep_s` from when it was first seen: at least as long as the platform's accepted age plus
clock skew, so a request can never be old enough to be forgotten yet young enough to be accepted. A store
that cannot be written (read-only or full data dir, a held lock) takes no callback at all: StoreUnavailable.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

from agent.records import pg
from agent.records.store import DB_ERRORS, Problem, Reopening, StoreUnavailable

_SCHEMA = "CREATE TABLE IF NOT EXISTS seen_callbacks (key TEXT PRIMARY KEY, seen_at REAL NOT NULL);"
_PG_SCHEMA = _SCHEMA.replace("REAL", "DOUBLE PRECISION")


class SeenCallbacks(Reopening):
    """Callback keys (platform, timestamp, signature or nonce) in SQLite (the data dir, or memory in tests) or in
    Postgres (STEWARD_DATABASE_URL), where every replica sees what the others took."""

    def __init__(self, path: str | Path = ":memory:", *, keep_s: float) -> None:
        location, self.keep_s = str(path), keep_s
        self.path = pg.redact(location)  # for messages: a Postgres URL without its password
        self._open(location, _SCHEMA, "seen_callbacks", wal=False, pg_schema=_PG_SCHEMA)
        self._lock = threading.Lock()

    def first_use(self, key: str, now_s: float) -> bool:
        """True the first time `key` is seen (and remembers it); False for a replay."""
        if (problem := self.healthy()) is not None:
            raise StoreUnavailable(problem)
        with self._lock:
            try:
                self._conn.execute("DELETE FROM seen_callbacks WHERE seen_at < ?", (now_s - self.keep_s,))
                cur = self._conn.execute("INSERT INTO seen_callbacks VALUES (?, ?) ON CONFLICT DO NOTHING",
                                         (key, now_s))
            except DB_ERRORS as exc:
                raise self._failed(exc) from exc
            self._worked()
            return cur.rowcount == 1

    def forget(self, key: str) -> None:
        """Take back a key whose callback was not carried out (its handler failed): the platform's retry of the
        same request is then taken, not refused as a replay. Best effort: a store that cannot be written keeps it."""
        with self._lock, contextlib.suppress(*DB_ERRORS):
            self._conn.execute("DELETE FROM seen_callbacks WHERE key = ?", (key,))


__all__ = ["Problem", "SeenCallbacks", "StoreUnavailable"]
