"""Score a replayed policy against what the trace did next (its future), not against a rule.

Work is counted in GPU-seconds: the sum of util/100 x the trace's sample interval.

- material false kill: a stop after which the container still does at least MATERIAL_WORK_GPU_S of work
  before it ends: real work was lost. strict false kill: a stop after which any later sample shows
  util > 0 (every material one is also strict). Both are reported side by side.
- reclaimed GPU-hours (operator's reading): from each stop to the end of the container's life in the trace
  (its last sample when it really ended inside the trace, else the trace end) minus the work the stop lost;
  a material false kill reclaims nothing. So a strict-only false kill (a blip of under a GPU-minute after
  hours of idling) reclaims its tail less that blip. The strict reading (any false kill reclaims nothing)
  is reported too.
- oracle, both ways: the final idle tails, the most a policy could reclaim without a false kill. Material:
  from the earliest sample after which less than MATERIAL_WORK_GPU_S of work follows (less that work);
  strict: from the last sample with util > 0. Tails cut off by the trace end are kept apart from tails
  of containers that really ended inside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel

from evals.replay import PolicyRun
from evals.trace import ContainerTrace, Trace

ACTIVE_PCT = 0.0  # strict: a later sample above this counts as activity: any non-zero duty cycle
# Material: a stop that loses at least a GPU-minute of later work killed real work; less is a blip
# (a health check, a driver poll). A named constant, deliberately not a knob: it is not tuned.
MATERIAL_WORK_GPU_S = 60.0

Rule = Literal["material", "strict"]


class Oracle(BaseModel):
    rule: Rule = "material"
    cut_off_gpu_hours: float  # final idle tails still running at the trace end
    ended_gpu_hours: float  # final idle tails of containers that ended inside the trace
    cut_off_tails: int
    ended_tails: int

    @property
    def total(self) -> float:
        return round(self.cut_off_gpu_hours + self.ended_gpu_hours, 2)


class PolicyScore(BaseModel):
    name: str
    reclaimed_gpu_hours: float  # operator's reading: material false kills reclaim nothing, blips are subtracted
    reclaimed_cut_off: float
    reclaimed_ended: float
    reclaimed_strict_gpu_hours: float  # strict reading: any false kill reclaims nothing
    share_of_oracle: float  # of the material oracle
    stops: int
    material_false_kills: int
    material_false_kill_containers: list[str]
    strict_false_kills: int  # includes the material ones
    strict_false_kill_containers: list[str]
    work_lost_gpu_s: float  # later work of all stopped containers (material or not)
    notifications: int
    median_to_warning_s: float | None
    median_to_stop_s: float | None
    blocked: int = 0
    wall_s: float = 0.0
    curve: list[tuple[float, float]] = []  # (seconds from start, cumulative reclaimed GPU-hours)


@dataclass(frozen=True)
class StopVerdict:
    """What the trace says about one stop."""

    container: str
    at: float  # seconds from the trace start
    later_work_gpu_s: float  # work the container still did after the stop
    strict: bool  # any later util > 0
    material: bool  # later work >= MATERIAL_WORK_GPU_S
    tail_gpu_hours: float  # from the stop to the end of the container's life
    reclaimed_gpu_hours: float  # operator's reading
    reclaimed_strict_gpu_hours: float


def _work(trace: Trace, c: ContainerTrace) -> np.ndarray:
    """GPU-seconds of work per sample; an invalid sample counts as none."""
    return np.nan_to_num(c.util, nan=0.0) / 100.0 * trace.interval_s


def work_after(trace: Trace, c: ContainerTrace, at: float) -> float:
    """GPU-seconds of work in the samples after `at`."""
    return float(_work(trace, c)[c.t > at].sum())


def judge_stop(trace: Trace, cid: str, at: float) -> StopVerdict:
    c = trace.containers[cid]
    later = c.util[c.t > at]
    work = work_after(trace, c, at)
    material = work >= MATERIAL_WORK_GPU_S
    strict = bool(np.any(later > ACTIVE_PCT))
    tail = max(0.0, trace.life_end(c) - at) / 3600.0
    reclaimed = 0.0 if material else max(0.0, tail - work / 3600.0)
    return StopVerdict(container=cid, at=at, later_work_gpu_s=round(work, 2), strict=strict, material=material,
                       tail_gpu_hours=tail, reclaimed_gpu_hours=reclaimed,
                       reclaimed_strict_gpu_hours=0.0 if strict else tail)


def tail_start(c: ContainerTrace, before: float | None = None) -> float:
    """Start of the idle stretch that reaches `before` (default: the end): the last busy sample, else the start."""
    mask = c.util > ACTIVE_PCT
    if before is not None:
        mask &= c.t <= before
    busy = np.flatnonzero(mask)
    return float(c.t[busy[-1]]) if len(busy) else c.first


def material_tail(trace: Trace, c: ContainerTrace) -> tuple[float, float]:
    """(start, work after it): the earliest sample after which less than MATERIAL_WORK_GPU_S of work follows."""
    w = _work(trace, c)
    after = np.concatenate([np.cumsum(w[::-1])[::-1][1:], [0.0]])  # after[k]: work in samples k+1..
    k = int(np.flatnonzero(after < MATERIAL_WORK_GPU_S)[0])  # the last sample always qualifies
    return float(c.t[k]), float(after[k])


def oracle(trace: Trace, rule: Rule = "material") -> Oracle:
    cut = ended = 0.0
    n_cut = n_ended = 0
    for c in trace.containers.values():
        if rule == "material":
            start, lost = material_tail(trace, c)
            hours = max(0.0, trace.life_end(c) - start - lost) / 3600.0
        else:
            hours = max(0.0, trace.life_end(c) - tail_start(c)) / 3600.0
        counted = hours * 3600.0 >= trace.interval_s  # a tail shorter than one sample is not one (a busy end's last minute)
        if trace.ended_inside(c):
            ended += hours
            n_ended += counted
        else:
            cut += hours
            n_cut += counted
    return Oracle(rule=rule, cut_off_gpu_hours=round(cut, 2), ended_gpu_hours=round(ended, 2), cut_off_tails=n_cut,
                  ended_tails=n_ended)


def score(trace: Trace, run: PolicyRun, best: Oracle, *, curve_points: int = 200) -> PolicyScore:
    """`best` is the material oracle (the share is of it)."""
    reclaimed = {"cut": 0.0, "ended": 0.0}
    strict_total = lost = 0.0
    material: list[str] = []
    strict: list[str] = []
    kept: list[tuple[float, float, float]] = []  # (stop time, life end, reclaimed GPU-hours)
    to_warning: list[float] = []
    to_stop: list[float] = []
    warnings: dict[str, list[float]] = {}
    for cid, at in run.warnings:
        warnings.setdefault(cid, []).append(at)
    for cid, at in run.stops:
        v = judge_stop(trace, cid, at)
        c = trace.containers[cid]
        lost += v.later_work_gpu_s
        strict_total += v.reclaimed_strict_gpu_hours
        if v.strict:
            strict.append(cid)
        if v.material:
            material.append(cid)
            continue
        end = trace.life_end(c)
        reclaimed["ended" if trace.ended_inside(c) else "cut"] += v.reclaimed_gpu_hours
        kept.append((at, end, v.reclaimed_gpu_hours))
        began = tail_start(c, at)
        to_stop.append(at - began)
        first = [w for w in warnings.get(cid, []) if began <= w <= at]
        if first:
            to_warning.append(min(first) - began)
    total = reclaimed["cut"] + reclaimed["ended"]
    grid = np.linspace(0.0, trace.duration_s, curve_points)
    curve = np.zeros_like(grid)
    for at, end, hours in kept:
        if end > at:
            curve += np.clip(np.minimum(grid, end) - at, 0.0, None) / (end - at) * hours
    return PolicyScore(
        name=run.name, reclaimed_gpu_hours=round(total, 2), reclaimed_cut_off=round(reclaimed["cut"], 2),
        reclaimed_ended=round(reclaimed["ended"], 2), reclaimed_strict_gpu_hours=round(strict_total, 2),
        share_of_oracle=total / best.total if best.total else 0.0, stops=len(run.stops),
        material_false_kills=len(material), material_false_kill_containers=sorted(material),
        strict_false_kills=len(strict), strict_false_kill_containers=sorted(strict),
        work_lost_gpu_s=round(lost, 1), notifications=len(run.warnings),
        median_to_warning_s=statistics.median(to_warning) if to_warning else None,
        median_to_stop_s=statistics.median(to_stop) if to_stop else None,
        blocked=run.blocked, wall_s=round(run.wall_s, 2),
        curve=[(round(float(g), 1), round(float(v), 3)) for g, v in zip(grid, curve, strict=True)],
    )


def actions_listing(trace: Trace, run: PolicyRun) -> dict[str, list[dict[str, object]]]:
    """Every stop and warning of a run (container, seconds from the trace start), for any other scorer."""
    stops = []
    for cid, at in run.stops:
        v = judge_stop(trace, cid, at)
        stops.append({"container": cid, "at_s": round(at, 1), "later_work_gpu_s": v.later_work_gpu_s,
                      "material_false_kill": v.material, "strict_false_kill": v.strict})
    return {"stops": stops, "warnings": [{"container": cid, "at_s": round(at, 1)} for cid, at in run.warnings]}
