"""Pending human approvals: one opaque id each, answered exactly once, expiring into a refusal.

Silence is never a yes, and it is not a final no either: a request that expired unanswered may be asked
again (a new request, one escalation group further) once `approvals.reask_after` has passed, if the
planner still proposes the action. A human deny stands; it is never re-asked as if it had expired.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from agent.records.audit import AuditLog, iso_utc

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
    payload TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS approvals_status ON approvals(status);
"""


class ApprovalError(ValueError):
    """An answer that cannot be taken: unknown id, already answered, or expired."""


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

    @property
    def round(self) -> int:
        """1 for a first request; n when it asks again after n - 1 requests in a row expired unanswered."""
        return int(self.payload.get("round") or 1)

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
    def __init__(self, path: str | Path, audit: AuditLog) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self.audit = audit

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
        with self._lock:
            self._conn.execute(
                "INSERT INTO approvals (id, proposal_key, target, action, level, requested_at, expires_at, payload)"
                " VALUES (?,?,?,?,?,?,?,?)",
                (approval_id, proposal_key, target, action, level, iso_utc(now), iso_utc(expires),
                 json.dumps(payload, default=str, ensure_ascii=False)),
            )
        self.audit.record(
            "approval", at=now, run_id=run_id, target=target, action=action, level=level, status="pending",
            reason=f"waiting for a human until {iso_utc(expires)}",
            data={"approval_id": approval_id, "proposal_key": proposal_key, "expires_at": iso_utc(expires), **asked},
        )
        got = self.get(approval_id)
        assert got is not None
        return got

    def answer(
        self, approval_id: str, *, decision: Literal["approve", "deny"], by: str, reason: str, now: datetime, run_id: str
    ) -> Approval:
        """Take one answer; a second, stale or unknown answer raises ApprovalError (and is audited)."""
        if decision not in ("approve", "deny"):
            raise ApprovalError(f"decision must be approve or deny, not {decision!r}")
        if not by or not by.strip():
            raise ApprovalError("an answer needs the approver's identity")
        current = self.get(approval_id)
        if current is None:
            raise ApprovalError(f"no approval with id {approval_id!r}")
        new_status = "approved" if decision == "approve" else "denied"
        with self._lock:
            cur = self._conn.execute(
                "UPDATE approvals SET status = ?, answered_by = ?, answered_at = ?, answer_reason = ?"
                " WHERE id = ? AND status = 'pending' AND expires_at > ?",
                (new_status, by, iso_utc(now), reason, approval_id, iso_utc(now)),
            )
            taken = cur.rowcount == 1
        if not taken:
            latest = self.get(approval_id)
            why = (
                f"already {latest.status} by {latest.answered_by or 'policy'}"
                if latest and latest.status != "pending"
                else "expired"
            )
            self.audit.record(
                "approval", at=now, run_id=run_id, target=current.target, action=current.action,
                level=current.level, status="refused_answer", reason=f"answer from {by} refused: {why}",
                data={"approval_id": approval_id, "decision": decision},
            )
            raise ApprovalError(f"approval {approval_id} cannot be answered: {why}")
        self.audit.record(
            "approval", at=now, run_id=run_id, target=current.target, action=current.action, level=current.level,
            status=new_status, reason=f"{decision} by {by}: {reason}".strip(": "),
            data={"approval_id": approval_id, "proposal_key": current.proposal_key, "by": by},
        )
        answered = self.get(approval_id)
        assert answered is not None
        return answered

    def expire_due(self, now: datetime, run_id: str) -> list[Approval]:
        """Mark every overdue request expired (silence is never approval)."""
        due = self._select("status = 'pending' AND expires_at <= ?", (iso_utc(now),))
        expired = []
        for item in due:
            with self._lock:
                cur = self._conn.execute(
                    "UPDATE approvals SET status = 'expired', answered_at = ? WHERE id = ? AND status = 'pending'",
                    (iso_utc(now), item.id),
                )
            if cur.rowcount == 1:
                self.audit.record(
                    "approval", at=now, run_id=run_id, target=item.target, action=item.action, level=item.level,
                    status="expired", reason=f"no answer by {iso_utc(item.expires_at)}; not done",
                    data={"approval_id": item.id, "proposal_key": item.proposal_key},
                )
                expired.append(item)
        return expired
