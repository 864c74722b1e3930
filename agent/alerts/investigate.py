"""Investigation of a sustained node incident: the jobs on the node, whether each makes progress, and the
runbook's proposed actions (a cordon, level 4) decided by the guardrail. Pure: the reading, the findings and
the decisions come from the caller (agent/graph/service.py `investigate`), which does the I/O.

A job counts as making progress only on evidence of progress (a counter in its log advanced within the
window); busy GPUs are reported but are not taken as progress, because a hung collective spins at 100%.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel

from core.actions import ActionOutcome, Finding, GuardedAction, ProposedAction
from core.observation import Observation
from core.text import markdown_text as shown

PROGRESS_WINDOW_S = 900.0  # a log counter that advanced this recently (or within 3 typical gaps) is progress
BUSY_PCT = 10.0  # average GPU utilisation over the last slices at or above this is "busy"

# (the incident's reading, its findings) -> proposals; the caller decides and audits each one.
Plan = Callable[[Observation, list[Finding]], list[ProposedAction]]
Decided = tuple[GuardedAction, str | None, ActionOutcome | None]  # decision, approval id, outcome if acted
Investigator = Callable[[Plan, str | None, frozenset[str]], tuple[Observation, list[Finding], list[Decided]]]


class JobProgress(BaseModel):
    id: str
    user: str
    project: str | None
    gpus: int
    state: Literal["progressing", "busy", "stalled", "unknown"]
    detail: str


class Investigation(BaseModel):
    node: str
    at: datetime | None = None
    jobs: list[JobProgress] = []
    health: list[str] = []  # the steward's own node findings (evidence)
    proposals: list[str] = []  # each proposal and what the guardrail said, one line each
    error: str | None = None  # the investigation could not run: why


def _recent_util(series: list[list[float | None]], slices: int = 3) -> float | None:
    values = [v for util in series for v in [x for x in util if x is not None][-slices:]]
    return sum(values) / len(values) if values else None


def job_progress(obs: Observation, job_id: str) -> JobProgress | None:
    job = obs.jobs_by_id().get(job_id)
    if job is None:
        return None
    util = _recent_util([g.util_avg for g in obs.gpus_by_job().get(job_id, [])])
    log = obs.logs.get(job_id)
    window = timedelta(seconds=max(PROGRESS_WINDOW_S, 3 * (log.typical_gap_s or 0) if log else 0))
    util_words = f"GPU {util:.0f}%" if util is not None else "no GPU samples"
    base = {"id": job.id, "user": job.user, "project": job.project, "gpus": job.gpus}
    if log is not None and log.advanced_since(obs.at - window) and log.last_progress_at is not None:
        step = f" (step {log.last_step:g})" if log.last_step is not None else ""
        return JobProgress(**base, state="progressing",
                           detail=f"log progress at {log.last_progress_at:%H:%M}{step}; {util_words}")
    if util is not None and util >= BUSY_PCT:
        seen = "no log progress in the window" if log is not None else "log not read (GPUs busy)"
        return JobProgress(**base, state="busy", detail=f"{util_words}; {seen}")
    if util is None and log is None:
        return JobProgress(**base, state="unknown", detail="no GPU samples and no log read")
    last = f"last log progress {log.last_progress_at:%H:%M}" if log and log.last_progress_at else "no log progress"
    if log is not None and log.ended:
        last += ", then a failure"
    return JobProgress(**base, state="stalled", detail=f"{util_words}; {last}")


def cordon_plan(node: str, proposes: frozenset[str], reason: str) -> Plan:
    """The runbook's cordon for `node`, when the runbook proposes one and the steward's own reading backs it."""

    def plan(obs: Observation, findings: list[Finding]) -> list[ProposedAction]:
        info = next((n for n in obs.nodes if n.name == node), None)
        health = [f for f in findings if f.target == node and f.target_type == "node" and f.kind == "node_health"]
        if "cordon" not in proposes or info is None or not health or info.unschedulable:
            return []
        return [ProposedAction(action="cordon", target=node, finding_kind="node_health", proposed_by="investigation",
                               target_uid=info.uid or None, reason=f"{reason}; {health[0].evidence}")]

    return plan


def build(node: str, obs: Observation, findings: list[Finding], decided: list[Decided],
          proposes: frozenset[str]) -> Investigation:
    info = next((n for n in obs.nodes if n.name == node), None)
    on_node = [j.id for j in obs.jobs if j.node == node and j.state == "running"]
    jobs = [p for p in (job_progress(obs, j) for j in on_node) if p is not None]
    health = [f.evidence for f in findings if f.target == node and f.target_type == "node"]
    lines = []
    for ga, approval, outcome in decided:
        what = f"{ga.proposal.action} {ga.proposal.target} (level {ga.decision.level})"
        if approval:
            lines.append(f"{what}: awaiting approval {approval}")
        elif outcome is not None:
            lines.append(f"{what}: {outcome.status} {outcome.detail}".rstrip())
        else:
            lines.append(f"{what}: {ga.decision.verdict} ({ga.decision.rule}: {ga.decision.reason})")
    if not decided and "cordon" in proposes:
        why = ("already cordoned" if info is not None and info.unschedulable else
               "the steward's own reading shows no health problem on it" if info is not None else
               "the node is not in the steward's reading")
        lines.append(f"no cordon proposed for {node}: {why}")
    return Investigation(node=node, at=obs.at, jobs=jobs, health=health, proposals=lines)


_STATE_ZH = {"progressing": "有进展", "busy": "GPU 忙（未见日志进展）", "stalled": "停滞", "unknown": "未知"}


def render_lines(inv: Investigation, language: str) -> list[str]:
    """The investigation's part of the incident message (markdown in a chat: the cluster's text in it, a job's name,
    user, detail or a reading quoting them, is written as text, core.text.markdown_text)."""
    zh = language == "zh"
    out = [f"调查（节点 {shown(inv.node)}）：" if zh else f"Investigation (node {shown(inv.node)}):"]
    if inv.error:
        out.append(f"- 调查未完成：{shown(inv.error)}" if zh else f"- could not investigate: {shown(inv.error)}")
        return out
    out.extend(f"- {'本系统读数' if zh else 'steward reading'}: {shown(h)}" for h in inv.health[:3])
    if not inv.jobs:
        out.append("- 节点上没有正在运行的作业" if zh else "- no running jobs on the node")
    for j in inv.jobs[:10]:
        state = _STATE_ZH[j.state] if zh else j.state
        out.append(f"- {shown(j.id)} ({shown(j.user)}, {j.gpus} GPU): {state}; {shown(j.detail)}")
    label = "建议操作（经护栏与审批）：" if zh else "Proposed actions (through the guardrail and approval):"
    out.append(label)
    out.extend(f"- {shown(p)}" for p in inv.proposals or ["—"])
    out.append("- 排空（drain）会驱逐上述作业：由人工在通知作业负责人后执行" if zh else
               "- drain evicts the jobs above: a human runs it after their owners are told")
    return out
