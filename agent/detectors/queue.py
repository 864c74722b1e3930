"""The queue: pending jobs that can never run as asked (stuck pending), idle jobs that keep a team waiting
(blocked queue), and free GPUs no pending job can use because of how they are spread (fragmentation).

See docs/queue.md. Only capacity the observation shows counts: nodes, and pools that may still grow.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from pydantic import BaseModel

from agent.config.policy import Policy
from agent.detectors.signals import ClusterSignals
from core.actions import Finding
from core.cluster import JobInfo, gpu_model_matches
from core.durations import format_duration
from core.observation import Observation

# A scheduler may be a moment behind (a node joining, a quota just raised): judge a job pending at least this long.
STUCK_AFTER_S = 300.0
# A team waits long enough to count as blocked once a job of theirs has been pending this long.
BLOCKED_AFTER_S = 600.0
BLOCKER_KINDS = frozenset({"idle", "zombie"})
HOLDING = frozenset({"running", "stopping"})

# Slurm reasons no amount of waiting clears: the job as asked breaks a per-job limit or the partition's shape.
NEVER_REASONS = frozenset({
    "PartitionConfig", "PartitionNodeLimit", "PartitionTimeLimit", "BadConstraints", "InvalidQOS", "InvalidAccount",
    "QOSMaxGRESPerJob", "AssocMaxGRESPerJob", "QOSMaxNodePerJobLimit", "AssocMaxNodesPerJobLimit",
    "QOSMaxWallDurationPerJobLimit", "AssocMaxWallDurationPerJobLimit",
})
# Per-user quotas: they clear when the user's other jobs end, so they are stuck only when the user holds no GPUs.
USER_QUOTA_REASONS = frozenset({"QOSMaxGRESPerUser", "AssocMaxGRESPerUser", "QOSMaxGRESPerAccount"})

# metrics["cause"] codes, so the Chinese text (agent/detectors/evidence.py) renders from numbers.
CAUSE_NODE_TOO_SMALL, CAUSE_CLUSTER_TOO_SMALL, CAUSE_NO_MODEL, CAUSE_QUOTA, CAUSE_DEPENDENCY = 1.0, 2.0, 3.0, 4.0, 5.0
# A dependency that can never be met (afterok on a job that failed): Slurm keeps such a job queued for ever unless
# the cluster sets kill_invalid_depend (slurm.conf DependencyParameters).
NEVER_DEPENDENCY_REASONS = frozenset({"DependencyNeverSatisfied"})
_BLOCKS = re.compile(r"; blocks the queue: (.*)$")


def pending_for(job: JobInfo, at: datetime) -> float | None:
    """Seconds the job has waited, None when the scheduler gave no submit time."""
    return max(0.0, (at - job.submitted_at).total_seconds()) if job.submitted_at is not None else None


class Capacity:
    """GPUs per node and per cluster for a GPU model, counting pools' room to grow."""

    def __init__(self, obs: Observation) -> None:
        self.obs = obs
        self.models = sorted({n.gpu_model for n in obs.nodes if n.gpu_model} | {p.gpu_model for p in obs.pools
                                                                                 if p.gpu_model})

    def largest_node(self, model: str | None) -> int:
        nodes = [n.gpus for n in self.obs.nodes if gpu_model_matches(model, n.gpu_model)]
        pools = [p.gpus_per_node for p in self.obs.pools if gpu_model_matches(model, p.gpu_model)]
        return max(nodes + pools, default=0)

    def total(self, model: str | None) -> int:
        total = sum(n.gpus for n in self.obs.nodes if gpu_model_matches(model, n.gpu_model))
        for p in self.obs.pools:
            if gpu_model_matches(model, p.gpu_model) and p.max_nodes is not None and p.max_nodes > p.nodes:
                total += (p.max_nodes - p.nodes) * p.gpus_per_node
        return total


class StuckPendingDetector:
    """Pending jobs that can never be scheduled as asked; level 1 advice with the reason and the fix."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def why_stuck(self, job: JobInfo, obs: Observation, cap: Capacity) -> tuple[float, str, str] | None:
        """(cause, why, fix) or None when waiting may still get the job scheduled."""
        model = job.gpu_model
        if model and not any(gpu_model_matches(model, m) for m in cap.models):
            have = ", ".join(cap.models) or "none"
            return (CAUSE_NO_MODEL, f"asks for GPU model {model}, which no node or pool has (models: {have})",
                    f"request one of: {have}")
        if job.scheduler == "kubernetes":
            largest = cap.largest_node(model)
            if job.gpus > largest:
                return (CAUSE_NODE_TOO_SMALL, f"one pod asks for {job.gpus} GPUs; the largest node has {largest}",
                        f"request at most {largest} GPUs per pod, or run it as a multi-node job")
        else:
            total = cap.total(model)
            if job.gpus > total:
                return (CAUSE_CLUSTER_TOO_SMALL, f"asks for {job.gpus} GPUs; the cluster has {total}",
                        f"request at most {total} GPUs")
        reason = job.pending_reason or ""
        if reason in NEVER_DEPENDENCY_REASONS:
            return (CAUSE_DEPENDENCY, "a job it depends on ended in a way its dependency rules out (afterok on a "
                                      "failed job): waiting never clears",
                    "fix or rerun the job it depends on and resubmit, or cancel it")
        if reason in NEVER_REASONS:
            return (CAUSE_QUOTA, f"the scheduler holds it for {reason}, a per-job limit waiting never clears",
                    "resubmit within the partition's and QOS limits, or ask the admins to raise them")
        if reason in USER_QUOTA_REASONS:
            held = sum(j.gpus for j in obs.jobs if j.user == job.user and j.state in HOLDING)
            if held == 0:
                return (CAUSE_QUOTA, f"the scheduler holds it for {reason} although {job.user} runs no other GPU "
                                     f"job: the job alone exceeds the quota",
                        f"request fewer GPUs than {job.gpus}, or ask the admins to raise the quota")
        return None

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        cap = Capacity(obs)
        findings = []
        for job in obs.jobs:
            if job.state != "pending" or job.gpus <= 0:
                continue
            waited = pending_for(job, obs.at)
            if waited is not None and waited < STUCK_AFTER_S:
                continue
            stuck = self.why_stuck(job, obs, cap)
            if stuck is None:
                continue
            cause, why, fix = stuck
            said = ": ".join(x for x in (job.pending_reason, job.pending_message) if x) or "no reason given"
            evidence = (f"pending {format_duration(waited) if waited is not None else 'for an unknown time'} and can "
                        f"never be scheduled as asked: {why}; the scheduler says {said}; fix: {fix}")
            findings.append(Finding(
                kind="stuck_pending", target=job.id, since=obs.at - timedelta(seconds=waited or 0.0),
                detected_at=obs.at, evidence=evidence, gpus=0, owner=job.user,
                metrics={"cause": cause, "gpus_requested": float(job.gpus), "pending_s": waited or 0.0,
                         "largest_node_gpus": float(cap.largest_node(job.gpu_model)),
                         "cluster_gpus": float(cap.total(job.gpu_model))},
            ))
        return findings


def _free_gpus(obs: Observation) -> dict[str, int]:
    held: dict[str, int] = {}
    for j in obs.jobs:
        if j.node is not None and j.state in HOLDING:
            held[j.node] = held.get(j.node, 0) + j.gpus
    return {n.name: max(0, n.gpus - held.get(n.name, 0)) for n in obs.nodes}


def waiting_jobs(obs: Observation, findings: list[Finding], after_s: float = 0.0) -> list[JobInfo]:
    """Pending GPU jobs that could run (not stuck) and have waited at least `after_s` (unknown: counted)."""
    stuck = {f.target for f in findings if f.kind == "stuck_pending"}
    return [j for j in obs.jobs if j.state == "pending" and j.gpus > 0 and j.id not in stuck
            and ((w := pending_for(j, obs.at)) is None or w >= after_s)]


# Scheduler reasons that are not a lack of free GPUs: a quota or limit (Slurm QOS*/Assoc*), a dependency, a hold,
# a begin time. A job held for one of them is not blocked by whoever holds GPUs.
_NOT_CAPACITY = re.compile(r"^(QOS|Assoc)|^(Dependency|DependencyNeverSatisfied|BeginTime|JobHeldUser|JobHeldAdmin|"
                           r"PartitionDown|PartitionInactive|Reservation)$")


def waits_for_capacity(job: JobInfo, free: dict[str, int], model: dict[str, str]) -> bool:
    """Whether a pending job waits for GPUs to free up: its scheduler gives no other reason, and no node of its
    model has room for it now (a Kubernetes pod on one node, a Slurm job across nodes)."""
    if _NOT_CAPACITY.search(job.pending_reason or ""):
        return False
    room = [g for node, g in free.items() if gpu_model_matches(job.gpu_model, model.get(node, ""))]
    if job.scheduler == "kubernetes":
        return not any(g >= job.gpus for g in room)
    return sum(room) < job.gpus


def mark_blockers(findings: list[Finding], obs: Observation) -> list[Finding]:
    """Blocked queue: an idle or hung job holds GPUs that, freed, would let a waiting job start on that node.

    Each such finding gets the waiting jobs in its evidence and metrics (blocked_jobs, blocked_gpus,
    blocked_wait_s) and moves to the front: it is the waste to handle first. Nothing else changes (the
    notice before a stop stays the same).
    """
    jobs = obs.jobs_by_id()
    free = _free_gpus(obs)
    model = {n.name: n.gpu_model for n in obs.nodes}
    on_node: dict[str, list[int]] = {}
    for i, f in enumerate(findings):
        job = jobs.get(f.target) if f.target_type == "job" else None
        if f.kind in BLOCKER_KINDS and job is not None and job.node is not None and job.state in HOLDING:
            on_node.setdefault(job.node, []).append(i)
    waiters: dict[int, list[JobInfo]] = {}
    for w in waiting_jobs(obs, findings, BLOCKED_AFTER_S):
        if not waits_for_capacity(w, free, model):
            continue  # held by a quota, a dependency or a hold, or room is already free: freeing GPUs is not it
        for node, idxs in sorted(on_node.items()):
            if (w.node is not None and w.node != node) or not gpu_model_matches(w.gpu_model, model.get(node, "")):
                continue
            have, chosen = free.get(node, 0), []
            for i in sorted(idxs, key=lambda i: -jobs[findings[i].target].gpus):
                if have >= w.gpus:
                    break
                have += jobs[findings[i].target].gpus
                chosen.append(i)
            if chosen and have >= w.gpus:
                for i in chosen:
                    waiters.setdefault(i, []).append(w)
                break
    if not waiters:
        return findings
    out = []
    for i, f in enumerate(findings):
        ws = waiters.get(i)
        if not ws:
            out.append(f)
            continue
        names = ", ".join(
            f"{w.project or w.namespace}'s {w.id} ({w.gpus} GPUs, waiting "
            f"{format_duration(pending_for(w, obs.at) or 0.0)}{', ' + w.pending_reason if w.pending_reason else ''})"
            for w in ws)
        metrics = dict(f.metrics, blocked_jobs=float(len(ws)), blocked_gpus=float(sum(w.gpus for w in ws)),
                       blocked_wait_s=max(pending_for(w, obs.at) or 0.0 for w in ws))
        out.append(f.model_copy(update={"evidence": f"{f.evidence}; blocks the queue: {names}", "metrics": metrics}))
    return sorted(out, key=lambda f: -f.metrics.get("blocked_jobs", 0.0))


class QueueView(BaseModel):
    """The queue at one instant: pending jobs, waits per team and GPU model, fragmented GPUs."""

    pending: int = 0
    pending_gpus: int = 0
    wait_s_by_team: dict[str, float] = {}  # longest wait per team (project, else namespace)
    wait_s_by_model: dict[str, float] = {}  # longest wait per requested GPU model ("any" = no model asked)
    reasons: dict[str, int] = {}  # pending jobs per scheduler reason
    free_gpus: int = 0
    fragmented_gpus: int = 0  # free GPUs on nodes where no waiting job fits, while some waiting job could fit in all
    fragmented_jobs: list[str] = []  # waiting jobs the free GPUs would hold in total but no single node does


def queue_view(obs: Observation, findings: list[Finding] | None = None) -> QueueView:
    findings = findings or []
    pending = [j for j in obs.jobs if j.state == "pending" and j.gpus > 0]
    view = QueueView(pending=len(pending), pending_gpus=sum(j.gpus for j in pending))
    for j in pending:
        wait = pending_for(j, obs.at) or 0.0
        team = j.project or j.namespace
        view.wait_s_by_team[team] = max(view.wait_s_by_team.get(team, 0.0), wait)
        view.wait_s_by_model[j.gpu_model or "any"] = max(view.wait_s_by_model.get(j.gpu_model or "any", 0.0), wait)
        reason = j.pending_reason or "unknown"
        view.reasons[reason] = view.reasons.get(reason, 0) + 1
    free = _free_gpus(obs)
    view.free_gpus = sum(free.values())
    waiting = waiting_jobs(obs, findings)
    if not waiting:
        return view
    model = {n.name: n.gpu_model for n in obs.nodes}
    for w in waiting:
        fits_total = sum(g for n, g in free.items() if gpu_model_matches(w.gpu_model, model[n]))
        if fits_total >= w.gpus and not any(g >= w.gpus for n, g in free.items()
                                            if gpu_model_matches(w.gpu_model, model[n])):
            view.fragmented_jobs.append(w.id)
    if view.fragmented_jobs:
        view.fragmented_gpus = sum(g for n, g in free.items()
                                   if not any(g >= w.gpus and gpu_model_matches(w.gpu_model, model[n]) for w in waiting))
    return view


def blocked_zh(finding: Finding) -> str:
    """The blocked-queue sentence of a blocker finding in Chinese ("" when it blocks nobody)."""
    from agent.detectors.evidence import duration_zh

    m = finding.metrics
    if not m.get("blocked_jobs"):
        return ""
    found = _BLOCKS.search(finding.evidence)
    who = found.group(1) if found else ""
    who = re.sub(r"(\S+)'s (\S+) \((\d+) GPUs, waiting ([^,)]+)",
                 lambda g: f"{g[1]} 团队的 {g[2]}（{g[3]} 块 GPU，已等待 {_zh_duration(g[4], duration_zh)}", who)
    who = who.replace(")", "）")
    return f"；阻塞队列：{m['blocked_jobs']:g} 个作业在等待它占用的 GPU（共 {m['blocked_gpus']:g} 块）：{who}"


def _zh_duration(english: str, duration_zh: object) -> str:
    from core.durations import parse_duration

    try:
        return str(duration_zh(parse_duration(english)))  # type: ignore[operator]
    except ValueError:
        return english


def stuck_pending_zh(finding: Finding) -> str:
    """A stuck-pending finding's evidence in Chinese, from its numbers."""
    from agent.detectors.evidence import duration_zh  # evidence.py renders through this module

    m = finding.metrics
    cause, gpus = m["cause"], m["gpus_requested"]
    waited = duration_zh(m["pending_s"])
    if cause == CAUSE_NODE_TOO_SMALL:
        why = f"单个 Pod 申请 {gpus:g} 块 GPU，而最大的节点只有 {m['largest_node_gpus']:g} 块"
        fix = f"每个 Pod 最多申请 {m['largest_node_gpus']:g} 块 GPU，或改为多节点作业"
    elif cause == CAUSE_CLUSTER_TOO_SMALL:
        why = f"申请 {gpus:g} 块 GPU，而集群共有 {m['cluster_gpus']:g} 块"
        fix = f"最多申请 {m['cluster_gpus']:g} 块 GPU"
    elif cause == CAUSE_NO_MODEL:
        model = re.search(r"asks for GPU model (\S+),", finding.evidence)
        have = re.search(r"\(models: ([^)]*)\)", finding.evidence)
        why = f"申请的 GPU 型号 {model.group(1) if model else ''} 在任何节点或节点池中都没有"
        fix = f"改为申请现有型号：{have.group(1) if have else ''}"
    elif cause == CAUSE_DEPENDENCY:
        why = "它所依赖的作业已以依赖条件排除的方式结束（如 afterok 依赖的作业失败），单靠等待无法解除"
        fix = "修复或重跑被依赖的作业后重新提交，或取消该作业"
    elif cause == CAUSE_QUOTA:
        why = "调度器因配额/作业上限而挂起它，单靠等待无法解除"
        fix = "在分区和 QOS 限额内重新提交（减少 GPU 数量），或请管理员提高配额"
    else:
        raise ValueError(f"unknown cause {cause}")
    said = re.search(r"the scheduler says (.*); fix:", finding.evidence)
    return (f"已排队 {waited}，按当前申请永远无法调度：{why}；调度器原因：{said.group(1) if said else '未提供'}；"
            f"处理办法：{fix}")
