"""Replay a recorded trace: the agent's own sweep (detect, plan, guardrail, execute) and two baselines.

The agent runs through the real graph (SweepService) on a simulated clock, exactly as a live
sweep would, with the trace behind every protocol. The baselines are the rules people run
today, evaluated at the same sweep times on the same samples.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from agent.config.policy import Policy
from agent.graph.deps import StewardDeps
from agent.graph.service import SweepService
from agent.planning.policy_model import Planner, PolicyModel
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog
from evals.trace import ContainerTrace, Trace
from evals.trace_cluster import NAMESPACE, TraceCluster
from tools.notify import RecordingNotifier

NAIVE_WINDOW_S = 1800.0
NAIVE_AVG_PCT = 5.0
JDS_WARN_S = 3600.0
JDS_CANCEL_S = 7200.0
JDS_MIN_COVERAGE = 0.9


@dataclass
class PolicyRun:
    """What one policy did over the trace: warnings and stops, in seconds from the trace start."""

    name: str
    warnings: list[tuple[str, float]] = field(default_factory=list)
    stops: list[tuple[str, float]] = field(default_factory=list)
    sweeps: int = 0
    wall_s: float = 0.0
    backend_calls: int = 0
    blocked: int = 0  # guardrail refusals (agent only)


def sweep_times(trace: Trace, every: float) -> np.ndarray:
    return np.arange(every, trace.duration_s + 1e-9, every)


def trace_deps(trace: Trace, policy: Policy, planner: Planner | None = None) -> tuple[StewardDeps, TraceCluster]:
    cluster = TraceCluster(trace)
    audit = AuditLog(":memory:")
    deps = StewardDeps(metrics=cluster, scheduler=cluster, logs=cluster, pools=cluster,
                       notifier=RecordingNotifier(cluster), clock=cluster, policy=policy, audit=audit,
                       approvals=ApprovalStore(":memory:", audit), planner=planner or PolicyModel())
    return deps, cluster


def run_agent(trace: Trace, policy: Policy, *, every: float = 300.0, planner: Planner | None = None,
              name: str = "agent (default policy)") -> PolicyRun:
    """The agent's graph, swept every `every` seconds over the whole trace."""
    started = time.perf_counter()
    deps, cluster = trace_deps(trace, policy, planner)
    service = SweepService(deps, run_prefix="replay")
    run = PolicyRun(name=name)
    for t in sweep_times(trace, every):
        cluster.advance_to(float(t))
        result = service.sweep(trigger="replay")
        run.blocked += sum(1 for d in result.state.get("decisions", []) if d["decision"]["verdict"] == "deny")
        run.sweeps += 1
    notifier = deps.notifier
    assert isinstance(notifier, RecordingNotifier)
    prefix = f"{NAMESPACE}/"
    run.warnings = [((m.job_id or "").removeprefix(prefix), cluster.offset_of(m.at)) for m in notifier.sent]
    run.stops = [(s.container, s.at) for s in cluster.stops]  # the first stop of each container only
    run.backend_calls = cluster.backend_calls
    run.wall_s = time.perf_counter() - started
    return run


def _window_counts(c: ContainerTrace, times: np.ndarray, window: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per sweep time T: valid samples, their util sum and non-zero samples in (T - window, T]."""
    valid = ~np.isnan(c.util)
    t, u = c.t[valid], c.util[valid]
    csum = np.concatenate([[0.0], np.cumsum(u)])
    cnz = np.concatenate([[0], np.cumsum(u > 0)])
    hi = np.searchsorted(t, times, side="right")
    lo = np.searchsorted(t, times - window, side="right")
    return hi - lo, csum[hi] - csum[lo], cnz[hi] - cnz[lo]


def _alive(trace: Trace, c: ContainerTrace, times: np.ndarray, age: float) -> np.ndarray:
    return (times >= c.first + age) & (times <= trace.life_end(c))


def run_naive(trace: Trace, *, every: float = 300.0) -> PolicyRun:
    """Stop when the average utilisation over the last 30 minutes is under 5%; no warning."""
    started = time.perf_counter()
    run = PolicyRun(name=f"naive: avg < {NAIVE_AVG_PCT:g}% over {NAIVE_WINDOW_S / 60:.0f} min -> stop")
    times = sweep_times(trace, every)
    run.sweeps = len(times)
    for c in trace.containers.values():
        n, total, _ = _window_counts(c, times, NAIVE_WINDOW_S)
        hit = _alive(trace, c, times, NAIVE_WINDOW_S) & (n > 0) & (total < NAIVE_AVG_PCT * np.maximum(n, 1))
        if hit.any():
            run.stops.append((c.id, float(times[np.argmax(hit)])))
    run.wall_s = time.perf_counter() - started
    return run


def run_jds(trace: Trace, *, every: float = 300.0) -> PolicyRun:
    """Job-Defense-Shield style: every sample 0% for 60 min -> warning; still 0% at 120 min -> cancel.

    The notice period is the hour between the two; any non-zero sample starts the count again.
    Coverage must be at least 90% of the expected samples, so a gap never counts as zero.
    """
    started = time.perf_counter()
    run = PolicyRun(name=f"JDS-style: all 0% {JDS_WARN_S / 60:.0f} min -> warn, {JDS_CANCEL_S / 60:.0f} min -> cancel")
    times = sweep_times(trace, every)
    run.sweeps = len(times)
    for c in trace.containers.values():
        flags = {}
        for label, window in (("warn", JDS_WARN_S), ("cancel", JDS_CANCEL_S)):
            n, _, nonzero = _window_counts(c, times, window)
            full = n >= JDS_MIN_COVERAGE * window / trace.interval_s
            flags[label] = _alive(trace, c, times, window) & full & (nonzero == 0)
        warned_at: float | None = None
        for k, t in enumerate(times):
            if warned_at is not None and not flags["warn"][k]:
                warned_at = None  # activity came back: the warning lapses
            if flags["cancel"][k] and warned_at is not None and t - warned_at >= JDS_CANCEL_S - JDS_WARN_S - 1e-6:
                run.stops.append((c.id, float(t)))
                break
            if flags["warn"][k] and warned_at is None:
                warned_at = float(t)
                run.warnings.append((c.id, warned_at))
    run.wall_s = time.perf_counter() - started
    return run
