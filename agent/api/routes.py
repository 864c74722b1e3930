"""REST endpoints: findings, approvals, exemptions, audit, savings, sweeps, health and metrics."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response

from agent.api.auth import Approver, Viewer, auth_mode
from agent.api.metrics import render_metrics
from agent.api.runtime import StewardRuntime, SweepBusy, UnknownApproval
from agent.api.schemas import (
    ApprovalAnswer,
    ApprovalResult,
    ApprovalsPage,
    AuditPage,
    ErrorBody,
    ExemptionRequest,
    ExemptionResult,
    FindingsPage,
    Health,
    Savings,
    SweepRun,
)
from agent.records.approvals import ApprovalError
from agent.records.savings import compute_savings
from core.durations import parse_duration

router = APIRouter()


def runtime_of(request: Request) -> StewardRuntime:
    return request.app.state.runtime


@router.get("/healthz", response_model=Health, tags=["ops"])
def healthz(request: Request) -> Health:
    rt = runtime_of(request)
    has_runbooks = bool(getattr(request.app.state, "runbooks_route", False))
    return Health(cluster_time=rt.deps.clock.now(), planner=rt.deps.planner.name,
                  auth_mode=auth_mode(request.app.state.settings), schedule=rt.scheduler.schedule.describe(),
                  leader=rt.scheduler.leader,
                  runbooks_route=has_runbooks)


@router.get("/metrics", tags=["ops"], response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
def metrics(request: Request) -> Response:
    return Response(render_metrics(runtime_of(request)), media_type="text/plain; version=0.0.4; charset=utf-8")


@router.get("/api/findings", response_model=FindingsPage, tags=["findings"])
def findings(request: Request, who: Viewer) -> FindingsPage:
    rt = runtime_of(request)
    latest = rt.latest
    at = latest.state.get("at") if latest else None
    return FindingsPage(at=at, run_id=latest.run_id if latest else None, findings=rt.findings())


@router.get("/api/approvals", response_model=ApprovalsPage, tags=["approvals"])
def approvals(request: Request, who: Viewer, recent: Annotated[int, Query(ge=0, le=500)] = 50) -> ApprovalsPage:
    store = runtime_of(request).deps.approvals
    answered = [a for a in store.all(limit=100_000) if a.status != "pending"]
    answered.sort(key=lambda a: a.answered_at or a.requested_at, reverse=True)
    return ApprovalsPage(pending=store.pending(), recent=answered[:recent])


@router.post("/api/approvals/{approval_id}", response_model=ApprovalResult, tags=["approvals"],
             responses={404: {"model": ErrorBody}, 409: {"model": ErrorBody, "description": "already answered or expired"}})
def answer(request: Request, approval_id: str, body: ApprovalAnswer, who: Approver) -> ApprovalResult:
    rt = runtime_of(request)
    try:
        result = rt.answer(approval_id, body.decision, by=who.name, reason=body.reason)
    except UnknownApproval as exc:
        raise HTTPException(404, str(exc)) from None
    except ApprovalError as exc:
        raise HTTPException(409, str(exc)) from None
    approval = rt.deps.approvals.get(approval_id)
    assert approval is not None
    return ApprovalResult(approval=approval, report=result.report, outcomes=result.state.get("outcomes", []))


@router.post("/api/exemptions", response_model=ExemptionResult, status_code=201, tags=["approvals"],
             responses={422: {"model": ErrorBody}})
def exempt(request: Request, body: ExemptionRequest, who: Approver) -> ExemptionResult:
    try:
        seconds = parse_duration(body.duration)
    except ValueError as exc:
        raise HTTPException(422, f"duration {body.duration!r}: {exc}") from None
    if seconds <= 0 or seconds > 30 * 86400:
        raise HTTPException(422, "an exemption lasts more than 0 and at most 30 days")
    seq, until = runtime_of(request).exempt(body.job, seconds, by=who.name, reason=body.reason)
    return ExemptionResult(job=body.job, until=until, by=who.name, audit_seq=seq)


@router.get("/api/audit", response_model=AuditPage, tags=["audit"])
def audit(request: Request, who: Viewer, kind: str | None = None, target: str | None = None,
          status: str | None = None, limit: Annotated[int, Query(ge=1, le=1000)] = 100,
          offset: Annotated[int, Query(ge=0)] = 0) -> AuditPage:
    log = runtime_of(request).deps.audit
    rows = log.entries(kind=kind, target=target, status=status, limit=limit + 1, offset=offset)
    return AuditPage(entries=rows[:limit], limit=limit, offset=offset,
                     next_offset=offset + limit if len(rows) > limit else None)


@router.get("/api/savings", response_model=Savings, tags=["findings"])
def savings(request: Request, who: Viewer, points: Annotated[int, Query(ge=2, le=500)] = 24) -> Savings:
    rt = runtime_of(request)
    return compute_savings(rt.deps.audit, rt.findings(), rt.deps.clock.now(), rt.deps.currency, points=points)


@router.post("/api/sweeps", response_model=SweepRun, tags=["sweeps"], responses={409: {"model": ErrorBody}})
def sweep_now(request: Request, who: Approver) -> SweepRun:
    try:
        result = runtime_of(request).sweep_now(trigger=f"api:{who.name}")
    except SweepBusy as exc:
        raise HTTPException(409, str(exc)) from None
    return SweepRun(run_id=result.run_id, at=result.state["at"], findings=len(result.state.get("findings", [])),
                    approvals_opened=[a.id for a in result.approvals], report=result.report)
