"""Append-only, tamper-evident audit log in SQLite: every finding, proposal, decision, approval and execution.

Each entry carries a sequence number (`seq`: 1, 2, 3, ... with no gaps), the hash of the entry before it
(`prev_hash`) and its own hash: sha256 over the canonical JSON of its content and `prev_hash` (a plain hash
chain). Triggers refuse UPDATE and DELETE; the chain makes an edit, insertion or deletion that went around them
(dropping the triggers, editing the file) detectable by `verify`, and the head (seq + hash) that the server logs
at each sweep, reports in /metrics and `steward audit head` writes to a file makes a deleted tail detectable.

Entries written before the chain existed (an audit.sqlite from an older version) keep no stored hash: the
chain starts after them, anchored to them (the first hashed entry's `prev_hash` is the running hash of those
entries as they were when the chain began), so they were unprotected before the upgrade but any later change
to them breaks the chain too. Rehashing them in place was not chosen: it would need an UPDATE through the
append-only triggers and would vouch for whatever they held at migration time just the same.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.records import pg
from agent.records.store import DB_ERRORS, Problem, StoreUnavailable, classify, columns, dialect, open_store
from core.actions import STOP_ACTIONS, DeniedAnswer, Exemption, History, HistoryEntry
from core.cluster import JobInfo
from core.observation import AnsweredRequests

log = logging.getLogger("steward.audit")

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
    data TEXT NOT NULL DEFAULT '{}',
    prev_hash TEXT,              -- the hash of entry seq - 1 (NULL only on entries older than the chain)
    hash TEXT                    -- sha256 of this entry's canonical content and prev_hash
);
CREATE INDEX IF NOT EXISTS audit_kind_at ON audit(kind, at);
CREATE INDEX IF NOT EXISTS audit_target ON audit(target);
-- The exemptions by their end (AuditLog.exemptions reads those not over, however many came after them) and the
-- revocations: built at the first open of an older file too. A malformed data (never written) sorts last: read.
CREATE INDEX IF NOT EXISTS audit_exemption_until
    ON audit((CASE WHEN json_valid(data) THEN json_extract(data, '$.until') ELSE '~' END)) WHERE kind = 'exemption';
CREATE INDEX IF NOT EXISTS audit_exemption_revoked ON audit(seq) WHERE kind = 'exemption' AND status = 'revoked';
CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit
BEGIN SELECT RAISE(ABORT, 'audit log is append-only'); END;
"""
# Postgres (STEWARD_DATABASE_URL): the same table; append-only by triggers too (UPDATE, DELETE and TRUNCATE raise),
# so `verify` can report them missing or disabled the same way. seq is assigned under LOCK TABLE ... IN EXCLUSIVE
# MODE (readers go on; a second writer, on this replica or another, waits), so two replicas never fork the chain.
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit (
    seq BIGINT PRIMARY KEY,
    at TEXT COLLATE "C" NOT NULL,
    recorded_at TEXT NOT NULL,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT,
    action TEXT,
    level INTEGER,
    status TEXT,
    reason TEXT,
    data TEXT NOT NULL DEFAULT '{}',
    prev_hash TEXT,
    hash TEXT
);
CREATE INDEX IF NOT EXISTS audit_kind_at ON audit(kind, at);
CREATE INDEX IF NOT EXISTS audit_target ON audit(target);
CREATE OR REPLACE FUNCTION steward_audit_until(data TEXT) RETURNS TEXT LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN RETURN data::jsonb ->> 'until'; EXCEPTION WHEN others THEN RETURN '~'; END $$;
CREATE INDEX IF NOT EXISTS audit_exemption_until ON audit((steward_audit_until(data) COLLATE "C"))
    WHERE kind = 'exemption';
CREATE INDEX IF NOT EXISTS audit_exemption_revoked ON audit(seq) WHERE kind = 'exemption' AND status = 'revoked';
CREATE OR REPLACE FUNCTION steward_audit_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN RAISE EXCEPTION 'audit log is append-only'; END $$;
CREATE OR REPLACE TRIGGER audit_no_update BEFORE UPDATE ON audit
    FOR EACH ROW EXECUTE FUNCTION steward_audit_append_only();
CREATE OR REPLACE TRIGGER audit_no_delete BEFORE DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION steward_audit_append_only();
CREATE OR REPLACE TRIGGER audit_no_truncate BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION steward_audit_append_only();
"""
TRIGGERS = ("audit_no_update", "audit_no_delete")
PG_TRIGGERS = (*TRIGGERS, "audit_no_truncate")
# How long a stop the steward carried out is remembered past the history's lookback: as long as a keep can last.
STOP_MEMORY = timedelta(days=31)
# The entry that remembers a job answered requests (agent/detectors/serving.py): one per job uid, read for its life.
SERVED = "served"
# Every kind of entry the steward writes (tests/test_audit_kinds.py holds the code to it): what `steward audit log
# --kind` accepts.
KINDS = ("execution", "decision", "approval", "exemption", "error", "finding", "proposal", "intent", "report", "usage",
         SERVED, "stop_confirmed", "credit", "change", "change_impact", "alert_incident", "alert_rejected", "digest")
# An exemption's end as the indexes above hold it (text: compared as ISO 8601 strings, with a day's margin).
UNTIL_SQLITE = "(CASE WHEN json_valid(data) THEN json_extract(data, '$.until') ELSE '~' END)"
UNTIL_PG = '(steward_audit_until(data) COLLATE "C")'
UNTIL_PG_UNINDEXED = "((data::jsonb ->> 'until') COLLATE \"C\")"  # a database opened read-only, from before the index
GENESIS = "0" * 64  # prev_hash of the very first entry of a log
CONTENT = ("seq", "at", "recorded_at", "run_id", "kind", "target", "action", "level", "status", "reason", "data")
CHAIN_BROKEN = "audit_chain_broken"


def _migrate(conn: Any) -> None:
    have = columns(conn, "audit")
    for column in ("prev_hash", "hash"):
        if column not in have:  # an audit.sqlite from before the chain: its entries stay, unhashed
            conn.execute(f"ALTER TABLE audit ADD COLUMN {column} TEXT")


def entry_hash(prev_hash: str, row: Mapping[str, Any]) -> str:
    """sha256 (hex) over the canonical JSON (sorted keys, no spaces, ASCII) of an entry's stored content."""
    body = {name: row[name] for name in CONTENT}
    body["prev_hash"] = prev_hash
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class Head:
    """The newest entry of a log: export it, and a log that later ends before it or differs at it was cut."""

    seq: int
    hash: str

    def to_json(self) -> dict[str, Any]:
        return {"seq": self.seq, "hash": self.hash}

    @staticmethod
    def from_json(doc: Any, source: str = "head") -> Head:
        if not isinstance(doc, dict) or not isinstance(doc.get("seq"), int) or isinstance(doc.get("seq"), bool):
            raise ValueError(f"{source}: needs an integer 'seq' and a 'hash' (what `steward audit head` writes)")
        digest = doc.get("hash")
        if not isinstance(digest, str) or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ValueError(f"{source}: 'hash' must be 64 lowercase hex digits, got {digest!r}")
        if doc["seq"] < 1:
            raise ValueError(f"{source}: 'seq' must be 1 or more, got {doc['seq']}")
        return Head(doc["seq"], digest)


@dataclass
class Verification:
    """What `verify` found: the first bad entry (seq and what is wrong) or none, and the head it reached."""

    entries: int = 0
    legacy: int = 0  # entries older than the chain (no stored hash)
    head: Head | None = None
    bad_seq: int | None = None
    bad_entry: str = ""  # "execution force_terminate ml/x at 2026-..." of the first bad entry
    problem: str = ""  # what is wrong with it, or with the log as a whole
    notes: list[str] = field(default_factory=list)  # what is wrong besides the entries (e.g. missing triggers)

    @property
    def ok(self) -> bool:
        return not self.problem and not self.notes

    def describe(self) -> str:
        if self.ok:
            older = f" ({self.legacy} older than the chain, unprotected before it began)" if self.legacy else ""
            head = f"head seq {self.head.seq} sha256 {self.head.hash}" if self.head else "empty"
            return f"OK: {self.entries} entries{older}, {head}"
        lines = []
        if self.problem:
            where = f"entry seq {self.bad_seq}" + (f" ({self.bad_entry})" if self.bad_entry else "")
            lines.append(f"BAD: {where}: {self.problem}" if self.bad_seq is not None else f"BAD: {self.problem}")
        lines.extend(f"BAD: {note}" for note in self.notes)
        return "\n".join(lines)


class AuditTampered(RuntimeError):
    """An entry the guardrail was about to rely on does not match its hash: nothing is decided on it."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(problem.detail)
        self.problem = problem


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
    prev_hash: str | None = None
    hash: str | None = None


def iso_utc(value: datetime) -> str:
    """ISO 8601 in UTC; a naive time is taken to be UTC already."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat()


def _text(value: Any) -> str | None:
    return None if value is None else str(value)


def _what(row: Mapping[str, Any]) -> str:
    """'execution force_terminate ml/x at 2026-...' for naming an entry to a person."""
    parts = [str(row.get(k)) for k in ("kind", "action", "target") if row.get(k)]
    return " ".join(parts) + (f" at {row['at']}" if row.get("at") else "")


class AuditLog:
    """One SQLite file (or ':memory:'), or a Postgres URL shared by replicas; safe to share between threads.

    A file that cannot be written (read-only or full data dir) is opened read-only: the history stays readable
    and every `record` raises StoreUnavailable; `problems()` says why (reported by /healthz and /metrics).
    """

    def __init__(self, path: str | Path = ":memory:", *, readonly: bool = False) -> None:
        """readonly: open an existing log only to read it (FileNotFoundError when there is none)."""
        location = str(path)
        self.path = pg.redact(location)  # named in problems and logs: a URL without its password
        self._conn, self.readonly = open_store(location, _SCHEMA, "audit", wal=location != ":memory:",
                                               migrate=_migrate, readonly=readonly, pg_schema=_PG_SCHEMA)
        self._postgres = dialect(self._conn) == "postgres"
        self._hashed = "hash" in columns(self._conn, "audit")  # False only for an old file opened read-only
        # How exemptions are read by their end: SQLite's planner, without statistics, prefers audit_kind_at (every
        # exemption ever written), so its indexes are named where they exist (not in an older file opened read-only).
        self._until, self._by_until, self._by_revoked = UNTIL_SQLITE, "", ""
        if self._postgres:
            found = self._conn.execute("SELECT to_regprocedure('steward_audit_until(text)')").fetchone()
            self._until = UNTIL_PG if found and found[0] is not None else UNTIL_PG_UNINDEXED
        else:
            have = {r[0] for r in self._conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
            self._by_until = " INDEXED BY audit_exemption_until" if "audit_exemption_until" in have else ""
            self._by_revoked = " INDEXED BY audit_exemption_revoked" if "audit_exemption_revoked" in have else ""
        self._lock = threading.Lock()
        self.write_problem: Problem | None = None  # the last write failed (locked, full, ...); cleared on success
        self.chain_problem: Problem | None = None  # an entry failed its hash check; stays until a restart
        self._chain_start: int | None = None  # seq of the first hashed entry, once known
        self._checked: Head | None = None  # the head the last incremental check reached
        if self.readonly is not None and not readonly:
            log.warning("audit log opened read-only: %s", self.readonly.detail)

    def close(self) -> None:
        self._conn.close()

    def problems(self) -> list[Problem]:
        """Why the audit log cannot be trusted or written right now (empty: it can)."""
        return [p for p in (self.readonly, self.write_problem, self.chain_problem) if p is not None]

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self._lock:
            cur = self._conn.cursor()
            try:
                yield cur
            finally:
                cur.close()

    def _select_list(self) -> str:
        return "*" if self._hashed else "*, NULL AS prev_hash, NULL AS hash"

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
        """Append one entry, chained to the one before it; its seq. StoreUnavailable when it cannot be written."""
        if self.readonly is not None:
            raise StoreUnavailable(self.readonly)
        item: dict[str, Any] = {
            # Stored exactly as hashed: text as text, the level as an integer (no SQLite type conversion).
            "at": iso_utc(at), "recorded_at": datetime.now(UTC).isoformat(), "run_id": str(run_id), "kind": str(kind),
            "target": _text(target), "action": _text(action), "level": None if level is None else int(level),
            "status": _text(status), "reason": _text(reason),
            "data": json.dumps(data or {}, default=str, ensure_ascii=False),
        }
        try:
            with self._cursor() as cur:
                cur.execute("BEGIN IMMEDIATE")  # the chain's tail is read and extended by one writer at a time
                try:
                    if self._postgres:  # ... across replicas too: other writers wait, readers do not
                        cur.execute("LOCK TABLE audit IN EXCLUSIVE MODE")
                    last = cur.execute("SELECT seq, hash FROM audit ORDER BY seq DESC LIMIT 1").fetchone()
                    if last is None:
                        prev = GENESIS
                    elif last[1] is not None:
                        prev = last[1]
                    else:  # the first entry after an upgrade: anchor the chain to the entries before it
                        prev = self._running_hash(cur, upto=int(last[0]))
                    item["seq"] = int(last[0]) + 1 if last else 1
                    digest = entry_hash(prev, item)
                    cur.execute(
                        "INSERT INTO audit (seq, at, recorded_at, run_id, kind, target, action, level, status, reason,"
                        " data, prev_hash, hash) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (*(item[name] for name in CONTENT), prev, digest),
                    )
                    cur.execute("COMMIT")
                except BaseException:
                    if self._conn.in_transaction:
                        cur.execute("ROLLBACK")
                    raise
        except DB_ERRORS as exc:
            self.write_problem = classify(exc, self.path)
            log.error("audit entry not written (%s %s): %s", kind, target or "", self.write_problem.detail)
            raise StoreUnavailable(self.write_problem) from exc
        self.write_problem = None
        return int(item["seq"])

    def _running_hash(self, cur: Any, upto: int) -> str:
        """The chain's hash after entry `upto`, computed over unhashed (older) entries from the start."""
        running = GENESIS
        rows = cur.execute(f"SELECT {', '.join(CONTENT)}, hash FROM audit WHERE seq <= ? ORDER BY seq", (upto,))
        for row in rows.fetchall():
            item = dict(zip((*CONTENT, "hash"), row, strict=True))
            running = item["hash"] or entry_hash(running, item)
        return running

    def last_seq(self) -> int | None:
        """The newest entry's sequence number (None for an empty log): one indexed read, for cache keys."""
        with self._cursor() as cur:
            row = cur.execute("SELECT max(seq) FROM audit").fetchone()
        return int(row[0]) if row and row[0] is not None else None

    def head(self) -> Head | None:
        """The newest entry's seq and hash (None for an empty log)."""
        with self._cursor() as cur:
            last = cur.execute(f"SELECT seq{', hash' if self._hashed else ', NULL'} FROM audit "
                               "ORDER BY seq DESC LIMIT 1").fetchone()
            if last is None:
                return None
            return Head(int(last[0]), last[1] or self._running_hash(cur, upto=int(last[0])))

    def verify(self, expect_head: Head | None = None, *, after: Head | None = None) -> Verification:
        """Walk the chain: sequence without gaps, each prev_hash the hash before it, each hash its content.

        Stops at the first bad entry and names it. `after`: start at that head (checked to be unchanged)
        instead of the beginning. `expect_head`: a head exported earlier must still be in the log, unchanged.
        """
        out = Verification()
        running, expected, chained = (after.hash, after.seq, True) if after else (GENESIS, 1, False)
        seen_expected: str | None = None
        select = f"SELECT {', '.join(CONTENT)}, " + ("prev_hash, hash" if self._hashed else "NULL, NULL")
        with self._cursor() as cur:
            if self._postgres:  # a disabled trigger counts as missing
                triggers = {r[0] for r in cur.execute(
                    "SELECT tgname FROM pg_trigger WHERE tgrelid = 'audit'::regclass AND tgenabled != 'D'").fetchall()}
            else:
                triggers = {r[0] for r in cur.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'audit'")}
            missing = [t for t in (PG_TRIGGERS if self._postgres else TRIGGERS) if t not in triggers]
            if missing:
                out.notes.append(f"append-only trigger(s) missing: {', '.join(missing)} (UPDATE/DELETE were "
                                 "possible)")
            rows = cur.execute(f"{select} FROM audit WHERE seq >= ? ORDER BY seq", (expected,))
            for raw in _batches(rows):
                item = dict(zip((*CONTENT, "prev_hash", "hash"), raw, strict=True))
                seq = item["seq"]
                if after is not None and out.entries == 0:
                    out.entries = 1
                    expected = seq + 1
                    # An entry older than the chain has no stored hash to compare: it was never protected.
                    if seq != after.seq or (item["hash"] or after.hash) != after.hash:
                        self._bad(out, item, f"differs from head seq {after.seq} checked earlier (the log was "
                                             "rewritten or its tail deleted)")
                        break
                    continue
                if seq != expected:
                    gap = (f"entries {expected}..{seq - 1} are missing" if seq > expected + 1
                           else f"entry {expected} is missing") if seq > expected else "out of sequence"
                    self._bad(out, item, f"sequence jumps from {expected - 1} to {seq}: {gap} (deleted)")
                    break
                computed = entry_hash(running, item)
                if item["hash"] is None:
                    if chained:
                        self._bad(out, item, f"no hash, but the chain began at seq {self._chain_start or '?'} "
                                             "(inserted, or its hash stripped)")
                        break
                    out.legacy += 1
                    running = computed
                else:
                    if not chained:
                        chained, self._chain_start = True, seq
                    if item["prev_hash"] != running:
                        self._bad(out, item, "prev_hash is not the hash of the entry before it (an entry before it "
                                             "was edited, inserted or deleted)")
                        break
                    if item["hash"] != computed:
                        self._bad(out, item, "content does not match its hash (edited after it was written)")
                        break
                    running = item["hash"]
                if expect_head is not None and seq == expect_head.seq:
                    seen_expected = running
                out.entries += 1
                expected = seq + 1
        if out.problem:
            return out
        if expected > 1 or after is not None:
            out.head = Head(expected - 1, running)
        if after is not None and out.entries == 0:
            out.problem = f"the log ends before head seq {after.seq} checked earlier (its tail was deleted)"
            out.bad_seq = after.seq
        elif expect_head is not None:
            last = out.head.seq if out.head else 0
            if last < expect_head.seq:
                out.bad_seq = expect_head.seq
                out.problem = (f"the log ends at seq {last}, before the exported head seq {expect_head.seq}: "
                               f"entries {last + 1}..{expect_head.seq} were deleted")
            elif seen_expected != expect_head.hash:
                out.bad_seq = expect_head.seq
                out.problem = (f"hash {seen_expected} differs from the exported head {expect_head.hash} (the log "
                               "was rewritten at or before it)")
        return out

    @staticmethod
    def _bad(out: Verification, item: Mapping[str, Any], problem: str) -> None:
        out.bad_seq, out.bad_entry, out.problem = int(item["seq"]), _what(item), problem

    def check_appended(self) -> Verification:
        """Verify what was appended since the last check (from the head at the first call): cheap, every sweep.

        A broken result is kept in `chain_problem` (reported as audit_chain_broken) until a restart.
        """
        if self._checked is None:
            self._checked = self.head()
            return Verification(head=self._checked)
        result = self.verify(after=self._checked)
        if result.problem:
            self._broken(result.bad_seq, result.problem)
        elif result.head is not None:
            self._checked = result.head
        return result

    def _broken(self, seq: int | None, problem: str) -> Problem:
        found = Problem(CHAIN_BROKEN, f"{self.path}: entry seq {seq}: {problem}; run `steward audit verify`")
        if self.chain_problem is None:
            log.error("audit log tampered: %s", found.detail)
        self.chain_problem = found
        return found

    def entries(
        self,
        *,
        kind: str | None = None,
        target: str | None = None,
        status: str | None = None,
        run_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
        action: str | None = None,
        offset: int = 0,
        newest_first: bool = True,
        checked: bool = False,
    ) -> list[AuditEntry]:
        """Entries matching the filters. checked: each one's hash is recomputed from its content, and one that
        does not match (or has none after the chain began) raises AuditTampered instead of being returned."""
        clauses, args = [], []
        for column, value in (("kind", kind), ("target", target), ("status", status), ("run_id", run_id),
                              ("action", action)):
            if value is not None:
                clauses.append(f"{column} = ?")
                args.append(value)
        if since is not None:
            clauses.append("at >= ?")
            args.append(iso_utc(since))
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {self._select_list()} FROM audit {where} ORDER BY seq {order} LIMIT ? OFFSET ?"
        return self._read(sql, (*args, limit, offset), checked=checked)

    def _read(self, sql: str, args: tuple[Any, ...], *, checked: bool) -> list[AuditEntry]:
        with self._cursor() as cur:
            cur.execute(sql, args)
            cols = [c[0] for c in cur.description]
            rows = cur.fetchall()
        out = []
        for row in rows:
            item = dict(zip(cols, row, strict=True))
            if checked:
                self._check_row(item)
            item["data"] = json.loads(item["data"] or "{}")
            out.append(AuditEntry.model_validate(item))
        return out

    def _check_row(self, item: Mapping[str, Any]) -> None:
        if item["hash"] is None:
            if self._chain_start is None and self._hashed:
                with self._cursor() as cur:
                    first = cur.execute("SELECT seq FROM audit WHERE hash IS NOT NULL ORDER BY seq LIMIT 1").fetchone()
                self._chain_start = int(first[0]) if first else None
            if self._chain_start is not None and item["seq"] > self._chain_start:
                raise AuditTampered(self._broken(item["seq"], f"{_what(item)}: no hash, but the chain began at seq "
                                                              f"{self._chain_start}"))
            return
        if entry_hash(item["prev_hash"] or "", item) != item["hash"]:
            raise AuditTampered(self._broken(item["seq"], f"{_what(item)}: content does not match its hash "
                                                          "(edited after it was written)"))

    def exists(self, *, kind: str, status: str, **data: str) -> bool:
        """Whether an entry of this kind and status whose data holds these values was written."""
        for key in data:
            if not key.isidentifier():
                raise ValueError(f"audit data key {key!r} is not an identifier")
        lookup = "(data::jsonb ->> '{}') = ?" if self._postgres else "json_extract(data, '$.{}') = ?"
        clauses = " AND ".join(lookup.format(key) for key in data)
        sql = f"SELECT 1 FROM audit WHERE kind = ? AND status = ?{' AND ' + clauses if clauses else ''} LIMIT 1"
        with self._cursor() as cur:
            return cur.execute(sql, (kind, status, *data.values())).fetchone() is not None

    def count(self, kind: str | None = None) -> int:
        with self._cursor() as cur:
            if kind is None:
                cur.execute("SELECT COUNT(*) FROM audit")
            else:
                cur.execute("SELECT COUNT(*) FROM audit WHERE kind = ?", (kind,))
            return int(cur.fetchone()[0])

    def exemptions(self, now: datetime) -> list[AuditEntry]:
        """Exemption grants in force at `now` (not over, not revoked by a `revoked` entry), newest first.

        A keep protects from the moment it is written, whatever its timestamp: one dated ahead of `now` (recorded by
        a replica whose clock runs ahead, or before this host's clock stepped back) is in force. A revocation, which
        takes protection away, counts once `now` reaches it: both read in the safe direction.

        Every grant whose end is still ahead is read, however many exemptions came after it (an approver's 30-day
        keep outlives tens of thousands of owners' one-hour keeps on a big cluster), and every revocation written
        after the oldest of them: two indexed reads (audit_exemption_until, audit_exemption_revoked), bounded by the
        grants of about the last day and those in force, not by the log's size. Entries are checked."""
        moment = now.replace(tzinfo=UTC) if now.tzinfo is None else now
        # `until` compared as text: any ISO 8601 time dated before yesterday (UTC), whatever its offset (< 24 h), is
        # over by today; the exact end is compared below.
        earliest = (moment.astimezone(UTC) - timedelta(days=1)).date().isoformat()
        select = self._select_list()
        candidates = self._read(f"SELECT {select} FROM audit{self._by_until} WHERE kind = 'exemption' AND "
                                f"{self._until} >= ? AND status = 'granted' ORDER BY seq DESC", (earliest,), checked=True)
        granted = [e for e in candidates if _until(e) > moment]
        if not granted:
            return []
        revocations = self._read(f"SELECT {select} FROM audit{self._by_revoked} WHERE kind = 'exemption' AND "
                                 "status = 'revoked' AND seq > ? ORDER BY seq", (min(e.seq for e in granted),),
                                 checked=True)
        revoked = {int(seq) for e in revocations if e.at <= moment for seq in e.data.get("revokes") or []}
        return [e for e in granted if e.seq not in revoked]

    def exemptions_in_force(self, now: datetime) -> list[Exemption]:
        """The keeps in force at `now`, as the guardrail reads them."""
        return [_exemption(e) for e in self.exemptions(now)]

    def history(self, now: datetime, lookback: timedelta = timedelta(hours=24),
                denials_for: timedelta | None = None) -> History:
        """What the guardrail needs to know about the past: actions, exemptions, pending approvals, and the
        human denials of the last `denials_for` (default: `lookback`).

        Every entry read is checked against its hash: AuditTampered rather than a decision on a forged past.
        """
        since = now - lookback
        denials_since = now - (denials_for if denials_for is not None else lookback)
        # A job signalled more than a lookback ago and still there (it ignored SIGTERM; its forced stop was never
        # approved) is still one the steward signalled: without it, its owner was warned again a day later, and the
        # forced stop was never asked for again (the graceful one was refused as already sent).
        signalled = [e for action in STOP_ACTIONS
                     for e in self.entries(kind="execution", action=action, status="executed", since=now - STOP_MEMORY,
                                           limit=100_000, newest_first=False, checked=True) if e.at < since]
        executions = sorted(signalled, key=lambda e: e.seq) + self.entries(
            kind="execution", since=since, limit=100_000, newest_first=False, checked=True)
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
                seq=e.seq,
                **_resize_fields(e),
            )
            # Entries dated after `now` too (the host clock stepped back): the rate limit, the circuit breaker and
            # "already signalled" must still see the steward's own recent actions, and a warning dated ahead of the
            # clock licenses no stop (its notice has not run).
            for e in executions
        ]
        exemptions = self.exemptions_in_force(now)
        pending: dict[str, str] = {}
        denied: set[str] = set()
        denials: list[DeniedAnswer] = []
        for e in self.entries(kind="approval", since=min(since, denials_since), limit=100_000, newest_first=False,
                              checked=True):
            key = e.data.get("proposal_key")
            if not key or e.at > now:
                continue
            if e.status == "denied" and e.at >= denials_since and e.action and e.target:
                denials.append(DeniedAnswer(action=e.action, target=e.target, at=e.at,  # type: ignore[arg-type]
                                            target_uid=e.data.get("target_uid"), by=str(e.data.get("by") or ""),
                                            reason=(e.reason or "").removeprefix(f"deny by {e.data.get('by')}")
                                            .removeprefix(": ")))
            if e.at < since:
                continue
            if e.status == "pending":
                pending[key] = e.data.get("approval_id", "")
            elif e.status in ("approved", "denied", "expired"):  # "reasked"/"escalated" close nothing
                pending.pop(key, None)
                if e.status in ("denied", "expired"):
                    denied.add(key)
        # Keeps dated ahead of `now` too: a keep answers the warnings before it from the moment it is written. One
        # dated ahead that was revoked since answered them no later than its revocation: read at its date, every
        # warning after the revocation looked older than the keep, and the owner was warned at every sweep.
        granted = self.entries(kind="exemption", status="granted", since=since, limit=100_000, newest_first=False,
                               checked=True)
        revoked_at: dict[int, datetime] = {}
        if any(e.at > now for e in granted):
            for r in self.entries(kind="exemption", status="revoked", since=since, limit=100_000, checked=True):
                for seq in r.data.get("revokes") or []:
                    if r.at <= now:
                        revoked_at[int(seq)] = min(r.at, revoked_at.get(int(seq), r.at))
        keeps = [_exemption(e).model_copy(update={"at": min(e.at, revoked_at[e.seq])})
                 if e.at > now and e.seq in revoked_at else _exemption(e) for e in granted]
        return History(
            entries=entries,
            keeps=keeps,
            exemptions=[x for x in exemptions if x.until > now],
            pending_approvals=list(pending),
            denied_recently=sorted(denied),
            denials=denials,
        )


def answered_requests(audit: AuditLog, jobs: Iterable[JobInfo]) -> dict[str, AnsweredRequests]:
    """The jobs of `jobs` (by id) an earlier sweep saw answering requests: the first `served` entry about each one's
    uid (never its name: a namesake starts clean), written at or after the job started (a scheduler that reuses an
    id, as Slurm after a database reset, reuses no record). A job without a uid has none. Entries are checked."""
    by_uid = {j.uid: j for j in jobs if j.uid and j.state != "pending"}  # a pending job has served nothing yet
    if not by_uid:
        return {}
    starts = [j.started_at for j in by_uid.values()]
    since = min(s for s in starts if s is not None) if all(s is not None for s in starts) else None
    out: dict[str, AnsweredRequests] = {}
    for e in audit.entries(kind=SERVED, since=since, limit=1_000_000, newest_first=False, checked=True):
        job = by_uid.get(str(e.data.get("target_uid") or ""))
        if job is None or job.id in out or (job.started_at is not None and e.at < job.started_at):
            continue
        out[job.id] = AnsweredRequests(at=e.at, requests=int(e.data.get("requests") or 0),
                                       failed_requests=int(e.data.get("failed_requests") or 0),
                                       request_path=e.data.get("request_path") or None)
    return out


def _until(e: AuditEntry) -> datetime:
    until = datetime.fromisoformat(str(e.data["until"]))
    return until.replace(tzinfo=UTC) if until.tzinfo is None else until


def _exemption(e: AuditEntry) -> Exemption:
    return Exemption(target=e.target or "", until=_until(e), by=e.data.get("by", "?"), reason=e.reason or "",
                     target_uid=e.data.get("target_uid") or None, at=e.at, seq=e.seq)


def _resize_fields(e: AuditEntry) -> dict[str, Any]:
    """A resize's node counts and planned scale-up back, as HistoryEntry fields (docs/forecast.md)."""
    if e.action != "resize_pool":
        return {}

    def number(key: str) -> int | None:
        value = e.data.get(key)
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    at = e.data.get("scale_up_at")
    return {"action_id": e.data.get("action_id"), "nodes_before": number("nodes_before"),
            "target_nodes": number("target_nodes"), "nodes_after": number("nodes_after"),
            "scale_up_nodes": number("scale_up_nodes"),
            "scale_up_at": datetime.fromisoformat(at) if isinstance(at, str) else None}


def _batches(cur: Any, size: int = 5000) -> Iterable[tuple[Any, ...]]:
    while True:
        rows = cur.fetchmany(size)
        if not rows:
            return
        yield from rows
