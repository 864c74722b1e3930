"""Append-only audit log in SQLite: every finding, proposal, decision, approval and execution."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from core.actions import Exemption, History, HistoryEntry

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at TEXT NOT NULL,            -- cluster time (simulated time in a simulation)
    recorded_at TEXT NOT NULL,   -- wall-clock time of the write
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,          -- finding | proposal | decision | approval | execution | exemption | report | error
    target TEXT,
    action TEXT,
    level INTEGER,
    status TEXT,
    reason TEXT,
    data TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX IF NOT EXISTS audit_kind_at ON audit(kind, at);
CREATE INDEX IF NOT EXISTS audit_target ON audit(target);
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
"""



class AuditEntry(BaseModel):
    seq: int
    at: datetime
    recorded_at: datetime
    run_id: str
    kind: str
    target: str | None = None
    action: str | None = None
    level: int | None = None
    status: str | None = None
    reason: str | None = None
    data: dict[str, Any] = {}


def iso_utc(value: datetime) -> str:
    """ISO 8601 in UTC; a naive time is taken to be UTC already."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


class AuditLog:
    """One SQLite file (or ':memory:'); safe to share between threads of one process."""

    def __init__(self, path: str | Path = ":memory:") -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY")
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        self._conn.close()

    @contextmanager
    def _cursor(self) -> Iterator[sqlite3.Cursor]:
        with self._lock:
            cur = self._conn.cursor()
            try:
                yield cur
            finally:
                cur.close()

    def record(
        self,
        kind: str,
        *,
        at: datetime,
        run_id: str,
        target: str | None = None,
        action: str | None = None,
        level: int | None = None,
        status: str | None = None,
        reason: str | None = None,
        data: dict[str, Any] | None = None,
    ) -> int:
        row = (
            iso_utc(at),
            datetime.now(UTC).isoformat(),
            run_id,
            kind,
            target,
            action,
            level,
            status,
            reason,
            json.dumps(data or {}, default=str, ensure_ascii=False),
        )
        with self._cursor() as cur:
            cur.execute(
                "INSERT INTO audit (at, recorded_at, run_id, kind, target, action, level, status, reason, data)"
                " VALUES (?,?,?,?,?,?,?,?,?,?)",
                row,
            )
            return int(cur.lastrowid or 0)

    def entries(
        self,
        *,
        kind: str | None = None,
        target: str | None = None,
        status: str | None = None,
        run_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
        offset: int = 0,
        newest_first: bool = True,
    ) -> list[AuditEntry]:
        clauses, args = [], []
        for column, value in (("kind", kind), ("target", target), ("status", status), ("run_id", run_id)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if since is not None:
            clauses.append("at >= ?")
            args.append(iso_utc(since))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT * FROM audit {where} ORDER BY seq {order} LIMIT ? OFFSET ?"
        with self._cursor() as cur:
            cur.execute(sql, (*args, limit, offset))
            cols = [c[0] for c in cur.description]
            rows = cur.fetchall()
        out = []
        for row in rows:
            item = dict(zip(cols, row, strict=True))
            item["data"] = json.loads(item["data"] or "{}")
            out.append(AuditEntry.model_validate(item))
        return out

    def count(self, kind: str | None = None) -> int:
        with self._cursor() as cur:
            if kind is None:
                cur.execute("SELECT COUNT(*) FROM audit")
            else:
                cur.execute("SELECT COUNT(*) FROM audit WHERE kind = ?", (kind,))
            return int(cur.fetchone()[0])

    def history(self, now: datetime, lookback: timedelta = timedelta(hours=24)) -> History:
        """What the guardrail needs to know about the past: actions, exemptions, pending approvals."""
        since = now - lookback
        executions = self.entries(kind="execution", since=since, limit=100_000, newest_first=False)
        entries = [
            HistoryEntry(
                action=e.action,  # type: ignore[arg-type]
                target=e.target or "",
                status=e.status,  # type: ignore[arg-type]
                at=e.at,
                finding_kind=e.data.get("finding_kind"),
                gpus=int(e.data.get("gpus") or 0),
                deadline=e.data.get("deadline"),
                target_uid=e.data.get("target_uid"),
                detail=str(e.data.get("detail") or ""),
            )
            for e in executions
            if e.at <= now
        ]
        exemptions = [
            Exemption(target=e.target or "", until=e.data["until"], by=e.data.get("by", "?"), reason=e.reason or "")
            for e in self.entries(kind="exemption", since=now - timedelta(days=30), limit=10_000)
            if e.at <= now
        ]
        pending: dict[str, str] = {}
        denied: set[str] = set()
        for e in self.entries(kind="approval", since=since, limit=100_000, newest_first=False):
            key = e.data.get("proposal_key")
            if not key or e.at > now:
                continue
            if e.status == "pending":
                pending[key] = e.data.get("approval_id", "")
            elif e.status in ("approved", "denied", "expired"):  # "reasked"/"escalated" close nothing
                pending.pop(key, None)
                if e.status in ("denied", "expired"):
                    denied.add(key)
        return History(
            entries=entries,
            exemptions=[x for x in exemptions if x.until > now],
            pending_approvals=list(pending),
            denied_recently=sorted(denied),
        )
