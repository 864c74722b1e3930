"""Incidents and the alerts in them, in SQLite under the data dir or in Postgres (STEWARD_DATABASE_URL, shared by
every replica), so neither a restart nor a webhook delivered to another replica forgets or repeats them.

Alerts are kept by Alertmanager's fingerprint (one row per alert, however often it is sent); an incident is
claimed for its message with one conditional UPDATE, so two deliveries of the same webhook send one message; a
unique index on the open incident's key means two replicas receiving the same alert at once open one incident.
A store that cannot be written takes no alert: StoreUnavailable (the app answers 503 and Alertmanager retries).

Incident keys are JSON arrays (agent/alerts/incidents.py incident_key); SQLite stores written by earlier versions
hold NUL-separated keys, which are still found there. Times are written in UTC; a time stored without a zone by an
earlier version is read as UTC.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from agent.alerts.incidents import Alert, legacy_incident_key, subject_of
from agent.records import pg
from agent.records.store import DB_ERRORS, Problem, Reopening, StoreUnavailable, dialect

_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL, alertname TEXT NOT NULL, subject TEXT NOT NULL,
    severity TEXT NOT NULL, layer TEXT NOT NULL, runbook TEXT, summary TEXT NOT NULL, opened_at TEXT NOT NULL,
    closed_at TEXT, outcome TEXT, notified_at TEXT, messages INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS incidents_open_key ON incidents (key) WHERE closed_at IS NULL;
CREATE TABLE IF NOT EXISTS incident_alerts (
    fingerprint TEXT PRIMARY KEY, incident_id INTEGER NOT NULL, status TEXT NOT NULL, starts_at TEXT NOT NULL,
    ends_at TEXT, labels TEXT NOT NULL, annotations TEXT NOT NULL);
"""
# Times are fixed-format ISO text compared as text: byte order ("C") on Postgres, as in SQLite.
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS incidents (
    id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL, alertname TEXT NOT NULL, subject TEXT NOT NULL,
    severity TEXT NOT NULL, layer TEXT NOT NULL, runbook TEXT, summary TEXT NOT NULL, opened_at TEXT COLLATE "C" NOT NULL,
    closed_at TEXT COLLATE "C", outcome TEXT, notified_at TEXT COLLATE "C", messages INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX IF NOT EXISTS incidents_open_key ON incidents (key) WHERE closed_at IS NULL;
CREATE TABLE IF NOT EXISTS incident_alerts (
    fingerprint TEXT PRIMARY KEY, incident_id BIGINT NOT NULL, status TEXT NOT NULL, starts_at TEXT COLLATE "C" NOT NULL,
    ends_at TEXT COLLATE "C", labels TEXT NOT NULL, annotations TEXT NOT NULL);
"""


@dataclass(frozen=True)
class Incident:
    id: int
    key: str
    alertname: str
    subject: str
    severity: str
    layer: str
    runbook: str | None
    summary: str
    opened_at: datetime
    closed_at: datetime | None
    outcome: str | None
    notified_at: datetime | None
    messages: int


@dataclass(frozen=True)
class StoredAlert:
    fingerprint: str
    status: str
    starts_at: datetime
    ends_at: datetime | None
    labels: dict[str, str]
    annotations: dict[str, str]


def _t(value: str | None) -> datetime | None:
    if not value:
        return None
    at = datetime.fromisoformat(value)
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)  # stored without a zone by an earlier version


class IncidentStore(Reopening):
    def __init__(self, path: str | Path = ":memory:") -> None:
        location = str(path)
        self.path = pg.redact(location)  # for messages: a Postgres URL without its password
        self._open(location, _SCHEMA, "incidents", wal=True, pg_schema=_PG_SCHEMA)
        self._lock = threading.RLock()

    def _run(self, sql: str, args: tuple = ()) -> Any:
        if (problem := self.healthy()) is not None:
            raise StoreUnavailable(problem)
        try:
            cur = self._conn.execute(sql, args)
        except DB_ERRORS as exc:
            raise self._failed(exc) from exc
        if not sql.lstrip().upper().startswith("SELECT"):
            self._worked()  # a read that works says nothing of writes (a lock another process holds blocks only those)
        return cur

    @staticmethod
    def _incident(row: tuple) -> Incident:
        return Incident(row[0], row[1], row[2], row[3], row[4], row[5], row[6], row[7], _t(row[8]),  # type: ignore[arg-type]
                        _t(row[9]), row[10], _t(row[11]), row[12])

    def open_incident(self, key: str, legacy: str | None = None) -> Incident | None:
        """The open incident of `key`; on SQLite also one opened under its `legacy` (NUL-separated) key."""
        keys = (key, legacy) if legacy is not None and dialect(self._conn) != "postgres" else (key,)
        row = self._run(f"SELECT * FROM incidents WHERE key IN ({', '.join('?' * len(keys))}) AND closed_at IS NULL "
                        "ORDER BY id LIMIT 1", keys).fetchone()
        return self._incident(row) if row else None

    def get(self, incident_id: int) -> Incident:
        return self._incident(self._run("SELECT * FROM incidents WHERE id = ?", (incident_id,)).fetchone())

    def incidents(self, limit: int = 100) -> list[Incident]:
        rows = self._run("SELECT * FROM incidents ORDER BY id DESC LIMIT ?", (limit,)).fetchall()
        return [self._incident(r) for r in rows]

    def open_incidents(self) -> list[Incident]:
        return [self._incident(r) for r in self._run("SELECT * FROM incidents WHERE closed_at IS NULL").fetchall()]

    def add(self, key: str, alert: Alert) -> Incident:
        """The open incident for `key`, opened from this alert if there is none; the alert recorded in it."""
        with self._lock:
            legacy = legacy_incident_key(alert.labels)
            found = self.open_incident(key, legacy)
            if found is None:
                labels, notes = alert.labels, alert.annotations
                self._run(  # another replica may open it at the same instant: one open incident per key
                    "INSERT INTO incidents (key, alertname, subject, severity, layer, runbook, summary, opened_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (key, labels.get("alertname", "?"), subject_of(labels), labels.get("severity", "warning"),
                     labels.get("layer", "unknown"), notes.get("runbook"),
                     notes.get("summary") or notes.get("description") or labels.get("alertname", "?"),
                     alert.startsAt.isoformat()))
                found = self.open_incident(key, legacy)
                if found is None:  # closed between the insert and the read: a later alert opens a new one
                    raise StoreUnavailable(Problem("db_error", f"incident {key} closed while it was being opened"))
            ends = alert.endsAt.isoformat() if alert.status == "resolved" and alert.endsAt else None
            self._run("INSERT INTO incident_alerts VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (fingerprint) DO UPDATE "
                      "SET incident_id = excluded.incident_id, status = excluded.status, starts_at = excluded.starts_at, "
                      "ends_at = excluded.ends_at, labels = excluded.labels, annotations = excluded.annotations",
                      (alert.fingerprint, found.id, alert.status, alert.startsAt.isoformat(), ends,
                       json.dumps(alert.labels, sort_keys=True), json.dumps(alert.annotations, sort_keys=True)))
            return found

    def alerts(self, incident_id: int) -> list[StoredAlert]:
        rows = self._run("SELECT fingerprint, status, starts_at, ends_at, labels, annotations FROM incident_alerts "
                         "WHERE incident_id = ? ORDER BY starts_at", (incident_id,)).fetchall()
        return [StoredAlert(r[0], r[1], _t(r[2]), _t(r[3]), json.loads(r[4]), json.loads(r[5]))  # type: ignore[arg-type]
                for r in rows]

    def close(self, incident_id: int, at: datetime, outcome: str) -> bool:
        """True for the call that closed it (a repeated resolve changes nothing)."""
        cur = self._run("UPDATE incidents SET closed_at = ?, outcome = ? WHERE id = ? AND closed_at IS NULL",
                        (at.isoformat(), outcome, incident_id))
        return cur.rowcount == 1

    def claim_message(self, incident_id: int, now: datetime, not_since: datetime) -> bool:
        """Take the incident's message slot: True once per period (none sent, or the last before `not_since`)."""
        cur = self._run("UPDATE incidents SET notified_at = ?, messages = messages + 1 WHERE id = ? AND "
                        "closed_at IS NULL AND (notified_at IS NULL OR notified_at < ?)",
                        (now.isoformat(), incident_id, not_since.isoformat()))
        return cur.rowcount == 1

    def release_message(self, incident_id: int, previous: datetime | None) -> None:
        """Give the slot back after a message that did not go out, so the next delivery tries again."""
        self._run("UPDATE incidents SET notified_at = ?, messages = messages - 1 WHERE id = ?",
                  (previous.isoformat() if previous else None, incident_id))
