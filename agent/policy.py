"""The operator's policy file: detector thresholds, protection, levels, limits. Validated."""

from __future__ import annotations

from datetime import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sim.durations import Duration
from sim.files import format_validation_errors, read_yaml


class PolicyError(ValueError):
    """A policy file that cannot be used; the message names the file and key."""


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IdleRule(_Section):
    window: Duration = 3600.0
    util_threshold_pct: float = Field(2.0, ge=0, le=100)
    min_coverage: float = Field(0.9, gt=0, le=1)  # share of expected samples that must be present


class ZombieRule(_Section):
    window: Duration = 1800.0
    busy_threshold_pct: float = Field(90.0, ge=0, le=100)  # "pinned" GPU
    cpu_threshold_pct: float = Field(5.0, ge=0)
    log_cadence_factor: float = Field(3.0, ge=1)  # no progress for this many usual log gaps


class OverprovisionedRule(_Section):
    window: Duration = 3600.0
    working_util_pct: float = Field(10.0, ge=0, le=100)
    ratio: float = Field(2.0, ge=1)
    min_gpus: int = Field(2, ge=2)


class LongTailRule(_Section):
    lookback: Duration = 24 * 3600.0  # a whole day, so a service's quiet hours are part of its history
    # Beyond the detectors' windows the day is read in coarse slices (max and sample count only): a fraction
    # of the fine slices' cost. Rounded to a whole number of fine slices.
    history_slice: Duration = 900.0
    quiet_factor: float = Field(1.5, ge=1)  # quiet stretch must exceed this many past gaps
    quiet_share: float = Field(1 / 3, ge=0, le=1)  # ... and this share of the span it worked in the lookback
    io_threshold_mbps: float = Field(1.0, ge=0)
    cpu_active_pct: float = Field(50.0, ge=0)


class NodeHealthRule(_Section):
    max_temp_c: float = 90.0
    ignore_xids: list[int] = [13, 31, 43]  # application faults, not hardware


class PoolRule(_Section):
    empty_window: Duration = 3600.0
    scale_down_start: time | None = None  # e.g. "20:00" (UTC); None = any hour
    scale_down_end: time | None = None

    @model_validator(mode="after")
    def _both(self) -> PoolRule:
        if (self.scale_down_start is None) != (self.scale_down_end is None):
            raise ValueError("scale_down_start and scale_down_end go together")
        return self


class Detectors(_Section):
    slice: Duration = 300.0
    idle: IdleRule = IdleRule()
    zombie: ZombieRule = ZombieRule()
    overprovisioned: OverprovisionedRule = OverprovisionedRule()
    longtail: LongTailRule = LongTailRule()
    node_health: NodeHealthRule = NodeHealthRule()
    pools: PoolRule = PoolRule()


PROTECTED_ANNOTATIONS = {
    "steward.io/protected": "true",
    "karpenter.sh/do-not-disrupt": "true",
    "cluster-autoscaler.kubernetes.io/safe-to-evict": "false",
}


class Protection(_Section):
    namespaces: list[str] = ["kube-system"]
    users: list[str] = []
    projects: list[str] = []
    labels: dict[str, str] = {"steward.io/protected": "true"}
    annotations: dict[str, str] = dict(PROTECTED_ANNOTATIONS)
    partitions: list[str] = []  # Slurm
    accounts: list[str] = []  # Slurm
    qos: list[str] = []  # Slurm
    priorities: list[Literal["low", "normal", "high"]] = []
    jobs: list[str] = []  # exact job ids


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
    min_notice: Duration = 1800.0  # between the warning and the earliest stop
    repeat_every: Duration = 4 * 3600.0  # at most one message per job and violation per period


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


class Approvals(_Section):
    expire_after: Duration = 4 * 3600.0


class Notifications(_Section):
    """When owners may be messaged (ChatOps); approval cards to approvers are not held back."""

    working_hours: str = "09:00-19:00"
    timezone: str = "Asia/Shanghai"
    weekdays_only: bool = True
    outside_hours: Literal["defer", "send"] = "defer"

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

    @model_validator(mode="after")
    def _consistent(self) -> Policy:
        if self.levels.max_auto > self.levels.max:
            raise ValueError("levels.max_auto is above levels.max")
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
        raise PolicyError(format_validation_errors(source, exc)) from None


def load_policy(path: str | Path | None) -> Policy:
    """The policy at `path`, or the defaults when no path is given."""
    if path is None:
        return Policy()
    return parse_policy(read_yaml(path, PolicyError), str(path))
