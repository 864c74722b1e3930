"""OversizedPoolDetector: on-demand pools that keep empty nodes they could release."""

from __future__ import annotations

import math
from datetime import UTC, datetime, time, timedelta

from agent.config.policy import Policy
from agent.detectors.signals import ClusterSignals, CoarseHistory, align_end, group_signals, valid_pct, window_slices
from core.actions import Finding
from core.cluster import GpuSeries, NodeInfo
from core.durations import format_duration
from core.observation import Observation

_HOLDING_STATES = frozenset({"running", "stopping", "pending"})


def in_time_window(at: datetime, start: time | None, end: time | None) -> bool:
    """Whether `at` (as UTC) falls in [start, end); the window may wrap past midnight; None = always."""
    if start is None or end is None or start == end:
        return True
    now = (at.astimezone(UTC) if at.tzinfo else at).time().replace(tzinfo=None)
    start, end = start.replace(tzinfo=None), end.replace(tzinfo=None)
    if start < end:
        return start <= now < end
    return now >= start or now < end


class OversizedPoolDetector:
    """Empty nodes (no jobs, every GPU unassigned and quiet for empty_window) in a pool above min_nodes."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.pools
        self.quiet_pct = policy.detectors.idle.util_threshold_pct
        self.reserve = policy.reserve.fraction

    def empty_slices(
        self, node: NodeInfo, series: list[GpuSeries], slice_s: float, history: CoarseHistory | None = None
    ) -> int:
        """How many newest slices the node has been verifiably empty (0 = not empty, or unknown).

        Past the fine slices it reads the node's coarse history, so `since` is not capped at the window.
        """
        if node.jobs or not series or len(series) < node.gpus or any(g.job is not None for g in series):
            return 0
        length = max(len(g.util_max) for g in series)
        count = 0
        columns = [[valid_pct(v) for v in align_end(g.util_max, length)] for g in series]
        for k in range(length - 1, -1, -1):
            if not all((v := col[k]) is not None and v <= self.quiet_pct for col in columns):
                break
            count += 1
        if count == length and history is not None:
            count += history.quiet_beyond(count, self.quiet_pct)
        return count

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        rule = self.rule
        if not in_time_window(obs.at, rule.scale_down_start, rule.scale_down_end):
            return []
        signals = signals or group_signals(obs)
        needed_slices = window_slices(rule.empty_window, obs.slice_s)
        nodes_by_pool: dict[str, list[NodeInfo]] = {}
        for n in obs.nodes:
            if n.pool is not None:
                nodes_by_pool.setdefault(n.pool, []).append(n)
        gpus_by_node: dict[str, int] = {}
        for j in obs.jobs:
            if j.node is not None and j.state in _HOLDING_STATES:
                gpus_by_node[j.node] = gpus_by_node.get(j.node, 0) + j.gpus
        findings = []
        for pool in obs.pools:
            if pool.billing != "on-demand" or pool.nodes <= pool.min_nodes or pool.gpus_per_node <= 0:
                continue
            members = nodes_by_pool.get(pool.name, [])
            empty_for = [
                self.empty_slices(n, signals.by_node.get(n.name, []), obs.slice_s, signals.node_history(n.name))
                for n in members
            ]
            empty = [(n, s) for n, s in zip(members, empty_for, strict=True) if s >= needed_slices]
            if not empty:
                continue
            used = sum(gpus_by_node.get(n.name, 0) for n in members)
            total = pool.nodes * pool.gpus_per_node
            needed = used + self.reserve * total
            suggested = max(pool.min_nodes, pool.nodes - len(empty), math.ceil(needed / pool.gpus_per_node - 1e-9))
            if suggested >= pool.nodes:
                continue
            gpus = (pool.nodes - suggested) * pool.gpus_per_node
            since = obs.at - timedelta(seconds=min(s for _, s in empty) * obs.slice_s)
            hours = (obs.at - since).total_seconds() / 3600.0
            names = ", ".join(n.name for n, _ in empty[:5]) + (" ..." if len(empty) > 5 else "")
            evidence = (
                f"on-demand pool {pool.name}: {len(empty)} of {pool.nodes} nodes empty for at least "
                f"{format_duration(needed_slices * obs.slice_s)} ({names}); jobs hold {used} of {total} GPUs; "
                f"keeping {self.reserve:.0%} reserve and min_nodes {pool.min_nodes} -> {suggested} nodes; "
                f"{gpus} GPUs at {pool.price_per_gpu_hour:g} {pool.currency}/GPU-hour could be released"
            )
            findings.append(
                Finding(
                    kind="oversized",
                    target=pool.name,
                    target_type="pool",
                    since=since,
                    detected_at=obs.at,
                    evidence=evidence,
                    gpus=gpus,
                    metrics={
                        "empty_nodes": float(len(empty)),
                        "nodes": float(pool.nodes),
                        "suggested_nodes": float(suggested),
                        "used_gpus": float(used),
                        "reserve_gpus": self.reserve * total,
                        "total_gpus": float(total),
                        "reserve_fraction": self.reserve,
                        "min_nodes": float(pool.min_nodes),
                        "empty_window_s": needed_slices * obs.slice_s,
                        "price_per_gpu_hour": pool.price_per_gpu_hour,
                    },
                    waste_gpu_hours=gpus * hours,
                    waste_cost=gpus * hours * pool.price_per_gpu_hour,
                    currency=pool.currency,
                )
            )
        return findings
