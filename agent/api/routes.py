"""REST endpoints: findings, approvals, exemptions, audit, savings, sweeps, health and metrics."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
from collections.abc import AsyncIterator, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, HTTPException, Path, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator

from agent.api.auth import Approver, Viewer, auth_mode
from agent.api.health import health
from agent.api.metrics import render_metrics
from agent.api.runtime import StewardRuntime, SweepBusy, UnknownApproval
from agent.api.schemas import (
    MAX_TARGET_CHARS,
    ApprovalAnswer,
    ApprovalResult,
    ApprovalsPage,
    ApprovalView,
    AuditPage,
    AuditView,
    ErrorBody,
    ExemptionRequest,
    ExemptionResult,
    ExemptionsPage,
    FindingsPage,
    FindingView,
    Health,
    HealthReason,
    RevokeRequest,
    RevokeResult,
    Savings,
    SweepRun,
    SweepStatus,
    no_nul,
)
from agent.api.sparkline import finding_sparks
from agent.chatops.commands import APPROVER_MAX_KEEP_S, MIN_KEEP_S
from agent.detectors.evidence import describe
from agent.graph.report import approval_why, audit_text, outcome_text, report_for_people
from agent.records.approvals import Approval, ApprovalError, ApprovalUnavailable, audit_refused_answer
from agent.records.audit import AuditEntry
from agent.records.savings import compute_savings
from core.actions import Finding
from core.durations import parse_spoken_duration
from core.observation import Observation

router = APIRouter()
MAX_OFFSET = 10**12  # far past any audit log, well inside SQLite's 64-bit integers
ApprovalId = Annotated[str, Path(min_length=1, max_length=100)]
Filter = Annotated[str | None, Query(max_length=MAX_TARGET_CHARS), AfterValidator(no_nul)]


def runtime_of(request: Request) -> StewardRuntime:
    return request.app.state.runtime


def configured_language(request: Request) -> Literal["en", "zh"] | None:
    """STEWARD_LANGUAGE when the operator set it; None leaves the UI to the reader's browser."""
    settings = request.app.state.settings
    return "zh" if settings.language == "zh" else "en" if "language" in settings.model_fields_set else None


_health_threads: tuple[int, ThreadPoolExecutor] | None = None


def health_threads() -> ThreadPoolExecutor:
    """The health check's own threads, made in the process that uses them: an executor made before a fork (a test's
    unprivileged child, a pre-forking server) keeps its parent's dead threads in its books and never runs a task."""
    global _health_threads
    if _health_threads is None or _health_threads[0] != os.getpid():
        _health_threads = (os.getpid(), ThreadPoolExecutor(max_workers=2, thread_name_prefix="healthz"))
    return _health_threads[1]


@router.api_route("/healthz", methods=["GET", "HEAD"], response_model=Health, tags=["ops"],
            responses={503: {"model": Health, "description": "degraded: `reasons` says why; the process is up"}})
async def healthz(request: Request, response: Response) -> Health:
    rt = runtime_of(request)
    has_runbooks = bool(getattr(request.app.state, "runbooks_route", False))
    # Its own threads, not the pool every other route queues in: a readiness probe must answer during a burst of
    # heavy reads (500 concurrent audit pages made it wait 22 s, past the probe's 5 s timeout).
    problems = await asyncio.get_running_loop().run_in_executor(health_threads(), health, rt)
    if problems:
        response.status_code = 503
    return Health(status="degraded" if problems else "ok", cluster_time=rt.deps.clock.now(),
                  planner=rt.deps.planner.name, auth_mode=auth_mode(request.app.state.settings),
                  display_tz=request.app.state.settings.display_tz, language=configured_language(request),
                  schedule=rt.scheduler.schedule.describe(), leader=rt.scheduler.leader, runbooks_route=has_runbooks,
                  reasons=[HealthReason(reason=p.reason, detail=p.detail) for p in problems])


@router.get("/metrics", tags=["ops"], response_class=Response,
            responses={200: {"content": {"text/plain": {}}, "description": "Prometheus text format"}})
def metrics(request: Request) -> Response:
    return Response(render_metrics(runtime_of(request)), media_type="text/plain; version=0.0.4; charset=utf-8")


# The reader's language for evidence and reasons (the UI sends its own); English is the detectors' own text.
UiLang = Annotated[Literal["en", "zh"], Query(description="Language of evidence and reasons: en | zh.")]


def _placement(f: Finding, obs: Observation | None, template: str | None) -> dict[str, str | None]:
    """Where a finding's target sits (namespace, team, node, pool) and its metrics link."""
    jobs = obs.jobs_by_id() if obs else {}
    pool_of = {n.name: n.pool for n in obs.nodes} if obs else {}
    job = jobs.get(f.target) if f.target_type == "job" else None
    namespace = job.namespace if job else (f.target.split("/", 1)[0] if f.target_type == "job" and "/" in f.target
                                           else None)
    node = job.node if job else (f.target if f.target_type == "node" else None)
    pool = f.target if f.target_type == "pool" else pool_of.get(node or "")
    team = (job.project or job.namespace) if job else namespace
    out: dict[str, str | None] = {"namespace": namespace, "team": team, "node": node, "pool": pool}
    if template:
        pod = (job.name if job else f.target.split("/", 1)[-1]) if f.target_type == "job" else ""
        out["metrics_url"] = template.format(namespace=quote(namespace or "", safe=""), pod=quote(pod, safe=""),
                                             node=quote(node or "", safe=""))
    return out


def finding_views(rt: StewardRuntime, lang: str = "en", template: str | None = None) -> list[FindingView]:
    found = rt.findings()
    states = rt.finding_states(found)
    obs = rt.newest_observation()
    sparks = finding_sparks(found, rt.sweep_observation())
    zone = rt.zone
    # Where the target sits now (its placement's team among it) over what the finding recorded.
    return [FindingView(**{**f.model_dump(), "evidence": describe(f, lang, zone), **states.get(f.target, {}),
                           **_placement(f, obs, template)}, util=sparks.get(f.target)) for f in found]


def _template(request: Request) -> str | None:
    return request.app.state.settings.metrics_url_template  # type: ignore[no-any-return]


@router.get("/api/findings", response_model=FindingsPage, tags=["findings"])
def findings(request: Request, who: Viewer, lang: UiLang = "en") -> Response:
    rt = runtime_of(request)
    template = _template(request)

    def build() -> bytes:
        latest = rt.latest
        return FindingsPage(at=latest.state.get("at") if latest else None, run_id=latest.run_id if latest else None,
                            sweep_running=False, findings=finding_views(rt, lang, template)).model_dump_json().encode()

    # The page is the latest sweep's (a snapshot); only whether a sweep runs now is read per request. The key can
    # only be the top-level one: inside strings JSON escapes every quote.
    body = rt.snapshots.body("findings", (lang, template), build)
    if rt.scheduler.busy:
        body = body.replace(b'"sweep_running":false', b'"sweep_running":true', 1)
    return Response(content=body, media_type="application/json")


def approval_view(rt: StewardRuntime, a: Approval, lang: str = "en", template: str | None = None) -> ApprovalView:
    """The request with its target's latest finding (owner, GPUs, cost per hour, evidence) and, once approved,
    the audited outcome of the action it allowed."""
    decision = (a.payload.get("guarded_action") or {}).get("decision") or {}
    view = ApprovalView(**a.model_dump(), why=approval_why(a.action, str(decision.get("rule", "approval")),
                                                           str(decision.get("reason", "")), lang))
    finding = next((f for f in rt.findings() if f.target == a.target), None)
    if finding is not None:
        hourly = finding.waste_cost / finding.waste_gpu_hours * finding.gpus if finding.waste_gpu_hours else None
        view = view.model_copy(update={"owner": finding.owner, "gpus": finding.gpus,
                                       "evidence": describe(finding, lang, rt.zone),
                                       "cost_per_hour": round(hourly, 2) if hourly is not None else None,
                                       "currency": finding.currency, "finding_kind": finding.kind,
                                       "metrics_url": _placement(finding, rt.newest_observation(),
                                                                 template).get("metrics_url")})
    view = _resize_sizes(view, a, finding, lang)
    if a.status == "approved":
        action_id = (a.payload.get("guarded_action") or {}).get("id")
        done = next((e for e in rt.deps.audit.entries(kind="execution", target=a.target, limit=200)
                     if action_id and e.data.get("action_id") == action_id), None)
        if done is not None:
            view = view.model_copy(update={"outcome": done.status, "outcome_detail": outcome_text(
                done.action or a.action, done.status or "", str(done.data.get("detail") or ""), done.reason or "",
                lang)})
    return view


def _resize_sizes(view: ApprovalView, a: Approval, finding: Finding | None, lang: str) -> ApprovalView:
    """A resize request names the node count it was asked for, which approving carries out (the guardrail
    re-checks it on fresh state first). A pending request is not re-asked while it waits, so a later sweep may
    suggest another size, or none: the card then says so rather than showing the newer finding as its own."""
    proposal = (a.payload.get("guarded_action") or {}).get("proposal") or {}
    nodes = proposal.get("target_nodes")
    if a.action != "resize_pool" or nodes is None:
        return view
    nodes = int(nodes)
    suggested: int | None = None
    if finding is not None and finding.kind == "oversized":
        value = int(finding.metrics.get("suggested_nodes", -1))
        suggested = value if value >= 0 else None
    note = None
    if a.status == "pending" and suggested != nodes:
        note = resize_note(a.target, nodes, suggested, lang)
    return view.model_copy(update={"target_nodes": nodes, "suggested_nodes": suggested, "size_note": note})


def resize_note(pool: str, nodes: int, suggested: int | None, lang: str) -> str:
    """Why a pending resize's size differs from the latest sweep's, and what approving does (en / zh)."""
    if lang == "zh":
        latest = (f"最近一次巡检建议缩容到 {suggested} 个节点" if suggested is not None
                  else f"最近一次巡检已不再认为 {pool} 过大")
        return (f"本请求是将 {pool} 缩容到 {nodes} 个节点；{latest}。批准将按本请求缩容到 {nodes} 个节点"
                f"（执行前护栏会按最新状态复核）。")
    latest = (f"the latest sweep suggests {suggested} nodes" if suggested is not None
              else f"the latest sweep no longer finds {pool} oversized")
    return (f"This request is to resize {pool} to {nodes} nodes; {latest}. Approving resizes to {nodes} nodes "
            f"(the guardrail re-checks it on fresh state first).")


@router.get("/api/approvals", response_model=ApprovalsPage, tags=["approvals"])
def approvals(request: Request, who: Viewer, recent: Annotated[int, Query(ge=0, le=500)] = 50,
              lang: UiLang = "en") -> Response:
    rt = runtime_of(request)
    store = rt.deps.approvals
    template = _template(request)

    def build() -> bytes:
        answered = [a for a in store.all(limit=100_000) if a.status != "pending"]
        answered.sort(key=lambda a: a.answered_at or a.requested_at, reverse=True)
        return ApprovalsPage(pending=[approval_view(rt, a, lang, template) for a in store.pending()],
                             recent=[approval_view(rt, a, lang, template) for a in answered[:recent]]
                             ).model_dump_json().encode()

    return rt.snapshots.response("approvals", (recent, lang, template), build)


@router.post("/api/approvals/{approval_id}", response_model=ApprovalResult, tags=["approvals"],
             responses={202: {"model": ApprovalResult, "description": "recorded; auditing or carrying it out is "
                                                                       "deferred and completes on its own"},
                        404: {"model": ErrorBody}, 409: {"model": ErrorBody, "description": "already answered or expired"},
                        503: {"model": ErrorBody, "description": "not taken: the approval store cannot be written"}})
def answer(request: Request, approval_id: ApprovalId, body: ApprovalAnswer, who: Viewer,
           response: Response, lang: UiLang = "en") -> ApprovalResult:
    rt = runtime_of(request)
    if who.role != "approver":  # refused as the Approver dependency would, and audited: an attempt is a fact
        if (asked := rt.deps.approvals.get(approval_id)) is not None:
            audit_refused_answer(rt.deps.audit, asked, at=rt.deps.clock.now(), run_id="api", decision=body.decision,
                                 reason=f"answer from {who.name} refused: not an approver")
        raise HTTPException(403, f"{who.name} is a {who.role}; this needs the approver role")
    try:
        result = rt.answer(approval_id, body.decision, by=who.name, reason=body.reason)
    except UnknownApproval as exc:
        raise HTTPException(404, str(exc)) from None
    except ApprovalUnavailable as exc:
        raise HTTPException(503, exc.text(lang)) from None
    except ApprovalError as exc:
        raise HTTPException(409, exc.text(lang)) from None
    if result.state.get("deferred"):
        response.status_code = 202
    approval = rt.deps.approvals.get(approval_id)
    assert approval is not None
    # Each outcome with `text`: what came of it (detail, else reason) in the reader's language.
    outcomes = [{**o, "text": outcome_text(str(o.get("action") or ""), str(o.get("status") or ""),
                                           str(o.get("detail") or ""), str(o.get("reason") or ""), lang)}
                for o in result.state.get("outcomes", [])]
    return ApprovalResult(approval=approval, report=result.report, outcomes=outcomes)


@router.post("/api/exemptions", response_model=ExemptionResult, status_code=201, tags=["approvals"],
             responses={422: {"model": ErrorBody}, 503: {"model": ErrorBody}})
def exempt(request: Request, body: ExemptionRequest, who: Approver, lang: UiLang = "en") -> ExemptionResult:
    """Errors in the reader's language (`lang`): a duration as people type it (`4h`, `4 hours`, `4小时`). A refusal
    is audited like one from chat (a `decision` entry, action `keep`, status `refused`)."""
    def refuse(status: int, en: str, zh: str) -> HTTPException:
        if status == 422:  # the caller's request, not the steward's state: what was asked and why it was not done
            rt = runtime_of(request)
            rt.deps.audit.record("decision", at=rt.deps.clock.now(), run_id="api", target=body.job[:200],
                                 action="keep", status="refused", reason=en,
                                 data={"by": who.name, "duration": body.duration[:50], "reason_zh": zh})
        return HTTPException(status, zh if lang == "zh" else en)

    try:
        seconds = parse_spoken_duration(body.duration)
    except ValueError:
        raise refuse(422, f"duration {body.duration!r} is not a duration: write e.g. 30m, 4h or 2d",
                     f"时长 {body.duration!r} 无法识别：请写成 30m、4h、2d 或 4小时") from None
    if seconds < MIN_KEEP_S or seconds > APPROVER_MAX_KEEP_S:
        raise refuse(422, "an exemption lasts at least a minute and at most 30 days", "保留时长须至少 1 分钟、不超过 30 天")
    rt = runtime_of(request)
    known = rt.knows_target(body.job)
    if known is None:
        raise refuse(503, "the first sweep is still reading the cluster; try again in a moment",
                     "首次巡检仍在读取集群，请稍后再试")
    if not known:
        raise refuse(422, f"{body.job!r} is not a job, node or pool the steward sees now",
                     f"当前没有名为 {body.job!r} 的作业、节点或资源池")
    seq, until = rt.exempt(body.job, seconds, by=who.name, reason=body.reason)
    return ExemptionResult(job=body.job, until=until, by=who.name, audit_seq=seq)


@router.get("/api/exemptions", response_model=ExemptionsPage, tags=["approvals"])
def exemptions(request: Request, who: Viewer) -> ExemptionsPage:
    return ExemptionsPage(exemptions=runtime_of(request).exemptions())


@router.post("/api/exemptions/revoke", response_model=RevokeResult, tags=["approvals"],
             responses={404: {"model": ErrorBody, "description": "no exemption in force on that job"}})
def revoke(request: Request, body: RevokeRequest, who: Approver) -> RevokeResult:
    """Ends every exemption in force on the job (audited `exemption` / `revoked`); the guardrail stops honouring
    them at once. A second revoke finds none in force (404)."""
    seq = runtime_of(request).revoke_exemption(body.job, by=who.name, reason=body.reason)
    if seq is None:
        raise HTTPException(404, f"no exemption is in force on {body.job!r} / {body.job!r} 当前没有生效的保留")
    return RevokeResult(job=body.job, by=who.name, audit_seq=seq)


def audit_view(e: AuditEntry, lang: str) -> AuditView:
    return AuditView(**e.model_dump(), text=audit_text(e.kind, e.status, e.action, e.target, e.reason, e.data, lang))


@router.get("/api/audit", response_model=AuditPage, tags=["audit"])
def audit(request: Request, who: Viewer, kind: Filter = None, target: Filter = None, status: Filter = None,
          limit: Annotated[int, Query(ge=1, le=1000)] = 100,
          offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0, lang: UiLang = "en") -> AuditPage:
    log = runtime_of(request).deps.audit
    rows = log.entries(kind=kind, target=target, status=status, limit=limit + 1, offset=offset)
    return AuditPage(entries=[audit_view(e, lang) for e in rows[:limit]], limit=limit, offset=offset,
                     next_offset=offset + limit if len(rows) > limit else None)


ExportFormat = Annotated[Literal["csv", "json"], Query(description="csv (a spreadsheet) or json (a list of rows).")]
FINDING_COLUMNS = ("kind", "target", "target_type", "namespace", "team", "owner", "pool", "node", "gpus", "since",
                   "detected_at", "waste_gpu_hours", "waste_cost", "currency", "warned_at", "stop_due_at",
                   "stopping_since", "stopped_at", "exempt_until", "approval_id", "runbook", "metrics_url", "evidence")
AUDIT_COLUMNS = ("seq", "at", "recorded_at", "run_id", "kind", "action", "target", "level", "status", "reason", "text",
                 "data", "hash")
MAX_EXPORT_ROWS = 100_000  # a day of a large cluster's audit; page with `offset` past it


# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection"); a reason or log
# tail from a chat message or a job may start with one.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> object:
    """One CSV cell: nested data as JSON; text a spreadsheet would read as a formula behind a `'`."""
    if isinstance(value, dict | list):
        value = json.dumps(value, ensure_ascii=False)
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value
    return value


def _export(rows: Iterable[dict[str, Any]], columns: tuple[str, ...], fmt: str, name: str) -> Response:
    """Rows as a CSV or JSON download (times in ISO 8601 UTC, nested data as JSON; in CSV, a cell a spreadsheet
    would run as a formula starts with `'`)."""
    plain = [{c: row.get(c) for c in columns} for row in rows]
    if fmt == "json":
        body, media = json.dumps(plain, ensure_ascii=False, default=str, indent=1), "application/json"
    else:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for row in plain:
            writer.writerow({c: _cell(v) for c, v in row.items()})
        body, media = "\ufeff" + out.getvalue(), "text/csv; charset=utf-8"  # the BOM: Excel reads it as UTF-8
    return Response(body, media_type=media,
                    headers={"Content-Disposition": f'attachment; filename="steward-{name}.{fmt}"'})


@router.get("/api/findings/export", tags=["findings"], response_class=Response,
            responses={200: {"content": {"text/csv": {}, "application/json": {}}, "description": "a download"}})
def export_findings(request: Request, who: Viewer, format: ExportFormat = "csv", lang: UiLang = "en") -> Response:
    """The latest sweep's findings with their status and placement, as on the Findings tab."""
    views = finding_views(runtime_of(request), lang, _template(request))
    return _export((v.model_dump(mode="json") for v in views), FINDING_COLUMNS, format, "findings")


@router.get("/api/audit/export", tags=["audit"], response_class=Response,
            responses={200: {"content": {"text/csv": {}, "application/json": {}}, "description": "a download"}})
def export_audit(request: Request, who: Viewer, format: ExportFormat = "csv", kind: Filter = None,
                 target: Filter = None, status: Filter = None, lang: UiLang = "en",
                 limit: Annotated[int, Query(ge=1, le=MAX_EXPORT_ROWS)] = MAX_EXPORT_ROWS,
                 offset: Annotated[int, Query(ge=0, le=MAX_OFFSET)] = 0) -> Response:
    """Audit entries (newest first, filtered as GET /api/audit), each with its hash and its reason for people."""
    rows = runtime_of(request).deps.audit.entries(kind=kind, target=target, status=status, limit=limit, offset=offset)
    return _export((audit_view(e, lang).model_dump(mode="json") for e in rows), AUDIT_COLUMNS, format, "audit")


@router.get("/api/savings", response_model=Savings, tags=["findings"])
def savings(request: Request, who: Viewer, points: Annotated[int, Query(ge=2, le=500)] = 24) -> Response:
    rt = runtime_of(request)

    def build() -> bytes:
        return compute_savings(rt.deps.audit, rt.findings(), rt.deps.clock.now(), rt.deps.currency,
                               points=points).model_dump_json().encode()

    # Savings grow with time for every stopped job: the snapshot is also keyed by the cluster clock's minute.
    minute = int(rt.deps.clock.now().timestamp() // 60)
    return rt.snapshots.response("savings", (points, minute), build)


@router.post("/api/sweeps", response_model=SweepRun, tags=["sweeps"], responses={409: {"model": ErrorBody}})
def sweep_now(request: Request, who: Approver) -> SweepRun:
    rt = runtime_of(request)
    try:
        result = rt.sweep_now(trigger=f"api:{who.name}")
    except SweepBusy as exc:
        raise HTTPException(409, str(exc)) from None
    report = report_for_people(result.report, result.state, rt.deps, request.app.state.settings.zone())
    return SweepRun(run_id=result.run_id, at=result.state["at"], findings=len(result.state.get("findings", [])),
                    approvals_opened=[a.id for a in result.approvals], report=report)


@router.get("/api/status", response_model=SweepStatus, tags=["sweeps"])
def status(request: Request, who: Viewer) -> SweepStatus:
    return SweepStatus.model_validate({**runtime_of(request).status(), "role": who.role})


EVENTS_POLL_S = 0.5  # how often /api/events looks for a change; a change reaches the page within this
EVENTS_KEEPALIVE_S = 15.0  # a comment line this often keeps proxies from closing a quiet stream


@router.get("/api/events", tags=["sweeps"], response_class=StreamingResponse,
            responses={200: {"content": {"text/event-stream": {}},
                             "description": "Server-sent events: a `status` event (the SweepStatus JSON) at once and "
                                            "on every change; `: keepalive` comments in between."}})
async def events(request: Request, who: Viewer) -> StreamingResponse:
    rt = runtime_of(request)

    async def stream() -> AsyncIterator[str]:
        last, quiet = "", 0.0
        while not await request.is_disconnected():
            now = SweepStatus.model_validate({**await asyncio.to_thread(rt.status), "role": who.role}).model_dump_json()
            if now != last:
                last, quiet = now, 0.0
                yield f"event: status\ndata: {now}\n\n"
            elif quiet >= EVENTS_KEEPALIVE_S:
                quiet = 0.0
                yield ": keepalive\n\n"
            await asyncio.sleep(EVENTS_POLL_S)
            quiet += EVENTS_POLL_S

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
