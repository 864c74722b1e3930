"""Pydantic models of the HTTP API's requests and responses (what the OpenAPI schema shows)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, Field

from agent.records.approvals import Approval
from agent.records.audit import AuditEntry
from agent.records.savings import Savings, SavingsPoint, TeamWaste  # noqa: F401 - part of the API
from core.actions import Finding

MAX_TARGET_CHARS = 320  # the longest Kubernetes namespace/name: 63 + 1 + 253
NUL_REFUSED = "must not contain a NUL character (\\x00); the data store cannot hold it"


def no_nul(value: str | None) -> str | None:
    """A text field or query filter without NUL: Postgres text cannot hold one (SQLite can), so it is refused
    here, naming the field (422), on either store alike."""
    if value is not None and "\x00" in value:
        raise ValueError(NUL_REFUSED)
    return value


Text = Annotated[str, AfterValidator(no_nul)]  # every text field a client sends


class HealthReason(BaseModel):
    reason: str = Field(description="data_dir_readonly, data_dir_full, db_locked, db_error, audit_chain_broken, "
                                    "answers_incomplete, sweep_failing, backend_unavailable, notify_failing or "
                                    "planner_degraded")
    detail: str


class Health(BaseModel):
    status: Literal["ok", "degraded"] = "ok"
    cluster_time: datetime
    planner: str
    auth_mode: Literal["tokens", "proxy", "local-dev"]
    schedule: str
    leader: bool
    runbooks_route: bool = False
    display_tz: str = Field("UTC", description="The time zone people read times in (STEWARD_DISPLAY_TZ).")
    language: Literal["en", "zh"] | None = Field(None, description="The team's language when the operator set one "
                                                 "(STEWARD_LANGUAGE): the UI's default before a reader picks one.")
    reasons: list[HealthReason] = Field(default_factory=list, description="Why it is degraded (empty when ok).")


class UtilSpark(BaseModel):
    """A target's GPU utilisation (percent) over the detection window, oldest point first (agent/api/sparkline.py)."""

    step_s: float = Field(description="Seconds each point covers.")
    end: datetime = Field(description="Where the newest point ends: the sweep's cluster time.")
    max: list[float | None] = Field(description="Per point, the highest utilisation of any GPU; null: no reading.")
    avg: list[float | None] = Field(description="Per point, the mean utilisation over the GPUs; null: no reading.")


class FindingView(Finding):
    """A finding with what has happened to its target since (from the audit log and the inbox)."""

    warned_at: datetime | None = Field(None, description="When the owner was warned of a stop.")
    advised_at: datetime | None = Field(None, description="When the owner was last told of it as advice (no stop "
                                                          "follows: right-size, scale a service down).")
    stop_due_at: datetime | None = Field(None, description="The earliest time the warned stop may happen.")
    stopping_since: datetime | None = Field(None, description="SIGTERM sent; the job had not exited then.")
    stopped_at: datetime | None = Field(None, description="When the job was seen gone after a stop.")
    exempt_until: datetime | None = None
    denied_until: datetime | None = Field(None, description="A human denied the action proposed on it; that "
                                          "action is neither asked again nor done until then (approvals."
                                          "denial_holds_for).")
    approval_id: str | None = Field(None, description="A pending approval request on this target.")
    namespace: str | None = Field(None, description="Kubernetes namespace or Slurm partition of a job finding.")
    team: str | None = Field(None, description="The job's project (team / cost centre), else its namespace.")
    node: str | None = None
    pool: str | None = Field(None, description="The node pool the job, node or pool finding is on.")
    metrics_url: str | None = Field(None, description="STEWARD_METRICS_URL_TEMPLATE filled in for this target.")
    util: UtilSpark | None = Field(None, description="GPU utilisation over the detection window (job and node "
                                                     "findings, at most 48 points), from the sweep's own reading.")


class FindingsPage(BaseModel):
    at: datetime | None = Field(None, description="Cluster time of the sweep the findings come from.")
    run_id: str | None = None
    sweep_running: bool = Field(False, description="A sweep is running now (the first one: no findings yet).")
    findings: list[FindingView]


class ApprovalView(Approval):
    """An approval request with the context a person decides on, and for answered ones what came of it."""

    owner: str | None = None
    gpus: int | None = Field(None, description="GPUs the finding names (idle: all the job holds).")
    cost_per_hour: float | None = Field(None, description="What those GPUs cost per hour, in `currency`.")
    currency: str | None = None
    evidence: str | None = Field(None, description="The latest finding's evidence on the target.")
    finding_kind: str | None = None
    why: str = Field("", description="Why the guardrail asks a human, in the language asked for (`lang`).")
    metrics_url: str | None = Field(None, description="The target's metrics (STEWARD_METRICS_URL_TEMPLATE).")
    outcome: str | None = Field(None, description="Audit status of the approved action (executed, skipped, ...).")
    outcome_detail: str | None = Field(None, description="What the execution recorded, in the language asked for.")
    target_nodes: int | None = Field(None, description="resize_pool: the node count this request is for (what "
                                                       "approving carries out).")
    suggested_nodes: int | None = Field(None, description="resize_pool: the node count the latest oversized finding "
                                                          "on the pool suggests (may differ from target_nodes).")
    size_note: str | None = Field(None, description="Pending resize whose size the latest sweep no longer suggests: "
                                                    "what approving does, in the language asked for.")


class ApprovalsPage(BaseModel):
    pending: list[ApprovalView]
    recent: list[ApprovalView] = Field(description="Answered or expired requests, newest first.")


class ApprovalAnswer(BaseModel):
    decision: Literal["approve", "deny"]
    reason: Text = Field("", max_length=2000)


class ApprovalResult(BaseModel):
    approval: Approval
    report: str
    outcomes: list[dict[str, Any]]


class ExemptionRequest(BaseModel):
    job: Text = Field(min_length=1, max_length=MAX_TARGET_CHARS,
                      description="Job id, node or pool to leave alone; one the steward sees now.")
    duration: Text = Field(min_length=1, max_length=32, description="How long, e.g. '4h', '30m', '1d'.")
    reason: Text = Field("", max_length=2000)


class ExemptionResult(BaseModel):
    job: str
    until: datetime
    by: str
    audit_seq: int


class AuditView(AuditEntry):
    text: str = Field("", description="The reason for people, in the language asked for (`lang`); times readable.")


class AuditPage(BaseModel):
    entries: list[AuditView]
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
    message: Text = Field(min_length=1, max_length=4000)
    lang: Literal["en", "zh"] | None = Field(None, description="The UI's language: the reply follows the message's "
                                                                 "own language, this only when the message has none.")
    job: Text | None = Field(None, min_length=1, max_length=300,
                            description="The job the chat is about (the finding or approval open in the UI): "
                                        "`keep 4h` and questions that name no job are about it.")


class ErrorBody(BaseModel):
    detail: str


class SweepStatus(BaseModel):
    """The sweep loop now: what GET /api/status answers and /api/events pushes on every change."""

    cluster_time: datetime
    running: bool
    running_since: datetime | None = Field(None, description="Cluster time the running sweep started.")
    last_finished_at: datetime | None = None
    last_run_id: str | None = None
    next_due: datetime | None = None
    sweeps: int = Field(description="Sweeps this process ran.")
    scenario_ended: bool | None = Field(None, description="Simulated cluster only: its scenario is over, the "
                                                           "clock stands still. None on a real cluster.")
    pending_approvals: int
    degraded: list[HealthReason] = Field(default_factory=list)
    role: Literal["viewer", "approver"] | None = Field(None, description="The caller's role (the UI shows "
                                                                          "approver-only buttons by it).")


class ExemptionsPage(BaseModel):
    exemptions: list[AuditEntry] = Field(description="Exemption grants in force now, newest first; "
                                                     "`data.until`, `data.by`.")


class RevokeRequest(BaseModel):
    job: Text = Field(min_length=1, max_length=MAX_TARGET_CHARS)
    reason: Text = Field("", max_length=2000)


class RevokeResult(BaseModel):
    job: str
    by: str
    audit_seq: int
