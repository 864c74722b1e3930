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
from core.cluster import JobInfo, PoolInfo, gpu_model_matches, job_gang
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
CAUSE_REFUSED, CAUSE_NOT_GROWN, CAUSE_CONSTRAINT = 6.0, 7.0, 8.0
# A dependency that can never be met (afterok on a job that failed): Slurm keeps such a job queued for ever unless
# the cluster sets kill_invalid_depend (slurm.conf DependencyParameters).
NEVER_DEPENDENCY_REASONS = frozenset({"DependencyNeverSatisfied"})
_BLOCKS = re.compile(r"; blocks the queue: (.*)$")
_GANG = re.compile(r"; (?:a pod|\d+ pods) of its own distributed job (?:is|are) pending: (.*?), so the job cannot run")

# The Kubernetes scheduler's own account of a pod it could not place (the PodScheduled condition's message):
# "0/3 nodes are available: 3 node(s) had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are
# available: 3 Preemption is not helpful for scheduling." One clause per reason, each with the nodes it refused.
_UNAVAILABLE = re.compile(r"^0/(\d+) nodes are available: (.*?)(?:\.\s*preemption:.*)?\.?\s*$", re.S)
_CLAUSES = re.compile(r",\s*(?=\d+ )")
_CLAUSE = re.compile(r"^(\d+) (.+)$", re.S)
_TAINT = re.compile(r"had (?:untolerated )?taints? \{([^:}]*)")  # "had taint {k: v}, that the pod didn't tolerate" before 1.24
_SELECTOR = re.compile(r"didn't match (?:Pod's node affinity|node selector)")
# A persistent volume bound where no node it could run on is (a zonal disk in another zone): no node ever matches it.
_VOLUME = re.compile(r"had volume node affinity conflict|had no available volume zone")  # VolumeBinding, VolumeZone
_VOLUME_WHY = "a persistent volume it mounts is bound to nodes it cannot run on (volume node affinity)"
# Taints that come and go, so waiting may clear them: the node lifecycle's (node.kubernetes.io/not-ready,
# unreachable, *-pressure, unschedulable), a cloud node not yet initialised, the cluster autoscaler's on a node it
# is removing.
# Karpenter's lifecycle taints too: a node being disrupted or not yet registered, which its replacement never carries
# (kubernetes-sigs/karpenter#624, #2123): a pod refused by one waits for capacity, and no toleration is advice.
_PASSING_TAINT = re.compile(r"^(node\.kubernetes\.io/|node\.cloudprovider\.kubernetes\.io/|"
                            r"ToBeDeletedByClusterAutoscaler$|DeletionCandidateOfClusterAutoscaler$|"
                            r"karpenter\.sh/(?:disrupted|disruption|unregistered)$)")
# Control-plane nodes refuse every workload pod: a refusal, but never a toleration to advise.
_CONTROL_PLANE_TAINTS = frozenset({"node-role.kubernetes.io/control-plane", "node-role.kubernetes.io/master"})


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


def why_stuck(job: JobInfo, obs: Observation, cap: Capacity) -> tuple[float, str, str] | None:
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
        refused = _refused_everywhere(job, obs)
        if refused is not None:
            return refused
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
    if reason == "BadConstraints":  # not a limit: a --constraint (node features) no node of the partition has
        return (CAUSE_CONSTRAINT, "the scheduler holds it for BadConstraints: no node of its partition has the "
                                  "features its --constraint asks for (or the memory or GRES per node it asks for); "
                                  "waiting never clears",
                "fix --constraint to features the partition's nodes have (`sinfo -o '%N %f'` lists them), or submit "
                "to a partition whose nodes have them")
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


def _refusals(message: str) -> tuple[list[str], bool, bool] | None:
    """From the scheduler's message: (the taints refused nodes carry, whether a node selector or affinity refused
    any, whether a volume's node affinity did) when it refused every node for a reason waiting does not change; None
    when it refused any for another reason (lack of resources, a cordon, a passing taint, pod affinity) or the
    message is not its usual form."""
    found = _UNAVAILABLE.match(message.strip())
    if found is None or int(found[1]) == 0:
        return None
    taints: list[str] = []
    selector = volume = False
    for clause in _CLAUSES.split(found[2]):
        counted = _CLAUSE.match(clause.strip())
        if counted is None:
            return None
        text = counted[2]
        if (taint := _TAINT.search(text)) is not None:
            key = taint[1].strip()
            if not key or _PASSING_TAINT.match(key):
                return None
            if key not in _CONTROL_PLANE_TAINTS and key not in taints:
                taints.append(key)
        elif _SELECTOR.search(text):
            selector = True
        elif _VOLUME.search(text):
            volume = True
        else:
            return None
    return (taints, selector, volume) if taints or selector or volume else None


SELECTED_TAINTED = " on the nodes its node selector or affinity admits (the others do not match it)"


def _refused_everywhere(job: JobInfo, obs: Observation) -> tuple[float, str, str] | None:
    """A pod the scheduler refuses on every node for a reason waiting does not change (a taint it does not tolerate,
    a node selector or affinity no node matches, a volume bound where none of them is), and none for lack of resources. A pool's new nodes are copies of
    its nodes, refused alike; only a pool with no node now, that could hold the pod and may still grow, might bring
    one that accepts it, so then it is not judged."""
    refused = _refusals(job.pending_message or "")
    if refused is None:
        return None
    if any(p.nodes == 0 and (p.max_nodes is None or p.max_nodes > 0) and p.gpus_per_node >= job.gpus
           and fits_pool_model(job, p, obs) for p in obs.pools):
        return None
    taints, selector, volume = refused
    keys = ", ".join(taints)
    # A selector that refuses some nodes while the others refuse for a taint is no selector "no node matches": the
    # nodes it admits carry the taint (a team's dedicated pool), and that is the pod's choice to make (a probe).
    admitted = selector and bool(taints)
    why = " and ".join(
        ([f"a taint it does not tolerate ({keys})" + (SELECTED_TAINTED if admitted else "")] if taints else [])
        + (["a node selector or affinity no node matches"] if selector and not admitted else [])
        + ([_VOLUME_WHY] if volume else []))
    fix = "; ".join(
        ([("if it is meant to run on those nodes, " if admitted else "") + f"add a toleration to the pod for {keys} "
          "(tolerations: " + ", ".join(f"{{key: {k}, operator: Exists}}" for k in taints) + ")"
          + ("; if not, point its nodeSelector or node affinity at GPU nodes without that taint" if admitted else "")]
         if taints else [])
        + (["set the pod's nodeSelector or node affinity to labels the GPU nodes carry "
            "(kubectl get nodes --show-labels)"] if selector and not admitted else [])
        + (["move the volume to the GPU nodes' zone, keeping its data (snapshot it and restore the snapshot "
            "there; its zone: kubectl get pv -o yaml, spec.nodeAffinity; a StorageClass with volumeBindingMode: WaitForFirstConsumer binds new ones there), or add GPU nodes in "
            "its zone"] if volume else []))
    return CAUSE_REFUSED, f"every node refuses it for a reason waiting does not change: {why}", fix


class StuckPendingDetector:
    """Pending jobs that can never be scheduled as asked; level 1 advice with the reason and the fix."""

    def __init__(self, policy: Policy) -> None:
        self.policy = policy

    def why_stuck(self, job: JobInfo, obs: Observation, cap: Capacity) -> tuple[float, str, str] | None:
        return why_stuck(job, obs, cap)

    def not_grown(self, job: JobInfo, obs: Observation, waited: float | None) -> tuple[float, str, str] | None:
        """A pod whose GPU model no node has, that only pools with no node could hold, waiting longer than a
        scale-up takes (`scale_up_lead`) with those pools still empty: their room to grow counted as capacity
        while a scale-up could still land; past it the autoscaler has not answered the pod (a node group it
        cannot scale from zero) and will not as things stand. Not a reason the pod is no demand for the pool:
        growing it is what would let the pod run."""
        lead = self.policy.detectors.pools.scale_up_lead
        model = job.gpu_model
        if (job.scheduler != "kubernetes" or not model or waited is None or waited < lead
                or not held_for_capacity(job) or any(gpu_model_matches(model, n.gpu_model) for n in obs.nodes)):
            return None
        pools = [p for p in obs.pools if p.gpus_per_node >= job.gpus and fits_pool_model(job, p, obs)]
        if not pools or any(p.nodes > 0 for p in pools):
            return None
        growable = [p for p in pools if p.max_nodes is None or p.max_nodes > 0]
        if not growable:
            return None
        names = ", ".join(f"{p.name} (0 of max {p.max_nodes if p.max_nodes is not None else '?'} nodes)"
                          for p in growable)
        have = ", ".join(sorted({n.gpu_model for n in obs.nodes if n.gpu_model and n.gpus >= job.gpus})) or "none"
        return (CAUSE_NOT_GROWN,
                f"no node has GPU model {model}, and pool(s) {names} added none in the {format_duration(waited)} it "
                f"has waited, at least as long as a scale-up is given (scale_up_lead {format_duration(lead)})",
                "ask the platform team why the autoscaler does not scale the pool up from zero (a node group with no "
                "node needs its template to advertise the GPUs, e.g. the tag "
                "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu), or request a GPU model that has "
                f"nodes ({have})")

    def _zone_may_come(self, job: JobInfo, obs: Observation, waited: float | None,
                       stuck: tuple[float, str, str]) -> bool:
        """A pod refused only because its volume is bound in another zone, while a pool that could hold it may still
        grow: a pool spread over zones may add a node in the volume's (Cluster Autoscaler reads volume topology), so
        it is judged once it has waited a scale-up's lead (`scale_up_lead`), as a pool that has not grown is."""
        if stuck[0] != CAUSE_REFUSED or _refusals(job.pending_message or "") != ([], False, True):
            return False
        if waited is not None and waited >= self.policy.detectors.pools.scale_up_lead:
            return False
        return any(p.max_nodes is not None and p.max_nodes > p.nodes and p.gpus_per_node >= job.gpus
                   and fits_pool_model(job, p, obs) for p in obs.pools)

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        cap = Capacity(obs)
        findings = []
        for job in obs.jobs:
            if job.state != "pending" or job.gpus <= 0:
                continue
            waited = pending_for(job, obs.at)
            if waited is not None and waited < STUCK_AFTER_S:
                continue
            stuck = self.why_stuck(job, obs, cap) or self.not_grown(job, obs, waited)
            if stuck is None or self._zone_may_come(job, obs, waited, stuck):
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
# a begin time, licenses (Slurm's Licenses: a floating license, not a GPU), nodes held by a reservation
# (ReqNodeNotAvail, ", Reserved for maintenance"; a plain "ReqNodeNotAvail, UnavailableNodes:..." is a job that does
# not fit on the nodes that are up, which more nodes may well start), an array's own throttle (JobArrayTaskLimit),
# and a Kubernetes pod's scheduling gates (SchedulingGated: Kueue's admission gate stays until the pod's quota admits
# it; the scheduler does not even try the pod). A job held for one of them is not blocked by whoever holds GPUs, and
# no node added or kept would start it.
_NOT_CAPACITY = re.compile(r"^(QOS|Assoc)|^Licenses\b|^ReqNodeNotAvail\b.*\bReserved\b|^(Dependency|DependencyNeverSatisfied|"
                           r"BeginTime|JobHeldUser|JobHeldAdmin|PartitionDown|PartitionInactive|Reservation|"
                           r"JobArrayTaskLimit|NodeDown|SchedulingGated)$")


def held_for_capacity(job: JobInfo) -> bool:
    """Whether the scheduler's reason for a pending job is (or may be) a lack of capacity: no quota, limit,
    dependency, hold or gate holds it."""
    return not _NOT_CAPACITY.search(job.pending_reason or "")


def fits_pool_model(job: JobInfo, pool: PoolInfo, obs: Observation) -> bool:
    """Whether a pending job's GPU model request can run in the pool: judged against the models its nodes report
    (the labels the scheduler matches, e.g. GPU feature discovery's `NVIDIA-H100-80GB-HBM3` or Slurm's
    `nvidia_h100_80gb_hbm3`), and against the pool's own model either way round, so a request spelled differently
    from the pool's short name (`A100-80GB`) still counts as demand: a shrink that strands queued work is the
    worse mistake."""
    if not job.gpu_model or not pool.gpu_model:
        return True
    models = {n.gpu_model for n in obs.nodes if n.pool == pool.name and n.gpu_model}
    return (any(gpu_model_matches(job.gpu_model, m) for m in models) or gpu_model_matches(job.gpu_model, pool.gpu_model)
            or gpu_model_matches(pool.gpu_model, job.gpu_model))


# A begin time is a start already set (Slurm --begin): the pool must carry the job then, so it stays demand.
_SET_START = frozenset({"BeginTime"})


def demand_for_pool(job: JobInfo, pool: PoolInfo, obs: Observation, cap: Capacity | None = None) -> bool:
    """Whether a pending GPU job is demand for the pool's nodes: it waits for capacity those nodes could give.

    Its scheduler's reason is a lack of capacity (`held_for_capacity`; a quota, a gate, a hold or a dependency is
    cleared by no node, and a dependency's job frees its own nodes when it ends) or a set begin time; it is not
    stuck (`why_stuck`: no node, present or added, runs it as asked); and it fits the pool: its GPU model, and a
    Kubernetes pod one of its nodes (a Slurm job may span pools; the stuck check bounds it by every node and pool
    of its model). Keeping or adding nodes for anything else buys GPUs that stay empty: Cluster Autoscaler, too,
    counts a pending pod only when a new node would let it run."""
    if job.state != "pending" or job.gpus <= 0 or not fits_pool_model(job, pool, obs):
        return False
    if not held_for_capacity(job) and job.pending_reason not in _SET_START:
        return False
    if job.scheduler == "kubernetes" and job.gpus > pool.gpus_per_node:
        return False
    return why_stuck(job, obs, cap or Capacity(obs)) is None


def waits_for_capacity(job: JobInfo, free: dict[str, int], model: dict[str, str]) -> bool:
    """Whether a pending job waits for GPUs to free up: its scheduler gives no other reason, and no node of its
    model has room for it now (a Kubernetes pod on one node, a Slurm job across nodes)."""
    if not held_for_capacity(job):
        return False
    room = [g for node, g in free.items() if gpu_model_matches(job.gpu_model, model.get(node, ""))]
    if job.scheduler == "kubernetes":
        return not any(g >= job.gpus for g in room)
    return sum(room) < job.gpus


def _waiter(w: JobInfo, at: datetime) -> str:
    return (f"{w.id} ({w.gpus} GPUs, waiting {format_duration(pending_for(w, at) or 0.0)}"
            f"{', ' + w.pending_reason if w.pending_reason else ''})")


def mark_blockers(findings: list[Finding], obs: Observation) -> list[Finding]:
    """Blocked queue: an idle or hung job holds GPUs that, freed, would let a waiting job start on that node.

    Each such finding gets the waiting jobs in its evidence and metrics (blocked_jobs, blocked_gpus,
    blocked_wait_s) and moves to the front: it is the waste to handle first. Nothing else changes (the
    notice before a stop stays the same). A pod of the blocker's own distributed job (`job_gang`) is not blocked
    by it: the gang needs both to run. The finding says instead that its job cannot run while that pod is pending
    (metrics gang_pending).
    """
    jobs = obs.jobs_by_id()
    free = _free_gpus(obs)
    model = {n.name: n.gpu_model for n in obs.nodes}
    on_node: dict[str, list[int]] = {}
    gang_of: dict[int, tuple[tuple[str, str, str], str] | None] = {}
    for i, f in enumerate(findings):
        job = jobs.get(f.target) if f.target_type == "job" else None
        if f.kind in BLOCKER_KINDS and job is not None and job.node is not None and job.state in HOLDING:
            on_node.setdefault(job.node, []).append(i)
            gang_of[i] = job_gang(job)
    waiters: dict[int, list[JobInfo]] = {}
    for w in waiting_jobs(obs, findings, BLOCKED_AFTER_S):
        if not waits_for_capacity(w, free, model):
            continue  # held by a quota, a dependency or a hold, or room is already free: freeing GPUs is not it
        gang = job_gang(w)
        for node, idxs in sorted(on_node.items()):
            if (w.node is not None and w.node != node) or not gpu_model_matches(w.gpu_model, model.get(node, "")):
                continue
            have, chosen = free.get(node, 0), []
            for i in sorted(idxs, key=lambda i: -jobs[findings[i].target].gpus):
                if have >= w.gpus:
                    break
                if gang is not None and gang_of[i] == gang:
                    continue  # its own gang's pod: stopping it never lets the waiter's job run
                have += jobs[findings[i].target].gpus
                chosen.append(i)
            if chosen and have >= w.gpus:
                for i in chosen:
                    waiters.setdefault(i, []).append(w)
                break
    siblings: dict[int, list[JobInfo]] = {}
    for i, gang in gang_of.items():
        if gang is not None:
            pending = [j for j in obs.jobs if j.state == "pending" and job_gang(j) == gang
                       and ((waited := pending_for(j, obs.at)) is None or waited >= BLOCKED_AFTER_S)]
            if pending:
                siblings[i] = sorted(pending, key=lambda j: j.id)
    if not waiters and not siblings:
        return findings
    out = []
    for i, f in enumerate(findings):
        ws, gs = waiters.get(i), siblings.get(i)
        if not ws and not gs:
            out.append(f)
            continue
        evidence, metrics = f.evidence, dict(f.metrics)
        if gs:
            evidence += (f"; {'a pod' if len(gs) == 1 else f'{len(gs)} pods'} of its own distributed job "
                         f"{'is' if len(gs) == 1 else 'are'} pending: {', '.join(_waiter(g, obs.at) for g in gs)}, "
                         f"so the job cannot run until {'it is' if len(gs) == 1 else 'they are'} placed")
            metrics["gang_pending"] = float(len(gs))
        if ws:
            names = ", ".join(f"{w.project or w.namespace}'s {_waiter(w, obs.at)}" for w in ws)
            evidence += f"; blocks the queue: {names}"
            metrics.update(blocked_jobs=float(len(ws)), blocked_gpus=float(sum(w.gpus for w in ws)),
                           blocked_wait_s=max(pending_for(w, obs.at) or 0.0 for w in ws))
        out.append(f.model_copy(update={"evidence": evidence, "metrics": metrics}))
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
    """The blocked-queue sentences of a blocker finding in Chinese: its own gang's pending pods, the jobs it
    blocks ("" when neither)."""
    from agent.detectors.evidence import duration_zh

    m = finding.metrics
    out = ""
    if m.get("gang_pending"):
        found = _GANG.search(finding.evidence)
        pods = found.group(1) if found else ""
        pods = re.sub(r"(\S+) \((\d+) GPUs, waiting ([^,)]+)",
                      lambda g: f"{g[1]}（{g[2]} 块 GPU，已等待 {_zh_duration(g[3], duration_zh)}", pods)
        pods = pods.replace("), ", "）、").replace(")", "）")
        out += f"；它所属分布式作业的 {m['gang_pending']:g} 个 Pod 仍在排队：{pods}，在其被调度之前该作业无法运行"
    if not m.get("blocked_jobs"):
        return out
    found = _BLOCKS.search(finding.evidence)
    who = found.group(1) if found else ""
    who = re.sub(r"(\S+)'s (\S+) \((\d+) GPUs, waiting ([^,)]+)",
                 lambda g: f"{g[1]} 团队的 {g[2]}（{g[3]} 块 GPU，已等待 {_zh_duration(g[4], duration_zh)}", who)
    who = who.replace(")", "）")
    return out + f"；阻塞队列：{m['blocked_jobs']:g} 个作业在等待它占用的 GPU（共 {m['blocked_gpus']:g} 块）：{who}"


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
    elif cause == CAUSE_CONSTRAINT:
        why = "调度器因 BadConstraints 挂起它：其分区内没有节点具有它 --constraint 要求的特性（或它要求的每节点内存、GRES），单靠等待无法解除"
        fix = "把 --constraint 改为分区节点具有的特性（可用 `sinfo -o '%N %f'` 查看），或提交到节点具有这些特性的分区"
    elif cause == CAUSE_QUOTA:
        why = "调度器因配额/作业上限而挂起它，单靠等待无法解除"
        fix = "在分区和 QOS 限额内重新提交（减少 GPU 数量），或请管理员提高配额"
    elif cause == CAUSE_NOT_GROWN:
        model = re.search(r"no node has GPU model (\S+), and", finding.evidence)
        pools = re.findall(r"(\S+) \(0 of max (\S+) nodes\)", finding.evidence)
        lead = re.search(r"a scale-up is given \(scale_up_lead ([^)]+)\)", finding.evidence)
        have = re.search(r"request a GPU model that has nodes \(([^)]*)\)", finding.evidence)
        why = (f"没有任何节点是 {model.group(1) if model else ''} 型号，而节点池 "
               + "、".join(f"{name}（0 个节点，上限 {top}）" for name, top in pools)
               + f"在它已等待的 {waited} 里一个节点也没有增加，不短于给一次扩容的时间（scale_up_lead "
               + f"{_zh_duration(lead.group(1), duration_zh) if lead else ''}）")
        fix = ("请平台团队查明自动扩缩容为何不能从零扩容该节点池（没有节点的节点组，其模板须声明 GPU，例如标签 "
               "k8s.io/cluster-autoscaler/node-template/resources/nvidia.com/gpu），或改为申请有节点的 GPU 型号"
               f"（{have.group(1) if have else ''}）")
    elif cause == CAUSE_REFUSED:
        taints = re.search(r"a taint it does not tolerate \(([^)]*)\)", finding.evidence)
        selector = "a node selector or affinity no node matches" in finding.evidence
        admitted = SELECTED_TAINTED in finding.evidence
        volume = _VOLUME_WHY in finding.evidence
        keys = taints.group(1) if taints else ""
        why = "每个节点都以等待无法改变的原因拒绝它：" + "；".join(
            ([f"它不容忍节点的污点（{keys}）" + ("，这些节点正是其节点选择器或亲和性所允许的（其余节点与之不匹配）" if admitted else "")]
             if taints else []) + (["节点选择器或节点亲和性与任何节点都不匹配"] if selector else [])
            + (["它挂载的持久卷绑定在它不能运行的节点上（卷的节点亲和性，例如另一个可用区的云盘）"] if volume else []))
        fix = "；".join(
            ([("若它本应运行在这些节点上，" if admitted else "") + f"为 Pod 添加对 {keys} 的容忍（tolerations: " + ", ".join(
                f"{{key: {k.strip()}, operator: Exists}}" for k in keys.split(",")) + "）"
              + ("；否则请把其节点选择器或亲和性指向不带该污点的 GPU 节点" if admitted else "")] if taints else [])
            + (["把 Pod 的 nodeSelector 或节点亲和性改为 GPU 节点实际带有的标签（kubectl get nodes --show-labels）"]
               if selector else [])
            + (["把该卷迁到 GPU 节点所在的可用区并保留数据（先做快照，再在那里从快照恢复；卷所在的可用区见 "
                "`kubectl get pv -o yaml` 的 `spec.nodeAffinity` 字段；绑定模式为 `WaitForFirstConsumer` 的存储类会把新卷建在那里），或在该卷的可用区增加 GPU 节点"]
               if volume else []))
    else:
        raise ValueError(f"unknown cause {cause}")
    said = re.search(r"the scheduler says (.*); fix:", finding.evidence)
    return (f"已排队 {waited}，按当前申请永远无法调度：{why}；调度器原因：{said.group(1) if said else '未提供'}；"
            f"处理办法：{fix}")
