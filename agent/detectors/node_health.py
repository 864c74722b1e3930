"""NodeHealthDetector: nodes with hardware XID errors or GPUs running too hot."""

from __future__ import annotations

from datetime import timedelta

from agent.config.policy import Policy
from agent.detectors.signals import ClusterSignals, group_signals
from core.actions import Finding
from core.observation import Observation

# Job findings whose waste a faulty GPU can cause: the job stopped working because its GPU did.
FAULT_KINDS = ("idle", "zombie")

# What an XID usually means, in the words an on-call engineer searches for.
XID_MEANINGS: dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement / row remapping event",
    64: "ECC page retirement / row remapping failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
}


def xid_meaning(xid: int) -> str:
    return XID_MEANINGS.get(xid, "hardware/driver error (see NVIDIA XID catalogue)")


class NodeHealthDetector:
    """One finding per node: any GPU with an XID not in ignore_xids, or at or above max_temp_c."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.node_health

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        signals = signals or group_signals(obs)
        ignore = set(self.rule.ignore_xids)
        findings = []
        for node, series in signals.by_node.items():
            problems: list[str] = []
            bad_gpus: set[int] = set()
            first_at = None
            worst_xid = 0
            hottest = None
            per_gpu: dict[str, float] = {}  # gpu<n>_xid / gpu<n>_temp_c: each problem as numbers
            for g in sorted(series, key=lambda s: s.gpu):
                if g.xid_last and g.xid_last not in ignore:
                    problems.append(f"GPU {g.gpu} XID {g.xid_last} ({xid_meaning(g.xid_last)})")
                    bad_gpus.add(g.gpu)
                    per_gpu[f"gpu{g.gpu}_xid"] = float(g.xid_last)
                    worst_xid = worst_xid or g.xid_last
                    if g.xid_at is not None and (first_at is None or g.xid_at < first_at):
                        first_at = g.xid_at
                if g.temp_c_max is not None and g.temp_c_max >= self.rule.max_temp_c:
                    problems.append(f"GPU {g.gpu} at {g.temp_c_max:.0f}°C (limit {self.rule.max_temp_c:g}°C)")
                    bad_gpus.add(g.gpu)
                    per_gpu[f"gpu{g.gpu}_temp_c"] = g.temp_c_max
                    hottest = max(hottest or g.temp_c_max, g.temp_c_max)
            if not problems:
                continue
            metrics = {"affected_gpus": float(len(bad_gpus)), "temp_limit_c": self.rule.max_temp_c, **per_gpu}
            if worst_xid:
                metrics["xid"] = float(worst_xid)
            if hottest is not None:
                metrics["temp_c_max"] = hottest
            findings.append(
                Finding(
                    kind="node_health",
                    target=node,
                    target_type="node",
                    since=first_at or obs.at,
                    detected_at=obs.at,
                    evidence=f"node {node}: " + "; ".join(problems),
                    metrics=metrics,
                    gpus=len(bad_gpus),
                )
            )
        return findings


def name_gpu_faults(findings: list[Finding], obs: Observation, signals: ClusterSignals, policy: Policy) -> list[Finding]:
    """An idle or hung job whose GPU reported a hardware XID while the job ran says so in its evidence (metrics
    fault_xid, fault_gpu, fault_at): the owner reads that the hang is the GPU's, not their code's, and the on-call
    engineer which node to drain (runbook gpu-xid-errors). The stop is decided as before: a job on a lost GPU makes
    no progress, and stopping it frees the node for draining. An XID from before the job started is a previous
    occupant's and is not named, and so is one the gauge already held when the series read begins (DCGM keeps the
    last XID until the driver reloads: when it happened is not known), or any on a job whose start is unknown."""
    ignore = set(policy.detectors.node_health.ignore_xids)
    jobs = obs.jobs_by_id()
    out = []
    for f in findings:
        job = jobs.get(f.target) if f.target_type == "job" and f.kind in FAULT_KINDS else None
        series = signals.jobs.get(f.target) if job is not None else None
        faults = [g for g in (series.gpus if series is not None else [])
                  if g.xid_last and g.xid_last not in ignore and g.xid_at is not None
                  and job is not None and job.started_at is not None and g.xid_at >= job.started_at
                  and g.xid_at > obs.at - timedelta(seconds=len(g.util_max) * g.slice_s)]
        if not faults:
            out.append(f)
            continue
        g = min(faults, key=lambda s: (s.xid_at, s.gpu))
        assert g.xid_at is not None
        out.append(f.model_copy(update={
            "evidence": (f"{f.evidence}; GPU {g.gpu} of {g.node} reported XID {g.xid_last} ({xid_meaning(g.xid_last)}) "
                         f"at {g.xid_at:%H:%M} UTC while the job ran: the GPU, not the job's code, may have stopped "
                         "it; the node needs checking (runbook gpu-xid-errors)"),
            "metrics": {**f.metrics, "fault_xid": float(g.xid_last), "fault_gpu": float(g.gpu),
                        "fault_at": g.xid_at.timestamp()},
        }))
    return out
