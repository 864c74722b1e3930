"""The operator's policy file: detector thresholds, protection, levels, limits. Validated."""

from __future__ import annotations

import math
from datetime import datetime, time, timedelta
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from core.durations import format_duration, parse_duration
from core.files import format_validation_errors, read_yaml
from core.redact import Redactor


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and key."""


class _Section(BaseModel):
    # NaN and infinity are refused everywhere: no threshold or period means anything with them.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


# Longer than a year is a typo, and past this the clock arithmetic of a sweep would overflow.
MAX_DURATION_S = 366 * 86400.0
# Slices one sweep reads per series (fine over the windows, coarse over the long-tail lookback);
# Prometheus refuses range queries over 11,000 points, and every slice costs memory and time.
MAX_SLICES = 10_000


def _seconds(value: object) -> float:
    try:
        return parse_duration(value)
    except OverflowError:
        raise ValueError("not a duration: far too long") from None


def _bounded(seconds: float) -> float:
    if not math.isfinite(seconds):
        raise ValueError("a duration must be finite")
    if seconds > MAX_DURATION_S:
        raise ValueError(f"{format_duration(seconds)} is longer than the {format_duration(MAX_DURATION_S)} maximum")
    return seconds


def _positive(seconds: float) -> float:
    if seconds <= 0:
        raise ValueError("must be longer than 0 (e.g. 30s, 15m, 2h)")
    return seconds


# A period that may be 0 (no notice, no grace) and one that may not (windows, slices, repeat, expiry).
Duration = Annotated[float, BeforeValidator(_seconds), AfterValidator(_bounded)]
PositiveDuration = Annotated[float, BeforeValidator(_seconds), AfterValidator(_bounded), AfterValidator(_positive)]


class IdleRule(_Section):
    window: PositiveDuration = 3600.0
    util_threshold_pct: float = Field(2.0, ge=0, le=100)
    min_coverage: float = Field(0.9, gt=0, le=1)  # share of expected samples that must be present
    # Blips: activity above the threshold that adds up to less than this (GPU-seconds) over a quiet stretch does not
    # end it (idle window, current quiet, past pauses). 0 (default): any such activity ends it. At 60 (a GPU-minute)
    # the dev trace showed 37 material false kills (docs/evals.md): off until a stop needs a warning sent in its own
    # quiet stretch and the budget bounds the work a stop can lose rather than the work a stretch held.
    blip_gpu_seconds: float = Field(0.0, ge=0)


class ZombieRule(_Section):
    window: PositiveDuration = 1800.0
    busy_threshold_pct: float = Field(90.0, ge=0, le=100)  # "pinned" GPU
    # A hung collective usually spins its host threads at ~100% of a core per rank, so CPU clears no one by
    # default; set it to also require process CPU below it (the rule before profiling fields were read).
    cpu_threshold_pct: float | None = Field(None, ge=0)
    log_cadence_factor: float = Field(3.0, ge=1)  # no progress for this many usual log gaps


class ActivityRule(_Section):
    """What real GPU work looks like beyond GPU_UTIL (which only says a kernel was resident): DCGM profiling
    ratios, board power and interconnect traffic. A field the exporter lacks is unknown and judges nothing."""

    # A hung collective's spinning kernels hold one SM per channel: well under a third of any datacenter GPU.
    sm_active_max: float = Field(0.3, ge=0, le=1)
    # Real work does math or moves memory; 5% is under what the lightest training keeps busy.
    tensor_active_max: float = Field(0.05, ge=0, le=1)
    dram_active_max: float = Field(0.05, ge=0, le=1)
    # Share of the GPU model's board power (agent/detectors/activity.py) at or below which it does no real math:
    # idle draws 10-25% of it and a hung collective's spinning kernels up to ~40%; real pinned work draws more.
    idle_power_share: float = Field(0.4, gt=0, le=1)
    # An idle GPU draws up to this share. Above it (and at or under idle_power_share) power alone cannot tell a hung
    # collective's spin from memory-bound work (generation, decoding): a hung-job stop judged without DCGM
    # profiling fields there, or with no power reading at all, needs a person.
    idle_draw_share: float = Field(0.25, gt=0, le=1)
    # NVLink and PCIe (TX + RX) at or below this: no traffic; real training moves hundreds of MB/s or more.
    interconnect_max_mbps: float = Field(10.0, ge=0)

    @model_validator(mode="after")
    def _ordered(self) -> ActivityRule:
        if self.idle_draw_share > self.idle_power_share:
            raise ValueError(f"idle_draw_share ({self.idle_draw_share:g}) is above idle_power_share "
                             f"({self.idle_power_share:g}): an idle GPU's draw is part of the near-idle band")
        return self


class KeepAliveRule(_Section):
    """Keep-alive dodgers: short regular GPU bursts with no progress, no I/O and near-idle power or tensor pipe,
    judged over the idle window. Reported as idle; a stop on that alone always needs a human."""

    enabled: bool = True
    min_bursts: int = Field(3, ge=2)  # separate bursts in the window (or every slice busy at a steady low level)
    max_avg_util_pct: float = Field(10.0, ge=0, le=100)  # the window's average utilisation: short bursts


class OverprovisionedRule(_Section):
    window: PositiveDuration = 3600.0
    working_util_pct: float = Field(10.0, ge=0, le=100)
    ratio: float = Field(2.0, ge=1)
    min_gpus: int = Field(2, ge=2)


class ServingRule(_Section):
    """Inference services (agent/detectors/serving.py): an idle one gets advice (scale to zero, share the GPU),
    never a stop. A selector is "label=value" or "label" (present with any value)."""

    enabled: bool = True
    # The labels the common serving stacks' charts and operators set: KServe, Knative, Seldon, Triton, TGI, vLLM,
    # SGLang, Ollama, KubeRay's RayService, BentoML's Yatai (a service the list misses can carry
    # steward.io/workload=serving; a Deployment's pod gets the same advice: agent/detectors/serving.py).
    selectors: list[str] = ["app.kubernetes.io/component=inference", "app.kubernetes.io/component=serving",
                            "app.kubernetes.io/component=predictor", "component=predictor",
                            "serving.kserve.io/inferenceservice", "serving.knative.dev/service",
                            "seldon-deployment-id", "app.kubernetes.io/name=triton-inference-server",
                            "app=triton-inference-server", "app.kubernetes.io/name=text-generation-inference",
                            "app=text-generation-inference", "app.kubernetes.io/name=vllm", "app=vllm",
                            "app.kubernetes.io/name=sglang", "app=sglang", "app.kubernetes.io/name=ollama",
                            "app=ollama", "ray.io/originated-from-crd=RayService", "ray.io/serve=true",
                            "yatai.ai/bento-deployment", "steward.io/workload=serving"]
    # A job whose container image is a model server's is a service whatever its labels: the image's name (its last
    # path component, without the tag) equal to one of these (nvcr.io/nvidia/tritonserver:24.08-py3, vllm/vllm-openai,
    # lmsysorg/sglang), or, for an entry with a "/", the image path starting with it (NVIDIA NIM's nvcr.io/nim/...).
    images: list[str] = ["tritonserver", "vllm-openai", "text-generation-inference", "sglang", "ollama",
                         "tensorrt-llm", "lmdeploy", "text-embeddings-inference", "llama.cpp", "torchserve",
                         "nvcr.io/nim/"]
    # A job whose command starts a model server is a service whatever its labels and image (a team's own image built
    # FROM vllm/vllm-openai, run as `vllm serve`): an entry's words in a row in the command, the first compared by its
    # last path component, so `/opt/tritonserver/bin/tritonserver` and `python -m sglang.launch_server` match.
    commands: list[str] = ["vllm serve", "vllm.entrypoints.openai.api_server", "vllm.entrypoints.api_server",
                           "sglang.launch_server", "text-generation-launcher", "text-embeddings-router",
                           "tritonserver", "ollama serve", "lmdeploy serve", "trtllm-serve", "llama-server",
                           "llama_cpp.server", "torchserve", "serve run", "mlserver start", "bentoml serve"]


class LongTailRule(_Section):
    lookback: PositiveDuration = 24 * 3600.0  # a whole day, so a service's quiet hours are part of its history
    # Beyond the detectors' windows the day is read in coarse slices (max and sample count only): a fraction
    # of the fine slices' cost. Rounded to a whole number of fine slices.
    history_slice: PositiveDuration = 900.0
    # The grace comes from the job's own behaviour: quiet is long for a job once it exceeds this many times the
    # longest pause it has shown in the lookback (pauses run between bursts; see idle.blip_gpu_seconds).
    quiet_factor: float = Field(1.5, ge=1)
    # What a past pause is. `silence`: the longest silence (no activity at all, as the current quiet stretch is
    # measured) that a burst of work (material_gpu_seconds) followed; silences that only a blip ended show nothing
    # worth waiting for. `bursts`: the time between two bursts of work, blips inside (the default before).
    pause: Literal["silence", "bursts"] = "silence"
    # Opt-in: also wait this share of the span it worked in the lookback. 0 by default: how long a job has worked
    # says nothing about how long it pauses (it gave day-long servers 6 h of grace after 1-2 h pauses).
    quiet_share: float = Field(0.0, ge=0, le=1)
    io_threshold_mbps: float = Field(1.0, ge=0)
    # Network or disk I/O averaging at least this over the window, though under io_threshold_mbps, is data moving
    # slowly (a results upload of many small files) or chatter the steward cannot tell from it: the job is still
    # warned, and its stop needs a person. An idle process moves kilobytes a second.
    io_trickle_mbps: float = Field(0.1, ge=0)
    cpu_active_pct: float = Field(50.0, ge=0)
    # A job whose GPUs did less work than this over its whole observed life (GPU-seconds, sum of util x time, an
    # upper bound) gets no long-tail grace: it has no working history to protect. The scorer's "material" work.
    material_gpu_seconds: float = Field(60.0, ge=0)


def _clock_time(value: object) -> object:
    """YAML 1.1 reads an unquoted 20:00 as the base-60 integer 1200: take it back as the time it was written as."""
    if isinstance(value, bool) or not isinstance(value, int):
        return value
    if 0 <= value < 24 * 60:
        return time(value // 60, value % 60)
    raise ValueError(f"{value} is not a time of day; write it quoted, e.g. \"20:00\"")


ClockTime = Annotated[time, BeforeValidator(_clock_time)]


class NodeHealthRule(_Section):
    max_temp_c: float = Field(90.0, gt=0, le=150)  # above 150 C no GPU runs: the check would never fire
    # Application faults, not hardware: XIDs NVIDIA's device plugin leaves a GPU healthy after (13 graphics engine
    # exception, 31 memory page fault, 43 GPU stopped processing, 68 video processor exception; k8s-device-plugin
    # internal/rm/health.go). Not 45 (preemptive cleanup), though the plugin skips it too: it follows a killed process,
    # but also comes seconds after a 48, 94 or 95, and the exporter keeps only a GPU's last XID, so ignoring 45 would
    # hide the hardware fault before it.
    ignore_xids: list[int] = [13, 31, 43, 68]


class PoolRule(_Section):
    empty_window: PositiveDuration = 3600.0
    # When empty nodes may be released (docs/forecast.md): `forecast` only inside a low-load window predicted from
    # the pool's own load history (none without one); `fixed` between scale_down_start and scale_down_end; `auto`
    # the forecast for a pool whose history is long enough to check it, the fixed window for the others.
    scale_down: Literal["auto", "forecast", "fixed"] = "auto"
    scale_down_start: ClockTime | None = None  # e.g. "20:00" (UTC); None = any hour
    scale_down_end: ClockTime | None = None
    # A forecast scale-down plans the scale-up back this long before its window ends (one forecast hour).
    scale_up_lead: PositiveDuration = 3600.0
    # The scale-up back to the size a forecast scale-down left (docs/forecast.md): level 4, through approval like
    # the scale-down it undoes; 3 lets it run without a human where levels.max_auto reaches 3.
    scale_up_level: Literal[3, 4] = 4
    # Kubernetes PriorityClass or Slurm QOS names of queued work that may fill a predicted quiet window (level 1
    # advice naming the jobs). [] = none: which work is expendable is the operators' call, never guessed.
    fill_classes: list[str] = []

    @model_validator(mode="after")
    def _both(self) -> PoolRule:
        if (self.scale_down_start is None) != (self.scale_down_end is None):
            raise ValueError("scale_down_start and scale_down_end go together")
        return self


class DoomedRule(_Section):
    """Doomed jobs (docs/doomed-jobs.md): a job whose identical recent runs all failed fast, the same way. The streak
    rule itself (3 runs, each within 10 minutes, the latest in 24 h, one reason) is the one measured on the held-out
    trace (agent/history/doomed.py DEFAULT_RULE); these keys say how the sweep uses it."""

    enabled: bool = True
    history: PositiveDuration = 7 * 86400.0  # finished jobs read back per sweep
    # A repeat offender (at least `repeat_offender_runs` identical fast failures in a row) that is running again is
    # a level-2 candidate: warned with a deadline, stopped after the notice like an idle job. Off by default: a
    # stop of a job that may have been fixed under the same image and command loses its work, and the advice
    # (level 1) already reaches the owner; an operator whose users loop on broken jobs turns it on.
    stop_repeat_offenders: bool = False
    repeat_offender_runs: int = Field(5, ge=3)


class Detectors(_Section):
    slice: PositiveDuration = 300.0
    idle: IdleRule = IdleRule()
    zombie: ZombieRule = ZombieRule()
    overprovisioned: OverprovisionedRule = OverprovisionedRule()
    longtail: LongTailRule = LongTailRule()
    activity: ActivityRule = ActivityRule()
    keepalive: KeepAliveRule = KeepAliveRule()
    node_health: NodeHealthRule = NodeHealthRule()
    pools: PoolRule = PoolRule()
    doomed: DoomedRule = DoomedRule()
    serving: ServingRule = ServingRule()

    @model_validator(mode="after")
    def _readable(self) -> Detectors:
        windows = {"idle.window": self.idle.window, "zombie.window": self.zombie.window,
                   "overprovisioned.window": self.overprovisioned.window, "pools.empty_window": self.pools.empty_window}
        for key, seconds in windows.items():
            if seconds < self.slice:
                raise ValueError(f"{key} ({format_duration(seconds)}) is shorter than slice "
                                 f"({format_duration(self.slice)}): a window is a whole number of slices")
        fine, coarse = slices_read(self)
        if fine > MAX_SLICES:
            raise ValueError(f"a sweep would read {fine} slices of {format_duration(self.slice)} per series "
                             f"(more than {MAX_SLICES}): make slice longer or the windows shorter")
        if coarse > MAX_SLICES:
            raise ValueError(f"longtail.lookback ({format_duration(self.longtail.lookback)}) would be read in "
                             f"{coarse} coarse slices (more than {MAX_SLICES}): make longtail.history_slice "
                             f"longer or the lookback shorter")
        return self


def slices_read(d: Detectors, stretch_s: float = 0.0) -> tuple[int, int]:
    """Fine and coarse slices one sweep reads per series: agent.graph.deps.sweep_grid's arithmetic, in slice counts.
    `stretch_s`: how far back a quiet stretch must stay visible (stretch_span), when longer than the lookback."""
    longest = max(d.idle.window, d.zombie.window, d.overprovisioned.window, d.pools.empty_window)
    window = max(1, math.ceil(longest / d.slice - 1e-9))
    ratio = max(1, min(round(d.longtail.history_slice / d.slice), window))  # fine slices per coarse one
    coarse = ratio * d.slice
    fine = math.ceil(longest / coarse - 1e-9) * ratio
    history = math.ceil(max(d.longtail.lookback, stretch_s) / coarse - 1e-9)
    if history * ratio <= fine:
        return fine, 0
    return min(fine + ratio, history * ratio), history


def stretch_span(policy: Policy) -> float:
    """How far back a sweep must see a quiet stretch: as long as a warning or an approval request about it can still
    count (the planner warns again after warning.repeat_every; a request waits up to approvals.expire_after), plus
    the notice. A stretch longer than what a sweep reads seems to begin at the read's edge, which moves with every
    sweep: a warning older than the edge would no longer count, the owner would be warned again and again, and the
    stop would never land. With the defaults this is 5 h, inside the 24 h long-tail lookback."""
    w = policy.warning
    return max(w.repeat_every, policy.approvals.expire_after) + w.min_notice


# Built-in protections: a policy's own lists add to these, and only remove_builtin takes one away.
PROTECTED_NAMESPACES = ["kube-system"]
PROTECTED_LABELS = {"steward.io/protected": "true"}
PROTECTED_ANNOTATIONS = {
    "steward.io/protected": "true",
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}
_BUILTIN: dict[str, list[str] | dict[str, str]] = {
    "namespaces": PROTECTED_NAMESPACES, "labels": PROTECTED_LABELS, "annotations": PROTECTED_ANNOTATIONS,
}


class BuiltinRemoval(_Section):
    """Built-in protections a policy gives up, each by name (label and annotation keys)."""

    namespaces: list[str] = []
    labels: list[str] = []
    annotations: list[str] = []

    @field_validator("namespaces", "labels", "annotations")
    @classmethod
    def _builtin(cls, value: list[str], info: ValidationInfo) -> list[str]:
        builtin = _BUILTIN[str(info.field_name)]
        unknown = [name for name in value if name not in builtin]
        if unknown:
            raise ValueError(f"{', '.join(map(repr, unknown))} is not a built-in protection "
                             f"(built-in: {', '.join(builtin)})")
        return list(dict.fromkeys(value))


def _same(a: str, b: str) -> bool:
    return a.strip().lower() == b.strip().lower()  # as agent/guardrail/protection.py compares label values


def _builtin_pair(builtin: dict[str, str], key: str, value: str) -> bool:
    return key in builtin and _same(builtin[key], value)


class Protection(_Section):
    """What the steward never touches. Validated, each list holds the built-ins plus the file's own entries."""

    remove_builtin: BuiltinRemoval = BuiltinRemoval()  # first: the lists below are checked against it
    namespaces: list[str] = []
    users: list[str] = []
    projects: list[str] = []
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    partitions: list[str] = []  # Slurm
    accounts: list[str] = []  # Slurm
    qos: list[str] = []  # Slurm
    priorities: list[Literal["low", "normal", "high"]] = []
    jobs: list[str] = []  # exact job ids

    @field_validator("namespaces", "labels", "annotations")
    @classmethod
    def _not_both(cls, value: Any, info: ValidationInfo) -> Any:
        """A built-in is kept, or removed by name; listing it while removing it, or changing its value, is an error."""
        removal = info.data.get("remove_builtin")
        if removal is None:
            return value  # remove_builtin itself is wrong; that error is reported
        key = str(info.field_name)
        removed = getattr(removal, key)
        builtin = _BUILTIN[key]
        for name in value:
            if isinstance(value, dict) and isinstance(builtin, dict) and name in builtin:
                same = _same(value[name], builtin[name])
                if same and name in removed:
                    raise ValueError(f"{name}={value[name]} is also in protection.remove_builtin.{key}")
                if not same and name not in removed:
                    raise ValueError(f"{name} is built in as {name}={builtin[name]}; to change its value, also "
                                     f"name it in protection.remove_builtin.{key}")
            elif name in removed:
                raise ValueError(f"{name!r} is also in protection.remove_builtin.{key}")
        return value

    @model_validator(mode="after")
    def _with_builtins(self) -> Protection:
        drop = self.remove_builtin
        kept = [n for n in PROTECTED_NAMESPACES if n not in drop.namespaces]
        self.namespaces = kept + [n for n in dict.fromkeys(self.namespaces) if n not in kept]
        self.labels = {k: v for k, v in PROTECTED_LABELS.items() if k not in drop.labels} | self.labels
        self.annotations = {k: v for k, v in PROTECTED_ANNOTATIONS.items() if k not in drop.annotations} | self.annotations
        return self

    def removed(self) -> list[str]:
        """The built-in protections this policy gives up, as `kind name` (what `policy check` warns about)."""
        return ([f"namespace {n}" for n in self.remove_builtin.namespaces]
                + [f"label {k}={PROTECTED_LABELS[k]}" for k in self.remove_builtin.labels]
                + [f"annotation {k}={PROTECTED_ANNOTATIONS[k]}" for k in self.remove_builtin.annotations])

    def added(self) -> list[str]:
        """The protections this policy adds to the built-ins, as `kind name`."""
        out = [f"namespace {n}" for n in self.namespaces if n not in PROTECTED_NAMESPACES]
        out += [f"label {k}={v}" for k, v in self.labels.items() if not _builtin_pair(PROTECTED_LABELS, k, v)]
        out += [f"annotation {k}={v}" for k, v in self.annotations.items()
                if not _builtin_pair(PROTECTED_ANNOTATIONS, k, v)]
        for kind, names in (("user", self.users), ("project", self.projects), ("partition", self.partitions),
                            ("account", self.accounts), ("qos", self.qos), ("priority", self.priorities),
                            ("job", self.jobs)):
            out += [f"{kind} {n}" for n in names]
        return out


class LevelOverride(_Section):
    namespace: str | None = None
    project: str | None = None
    max_auto: int | None = Field(None, ge=0, le=4)
    max: int | None = Field(None, ge=0, le=4)

    @model_validator(mode="after")
    def _scope(self) -> LevelOverride:
        if (self.namespace is None) == (self.project is None):
            raise ValueError("an override names exactly one of namespace or project")
        return self


class Levels(_Section):
    max_auto: int = Field(2, ge=0, le=4)  # highest level done without a human
    max: int = Field(4, ge=0, le=4)  # hard ceiling: above it, always denied
    require_approval: list[int] = [3, 4]
    overrides: list[LevelOverride] = []

    @field_validator("require_approval")
    @classmethod
    def _levels(cls, value: list[int]) -> list[int]:
        bad = [v for v in value if v not in (1, 2, 3, 4)]
        if bad:
            raise ValueError(f"levels are 1..4, got {bad}")
        return value


class Warning(_Section):
    # Between the warning and the earliest stop: an hour, time for an owner to come back from lunch or a meeting.
    min_notice: Duration = 3600.0
    repeat_every: PositiveDuration = 4 * 3600.0  # at most one message per job and violation per period
    # A job idle for the idle window is warned even while its own long-tail grace (a pause not yet long for it)
    # runs; the stop waits for both the notice and the grace, so the owner's notice overlaps the grace instead of
    # following it. False: no warning until the grace has run out.
    during_grace: bool = True


class Stop(_Section):
    grace_period: Duration = 300.0  # SIGTERM to force


class CircuitBreaker(_Section):
    max_failures_per_hour: int = Field(3, ge=1)
    max_reclaimed_gpus_per_hour: int = Field(64, ge=1)


class RateLimits(_Section):
    stops_per_hour: int = Field(20, ge=0)
    circuit_breaker: CircuitBreaker = CircuitBreaker()


class Reserve(_Section):
    fraction: float = Field(0.10, ge=0, le=1)  # pool GPUs kept free, never released automatically


class Credit(_Section):
    """A resource credit for owners whose jobs the steward stopped (docs/cost-report.md); recorded and reported,
    granted by the operators' scheduler setup (a PriorityClass, a QOS, a quota), not by the steward."""

    kind: Literal["none", "priority", "quota_grace"] = "none"
    priority_bump: int = Field(1, ge=1, le=1000)  # kind priority: how much higher the owner's next jobs rank
    valid_for: PositiveDuration = 24 * 3600.0  # how long the grant lasts after the stop


class Approvals(_Section):
    expire_after: PositiveDuration = 4 * 3600.0
    # Silence is never a yes, nor a final no: a request that expired unanswered is asked again this long
    # after it expired if the action is still proposed (null: never), each time to the next group below
    # (the last group keeps being asked). A denied request is not re-asked. [] = the configured approvers.
    reask_after: PositiveDuration | None = 2 * 3600.0
    # A human's no is an answer, not a delay: the same action on the same job (its uid) or pool is neither asked
    # again nor done for this long after a deny, whatever size or reason the next proposal carries. 0: not held.
    denial_holds_for: Duration = 24 * 3600.0
    escalation: list[list[str]] = []

    def denials_lookback(self) -> timedelta:
        """How far back the guardrail's history reads human denials: as long as one holds."""
        return timedelta(seconds=self.denial_holds_for)

    @field_validator("escalation")
    @classmethod
    def _groups(cls, value: list[list[str]]) -> list[list[str]]:
        if any(not group or not all(name.strip() for name in group) for group in value):
            raise ValueError("each escalation group is a non-empty list of approver names")
        return value


class Notifications(_Section):
    """When owners may be messaged, on every channel; approval cards to approvers are not held back.

    A warning goes out when the waste is found, at any hour (`outside_hours: send`): the notice is the owner's
    chance to keep the job, and a job left holding GPUs for the night or the weekend is the waste this tool
    exists for. `defer` holds owner warnings, and so every stop they announce, until working hours.
    """

    working_hours: str = "09:00-19:00"
    timezone: str = "Asia/Shanghai"
    weekdays_only: bool = True
    outside_hours: Literal["defer", "send"] = "send"

    @field_validator("working_hours")
    @classmethod
    def _hours(cls, value: str) -> str:
        try:
            start, end = (time.fromisoformat(part.strip()) for part in value.split("-"))
        except ValueError:
            raise ValueError(f"working_hours is 'HH:MM-HH:MM', got {value!r}") from None
        if start == end:
            raise ValueError("working_hours start and end are the same")
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown timezone {value!r}") from None
        return value

    def holds(self, moment: datetime) -> bool:
        """Whether an owner's message at `moment` waits: `defer` outside working hours in the team's zone."""
        if self.outside_hours != "defer":
            return False
        from zoneinfo import ZoneInfo

        local = moment.astimezone(ZoneInfo(self.timezone))
        if self.weekdays_only and local.weekday() >= 5:
            return True
        start, end = (time.fromisoformat(part.strip()) for part in self.working_hours.split("-"))
        now = local.time().replace(tzinfo=None)
        inside = start <= now < end if start < end else (now >= start or now < end)  # "22:00-06:00" spans midnight
        return not inside


class RedactionPattern(_Section):
    name: str
    regex: str


class Redaction(_Section):
    """Secrets scrubbed from log text before it reaches the model, the UI or a notification (core/redact.py).

    The built-in patterns always apply unless named in `disable`, so a policy that forgets them stays safe.
    """

    extra: list[RedactionPattern] = []
    disable: list[str] = []

    @model_validator(mode="after")
    def _compiles(self) -> Redaction:
        self.redactor()  # a bad regex or an unknown name to disable is a policy error, not a sweep crash
        return self

    def redactor(self) -> Redactor:
        return Redactor([p.model_dump() for p in self.extra], self.disable)


class Policy(_Section):
    version: Literal[1] = 1
    mode: Literal["enforce", "dry_run", "observe"] = "enforce"
    detectors: Detectors = Detectors()
    protection: Protection = Protection()
    levels: Levels = Levels()
    warning: Warning = Warning()
    stop: Stop = Stop()
    rate_limits: RateLimits = RateLimits()
    reserve: Reserve = Reserve()
    approvals: Approvals = Approvals()
    notifications: Notifications = Notifications()
    redaction: Redaction = Redaction()
    credit: Credit = Credit()

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.levels.max_auto > self.levels.max:
            raise ValueError("levels.max_auto is above levels.max")
        if self.warning.min_notice > self.warning.repeat_every:
            raise ValueError(f"warning.min_notice ({format_duration(self.warning.min_notice)}) is longer than "
                             f"warning.repeat_every ({format_duration(self.warning.repeat_every)}): the owner would be "
                             f"warned again before the notice ran out, and no stop could ever land")
        _, coarse = slices_read(self.detectors, stretch_span(self))
        if coarse > MAX_SLICES:
            raise ValueError(f"a quiet stretch must stay visible for {format_duration(stretch_span(self))} "
                             f"(warning.repeat_every or approvals.expire_after, plus warning.min_notice): "
                             f"{coarse} coarse slices (more than {MAX_SLICES}); make longtail.history_slice longer")
        return self

    def levels_for(self, namespace: str | None, project: str | None) -> tuple[int, int]:
        """(max_auto, max) for a job's scope; the strictest matching override wins."""
        max_auto, hard_max = self.levels.max_auto, self.levels.max
        for o in self.levels.overrides:
            if (o.namespace is not None and o.namespace == namespace) or (
                o.project is not None and o.project == project
            ):
                if o.max_auto is not None:
                    max_auto = min(max_auto, o.max_auto)
                if o.max is not None:
                    hard_max = min(hard_max, o.max)
        return min(max_auto, hard_max), hard_max


def parse_policy(data: Any, source: str = "<policy>") -> Policy:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise PolicyError(f"{source}: a policy is a mapping at the top level")
    try:
        return Policy.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(format_validation_errors(source, exc, Policy)) from None


def load_policy(path: str | Path | None) -> Policy:
    """The policy at `path`, or the defaults when no path is given."""
    if path is None:
        return Policy()
    return parse_policy(read_yaml(path, PolicyError), str(path))
