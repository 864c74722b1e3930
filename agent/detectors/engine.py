"""Run every detector over one observation, and pick the jobs whose logs are worth fetching."""

from __future__ import annotations

from typing import Protocol

from agent.config.policy import Policy
from agent.detectors.doomed import DoomedJobDetector
from agent.detectors.gang import spare_waiting_ranks
from agent.detectors.idle import IdleGpuDetector
from agent.detectors.keepalive import KeepAliveDetector
from agent.detectors.node_health import NodeHealthDetector, name_gpu_faults
from agent.detectors.overprovisioned import OverprovisionedDetector
from agent.detectors.pools import OversizedPoolDetector, PlannedScaleUpDetector, QuietFillDetector
from agent.detectors.queue import StuckPendingDetector, mark_blockers
from agent.detectors.serving import as_serving_advice
from agent.detectors.signals import ClusterSignals, group_signals
from agent.detectors.zombie import ZombieDetector
from core.actions import Finding, History
from core.observation import Observation


class Detector(Protocol):
    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]: ...


def all_detectors(policy: Policy, history: History | None = None) -> list[Detector]:
    return [
        IdleGpuDetector(policy),
        KeepAliveDetector(policy),
        ZombieDetector(policy),
        OverprovisionedDetector(policy),
        NodeHealthDetector(policy),
        OversizedPoolDetector(policy, history),
        QuietFillDetector(policy),
        StuckPendingDetector(policy),
        DoomedJobDetector(policy),
    ]


def run_detectors(obs: Observation, policy: Policy, signals: ClusterSignals | None = None,
                  history: History | None = None) -> list[Finding]:
    """Every detector's findings, job findings priced (GPU-hours since the waste began x pool price).

    `signals` may be reused from log_candidates on the same metrics; logs are read from `obs`. With `history`
    (the guardrail's, from the audit log), the scale-ups back that executed forecast scale-downs planned too, and a
    further scale-down of a pool one left keeps its way back (OversizedPoolDetector.open_plan).
    """
    signals = signals or group_signals(obs)
    found = [f for d in all_detectors(policy, history) for f in d.detect(obs, signals)]
    if history is not None and obs.pools:
        found += PlannedScaleUpDetector(policy).detect(obs, history)
    found = spare_waiting_ranks(found, obs, signals, policy)
    # A hung job's GPUs spin at 100 %, one whose rank died has let go: that is the hang, not a request too large to
    # right-size (packed runs that "finish unevenly" read the same way, the advice says so).
    hung = {f.target for f in found if f.kind == "zombie"}
    found = [f for f in found if not (f.kind == "overprovisioned" and f.target in hung)]
    findings = mark_blockers(as_serving_advice(found, obs, policy.detectors.serving), obs)
    findings = name_gpu_faults(findings, obs, signals, policy)
    jobs = obs.jobs_by_id()
    pool_of = {n.name: n.pool for n in obs.nodes}
    prices = {p.name: p.price_per_gpu_hour for p in obs.pools}
    priced = []
    for f in findings:
        job = jobs.get(f.target) if f.target_type == "job" else None
        if job is None:
            priced.append(f)
            continue
        hours = max(0.0, (obs.at - f.since).total_seconds() / 3600.0)
        gpu_hours = f.gpus * hours
        price = prices.get(pool_of.get(job.node or "") or "", 0.0)
        priced.append(
            f.model_copy(
                update={
                    "waste_gpu_hours": round(gpu_hours, 4),
                    "waste_cost": round(gpu_hours * price, 2),
                    "currency": obs.currency,
                    "owner": job.user,
                    "team": job.project or job.namespace,
                    "runbook": None,
                }
            )
        )
    return priced


def log_candidates(obs: Observation, policy: Policy, signals: ClusterSignals | None = None) -> list[str]:
    """Job ids whose logs could change a finding: GPUs quiet over the idle window, pinned over the zombie
    window, or in a keep-alive pattern. Everything else is decided without logs, so a big sweep fetches few."""
    signals = signals or group_signals(obs)
    idle, zombie, keepalive = IdleGpuDetector(policy), ZombieDetector(policy), KeepAliveDetector(policy)
    return sorted(
        job.id
        for job in obs.jobs
        if idle.quiet_window(job, signals) is not None or zombie.pinned_window(job, signals) is not None
        or keepalive.pattern_window(job, signals) is not None
    )
