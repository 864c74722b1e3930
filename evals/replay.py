"""Replay a recorded trace: the agent's own sweep (detect, plan, guardrail, execute) and the baseline rules.

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
ZERO_MIN_COVERAGE = 0.9  # all-zero rules (zero-for-N, JDS): a window needs 90% of its samples


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
    """Sweep times at which a rule looking back `age` may act on the container (none before --act-after)."""
    return (times >= c.first + age) & (times <= trace.life_end(c)) & (times >= trace.act_after_s)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:g} h" if seconds >= 3600 else f"{seconds / 60:g} min"


def run_naive(trace: Trace, *, every: float = 300.0, avg_pct: float = NAIVE_AVG_PCT,
              window_s: float = NAIVE_WINDOW_S) -> PolicyRun:
    """Stop when the average utilisation over the last `window_s` is under `avg_pct`; no warning."""
    started = time.perf_counter()
    run = PolicyRun(name=f"naive: avg < {avg_pct:g}% over {_hours(window_s)} -> stop")
    times = sweep_times(trace, every)
    run.sweeps = len(times)
    for c in trace.containers.values():
        n, total, _ = _window_counts(c, times, window_s)
        hit = _alive(trace, c, times, window_s) & (n > 0) & (total < avg_pct * np.maximum(n, 1))
        if hit.any():
            run.stops.append((c.id, float(times[np.argmax(hit)])))
    run.wall_s = time.perf_counter() - started
    return run


def _all_zero(trace: Trace, c: ContainerTrace, times: np.ndarray, window_s: float) -> np.ndarray:
    """Per sweep time: the container lived through the window, every sample in it is 0% and they cover 90% of it."""
    n, _, nonzero = _window_counts(c, times, window_s)
    full = n >= ZERO_MIN_COVERAGE * window_s / trace.interval_s
    return _alive(trace, c, times, window_s) & full & (nonzero == 0)


def run_zero(trace: Trace, *, every: float = 300.0, window_s: float = 2 * 3600.0) -> PolicyRun:
    """Stop when every sample of the last `window_s` is 0% (with 90% coverage, so a gap never counts as zero); no warning."""
    started = time.perf_counter()
    run = PolicyRun(name=f"all 0% for {_hours(window_s)} -> stop")
    times = sweep_times(trace, every)
    run.sweeps = len(times)
    for c in trace.containers.values():
        hit = _all_zero(trace, c, times, window_s)
        if hit.any():
            run.stops.append((c.id, float(times[np.argmax(hit)])))
    run.wall_s = time.perf_counter() - started
    return run


def run_jds(trace: Trace, *, every: float = 300.0, warn_s: float = JDS_WARN_S,
            cancel_s: float = JDS_CANCEL_S) -> PolicyRun:
    """Job-Defense-Shield style: every sample 0% for `warn_s` -> warning; still 0% at `cancel_s` -> cancel.

    The notice period is the time between the two; any non-zero sample starts the count again.
    Coverage must be at least 90% of the expected samples, so a gap never counts as zero.
    """
    if cancel_s <= warn_s:
        raise ValueError(f"JDS cancel window ({cancel_s:g} s) must be longer than its warning window ({warn_s:g} s)")
    started = time.perf_counter()
    run = PolicyRun(name=f"JDS-style: all 0% {_hours(warn_s)} -> warn, {_hours(cancel_s)} -> cancel")
    times = sweep_times(trace, every)
    run.sweeps = len(times)
    for c in trace.containers.values():
        warn = _all_zero(trace, c, times, warn_s)
        cancel = _all_zero(trace, c, times, cancel_s)
        warned_at: float | None = None
        for k, t in enumerate(times):
            if warned_at is not None and not warn[k]:
                warned_at = None  # activity came back: the warning lapses
            if cancel[k] and warned_at is not None and t - warned_at >= cancel_s - warn_s - 1e-6:
                run.stops.append((c.id, float(t)))
                break
            if warn[k] and warned_at is None:
                warned_at = float(t)
                run.warnings.append((c.id, warned_at))
    run.wall_s = time.perf_counter() - started
    return run
