"""Scenario file format v1: pydantic models and a loader whose errors name file and key."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from core.durations import Duration
from core.files import format_validation_errors, read_yaml

DEFAULT_START = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
NAME_RE = re.compile(r"^[a-z0-9-]+$")

Range = float | tuple[float, float]


class ScenarioError(ValueError):
    """A scenario file that cannot be used; the message names the file and key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class NodeEvent(_Strict):
    at: Duration
    xid: int | None = None
    gpu_temp_c: float | None = None
    gpu: int | None = None  # extension: which GPU index (default 0)
    # extension (docs/changes.md): node labels set from this time on (merged over the node's `labels`), e.g. a
    # driver upgrade's nvidia.com/cuda.driver-version.full as GPU feature discovery reports it
    labels: dict[str, str] | None = None


class PoolHistory(_Strict):
    """Extension (docs/forecast.md): the pool's allocated GPUs hour by hour over `days` days before the scenario's
    `start`, for its load forecast. `daily` is 24 values (hours 0-23 UTC); `weekend`, when given, replaces it on
    Saturdays and Sundays; each hour gets uniform noise of up to +-`noise` GPUs drawn from `seed` (deterministic),
    and is clipped to [0, the pool's GPUs]."""

    days: int = Field(ge=1, le=90)
    daily: list[float]
    weekend: list[float] | None = None
    noise: float = Field(0.0, ge=0)
    seed: int = 0

    @field_validator("daily", "weekend")
    @classmethod
    def _profile(cls, value: list[float] | None) -> list[float] | None:
        if value is not None and (len(value) != 24 or any(v < 0 for v in value)):
            raise ValueError("a profile is 24 allocated-GPU values, one per hour 0-23 UTC, none negative")
        return value

    def hourly(self, start: datetime, capacity: float) -> tuple[datetime, list[float]]:
        """The past hours' values, oldest first, and the hour the history ends at (`start`, rounded down)."""
        import random

        end = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
        rng = random.Random(self.seed)
        out = []
        for k in range(self.days * 24, 0, -1):
            at = end - timedelta(hours=k)
            profile = self.weekend if self.weekend is not None and at.weekday() >= 5 else self.daily
            noise = rng.uniform(-self.noise, self.noise) if self.noise else 0.0
            out.append(round(min(capacity, max(0.0, profile[at.hour] + noise)), 3))
        return end, out


class Pool(_Strict):
    name: str
    provider: Literal["sim", "aws", "capi"] = "sim"
    gpu_model: str = "A100-80GB"
    gpus_per_node: int = Field(8, ge=1, le=64)
    nodes: int = Field(ge=0)
    min_nodes: int = Field(0, ge=0)
    max_nodes: int | None = Field(None, ge=0)
    price_per_gpu_hour: float = Field(0.0, ge=0)
    billing: Literal["on-demand", "reserved", "spot"] = "on-demand"
    profiling: bool = True  # extension: the nodes' exporter reports the DCGM profiling fields (SM, tensor, NVLink...)
    history: PoolHistory | None = None  # extension: the pool's load before `start`, for its forecast (docs/forecast.md)

    @model_validator(mode="after")
    def _sizes(self) -> Pool:
        if self.max_nodes is not None and self.max_nodes < self.min_nodes:
            raise ValueError("max_nodes is below min_nodes")
        if self.nodes < self.min_nodes:
            raise ValueError("nodes is below min_nodes")
        return self


class Node(_Strict):
    name: str
    pool: str | None = None
    gpus: int | None = Field(None, ge=1)  # extension: override the pool's gpus_per_node
    gpu_model: str | None = None
    events: list[NodeEvent] = []
    profiling: bool | None = None  # extension: override the pool's `profiling` (a node outside a pool: true)
    labels: dict[str, str] = {}  # extension: the node's labels at the start (docs/changes.md)


class Phase(_Strict):
    duration: Duration | None = None
    gpu_util: Range | None = None
    active_gpus: int | None = Field(None, ge=0)
    gpu_mem_gb: Range | None = None
    # Extension: GPU memory, GB, that each GPU beyond active_gpus holds at 0 %: a DDP rank waiting for its siblings
    # keeps its model and optimiser state. Default a CUDA context's (sim/signals.py IDLE_FB_MB): a GPU the job
    # leaves alone, or one whose task has ended.
    idle_gpu_mem_gb: Range | None = None
    cpu_pct: Range | None = None
    net_rx_mbps: Range | None = None
    net_tx_mbps: Range | None = None  # extension: network transmit (an upload); default 0
    disk_read_mbps: Range | None = None
    # Extension: disk write, MB/s (a checkpoint save, a dataset copied to local disk); served as cAdvisor's
    # container_fs_writes_bytes_total. Default 0: training mostly reads, a phase that writes says so.
    disk_write_mbps: Range | None = None
    log: Literal["loss", "silent", "lines"] | None = None
    log_every: Duration | None = None
    lines: list[str] | None = None
    metrics: Literal["ok", "missing"] | None = None
    # Extension: what the GPU really does (DCGM profiling fields, power, interconnect). Left out, each is derived
    # from gpu_util and gpu_work (sim/signals.py); written, it overrides that for this phase and the next ones.
    gpu_work: Literal["real", "spin"] | None = None
    sm_active: Range | None = None  # ratio 0..1, as DCGM reports it
    tensor_active: Range | None = None  # ratio 0..1
    dram_active: Range | None = None  # ratio 0..1
    power_w: Range | None = None  # board power per active GPU, W
    nvlink_mbps: Range | None = None  # NVLink MB/s per active GPU, transmit and receive together
    pcie_mbps: Range | None = None  # PCIe MB/s per active GPU, transmit and receive together
    # Extension (docs/alerts.md, service layer): a serving job's request rate (requests/s) and mean end-to-end
    # latency (s); the simulated exporter serves them as vLLM's metrics. Left out: the job serves no vLLM metrics.
    requests_per_s: Range | None = None
    latency_s: Range | None = None

    @field_validator("gpu_util", "gpu_mem_gb", "cpu_pct", "net_rx_mbps", "net_tx_mbps", "disk_read_mbps", "disk_write_mbps",
                     "sm_active", "tensor_active", "dram_active", "power_w", "nvlink_mbps", "pcie_mbps", "requests_per_s",
                     "latency_s", mode="before")
    @classmethod
    def _range(cls, value: Any) -> Any:
        if isinstance(value, list):
            if len(value) != 2 or not all(isinstance(v, (int, float)) for v in value):
                raise ValueError("a range is [low, high] with two numbers")
            low, high = value
            if low > high:
                raise ValueError("a range's low is above its high")
            return (float(low), float(high))
        return value

    @field_validator("sm_active", "tensor_active", "dram_active")
    @classmethod
    def _ratio(cls, value: Range | None) -> Range | None:
        values = value if isinstance(value, tuple) else (value,) if value is not None else ()
        if any(not 0.0 <= v <= 1.0 for v in values):
            raise ValueError("an activity is a ratio from 0 to 1, as DCGM reports it (0.85, not 85)")
        return value

    @field_validator("power_w", "nvlink_mbps", "pcie_mbps", "requests_per_s", "latency_s")
    @classmethod
    def _not_negative(cls, value: Range | None) -> Range | None:
        values = value if isinstance(value, tuple) else (value,) if value is not None else ()
        if any(v < 0 for v in values):
            raise ValueError("must not be negative")
        return value


class Owner(_Strict):
    """Extension (docs/detectors.md): the controller ownerReference a Kubernetes pod carries, as the adapter reads it
    (tools/k8s_pods.py): the kind as an operator names it (ElasticJob, StatefulSet, Deployment, Notebook) and the
    owner's name. The simulated owner uid is `sim:<namespace>/<kind>/<name>`."""

    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)


class RestartLoop(_Strict):
    """Extension (docs/doomed-jobs.md): a Kubernetes pod whose container the kubelet restarts in place. From the
    job's start the container runs `run`, exits with `reason`, waits `backoff` (CrashLoopBackOff) and starts again,
    until the job ends or is stopped. The pod reports what the kubelet does: restartCount, the last termination
    (reason, when, how long it ran) and the waiting reason. The back-off is fixed: the kubelet's once it has reached
    its 5-minute cap (its first restarts come sooner: at once, then 10 s doubling), which is where a loop spends its
    day. The job's phases still script its GPUs."""

    run: Duration = Field(gt=0)
    backoff: Duration = Field(300.0, ge=0)
    reason: str = Field("Error (exit 1)", min_length=1)  # as tools/k8s_pods._exit_reason writes it


class Job(_Strict):
    id: str
    scheduler: Literal["kubernetes", "slurm"] = "kubernetes"
    user: str = "unknown"
    project: str | None = None
    node: str | None = None
    gpus: int = Field(1, ge=0)
    priority: Literal["low", "normal", "high"] = "normal"
    # Extension (docs/forecast.md): the Kubernetes PriorityClass / Slurm QOS name, for filling quiet windows.
    priority_class: str | None = None
    qos: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    submit: Duration = 0.0
    start: Duration | None = None
    end: Duration | None = None
    sigterm: Literal["exits", "ignores"] = "exits"
    phases: list[Phase] = []
    # Extensions for the queue (docs/queue.md): the GPU model the job asks for (placed only on a node whose model
    # matches), and a scheduler reason that holds it whatever the free capacity (a quota, e.g. QOSMaxGRESPerUser),
    # with the scheduler's message. Without pending_reason the simulator derives the reason from the capacity.
    gpu_model: str | None = None
    pending_reason: str | None = None
    pending_message: str | None = None
    # Extensions for change governance (docs/changes.md): the job's container image, and how it ends at `end`
    # (`failed`: the scheduler reports it failed, as a crashed pod or a Slurm job with a non-zero exit).
    image: str | None = None
    exit: Literal["succeeded", "failed"] = "succeeded"
    # Extensions for doomed jobs (docs/doomed-jobs.md): the job's command (with user, image and GPUs, what makes
    # two runs "the same job") and, for `exit: failed`, the reason the scheduler reports (CUDA out of memory, exit 1).
    command: str | None = None
    exit_reason: str | None = None
    # Extension (docs/alerts.md): the `model_name` label of the job's vLLM metrics (default: the job's name).
    model_name: str | None = None
    # Extension (docs/detectors.md): the pod's controller ownerReference; left out, the owner kind is derived from the
    # labels (job-name: Job, pod-template-hash: Deployment) with no owner name, as before.
    owner: Owner | None = None
    # Extension (docs/doomed-jobs.md): the pod's container restarting in place.
    restart_loop: RestartLoop | None = None

    @model_validator(mode="after")
    def _owner_on_kubernetes(self) -> Job:
        if self.owner is not None and self.scheduler != "kubernetes":
            raise ValueError("owner is a Kubernetes pod's ownerReference: a Slurm job has none")
        if self.restart_loop is not None and self.scheduler != "kubernetes":
            raise ValueError("restart_loop is a Kubernetes container restarting in place: a Slurm job has none")
        return self

    @field_validator("id")
    @classmethod
    def _id(cls, value: str) -> str:
        if "/" not in value or value.startswith("/") or value.endswith("/"):
            raise ValueError("job id is namespace/pod (Kubernetes) or partition/jobname (Slurm)")
        return value

    @property
    def namespace(self) -> str:
        return self.id.split("/", 1)[0]

    @property
    def name(self) -> str:
        return self.id.split("/", 1)[1]

    @property
    def start_s(self) -> float:
        return self.submit if self.start is None else self.start


class ScriptedApproval(_Strict):
    job: str
    decision: Literal["approve", "deny"]
    at: Duration
    by: str = "scripted"


class ScriptedChange(_Strict):
    """Extension (docs/changes.md): a change a person records at `at`, as `steward change record` would."""

    at: Duration
    kind: Literal["driver", "image", "cuda", "policy", "scheduler", "other"]
    target: str
    description: str = ""
    by: str = "scripted"


class Truth(_Strict):
    job: str | None = None
    pool: str | None = None  # extension: a pool-level answer (waste: oversized)
    waste: Literal["idle", "zombie", "overprovisioned", "none", "oversized", "node_health", "stuck_pending", "doomed",
                   "crash_loop", "idle_serving"]
    since: Duration | None = None
    must_not_kill: bool = False

    @model_validator(mode="after")
    def _target(self) -> Truth:
        if (self.job is None) == (self.pool is None):
            raise ValueError("a truth entry names exactly one of job or pool")
        return self


class Scenario(_Strict):
    version: Literal[1] = 1
    name: str
    description: str = ""
    start: datetime = DEFAULT_START
    duration: Duration
    step: Duration = 30.0
    currency: str = "USD"
    pools: list[Pool] = []
    nodes: list[Node] = []
    jobs: list[Job] = []
    approvals: list[ScriptedApproval] = []
    changes: list[ScriptedChange] = []  # extension: changes recorded by people (docs/changes.md)
    truth: list[Truth] = []

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME_RE.match(value):
            raise ValueError("name must match [a-z0-9-]+")
        return value

    @field_validator("start", mode="before")
    @classmethod
    def _start(cls, value: Any) -> Any:
        if isinstance(value, datetime) and value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value

    @field_validator("step")
    @classmethod
    def _step(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("step must be positive")
        return value

    @model_validator(mode="after")
    def _references(self) -> Scenario:
        pool_names = {p.name for p in self.pools}
        if len(pool_names) != len(self.pools):
            raise ValueError("pool names must be unique")
        node_names = [n.name for n in self.nodes]
        if len(set(node_names)) != len(node_names):
            raise ValueError("node names must be unique")
        for i, node in enumerate(self.nodes):
            if node.pool is not None and node.pool not in pool_names:
                raise ValueError(f"nodes[{i}].pool: unknown pool {node.pool!r}")
            if node.pool is None and node.gpus is None:
                raise ValueError(f"nodes[{i}]: a node without a pool needs gpus")
        known_nodes = set(node_names) | {f"{p.name}-{i}" for p in self.pools for i in range(p.nodes)}
        job_ids = [j.id for j in self.jobs]
        _check_namesakes(self.jobs)
        for i, job in enumerate(self.jobs):
            if job.node is not None and job.node not in known_nodes:
                raise ValueError(f"jobs[{i}].node: unknown node {job.node!r}")
            if job.end is not None and job.end < job.start_s:
                raise ValueError(f"jobs[{i}].end is before its start")
            if job.exit_reason is not None and job.exit != "failed":
                raise ValueError(f"jobs[{i}].exit_reason: only a job with `exit: failed` has one")
        for i, approval in enumerate(self.approvals):
            if approval.job not in job_ids and approval.job not in pool_names:
                raise ValueError(f"approvals[{i}].job: unknown job {approval.job!r}")
        for i, truth in enumerate(self.truth):
            if truth.job is not None and truth.job not in job_ids:
                raise ValueError(f"truth[{i}].job: unknown job {truth.job!r}")
            if truth.pool is not None and truth.pool not in pool_names:
                raise ValueError(f"truth[{i}].pool: unknown pool {truth.pool!r}")
        return self


def _check_namesakes(jobs: list[Job]) -> None:
    """Two jobs may share an id only when one was submitted at or after the other's end (a namesake)."""
    seen: dict[str, list[int]] = {}
    for j, job in enumerate(jobs):
        for i in seen.get(job.id, []):
            first, second = (jobs[i], job) if jobs[i].submit <= job.submit else (job, jobs[i])
            if first.end is None or second.submit < first.end or second.submit == first.submit:
                raise ValueError(
                    f"jobs[{i}] and jobs[{j}] share the id {job.id!r} and their lifetimes overlap: a reused id "
                    "needs the earlier job to have an `end` and the later one submitted at or after it")
        seen.setdefault(job.id, []).append(j)


def parse_scenario(data: Any, source: str = "<scenario>") -> Scenario:
    """Validate already-parsed YAML/JSON data as a scenario."""
    if not isinstance(data, dict):
        raise ScenarioError(f"{source}: a scenario is a mapping at the top level")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ScenarioError(format_validation_errors(source, exc, Scenario)) from None


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario YAML file."""
    data = read_yaml(path, ScenarioError)
    return parse_scenario(data, str(path))


def demo_scenario_path() -> Path:
    """The built-in demo cluster that `steward sweep` uses by default."""
    return Path(__file__).with_name("demo.yaml")
