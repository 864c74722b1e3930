"""Pending human approvals: one opaque id each, answered exactly once, expiring into a refusal.

An answer is recorded here first (durable, and what makes it exactly once); auditing it and resuming the
waiting graph follow, and `completed_at` is set when both are done. An answer whose audit or resume failed
(audit DB locked, process killed) stays incomplete and is finished later: `incomplete()` lists it.

Silence is never a yes, and it is not a final no either: a request that expired unanswered may be asked
again (a new request, one escalation group further) once `approvals.reask_after` has passed, if the
planner still proposes the action. A human deny stands; it is never re-asked as if it had expired.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from agent.records import pg
from agent.records.audit import AuditLog, iso_utc
from agent.records.store import DB_ERRORS, Problem, StoreUnavailable, classify, columns, open_store
from core.fencing import process_gone

log = logging.getLogger("steward.approvals")

ApprovalStatus = Literal["pending", "approved", "denied", "expired"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    proposal_key TEXT NOT NULL,
    target TEXT NOT NULL,
    action TEXT NOT NULL,
    level INTEGER NOT NULL,
    requested_at TEXT NOT NULL,
    expires_at TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    answered_by TEXT,
    answered_at TEXT,
    answer_reason TEXT,
    payload TEXT NOT NULL,
    completed_at TEXT,           -- the answer (or expiry) was audited and the graph resumed with it
    claimed_by TEXT,             -- the process completing it now (one at a time, across replicas)
    claimed_until REAL           -- wall-clock seconds; a claim left by a killed process lapses then
);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals(status);
"""
_PG_SCHEMA = """
CREATE TABLE IF NOT EXISTS approvals (
    id TEXT PRIMARY KEY,
    proposal_key TEXT NOT NULL,
    target TEXT NOT NULL,
    action TEXT NOT NULL,
    level INTEGER NOT NULL,
    requested_at TEXT COLLATE "C" NOT NULL,
    expires_at TEXT COLLATE "C" NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    answered_by TEXT,
    answered_at TEXT,
    answer_reason TEXT,
    payload TEXT NOT NULL,
    completed_at TEXT,
    claimed_by TEXT,
    claimed_until DOUBLE PRECISION
);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals(status);
"""
CLAIM_S = 600.0  # how long one host may take to audit an answer and resume its graph before another host may


def _migrate(conn: Any) -> None:
    have = columns(conn, "approvals")
    for column, kind in (("completed_at", "TEXT"), ("claimed_by", "TEXT"), ("claimed_until", "REAL")):
        if column not in have:  # an approvals.sqlite from before: its answered requests are checked once
            conn.execute(f"ALTER TABLE approvals ADD COLUMN {column} {kind}")


class ApprovalError(ValueError):
    """An answer that cannot be taken: unknown id, already answered, or expired. str() is the English; `zh` the same
    in Chinese, for a reply to someone who reads the product in Chinese (the English when none was given)."""

    def __init__(self, message: str, zh: str | None = None) -> None:
        super().__init__(message)
        self.zh = zh if zh is not None else message

    def text(self, language: str) -> str:
        """The message in `language` (zh or en)."""
        return self.zh if language == "zh" else str(self)


class ApprovalUnavailable(ApprovalError):
    """The approval store cannot be written (read-only, full, locked): the answer was not taken; ask again."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(f"answer not taken, the request stays open: {problem.detail}",
                         zh=f"答复未受理，请求仍待处理：{problem.detail}")
        self.problem = problem


# An answered request's status in Chinese, for the refusal of a later answer.
_ANSWERED_ZH = {"approved": "批准", "denied": "拒绝"}


class Approval(BaseModel):
    id: str
    proposal_key: str
    target: str
    action: str
    level: int
    requested_at: datetime
    expires_at: datetime
    status: ApprovalStatus
    answered_by: str | None = None
    answered_at: datetime | None = None
    answer_reason: str | None = None
    payload: dict[str, Any] = {}
    completed_at: datetime | None = None

    @property
    def round(self) -> int:
        """1 for a first request; n when it asks again after n - 1 requests in a row expired unanswered."""
        return int(self.payload.get("round") or 1)

    @property
    def target_uid(self) -> str | None:
        """The immutable identity of the job (or pool plan) the request is about, from its guarded action; None
        for a request made without one."""
        proposal = (self.payload.get("guarded_action") or {}).get("proposal") or {}
        uid = proposal.get("target_uid")
        return str(uid) if uid else None

    @property
    def approvers(self) -> list[str]:
        """Whom this request is addressed to (policy approvals.escalation); empty: the configured approvers."""
        return [str(x) for x in self.payload.get("approvers") or []]


def escalation_group(round_: int, escalation: Sequence[Sequence[str]]) -> tuple[int | None, list[str]]:
    """(1-based group, its members) for a request's round: each re-ask one group further, the last group stays."""
    if not escalation:
        return None, []
    index = min(max(round_, 1), len(escalation)) - 1
    return index + 1, [str(x) for x in escalation[index]]


def _utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


class ApprovalStore:
    def __init__(self, path: str | Path, audit: AuditLog, *, holder_pid: int | None = None) -> None:
        """holder_pid: the process the claims are made for (default this one; a test stands in for another)."""
        location = str(path)
        self.path = pg.redact(location)
        # On Postgres every replica shares the table: the conditional UPDATEs below (status = 'pending', a lapsed
        # claim) are single statements, atomic under Postgres's row locks as under SQLite's file lock.
        self._conn, self.readonly = open_store(location, _SCHEMA, "approvals", wal=False, migrate=_migrate,
                                               pg_schema=_PG_SCHEMA)
        self._lock = threading.Lock()
        self.audit = audit
        self.write_problem: Problem | None = None
        # Who claims an answer to complete it: this process on this host. A process restarted there takes the
        # claims of the one it replaced back at once (a killed process leaves them, `_left_here`); another live
        # process, a cron sweep beside the server on one host or another replica, waits for them to lapse.
        self.host = socket.gethostname() or "localhost"
        self.holder = f"{self.host}/{holder_pid if holder_pid is not None else os.getpid()}"
        if self.readonly is not None:
            log.warning("approval store opened read-only: %s", self.readonly.detail)

    def problems(self) -> list[Problem]:
        return [p for p in (self.readonly, self.write_problem) if p is not None]

    def _write(self, sql: str, args: tuple[Any, ...]) -> int:
        """Run one write; its row count. StoreUnavailable (and `write_problem` set) when it cannot be written."""
        if self.readonly is not None:
            raise StoreUnavailable(self.readonly)
        try:
            with self._lock:
                count = self._conn.execute(sql, args).rowcount
        except DB_ERRORS as exc:
            self.write_problem = classify(exc, self.path)
            log.error("approval store not written: %s", self.write_problem.detail)
            raise StoreUnavailable(self.write_problem) from exc
        self.write_problem = None
        return count

    def _row(self, row: tuple[Any, ...], cols: list[str]) -> Approval:
        item = dict(zip(cols, row, strict=True))
        item["payload"] = json.loads(item["payload"])
        return Approval.model_validate(item)

    def _select(self, where: str, args: tuple[Any, ...]) -> list[Approval]:
        with self._lock:
            cur = self._conn.execute(f"SELECT * FROM approvals WHERE {where} ORDER BY requested_at", args)
            cols = [c[0] for c in cur.description]
            return [self._row(r, cols) for r in cur.fetchall()]

    def get(self, approval_id: str) -> Approval | None:
        found = self._select("id = ?", (approval_id,))
        return found[0] if found else None

    def pending(self) -> list[Approval]:
        return self._select("status = 'pending'", ())

    def all(self, limit: int = 200) -> list[Approval]:
        # The newest `limit` requests, oldest first (LIMIT cannot precede the ORDER BY that _select adds).
        return self._select("id IN (SELECT id FROM approvals ORDER BY requested_at DESC LIMIT ?)", (limit,))

    def find_pending(self, proposal_key: str) -> Approval | None:
        found = self._select("proposal_key = ? AND status = 'pending'", (proposal_key,))
        return found[0] if found else None

    def latest(self, proposal_key: str) -> Approval | None:
        """The newest request for this proposal, whatever its status."""
        found = self._select("proposal_key = ?", (proposal_key,))
        return found[-1] if found else None

    def reask_due(self, proposal_key: str, now: datetime, reask_after: float | None) -> Approval | None:
        """The expired request that this proposal may now be asked again for, or None.

        Only when the newest request for it expired unanswered at least `reask_after` seconds ago (None:
        never). A denied, approved or pending newest request is never re-asked here.
        """
        last = self.latest(proposal_key)
        if last is None or last.status != "expired" or reask_after is None:
            return None
        if _utc(now) < _utc(last.expires_at) + timedelta(seconds=reask_after):
            return None
        return last

    def request(
        self,
        *,
        proposal_key: str,
        target: str,
        action: str,
        level: int,
        now: datetime,
        expire_after_s: float,
        payload: dict[str, Any],
        run_id: str,
        escalation: Sequence[Sequence[str]] = (),
    ) -> Approval:
        """Open a request (idempotent: an open request for the same proposal is returned as is).

        After an unanswered (expired) request for the same proposal this is its next round, addressed to
        the next group of `escalation`; the re-ask is audited before the new pending request.
        """
        existing = self.find_pending(proposal_key)
        if existing is not None:
            if not self.audit.exists(kind="approval", status="pending", approval_id=existing.id):
                self._audit_pending(existing, run_id)  # its audit entry failed when it was opened
            return existing
        approval_id = "apr_" + secrets.token_urlsafe(12)
        expires = now + timedelta(seconds=expire_after_s)
        previous = self.latest(proposal_key)
        round_ = previous.round + 1 if previous is not None and previous.status == "expired" else 1
        group, approvers = escalation_group(round_, escalation)
        asked: dict[str, Any] = {"round": round_, "group": group, "approvers": approvers}
        if previous is not None and round_ > 1:
            asked["reask_of"] = previous.id
            whom = f"group {group}: {', '.join(approvers)}" if approvers else "the approvers"
            self.audit.record(
                "approval", at=now, run_id=run_id, target=target, action=action, level=level,
                status="escalated" if approvers != previous.approvers else "reasked",
                reason=f"{previous.id} expired unanswered at {iso_utc(previous.expires_at)}; still proposed, "
                       f"asking again (round {round_}) to {whom}",
                data={"approval_id": approval_id, "previous_approval_id": previous.id,
                      "proposal_key": proposal_key, **asked},
            )
        payload = {**payload, **asked}
        self._write(
            "INSERT INTO approvals (id, proposal_key, target, action, level, requested_at, expires_at, payload)"
            " VALUES (?,?,?,?,?,?,?,?)",
            (approval_id, proposal_key, target, action, level, iso_utc(now), iso_utc(expires),
             json.dumps(payload, default=str, ensure_ascii=False)),
        )
        got = self.get(approval_id)
        assert got is not None
        self._audit_pending(got, run_id)
        return got

    def _audit_pending(self, approval: Approval, run_id: str) -> None:
        asked: dict[str, Any] = {k: approval.payload[k] for k in ("round", "group", "approvers", "reask_of")
                                 if k in approval.payload}
        self.audit.record(
            "approval", at=approval.requested_at, run_id=run_id, target=approval.target, action=approval.action,
            level=approval.level, status="pending", reason=f"waiting for a human until {iso_utc(approval.expires_at)}",
            data={"approval_id": approval.id, "proposal_key": approval.proposal_key,
                  "expires_at": iso_utc(approval.expires_at), **asked},
        )

    def answer(
        self, approval_id: str, *, decision: Literal["approve", "deny"], by: str, reason: str, now: datetime, run_id: str
    ) -> Approval:
        """Take one answer, durably, and claim it for completion (`audit_answer`, then the graph's resume).

        A second, stale or unknown answer raises ApprovalError (and is audited); a store that cannot be written
        raises ApprovalUnavailable and the request stays open.
        """
        if decision not in ("approve", "deny"):
            raise ApprovalError(f"decision must be approve or deny, not {decision!r}",
                                zh=f"答复只能是 approve 或 deny，不能是 {decision!r}")
        if not by or not by.strip():
            raise ApprovalError("an answer needs the approver's identity", zh="答复须注明审批人身份")
        current = self.get(approval_id)
        if current is None:
            raise ApprovalError(f"no approval with id {approval_id!r}", zh=f"没有编号为 {approval_id} 的审批请求")
        new_status = "approved" if decision == "approve" else "denied"
        try:
            taken = self._write(
                "UPDATE approvals SET status = ?, answered_by = ?, answered_at = ?, answer_reason = ?,"
                " claimed_by = ?, claimed_until = ? WHERE id = ? AND status = 'pending' AND expires_at > ?",
                (new_status, by, iso_utc(now), reason, self.holder, time.time() + CLAIM_S, approval_id, iso_utc(now)),
            ) == 1
        except StoreUnavailable as exc:
            raise ApprovalUnavailable(exc.problem) from exc
        if not taken:
            latest = self.get(approval_id)
            why = (
                f"already {latest.status} by {latest.answered_by or 'policy'}"
                if latest and latest.status != "pending"
                else "expired"
            )
            why_zh = (
                f"已由 {latest.answered_by or '策略'} {_ANSWERED_ZH.get(latest.status, latest.status)}"
                if latest and latest.status in _ANSWERED_ZH
                else "已过期"
            )
            try:
                self.audit.record(
                    "approval", at=now, run_id=run_id, target=current.target, action=current.action,
                    level=current.level, status="refused_answer", reason=f"answer from {by} refused: {why}",
                    data={"approval_id": approval_id, "decision": decision},
                )
            except StoreUnavailable as exc:  # the refusal stands either way; say it went unaudited
                why += f" (refusal not audited: {exc.problem.detail})"
                why_zh += f"（本次未受理未能写入审计：{exc.problem.detail}）"
            raise ApprovalError(f"approval {approval_id} cannot be answered: {why}",
                                zh=f"审批请求 {approval_id} 无法再处理：{why_zh}")
        answered = self.get(approval_id)
        assert answered is not None
        return answered

    def audit_answer(self, approval: Approval) -> None:
        """Audit an answer or expiry once (skipped when its entry is already there): at the time it was given."""
        status = approval.status
        if status not in ("approved", "denied", "expired"):
            raise ApprovalError(f"approval {approval.id} is {status}: nothing to audit",
                                zh=f"审批请求 {approval.id} 的状态为 {status}：没有可审计的答复")
        if self.audit.exists(kind="approval", status=status, approval_id=approval.id):
            return
        at = approval.answered_at or approval.expires_at
        if status == "expired":
            self.audit.record(
                "approval", at=at, run_id="expiry", target=approval.target, action=approval.action,
                level=approval.level, status="expired", reason=f"no answer by {iso_utc(approval.expires_at)}; not done",
                data={"approval_id": approval.id, "proposal_key": approval.proposal_key},
            )
            return
        decision = "approve" if status == "approved" else "deny"
        self.audit.record(
            "approval", at=at, run_id=approval.id, target=approval.target, action=approval.action,
            level=approval.level, status=status,
            reason=f"{decision} by {approval.answered_by}: {approval.answer_reason or ''}".strip(": "),
            data={"approval_id": approval.id, "proposal_key": approval.proposal_key, "by": approval.answered_by,
                  "target_uid": ((approval.payload.get("guarded_action") or {}).get("proposal") or {}).get("target_uid")},
        )

    def incomplete(self) -> list[Approval]:
        """Answered or expired requests whose audit or resume has not been done (oldest first)."""
        if self.readonly is not None and "completed_at" not in columns(self._conn, "approvals"):
            return []  # an older file, opened read-only: nothing can be completed anyway
        return self._select("status IN ('approved', 'denied', 'expired') AND completed_at IS NULL", ())

    def claim(self, approval_id: str) -> bool:
        """Take the right to complete an answered request; False while another live process holds it."""
        now = time.time()
        with self._lock:
            row = self._conn.execute("SELECT claimed_by FROM approvals WHERE id = ?", (approval_id,)).fetchone()
        left = row[0] if row and self._left_here(row[0]) else self.holder
        return self._write(
            "UPDATE approvals SET claimed_by = ?, claimed_until = ? WHERE id = ? AND completed_at IS NULL"
            " AND status != 'pending' AND (claimed_by IS NULL OR claimed_by = ? OR claimed_by = ? OR claimed_until <= ?)",
            (self.holder, now + CLAIM_S, approval_id, self.holder, left, now),
        ) == 1

    def _left_here(self, holder: str | None) -> bool:
        """A claim made on this host by a process that no longer runs (the one this one replaced), or by a version
        that named only the host. A live process keeps its claim: it may be carrying the answer out right now."""
        if not holder or holder == self.holder:
            return False
        if not holder.rpartition("/")[2].isdigit():
            return holder == self.host
        return process_gone(holder, here=self.host)

    def release(self, approval_id: str) -> None:
        """Give up a claim (its completion failed and will be tried again); best effort."""
        with contextlib.suppress(StoreUnavailable):  # else the claim lapses after CLAIM_S
            self._write("UPDATE approvals SET claimed_by = NULL, claimed_until = NULL WHERE id = ? AND claimed_by = ?",
                        (approval_id, self.holder))

    def mark_completed(self, approval_id: str, now: datetime) -> None:
        self._write("UPDATE approvals SET completed_at = ?, claimed_by = NULL, claimed_until = NULL"
                    " WHERE id = ? AND completed_at IS NULL", (iso_utc(now), approval_id))

    def expire_due(self, now: datetime, run_id: str) -> list[Approval]:
        """Mark every overdue request expired (silence is never approval), claimed for completion.

        The expiry's audit entry and the graph's resume follow (`audit_answer`, SweepService.complete).
        """
        due = self._select("status = 'pending' AND expires_at <= ?", (iso_utc(now),))
        expired = []
        for item in due:
            changed = self._write(
                "UPDATE approvals SET status = 'expired', answered_at = ?, claimed_by = ?, claimed_until = ?"
                " WHERE id = ? AND status = 'pending'",
                (iso_utc(now), self.holder, time.time() + CLAIM_S, item.id),
            )
            if changed == 1:
                got = self.get(item.id)
                assert got is not None
                expired.append(got)
        return expired


def audit_refused_answer(audit: AuditLog, approval: Approval, *, at: datetime, run_id: str, decision: str,
                         reason: str, **data: Any) -> None:
    """An answer refused before it reached the store (not an approver, an unsigned sender) is audited too: an
    attempt is a fact. The refusal stands when the audit cannot be written (logged)."""
    try:
        audit.record("approval", at=at, run_id=run_id, target=approval.target, action=approval.action,
                     level=approval.level, status="refused_answer", reason=reason,
                     data={"approval_id": approval.id, "decision": decision, **data})
    except StoreUnavailable as exc:
        log.warning("refused answer to %s not audited: %s", approval.id, exc.problem.detail)
