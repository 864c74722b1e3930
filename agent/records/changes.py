"""Change records (docs/changes.md): driver, CUDA, image, policy and scheduler changes, recorded by people
(`steward change record`, `POST /api/changes`) or detected by a sweep, each once by a stable key; and the
signals a change's impact is measured by (job failures, XIDs, queue waits), each once by its own key.

SQLite under the data dir, or Postgres with STEWARD_DATABASE_URL, like the audit log and the approvals.
A store that cannot be written refuses the write with StoreUnavailable (the API answers 503).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent.records import pg
from agent.records.store import DB_ERRORS, Problem, StoreUnavailable, classify, dialect, open_store

log = logging.getLogger("steward.changes")

ChangeKind = Literal["driver", "image", "cuda", "policy", "scheduler", "other"]
KINDS: tuple[str, ...] = ("driver", "image", "cuda", "policy", "scheduler", "other")
SignalKind = Literal["job_failed", "xid", "queue_wait"]
MAX_TARGET = 300
MAX_DESCRIPTION = 2000
# change_seen row: when the first sweep fed this store (no other key lacks an '@' but "policy"). The old key began
# with NUL, which Postgres refuses in text: it is still read from SQLite stores that have it.
OBSERVING = "steward:observing-since"
_OLD_OBSERVING = "\x00observing-since"

_COLUMNS = ("id", "key", "kind", "target", "description", "at", "recorded_at", "source", "by_whom", "detail",
            "flagged_at", "impact")
_TABLES = """
CREATE TABLE IF NOT EXISTS change_signals (
    key TEXT PRIMARY KEY, kind TEXT NOT NULL, at TEXT{c} NOT NULL, subject TEXT NOT NULL, value REAL NOT NULL);
CREATE INDEX IF NOT EXISTS change_signals_at ON change_signals (kind, at);
CREATE TABLE IF NOT EXISTS change_seen (key TEXT PRIMARY KEY, value TEXT NOT NULL, first_seen TEXT{c} NOT NULL);
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, target TEXT NOT NULL,
    description TEXT NOT NULL, at TEXT NOT NULL, recorded_at TEXT NOT NULL, source TEXT NOT NULL,
    by_whom TEXT NOT NULL, detail TEXT NOT NULL, flagged_at TEXT, impact TEXT);
CREATE INDEX IF NOT EXISTS changes_at ON changes (at);
""" + _TABLES.format(c="")
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS changes (
    id BIGSERIAL PRIMARY KEY, key TEXT NOT NULL UNIQUE, kind TEXT NOT NULL, target TEXT NOT NULL,
    description TEXT NOT NULL, at TEXT COLLATE "C" NOT NULL, recorded_at TEXT COLLATE "C" NOT NULL,
    source TEXT NOT NULL, by_whom TEXT NOT NULL, detail TEXT NOT NULL, flagged_at TEXT, impact TEXT);
CREATE INDEX IF NOT EXISTS changes_at ON changes (at);
""" + _TABLES.format(c=' COLLATE "C"').replace("REAL", "DOUBLE PRECISION")


# The times a change may carry (a person's typo, 0001-01-01 or 9999-12-31, is refused): inside them every time
# converts to UTC and back, and its stamp sorts as the time does.
EARLIEST = datetime(1970, 1, 1, tzinfo=UTC)
LATEST = datetime(2200, 1, 1, tzinfo=UTC)  # exclusive
RANGE_TEXT = "must be from 1970-01-01 up to 2200-01-01 (UTC) / 须在 1970-01-01 至 2200-01-01（UTC）之间"


def stamp(value: datetime) -> str:
    """A fixed-width UTC time, so the stored strings sort as the times do (a naive time is taken as UTC). The year
    is always four digits (strftime's %Y writes year 999 as "999", which sorted after every later year and could
    not be read back)."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(tzinfo=None).isoformat(timespec="microseconds") + "+00:00"


_STAMP_LEN = len("2026-01-01T00:00:00.000000+00:00")


def in_range(value: datetime) -> bool:
    """Whether `value` (aware) lies in [EARLIEST, LATEST): compared without converting, which can overflow."""
    try:
        return EARLIEST <= value < LATEST
    except OverflowError:
        return False


def _t(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class ChangeInput(BaseModel):
    """A change a person records (`steward change record`, `POST /api/changes`)."""

    model_config = ConfigDict(extra="forbid")

    kind: ChangeKind = Field(description="driver | image | cuda | policy | scheduler | other")
    target: str = Field(min_length=1, max_length=MAX_TARGET,
                        description="What changed: a node, pool, image, namespace or 'cluster'.")
    description: str = Field("", max_length=MAX_DESCRIPTION, description="What was done, e.g. 535.154 -> 550.54.")
    at: datetime | None = Field(None, description="When it happened (ISO 8601); default: now.")

    @field_validator("target", "description")
    @classmethod
    def _printable(cls, value: str) -> str:
        value = value.strip()
        if any(not ch.isprintable() for ch in value):
            raise ValueError("must be printable text on one line")
        return value

    @field_validator("target")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value:
            raise ValueError("must not be blank")
        return value

    @field_validator("at")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is None:
            return None
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value
        if not in_range(value):  # 0001-01-01T00:00+01:00 has no UTC time: refused here, never an OverflowError
            raise ValueError(RANGE_TEXT)
        return value


class Change(BaseModel):
    id: int
    key: str = Field(description="Stable key: a change is recorded once per key.")
    kind: ChangeKind
    target: str
    description: str
    at: datetime = Field(description="When it happened (recorded) or was first seen (detected).")
    recorded_at: datetime
    source: Literal["recorded", "detected"]
    by: str
    detail: dict[str, Any] = {}
    flagged_at: datetime | None = Field(None, description="When its impact report first showed a rise.")
    impact: dict[str, Any] | None = Field(None, description="The impact report that flagged it.")


class ChangeStore:
    def __init__(self, path: str | Path = ":memory:") -> None:
        location = str(path)
        self.path = pg.redact(location)
        self._conn, self.readonly = open_store(location, _SCHEMA, "changes", wal=True, pg_schema=_PG_SCHEMA)
        self._lock = threading.Lock()
        self.write_problem: Problem | None = None
        self._checked = False  # whether `_note_unreadable` has looked
        self._skipped: set[int] = set()  # ids of rows left out, logged once each

    def problems(self) -> list[Problem]:
        return [p for p in (self.readonly, self.write_problem) if p is not None]

    def close(self) -> None:
        self._conn.close()

    def _write(self, sql: str, args: tuple[Any, ...]) -> int:
        if self.readonly is not None:
            raise StoreUnavailable(self.readonly)
        try:
            with self._lock:
                count = int(self._conn.execute(sql, args).rowcount)
        except DB_ERRORS as exc:
            self.write_problem = classify(exc, self.path)
            log.error("change store not written: %s", self.write_problem.detail)
            raise StoreUnavailable(self.write_problem) from exc
        self.write_problem = None
        return count

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return list(self._conn.execute(sql, args).fetchall())

    # -- changes -----------------------------------------------------------------------------------
    def record(self, *, key: str, kind: str, target: str, description: str, at: datetime, now: datetime,
               source: Literal["recorded", "detected"], by: str,
               detail: dict[str, Any] | None = None) -> tuple[Change, bool]:
        """(the change under `key`, whether this call recorded it); a key recorded before is left as it was."""
        if kind not in KINDS:
            raise ValueError(f"kind {kind!r}: use one of {', '.join(KINDS)}")
        known = self.by_key(key)
        if known is not None:  # asked first, so a repeat does not use up an id (Postgres sequences do)
            return known, False
        added = self._write(
            "INSERT INTO changes (key, kind, target, description, at, recorded_at, source, by_whom, detail) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
            (key, kind, target[:MAX_TARGET], description[:MAX_DESCRIPTION], stamp(at), stamp(now), source, by,
             json.dumps(detail or {}, sort_keys=True, ensure_ascii=False)))
        found = self.by_key(key)
        assert found is not None
        return found, added == 1

    def add_detail(self, change_id: int, detail: dict[str, Any]) -> None:
        """Replace a detected change's detail (e.g. one more node seen with the new driver)."""
        self._write("UPDATE changes SET detail = ? WHERE id = ?",
                    (json.dumps(detail, sort_keys=True, ensure_ascii=False), change_id))

    def _change(self, row: tuple[Any, ...]) -> Change:
        item = dict(zip(_COLUMNS, row, strict=True))
        item["by"] = item.pop("by_whom")
        item["detail"] = json.loads(item["detail"] or "{}")
        item["impact"] = json.loads(item["impact"]) if item["impact"] else None
        return Change.model_validate(item)

    def _readable(self, row: tuple[Any, ...]) -> Change | None:
        """The row as a change; None (logged) for one an older version stored with a time it cannot read back (year
        999 written "999-06-01...") or outside [EARLIEST, LATEST): left out, so it cannot break every list."""
        try:
            change = self._change(row)
            if in_range(change.at):
                return change
            why = f"its time {row[5]!r} is outside {stamp(EARLIEST)[:10]} .. {stamp(LATEST)[:10]}"
        except (ValueError, OverflowError) as exc:
            why = f"it cannot be read ({type(exc).__name__}: {str(exc)[:200]})"
        if row[0] not in self._skipped:
            self._skipped.add(row[0])
            log.warning("change #%s left out of change lists: %s; correct its time or delete the row", row[0], why)
        return None

    def by_key(self, key: str) -> Change | None:
        rows = self._read(f"SELECT {', '.join(_COLUMNS)} FROM changes WHERE key = ?", (key,))
        return self._readable(rows[0]) if rows else None

    def get(self, change_id: int) -> Change | None:
        rows = self._read(f"SELECT {', '.join(_COLUMNS)} FROM changes WHERE id = ?", (change_id,))
        return self._readable(rows[0]) if rows else None

    def changes(self, *, since: datetime | None = None, until: datetime | None = None, kind: str | None = None,
                limit: int = 200) -> list[Change]:
        """Newest first, each readable one (`_readable`). A stamp is 32 characters: one an older version wrote with a
        short year is left out here, so it neither takes a place in `limit` nor sorts first."""
        self._note_unreadable()
        where: list[str] = ["at >= ?", "at < ?", f"LENGTH(at) = {_STAMP_LEN}"]
        args: list[Any] = [stamp(EARLIEST), stamp(LATEST)]
        if since is not None:
            where.append("at >= ?")
            args.append(stamp(since))
        if until is not None:
            where.append("at <= ?")
            args.append(stamp(until))
        if kind is not None:
            where.append("kind = ?")
            args.append(kind)
        sql = (f"SELECT {', '.join(_COLUMNS)} FROM changes" + (f" WHERE {' AND '.join(where)}" if where else "")
               + " ORDER BY at DESC, id DESC LIMIT ?")
        return [c for c in (self._readable(r) for r in self._read(sql, (*args, limit))) if c is not None]

    def _note_unreadable(self) -> None:
        """Once per store: log the rows `changes` leaves out (times an older version stored unpadded or out of
        range), so an operator can correct or delete them."""
        if self._checked:
            return
        self._checked = True
        rows = self._read(f"SELECT id, at FROM changes WHERE NOT (at >= ? AND at < ? AND LENGTH(at) = {_STAMP_LEN}) "
                          "ORDER BY id LIMIT 20", (stamp(EARLIEST), stamp(LATEST)))
        for change_id, at in rows:
            self._skipped.add(change_id)
            log.warning("change #%s left out of change lists: its stored time %r is unreadable or outside %s .. %s; "
                        "correct its time or delete the row", change_id, at, stamp(EARLIEST)[:10],
                        stamp(LATEST)[:10])

    def flag(self, change_id: int, at: datetime, impact: dict[str, Any]) -> bool:
        """Mark the change as followed by a rise; True for the call that flagged it (once per change)."""
        return self._write("UPDATE changes SET flagged_at = ?, impact = ? WHERE id = ? AND flagged_at IS NULL",
                           (stamp(at), json.dumps(impact, sort_keys=True, ensure_ascii=False), change_id)) == 1

    # -- what detection has seen (the baseline a change is measured from) ---------------------------
    def seen(self, key: str) -> str | None:
        rows = self._read("SELECT value FROM change_seen WHERE key = ?", (key,))
        return str(rows[0][0]) if rows else None

    def see(self, key: str, value: str, at: datetime) -> None:
        self._write("INSERT INTO change_seen (key, value, first_seen) VALUES (?, ?, ?) ON CONFLICT (key) DO UPDATE "
                    "SET value = excluded.value, first_seen = excluded.first_seen", (key, value, stamp(at)))

    def mark_observing(self, at: datetime) -> None:
        """Note when sweeps began feeding this store (kept from the first call): no signal is known before it."""
        self._write("INSERT INTO change_seen (key, value, first_seen) VALUES (?, ?, ?) ON CONFLICT (key) DO NOTHING",
                    (OBSERVING, "", stamp(at)))

    def observing_since(self) -> datetime | None:
        keys = (OBSERVING,) if dialect(self._conn) == "postgres" else (OBSERVING, _OLD_OBSERVING)
        rows = self._read(f"SELECT first_seen FROM change_seen WHERE key IN ({', '.join('?' * len(keys))})", keys)
        return min((datetime.fromisoformat(r[0]) for r in rows), default=None)

    # -- signals ------------------------------------------------------------------------------------
    def add_signal(self, key: str, kind: str, at: datetime, subject: str, value: float = 1.0) -> bool:
        """Record one event (a failed job, an XID, a job's queue wait) once by its key; True when new."""
        return self._write("INSERT INTO change_signals (key, kind, at, subject, value) VALUES (?, ?, ?, ?, ?) "
                           "ON CONFLICT (key) DO NOTHING", (key, kind, stamp(at), subject[:MAX_TARGET], value)) == 1

    def signals(self, kind: str, since: datetime, until: datetime) -> list[tuple[datetime, str, float]]:
        """(at, subject, value) of `kind` with since <= at < until, oldest first."""
        rows = self._read("SELECT at, subject, value FROM change_signals WHERE kind = ? AND at >= ? AND at < ? "
                          "ORDER BY at", (kind, stamp(since), stamp(until)))
        return [(datetime.fromisoformat(r[0]), str(r[1]), float(r[2])) for r in rows]

    def prune(self, before: datetime) -> int:
        """Forget signals older than `before` (changes themselves are kept)."""
        return self._write("DELETE FROM change_signals WHERE at < ?", (stamp(before),))
