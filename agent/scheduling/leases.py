"""Leader leases: a row lease in SQLite (the data dir, default) or Postgres, and the protocol the Kubernetes Lease
shares."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from agent.records.store import dialect, open_store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at REAL NOT NULL
);
"""
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    expires_at DOUBLE PRECISION NOT NULL
);
"""


class LeaderLease(Protocol):
    """Held by at most one replica at a time until it expires; renewing extends it."""

    holder: str

    def acquire(self) -> bool:
        """Take or renew the lease; False when another live holder has it."""
        ...

    def release(self) -> None: ...


class AlwaysLeader:
    """One replica by construction (tests, `steward serve` with leader_lock=none)."""

    def __init__(self, holder: str = "local") -> None:
        self.holder = holder

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        return None


class SqliteLease:
    """A row lease with expiry: replicas sharing one data dir (or volume), or one Postgres, elect a single sweeper.

    Wall time, not cluster time: a lease is about processes, and a simulated clock may run fast. On Postgres the
    time is the database server's (one clock for every replica, whatever their nodes' skew) unless a clock is
    given. A holder that dies, hangs or loses the database stops renewing, and the lease passes to another
    replica `duration_s` after its last renewal.
    """

    def __init__(self, path: str | Path, name: str, holder: str, duration_s: float = 30.0,
                 clock: Callable[[], float] | None = None) -> None:
        # Each replica has its own connection; SQLite's file lock makes the UPDATE/INSERT atomic across them.
        # In a data dir that cannot be written the lease is never held (`problem` says why; nothing sweeps).
        self._conn, self.problem = open_store(str(path), _SCHEMA, "leases", wal=False, timeout=10,
                                              pg_schema=_PG_SCHEMA)
        self._lock = threading.Lock()
        self._postgres = dialect(self._conn) == "postgres"
        if clock is None:
            clock = self._server_time if self._postgres else time.time
        self.name, self.holder, self.duration_s, self._clock = name, holder, duration_s, clock

    def _server_time(self) -> float:
        with self._lock:
            return float(self._conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()[0])

    def acquire(self) -> bool:
        if self.problem is not None:
            return False
        now = self._clock()
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("INSERT INTO leases (name, holder, expires_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                                   (self.name, self.holder, now + self.duration_s))
                cur = self._conn.execute(
                    "UPDATE leases SET holder = ?, expires_at = ? WHERE name = ? AND (holder = ? OR expires_at <= ?)",
                    (self.holder, now + self.duration_s, self.name, self.holder, now))
                took = cur.rowcount == 1
                self._conn.execute("COMMIT")
            except BaseException:
                if self._conn.in_transaction:  # SQLite already rolled back after e.g. a full disk
                    self._conn.execute("ROLLBACK")
                raise
        return took

    def current_holder(self) -> str | None:
        with self._lock:
            row = self._conn.execute("SELECT holder, expires_at FROM leases WHERE name = ?", (self.name,)).fetchone()
        return row[0] if row and row[1] > self._clock() else None

    def release(self) -> None:
        if self.problem is not None:
            return
        with self._lock:
            self._conn.execute("DELETE FROM leases WHERE name = ? AND holder = ?", (self.name, self.holder))
