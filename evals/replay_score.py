"""Score a replayed policy against what the trace did next (its future), not against a rule.

- reclaimed GPU-hours: from each stop to the end of the container's life in the trace (its last
  sample when it really ended inside the trace, else the trace end); false kills reclaim nothing.
- false kill: a stop after which the container shows any GPU activity (util > 0 in a later sample).
- oracle: the final idle tails (from the last sample with util > 0 to the end of life), the most a
  policy could reclaim without a false kill; tails cut off by the trace end are kept apart from
  tails of containers that really ended inside it.
"""

from __future__ import annotations

import statistics

import numpy as np
from pydantic import BaseModel

from evals.replay import PolicyRun
from evals.trace import ContainerTrace, Trace

ACTIVE_PCT = 0.0  # a later sample above this counts as activity: any non-zero duty cycle


class Oracle(BaseModel):
    cut_off_gpu_hours: float  # final idle tails still running at the trace end
    ended_gpu_hours: float  # final idle tails of containers that ended inside the trace
    cut_off_tails: int
    ended_tails: int

    @property
    def total(self) -> float:
        return self.cut_off_gpu_hours + self.ended_gpu_hours


class PolicyScore(BaseModel):
    name: str
    reclaimed_gpu_hours: float
    reclaimed_cut_off: float
    reclaimed_ended: float
    share_of_oracle: float
    stops: int
    false_kills: int
    false_kill_containers: list[str]
    notifications: int
    median_to_warning_s: float | None
    median_to_stop_s: float | None
    blocked: int = 0
    wall_s: float = 0.0
    curve: list[tuple[float, float]] = []  # (seconds from start, cumulative reclaimed GPU-hours)


def tail_start(c: ContainerTrace, before: float | None = None) -> float:
    """Start of the idle stretch that reaches `before` (default: the end): the last busy sample, else the start."""
    mask = c.util > ACTIVE_PCT
    if before is not None:
        mask &= c.t <= before
    busy = np.flatnonzero(mask)
    return float(c.t[busy[-1]]) if len(busy) else c.first


def oracle(trace: Trace) -> Oracle:
    cut = ended = 0.0
    n_cut = n_ended = 0
    for c in trace.containers.values():
        hours = max(0.0, trace.life_end(c) - tail_start(c)) / 3600.0
        if trace.ended_inside(c):
            ended += hours
            n_ended += hours > 0
        else:
            cut += hours
            n_cut += hours > 0
    return Oracle(cut_off_gpu_hours=round(cut, 2), ended_gpu_hours=round(ended, 2), cut_off_tails=n_cut,
                  ended_tails=n_ended)


def is_false_kill(c: ContainerTrace, stop_at: float) -> bool:
    later = c.util[c.t > stop_at]
    return bool(np.any(later > ACTIVE_PCT))


def score(trace: Trace, run: PolicyRun, best: Oracle, *, curve_points: int = 200) -> PolicyScore:
    reclaimed = {"cut": 0.0, "ended": 0.0}
    false_kills: list[str] = []
    good: list[tuple[float, float]] = []  # (stop time, life end)
    to_warning: list[float] = []
    to_stop: list[float] = []
    warnings: dict[str, list[float]] = {}
    for cid, at in run.warnings:
        warnings.setdefault(cid, []).append(at)
    for cid, at in run.stops:
        c = trace.containers[cid]
        if is_false_kill(c, at):
            false_kills.append(cid)
            continue
        end = trace.life_end(c)
        reclaimed["ended" if trace.ended_inside(c) else "cut"] += max(0.0, end - at) / 3600.0
        good.append((at, end))
        began = tail_start(c, at)
        to_stop.append(at - began)
        first = [w for w in warnings.get(cid, []) if began <= w <= at]
        if first:
            to_warning.append(min(first) - began)
    total = reclaimed["cut"] + reclaimed["ended"]
    grid = np.linspace(0.0, trace.duration_s, curve_points)
    curve = np.zeros_like(grid)
    for at, end in good:
        curve += np.clip(np.minimum(grid, end) - at, 0.0, None) / 3600.0
    return PolicyScore(
        name=run.name, reclaimed_gpu_hours=round(total, 2), reclaimed_cut_off=round(reclaimed["cut"], 2),
        reclaimed_ended=round(reclaimed["ended"], 2), share_of_oracle=total / best.total if best.total else 0.0,
        stops=len(run.stops), false_kills=len(false_kills), false_kill_containers=sorted(false_kills),
        notifications=len(run.warnings),
        median_to_warning_s=statistics.median(to_warning) if to_warning else None,
        median_to_stop_s=statistics.median(to_stop) if to_stop else None,
        blocked=run.blocked, wall_s=round(run.wall_s, 2),
        curve=[(round(float(g), 1), round(float(v), 3)) for g, v in zip(grid, curve, strict=True)],
    )
