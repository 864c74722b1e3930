"""Typed records that cluster adapters return: jobs, nodes, pools, metric slices, logs, results."""

from __future__ import annotations

import math
import re
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

SchedulerKind = Literal["kubernetes", "slurm"]
JobState = Literal["pending", "running", "stopping", "completed", "failed", "cancelled"]


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


class JobInfo(_Record):
    """A job as the scheduler reports it.

    `id` is the display name (namespace/pod or partition/jobname), which the scheduler reuses: every
    `srun --pty bash` is `bash`, StatefulSet and notebook pods come back under the same name. `uid` is
    the scheduler's immutable identity (Kubernetes metadata.uid, the Slurm job id, a trace's container
    id): warnings, approvals and stops are about one uid, and a new uid under an old name starts clean.
    """

    id: str
    uid: str = ""  # "" = the backend gave none (then only records made without a uid are this job's)
    scheduler: SchedulerKind
    namespace: str  # Kubernetes namespace; Slurm partition
    name: str
    user: str
    project: str | None = None  # team / cost centre (Slurm: account)
    gpus: int = 0
    node: str | None = None
    state: JobState = "running"
    priority: Literal["low", "normal", "high"] = "normal"
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    qos: str | None = None  # Slurm QOS
    priority_class: str | None = None  # Kubernetes spec.priorityClassName
    owner_kind: str | None = None  # Job, Deployment, StatefulSet, Notebook, ...
    # The controller ownerReference's name and uid (a Deployment's pods: the Deployment's name, their ReplicaSet's
    # uid): the pods of one custom controller (a DLRover ElasticJob) are one job (agent/detectors/gang.py). None / ""
    # when nothing owns the pod, and on Slurm.
    owner_name: str | None = None
    owner_uid: str = ""
    started_at: datetime | None = None
    stop_requested_at: datetime | None = None  # when a graceful stop was sent
    # Pending jobs (docs/queue.md): when the scheduler got the job, why it waits in the scheduler's own words
    # (Kubernetes PodScheduled reason, e.g. Unschedulable; Slurm Reason, e.g. Resources, QOSMaxGRESPerUser)
    # and its message ("0/8 nodes are available: 8 Insufficient nvidia.com/gpu"). None = not reported.
    submitted_at: datetime | None = None
    pending_reason: str | None = None
    pending_message: str | None = None
    gpu_model: str | None = None  # the GPU model the job asks for (node selector, typed GRES); None = any
    image: str | None = None  # the main container's image (Kubernetes); None = not reported (docs/changes.md)
    ended_at: datetime | None = None  # when a finished job ended (`failed_jobs`); None while it runs
    # What the job runs (docs/doomed-jobs.md): with user, image and GPUs, what makes two runs "the same job".
    command: str | None = None
    # A container restarting in place (Kubernetes restartCount, docs/doomed-jobs.md): how many times, how its last
    # run ended (the kubelet keeps only the last: reason and exit code, when, after how long) and why it is not
    # running now (the kubelet's waiting reason, e.g. CrashLoopBackOff). 0 / None = not restarted or not reported.
    restarts: int = 0
    last_exit: str | None = None
    last_exit_at: datetime | None = None
    last_run_s: float | None = None
    waiting: str | None = None


class FinishedJob(_Record):
    """A job that ended, as the scheduler's history reports it (docs/doomed-jobs.md): what it ran and how it ended."""

    id: str
    uid: str = ""
    user: str
    project: str | None = None
    gpus: int = 0
    node: str | None = None
    image: str | None = None
    command: str | None = None
    started_at: datetime
    ended_at: datetime  # when the outcome became known
    state: Literal["completed", "failed", "cancelled"]
    reason: str = ""  # the exit reason or code where the scheduler gives one (CUDA OOM, OOMKilled, exit 1); "" = unknown


# The label a Slurm job's JobInfo carries when it is a component of a heterogeneous job (its het_job_id): the
# components live and die together (scancel of the leader cancels all), like the pods of a PyTorchJob.
SLURM_HET_JOB_LABEL = "slurm.het_job_id"
# A Slurm job's id as scancel takes it (an array task's `<array>_<task>` in SLURM_ARRAY_TASK_LABEL, its own numeric
# id then in SLURM_JOB_ID_LABEL): the suffix tools/slurm.py adds to the steward id of jobs that share a name.
SLURM_JOB_ID_LABEL = "slurm.job_id"
SLURM_ARRAY_TASK_LABEL = "slurm.array_task"


def names_job(name: str, job: JobInfo) -> bool:
    """Whether `name`, a steward id written down by a person (`protection.jobs`, a keep recorded without a uid),
    names `job`: its id, and on Slurm any id the adapter gives it whatever else is listed. A Slurm steward id is
    `partition/jobname` until another job (any user's) takes the same name, then `partition/jobname-<job id>` until
    that one ends (tools/slurm.py steward_ids): another job's name must never change what protects this one, so its
    bare `partition/jobname` and that with `-<its job id>` (repeated) name it too. The bare name also names a
    namesake: it is protected with it, erring toward protecting."""
    if name == job.id:
        return True
    if job.scheduler != "slurm":
        return False
    base = f"{job.namespace}/{job.name}"
    if name == base:
        return True
    slurm_id = job.labels.get(SLURM_ARRAY_TASK_LABEL) or job.labels.get(SLURM_JOB_ID_LABEL)
    suffix, rest = f"-{slurm_id}", name
    while slurm_id and rest.endswith(suffix):
        rest = rest.removesuffix(suffix)
        if rest == base:
            return True
    return False
# The labels gang schedulers put on every pod of one job (agent/detectors/gang.py): Kubeflow's training operator,
# Volcano, LeaderWorkerSet, JobSet, the scheduler-plugins Coscheduling PodGroup (its current label and the one
# before v0.26), Kueue's plain Pod groups, KubeRay's cluster (a Ray Train job's GPU workers wait on its CPU workers
# and fail with them), and a Slurm heterogeneous job. A batch/v1 Job's `job-name` only with a completion index: an
# Indexed Job is how Kubernetes itself runs multi-pod training (its docs' "Job with Pod-to-Pod Communication", JobSet's
# replicas), while a plain parallel Job's pods are independent work-queue workers. A wrong gang costs a finding, never
# a stop: an independent indexed worker idle beside busy siblings is not reported while they work (a worker that
# finished its index exits; one that idles while others work is more often a rank waiting in a barrier).
GANG_LABELS = ("training.kubeflow.org/job-name", "volcano.sh/job-name", "leaderworkerset.sigs.k8s.io/name",
               "jobset.sigs.k8s.io/jobset-name", "scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io",
               "kueue.x-k8s.io/pod-group-name", "ray.io/cluster", SLURM_HET_JOB_LABEL)
RAY_CLUSTER_LABEL = "ray.io/cluster"
# A LeaderWorkerSet's replicas are independent groups (a leader and its workers each), kubernetes-sigs/lws#877: one
# group hung while another serves is that group's waste, not the set's.
LWS_NAME_LABEL, LWS_GROUP_LABEL = "leaderworkerset.sigs.k8s.io/name", "leaderworkerset.sigs.k8s.io/group-index"
INDEXED_JOB_LABEL = "batch.kubernetes.io/job-completion-index"  # a label since Kubernetes 1.28
JOB_NAME_LABELS = ("batch.kubernetes.io/job-name", "job-name")  # the Job controller's, newest first


# Controllers whose pods are independent replicas, never one job: a Deployment's (its ReplicaSet's) interchangeable
# replicas, a DaemonSet's per-node agents, a plain batch Job's work-queue workers (an Indexed Job is read from its
# labels above), a Kubeflow Notebook's single workspace pod, a Tekton TaskRun's one pod, a Slinky NodeSet's slurmd
# pods (each a Slurm node of its own, busy or idle with the jobs Slurm gives it). Any other owner (a DLRover
# ElasticJob, an Argo Workflow, a hand-rolled torchrun StatefulSet, a Spark driver pod owning its executors) runs its
# pods as one job: stopping one breaks the job the others belong to. (An Argo Workflow's steps are one job for a hang,
# and each its own for idleness: agent/detectors/gang.py STEP_OWNERS.) ownerReferences are as self-service as labels
# (a pod's creator sets them), so reading them grants nothing a gang label would not.
INDEPENDENT_OWNERS = frozenset({"Deployment", "ReplicaSet", "DaemonSet", "Job", "CronJob", "Notebook", "TaskRun",
                                "NodeSet"})


def owner_gang_key(namespace: str, owner_kind: str | None, owner_name: str | None,
                   owner_uid: str = "") -> tuple[str, str, str, str] | None:
    """(namespace, owner kind, owner name, owner uid) naming the job a pod without a gang label belongs to: its
    controller, unless that controller runs independent replicas (INDEPENDENT_OWNERS); None without an owner."""
    if not owner_kind or not owner_name or owner_kind in INDEPENDENT_OWNERS:
        return None
    return namespace, owner_kind, owner_name, owner_uid


def job_gang(job: JobInfo) -> tuple[tuple[str, str, str], str] | None:
    """The distributed job a pod belongs to: ((namespace, label, value), owner uid) from a gang label (gang_key;
    uid ""), else from its controller (owner_gang_key: an operator the label list does not know, such as DLRover's
    ElasticJob; its uid, since a controller recreated under its name is another job); None for a job of its own.
    The one grouping every detector uses (the gang's waits, the queue's "blocks")."""
    key = gang_key(job.namespace, job.labels)
    if key is not None:
        return key, ""
    owner = owner_gang_key(job.namespace, job.owner_kind, job.owner_name, job.owner_uid)
    return (owner[:3], job.owner_uid or "") if owner is not None else None


def gang_key(namespace: str, labels: dict[str, str]) -> tuple[str, str, str] | None:
    """(namespace, label, value) naming the distributed job a pod or job belongs to (GANG_LABELS); None for a job of
    its own. A Slurm heterogeneous job's components may sit in different partitions: its id is the cluster's."""
    for label in GANG_LABELS:
        value = labels.get(label)
        if value:
            if label == LWS_NAME_LABEL and labels.get(LWS_GROUP_LABEL):  # each replica group is a job of its own
                value = f"{value}/{labels[LWS_GROUP_LABEL]}"
            return ("" if label == SLURM_HET_JOB_LABEL else namespace), label, value
    if INDEXED_JOB_LABEL in labels:
        for label in JOB_NAME_LABELS:
            if value := labels.get(label):
                return namespace, label, value
    return None


def gpu_model_matches(wanted: str | None, model: str) -> bool:
    """Whether a node's GPU model satisfies a request: every word of the request is a word of the model
    ("H100" matches "NVIDIA-H100-80GB-HBM3", "a100" matches "A100-80GB"); no request matches any model."""
    if not wanted:
        return True
    words = set(re.split(r"[\s_\-]+", model.lower()))
    return all(w in words for w in re.split(r"[\s_\-]+", wanted.lower()) if w)


class NodeInfo(_Record):
    name: str
    pool: str | None = None
    gpus: int
    gpu_model: str = ""
    jobs: list[str] = []
    uid: str = ""  # the scheduler's immutable identity of the node (Kubernetes metadata.uid); "" = none given
    labels: dict[str, str] = {}  # e.g. GPU feature discovery's nvidia.com/cuda.driver-version.full
    unschedulable: bool = False  # cordoned: no new work lands on it


class NodesUnknown(RuntimeError):
    """What runs on the nodes could not be read whole (squeue records dropped or ambiguous): a node that might run
    a workload is never removed on such an answer."""


class PoolInfo(_Record):
    name: str
    provider: Literal["sim", "aws", "capi"] = "sim"
    gpu_model: str = ""
    gpus_per_node: int
    nodes: int
    min_nodes: int = 0
    max_nodes: int | None = None
    price_per_gpu_hour: float = 0.0
    billing: Literal["on-demand", "reserved", "spot"] = "on-demand"
    busy_nodes: int = 0  # nodes that run at least one job now
    used_gpus: int | None = None  # GPUs jobs hold now; None = unknown (then busy nodes count as full)
    currency: str = "USD"
    # Allocated GPUs per past hour, oldest first, the last hour ending at load_history_end: what the pool's load
    # forecast is made from (docs/forecast.md). Empty when the backend keeps none.
    load_history: list[float] = []
    load_history_end: datetime | None = None


def expected_samples(slice_s: float, interval_s: float) -> int:
    """Samples every slice of a healthy sampler holds: the floor of slice / interval (at least 1).

    When the interval does not divide the slice, slices hold the floor or the ceiling in turn; expecting the
    rounded value would call every floor-sized slice incomplete (an 85 s interval and 5-minute slices: 3 or 4
    samples against 4 expected, 88 % coverage, and no job ever judged idle).
    """
    return max(1, math.floor(slice_s / interval_s + 1e-9))


class GpuSeries(_Record):
    """One GPU's samples, aggregated into slices (oldest first; None = no valid sample).

    Labels follow dcgm-exporter: Hostname, gpu, UUID, modelName, and pod/namespace/container
    on Kubernetes or hpc_job on Slurm. `job` is the steward job id these map to.
    """

    job: str | None
    node: str
    gpu: int
    uuid: str = ""
    model: str = ""
    slice_s: float
    util_max: list[float | None]  # DCGM_FI_DEV_GPU_UTIL, per slice
    util_avg: list[float | None]
    samples: list[int]  # valid samples per slice
    expected: int  # samples a full slice holds
    engine_active_avg: list[float | None] = []  # DCGM_FI_PROF_GR_ENGINE_ACTIVE (0..1)
    mem_used_mb: float | None = None  # DCGM_FI_DEV_FB_USED, latest
    temp_c_max: float | None = None  # DCGM_FI_DEV_GPU_TEMP over the lookback
    power_w_avg: float | None = None
    # Per slice, oldest first, None = no valid sample; [] = the exporter does not report the field at all (unknown,
    # never zero). DCGM profiling ratios (0..1), board power (W) and interconnect traffic (bytes/s, TX + RX).
    sm_active_avg: list[float | None] = []  # DCGM_FI_PROF_SM_ACTIVE
    tensor_active_avg: list[float | None] = []  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    dram_active_avg: list[float | None] = []  # DCGM_FI_PROF_DRAM_ACTIVE
    power_w_slices: list[float | None] = []  # DCGM_FI_DEV_POWER_USAGE, slice average
    nvlink_bytes_avg: list[float | None] = []  # DCGM_FI_PROF_NVLINK_TX_BYTES + _RX_BYTES
    pcie_bytes_avg: list[float | None] = []  # DCGM_FI_PROF_PCIE_TX_BYTES + _RX_BYTES
    xid_last: int = 0  # DCGM_FI_DEV_XID_ERRORS: last non-zero XID in the lookback
    xid_at: datetime | None = None


class GpuHistory(_Record):
    """One GPU's coarse history over the long-tail lookback: per slice the max utilisation and sample count.

    Read only where the fine slices (GpuSeries) are too short: the long-tail check and quiet-since.
    """

    job: str | None
    node: str
    gpu: int
    slice_s: float
    util_max: list[float | None]  # None = no valid sample in the slice
    samples: list[int]
    expected: int  # samples a full slice holds
    # Lowest sample per slice: above the quiet threshold, no pause can hide inside. Empty = unknown.
    util_min: list[float | None] = []
    # Mean sample per slice (how much work a slice held); empty = unknown, then its max bounds the work.
    util_avg: list[float | None] = []


class JobIoSeries(_Record):
    """A job's process CPU (% of one core), network traffic, disk read and disk write (MB/s) per slice."""

    job: str
    slice_s: float
    cpu_pct: list[float | None]
    net_rx_mbps: list[float | None]  # network receive + transmit (tools/promql.py), MB/s
    disk_read_mbps: list[float | None]
    # Disk write per slice (cAdvisor's container_fs_writes_bytes_total); empty = not known (a source without it). A
    # copy from network storage to local disk (data staging) reads nothing a counter sees and writes at speed.
    disk_write_mbps: list[float | None] = []
    # An inference service's requests/s per slice (vLLM's request counter; docs/alerts.md); empty = not known
    requests_per_s: list[float | None] = []


class LogLine(_Record):
    at: datetime
    text: str


class StopResult(_Record):
    job: str
    status: Literal["stopped", "stopping", "already_gone", "refused", "error"]
    detail: str = ""
    # The other pods this stop stopped with the job, through one suspension of the owner they share (ids), and that
    # owner's uid: a backend that stops job by job leaves them empty.
    covered: list[str] = []
    owner_uid: str | None = None


class CordonResult(_Record):
    node: str
    status: Literal["cordoned", "unchanged", "refused", "error"]
    detail: str = ""


class ResizeResult(_Record):
    pool: str
    status: Literal["resized", "unchanged", "refused", "error"]
    nodes_before: int
    nodes_after: int
    removed_nodes: list[str] = []
    detail: str = ""


class NotifyResult(_Record):
    recipient: str
    status: Literal["sent", "error", "suppressed", "deferred"]  # deferred: outside working hours, retried later
    channel: str = "log"
    detail: str = ""
    message_id: str = Field(default="")
