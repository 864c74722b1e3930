"""Pydantic models of the HTTP API's requests and responses (what the OpenAPI schema shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.records.approvals import Approval
from agent.records.audit import AuditEntry
from agent.records.savings import Savings, SavingsPoint, TeamWaste  # noqa: F401 - part of the API
from core.actions import Finding


class Health(BaseModel):
    status: Literal["ok"] = "ok"
    cluster_time: datetime
    planner: str
    auth_mode: Literal["tokens", "proxy", "local-dev"]
    schedule: str
    leader: bool
    runbooks_route: bool = False


class FindingsPage(BaseModel):
    at: datetime | None = Field(None, description="Cluster time of the sweep the findings come from.")
    run_id: str | None = None
    findings: list[Finding]


class ApprovalsPage(BaseModel):
    pending: list[Approval]
    recent: list[Approval] = Field(description="Answered or expired requests, newest first.")


class ApprovalAnswer(BaseModel):
    decision: Literal["approve", "deny"]
    reason: str = Field("", max_length=2000)


class ApprovalResult(BaseModel):
    approval: Approval
    report: str
    outcomes: list[dict[str, Any]]


class ExemptionRequest(BaseModel):
    job: str = Field(min_length=1, description="Job id, node or pool to leave alone.")
    duration: str = Field(description="How long, e.g. '4h', '30m', '1d'.")
    reason: str = Field("", max_length=2000)


class ExemptionResult(BaseModel):
    job: str
    until: datetime
    by: str
    audit_seq: int


class AuditPage(BaseModel):
    entries: list[AuditEntry]
    limit: int
    offset: int
    next_offset: int | None


class SweepRun(BaseModel):
    run_id: str
    at: datetime
    findings: int
    approvals_opened: list[str]
    report: str


class ChatRequest(BaseModel):
    message: str = Field(min_length=1, max_length=4000)
    lang: Literal["en", "zh"] | None = Field(None, description="Reply language; detected from the message when omitted.")


class ErrorBody(BaseModel):
    detail: str
