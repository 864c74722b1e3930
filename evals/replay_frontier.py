"""`steward replay --frontier`: each baseline family across its knob and the agent across its main knobs.

Every point is scored the operator's way (evals/replay_score.py): reclaimed GPU-hours against material false
kills. A family's Pareto frontier is its points that no other point of the family beats (as many or more
GPU-hours with as few or fewer material false kills). The verdict: the agent's default point has 0 material
false kills and at least as many GPU-hours as every baseline point with no more material false kills than it.
"""

from __future__ import annotations

import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from agent.config.policy import Policy, parse_policy
from evals.replay import PolicyRun, run_agent, run_jds, run_naive, run_zero
from evals.replay_score import Oracle, PolicyScore, oracle, score
from evals.trace import Trace

HOUR = 3600.0
# Baseline knobs: thresholds x windows for the naive average rule; the zero window from 1 h to 12 h; the JDS
# warning window with a fixed one-hour notice before the cancel (its default is 1 h -> 2 h).
NAIVE_GRID: tuple[tuple[float, float], ...] = tuple(
    (pct, hours * HOUR) for pct in (1.0, 5.0, 10.0) for hours in (0.5, 1, 2, 4, 8, 12))
ZERO_GRID: tuple[float, ...] = tuple(h * HOUR for h in (1, 2, 3, 4, 5, 6, 8, 10, 12))
JDS_NOTICE_S = HOUR
JDS_GRID: tuple[tuple[float, float], ...] = tuple((h * HOUR, h * HOUR + JDS_NOTICE_S) for h in (1, 2, 3, 4, 6, 8, 11))
# The agent's main knobs, one at a time around the policy given (dotted policy keys; values as in a policy file).
AGENT_KNOBS: tuple[dict[str, Any], ...] = (
    {},
    {"detectors.idle.window": "30m"},
    {"detectors.idle.window": "2h"},
    {"detectors.idle.window": "4h"},
    {"detectors.longtail.quiet_share": 0.33},  # the grace term before issue 12 (a third of the span it worked)
    {"detectors.longtail.pause": "bursts"},  # a past pause from burst to burst, blips inside (before the silence rule)
    {"detectors.idle.blip_gpu_seconds": 60},  # blips under a GPU-minute do not end a quiet stretch
    {"detectors.longtail.lookback": "6h"},
    {"warning.min_notice": "30m"},
    {"warning.during_grace": False},  # the warning waits for the long-tail grace (before issue 12's fourth round)
)

FAMILIES = ("agent", "naive", "zero", "jds")


@dataclass
class FrontierPoint:
    family: str  # agent, naive, zero or jds
    knobs: str  # what this point sets, e.g. "avg < 5%, 30 min" or "detectors.idle.window=2h"
    run: PolicyRun
    score: PolicyScore
    default: bool = False  # the agent with the policy as given
    on_frontier: bool = False  # on its family's Pareto frontier


@dataclass
class Verdict:
    default: FrontierPoint
    best_baseline: FrontierPoint | None  # most GPU-hours among baseline points with <= the default's material kills

    @property
    def zero_material_false_kills(self) -> bool:
        return self.default.score.material_false_kills == 0

    @property
    def on_or_above(self) -> bool:
        best = self.best_baseline
        return best is None or self.default.score.reclaimed_gpu_hours >= best.score.reclaimed_gpu_hours

    @property
    def passed(self) -> bool:
        return self.zero_material_false_kills and self.on_or_above


@dataclass
class Frontier:
    material: Oracle
    strict: Oracle
    points: list[FrontierPoint] = field(default_factory=list)
    agent_wall_s: float = 0.0  # wall time of all agent points together
    wall_s: float = 0.0

    def family(self, name: str) -> list[FrontierPoint]:
        return [p for p in self.points if p.family == name]

    def verdict(self) -> Verdict:
        default = next(p for p in self.points if p.default)
        rivals = [p for p in self.points if p.family != "agent"
                  and p.score.material_false_kills <= default.score.material_false_kills]
        best = max(rivals, key=lambda p: (p.score.reclaimed_gpu_hours, -p.score.material_false_kills), default=None)
        return Verdict(default=default, best_baseline=best)


def mark_frontier(points: list[FrontierPoint]) -> None:
    """Flag the points of one family that no other point of it beats."""
    best = float("-inf")
    for p in sorted(points, key=lambda p: (p.score.material_false_kills, -p.score.reclaimed_gpu_hours)):
        p.on_frontier = p.score.reclaimed_gpu_hours > best
        best = max(best, p.score.reclaimed_gpu_hours)


def with_knobs(base: Policy, knobs: dict[str, Any]) -> Policy:
    """The base policy with dotted keys set, validated like a policy file (errors name the key)."""
    data = base.model_dump()
    for dotted, value in knobs.items():
        node = data
        *path, leaf = dotted.split(".")
        for key in path:
            if not isinstance(node.get(key), dict):
                raise ValueError(f"agent knob {dotted!r}: no policy section {key!r}")
            node = node[key]
        if leaf not in node:
            raise ValueError(f"agent knob {dotted!r}: no policy key {leaf!r}")
        node[leaf] = value
    return parse_policy(data, "agent knob " + ", ".join(f"{k}={v}" for k, v in knobs.items()))


def _knob_label(knobs: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items()) or "default"


def run_frontier(trace: Trace, policy: Policy, *, every: float = 300.0, jobs: int = 1,
                 agent_knobs: tuple[dict[str, Any], ...] = AGENT_KNOBS,
                 naive: tuple[tuple[float, float], ...] = NAIVE_GRID, zero: tuple[float, ...] = ZERO_GRID,
                 jds: tuple[tuple[float, float], ...] = JDS_GRID) -> Frontier:
    """The agent's points (the first knob set must be {}: the default) run in `jobs` processes; baselines are numpy."""
    if not agent_knobs or agent_knobs[0]:
        raise ValueError("the first agent knob set must be {} (the policy as given: the default point)")
    started = time.perf_counter()
    best = oracle(trace, "material")
    frontier = Frontier(material=best, strict=oracle(trace, "strict"))
    policies = [with_knobs(policy, knobs) for knobs in agent_knobs]  # bad knobs fail before any replay
    names = [f"agent ({_knob_label(knobs)})" for knobs in agent_knobs]
    agent_started = time.perf_counter()
    if jobs > 1 and len(policies) > 1:
        # The platform's default start method (fork on Linux: the workers inherit the imports; nothing has run the
        # graph or opened a database in this process yet).
        with ProcessPoolExecutor(max_workers=min(jobs, len(policies))) as pool:
            futures = [pool.submit(run_agent, trace, p, every=every, name=n) for p, n in zip(policies, names, strict=True)]
            agent_runs = [f.result() for f in futures]
    else:
        agent_runs = [run_agent(trace, p, every=every, name=n) for p, n in zip(policies, names, strict=True)]
    frontier.agent_wall_s = time.perf_counter() - agent_started
    for k, (knobs, run) in enumerate(zip(agent_knobs, agent_runs, strict=True)):
        frontier.points.append(FrontierPoint("agent", _knob_label(knobs), run, score(trace, run, best), default=k == 0))
    baselines: list[tuple[str, str, PolicyRun]] = []
    for pct, window in naive:
        baselines.append(("naive", f"avg < {pct:g}%, {window / HOUR:g} h", run_naive(trace, every=every, avg_pct=pct,
                                                                                    window_s=window)))
    for window in zero:
        baselines.append(("zero", f"{window / HOUR:g} h", run_zero(trace, every=every, window_s=window)))
    for warn, cancel in jds:
        baselines.append(("jds", f"warn {warn / HOUR:g} h, cancel {cancel / HOUR:g} h",
                          run_jds(trace, every=every, warn_s=warn, cancel_s=cancel)))
    for family, knobs_text, run in baselines:
        frontier.points.append(FrontierPoint(family, knobs_text, run, score(trace, run, best)))
    for family in FAMILIES:
        mark_frontier(frontier.family(family))
    frontier.wall_s = time.perf_counter() - started
    return frontier
