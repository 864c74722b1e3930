"""How a Kubernetes pod or node (as raw API JSON) reads as a steward JobInfo or NodeInfo."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Literal

from pydantic import BaseModel, ConfigDict

from core.cluster import FinishedJob, JobInfo, JobState, NodeInfo

GPU_RESOURCE = "nvidia.com/gpu"
# Pods in these phases hold or wait for GPUs; one field selector keeps the list call to them.
ACTIVE_PODS = "status.phase!=Succeeded,status.phase!=Failed"
# Pods that ended: what a job's finished history is read from (the doomed-job check, docs/doomed-jobs.md).
FINISHED_PODS = "status.phase!=Running,status.phase!=Pending,status.phase!=Unknown"
_PHASES: dict[str, JobState] = {"Pending": "pending", "Running": "running", "Succeeded": "completed",
                                "Failed": "failed", "Unknown": "running"}
Priority = Literal["low", "normal", "high"]


class PodReading(BaseModel):
    """Which labels and annotations name a pod's owner, project, priority and a node's pool."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    owner_keys: tuple[str, ...] = ("steward.io/owner",)
    project_keys: tuple[str, ...] = ("steward.io/project",)
    priority_key: str = "steward.io/priority"
    pool_labels: tuple[str, ...] = (
        "steward.io/pool",
        "cluster.x-k8s.io/deployment-name",
        "karpenter.sh/nodepool",
        "cloud.google.com/gke-nodepool",
        "eks.amazonaws.com/nodegroup",
        "kubernetes.azure.com/agentpool",
    )
    gpu_model_label: str = "nvidia.com/gpu.product"
    gpu_resource: str = GPU_RESOURCE


def parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _quantity(value: object) -> int:
    """GPU quantities are whole numbers ("2"); anything else counts as none rather than crash a sweep."""
    try:
        return int(str(value))
    except (TypeError, ValueError):
        return 0


def pod_gpus(pod: dict, resource: str = GPU_RESOURCE) -> int:
    """GPUs a pod holds: the largest init container or the sum of its containers, as the scheduler counts."""
    spec = pod.get("spec") or {}

    def per(container: dict) -> int:
        res = container.get("resources") or {}
        return max(_quantity((res.get("limits") or {}).get(resource)), _quantity((res.get("requests") or {}).get(resource)))

    main = sum(per(c) for c in spec.get("containers") or [])
    init = max((per(c) for c in spec.get("initContainers") or []), default=0)
    return max(main, init)


def main_container(pod: dict, resource: str = GPU_RESOURCE) -> dict:
    """The container that does the job's work: the first that asks for GPUs, else the first (sidecars aside)."""
    containers = (pod.get("spec") or {}).get("containers") or [{}]
    for c in containers:
        res = c.get("resources") or {}
        if _quantity((res.get("limits") or {}).get(resource)) or _quantity((res.get("requests") or {}).get(resource)):
            return c
    return containers[0]


def container_command(container: dict) -> str | None:
    """What the container runs (command and args, as the pod spec gives them); None when the image's default."""
    words = [str(w) for w in (container.get("command") or []) + (container.get("args") or [])]
    return " ".join(words) if words else None


def owner_kind(meta: dict) -> str:
    """The workload kind an operator would name: ReplicaSet pods belong to their Deployment."""
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None:
        return "Pod"
    kind = ref.get("kind", "Pod")
    labels = meta.get("labels") or {}
    if kind == "ReplicaSet" and "pod-template-hash" in labels:
        return "Deployment"  # the RS is named <deployment>-<pod-template-hash>; no extra call needed
    if kind == "StatefulSet" and "notebook-name" in labels:
        return "Notebook"  # Kubeflow's notebook controller labels the pods it runs
    group = str(ref.get("apiVersion", "")).rpartition("/")[0]
    if kind == "Job" and group not in ("", "batch"):
        return f"Job.{group}"  # a Volcano Job (batch.volcano.sh) is not a batch/v1 Job: never suspended as one
    return kind


def owner_name(meta: dict) -> str | None:
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if ref is None:
        return None
    hash_ = (meta.get("labels") or {}).get("pod-template-hash")
    if ref.get("kind") == "ReplicaSet" and hash_:
        return re.sub(rf"-{re.escape(hash_)}$", "", ref.get("name", ""))
    return ref.get("name")


def owner_uid(meta: dict) -> str:
    """The uid of the controller ownerReference (else the first, as owner_kind reads it); "" when none."""
    refs = meta.get("ownerReferences") or []
    ref = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    return str((ref or {}).get("uid") or "")


def _first(keys: tuple[str, ...], *maps: dict[str, str]) -> str | None:
    for key in keys:
        for values in maps:
            if values.get(key):
                return values[key]
    return None


def pod_state(pod: dict) -> JobState:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    state = _PHASES.get(phase, "running")
    if state == "running" and (pod.get("metadata") or {}).get("deletionTimestamp"):
        return "stopping"
    return state


def pending_condition(status: dict) -> tuple[str | None, str | None]:
    """The PodScheduled=False condition's reason and message ("Unschedulable", "0/8 nodes are available: ...")."""
    for cond in status.get("conditions") or []:
        if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
            return cond.get("reason") or None, cond.get("message") or None
    return None, None


def _exit_reason(terminated: dict) -> str:
    """How a container ended, as the kubelet reports it: "OOMKilled (exit 137)", "Error (exit 1)", "exit 1"."""
    why, code = terminated.get("reason") or "", terminated.get("exitCode")
    return f"{why} (exit {code})" if why and code is not None else (why or (f"exit {code}" if code is not None else ""))


def _pod_end(status: dict) -> str:
    """Why the pod itself ended, when something outside it ended it: its status reason (Evicted, NodeLost,
    Shutdown, DeadlineExceeded) or a true DisruptionTarget condition's (PreemptionByScheduler,
    TerminationByKubelet, DeletionByTaintManager, ...). The container only says how it died (Error, exit 137 from
    the SIGKILL), which would charge the job with its neighbours' or the node's doing."""
    if status.get("reason"):
        if status["reason"] == "Evicted" and "ephemeral" in str(status.get("message") or "").lower():
            return "EphemeralStorageExceeded"  # the kubelet enforced the pod's own limit: the job's doing
        return str(status["reason"])
    for c in status.get("conditions") or []:
        if c.get("type") == "DisruptionTarget" and str(c.get("status")) == "True":
            return f"DisruptionTarget {c.get('reason') or ''}".strip()
    return ""


def _main_status(pod: dict, reading: PodReading) -> dict:
    """The main container's status (containerStatuses), {} when the kubelet has not reported it."""
    main = main_container(pod, reading.gpu_resource).get("name")
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return next((c for c in statuses if c.get("name") == main), statuses[0] if statuses else {})


def restart_fields(pod: dict, reading: PodReading) -> dict:
    """JobInfo's restart fields from the main container's status: restartCount, its last termination (the kubelet
    keeps only the last) and the reason it waits (CrashLoopBackOff)."""
    status = _main_status(pod, reading)
    last = (status.get("lastState") or {}).get("terminated") or {}
    started, ended = parse_time(last.get("startedAt")), parse_time(last.get("finishedAt"))
    waiting = ((status.get("state") or {}).get("waiting") or {}).get("reason") or None
    return {"restarts": max(0, _quantity(status.get("restartCount"))),
            "last_exit": (_exit_reason(last) or None) if last else None, "last_exit_at": ended,
            "last_run_s": max(0.0, (ended - started).total_seconds()) if started and ended else None,
            "waiting": waiting}


def pod_to_job(pod: dict, reading: PodReading) -> JobInfo:
    meta, spec, status = pod.get("metadata") or {}, pod.get("spec") or {}, pod.get("status") or {}
    ns, name = meta.get("namespace", "default"), meta["name"]
    labels, annotations = dict(meta.get("labels") or {}), dict(meta.get("annotations") or {})
    wanted = labels.get(reading.priority_key) or annotations.get(reading.priority_key)
    priority: Priority = wanted if wanted in ("low", "high") else "normal"  # type: ignore[assignment]
    deletion = parse_time(meta.get("deletionTimestamp"))
    stop_requested = None
    if deletion is not None:
        stop_requested = deletion - timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)
    state = pod_state(pod)
    reason, message = pending_condition(status) if state == "pending" else (None, None)
    return JobInfo(
        id=f"{ns}/{name}", uid=str(meta.get("uid") or ""), scheduler="kubernetes", namespace=ns, name=name,
        user=_first(reading.owner_keys, labels, annotations) or ns,
        project=_first(reading.project_keys, labels, annotations) or ns,
        gpus=pod_gpus(pod, reading.gpu_resource), node=spec.get("nodeName"), state=state,
        priority=priority, priority_class=spec.get("priorityClassName") or None,
        labels=labels, annotations=annotations, owner_kind=owner_kind(meta),
        owner_name=owner_name(meta), owner_uid=owner_uid(meta),
        started_at=parse_time(status.get("startTime")), stop_requested_at=stop_requested,
        submitted_at=parse_time(meta.get("creationTimestamp")),
        pending_reason=reason, pending_message=message,
        gpu_model=(spec.get("nodeSelector") or {}).get(reading.gpu_model_label) or None,
        image=main_container(pod, reading.gpu_resource).get("image") or None,
        command=container_command(main_container(pod, reading.gpu_resource)),
        **restart_fields(pod, reading),
    )


def pod_to_finished(pod: dict, reading: PodReading) -> FinishedJob | None:
    """An ended pod as a finished run: what it ran and how its main container ended (the kubelet's terminated
    state: reason such as OOMKilled or Error, and exit code). None when the end time is not reported."""
    job = pod_to_job(pod, reading)
    status = pod.get("status") or {}
    main = main_container(pod, reading.gpu_resource).get("name")
    states = [c for c in status.get("containerStatuses") or [] if c.get("name") == main] or (
        status.get("containerStatuses") or [])
    ended = [((c.get("state") or {}).get("terminated") or {}) for c in states]
    ended = [t for t in ended if t]
    ends = [at for t in ended if (at := parse_time(t.get("finishedAt"))) is not None]
    starts = [at for t in ended if (at := parse_time(t.get("startedAt"))) is not None]
    ended_at = max(ends, default=None)
    started_at = job.started_at or min(starts, default=None)
    if ended_at is None or started_at is None:
        return None
    phase = status.get("phase")
    reason = ""
    if phase == "Failed":
        t = ended[0] if ended else {}
        container = _exit_reason({"reason": t.get("reason"), "exitCode": t.get("exitCode")})
        pod_end = _pod_end(status)
        reason = f"{pod_end}: {container}" if pod_end and container else (pod_end or container)
    return FinishedJob(id=job.id, uid=job.uid, user=job.user, project=job.project, gpus=job.gpus, node=job.node,
                       image=job.image, command=job.command, started_at=started_at, ended_at=ended_at,
                       state="completed" if phase == "Succeeded" else "failed", reason=reason)


def node_gpus(node: dict, resource: str = GPU_RESOURCE) -> int:
    status = node.get("status") or {}
    return _quantity((status.get("capacity") or {}).get(resource) or (status.get("allocatable") or {}).get(resource))


def node_to_info(node: dict, jobs: list[str], reading: PodReading) -> NodeInfo:
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    return NodeInfo(name=meta["name"], pool=_first(reading.pool_labels, labels), gpus=node_gpus(node, reading.gpu_resource),
                    gpu_model=labels.get(reading.gpu_model_label, ""), jobs=jobs, uid=meta.get("uid", ""),
                    labels=dict(labels), unschedulable=bool((node.get("spec") or {}).get("unschedulable")))
