"""OversizedPoolDetector: on-demand pools that keep empty nodes they could release."""

from __future__ import annotations

import math
from datetime import UTC, datetime, time, timedelta

from agent.config.policy import Policy
from agent.detectors.signals import ClusterSignals, CoarseHistory, align_end, group_signals, valid_pct, window_slices
from agent.history.forecast import HOUR, MIN_FORECAST_H, ForecastError, LowWindowPlan, cached_low_windows
from core.actions import Finding
from core.cluster import GpuSeries, NodeInfo, PoolInfo
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


def _clock(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%H:%M")


def pool_forecast(pool: PoolInfo) -> LowWindowPlan:
    """The pool's low-load windows for the 24 h after its load history; ForecastError says why there are none."""
    if not pool.load_history or pool.load_history_end is None:
        raise ForecastError("no load history for this pool (the backend keeps none)")
    end = pool.load_history_end.timestamp()
    return cached_low_windows(tuple(pool.load_history), end, float(pool.nodes * pool.gpus_per_node) or None)


class OversizedPoolDetector:
    """Empty nodes (no jobs, every GPU unassigned and quiet for empty_window) in a pool above min_nodes.

    When a pool is released is the policy's `scale_down`: inside a low-load window its forecast predicts, or in
    the fixed clock window. `notes` says, per pool, why a pool with empty nodes got no finding.
    """

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.pools
        self.quiet_pct = policy.detectors.idle.util_threshold_pct
        self.reserve = policy.reserve.fraction
        self.notes: dict[str, str] = {}

    def _uses_forecast(self, pool: PoolInfo) -> bool:
        if self.rule.scale_down == "forecast":
            return True
        return self.rule.scale_down == "auto" and len(pool.load_history) >= MIN_FORECAST_H

    def forecast_window(self, pool: PoolInfo, at: datetime) -> tuple[LowWindowPlan, float, float, float] | str:
        """(plan, window start, window end, scale-up time) when `at` is inside a predicted low-load window with
        time to spare before the planned scale-up; otherwise why not."""
        try:
            plan = pool_forecast(pool)
        except ForecastError as exc:
            return f"no forecast for pool {pool.name}, so no scale-down: {exc}"
        now = at.timestamp()
        horizon_end = plan.first_hour + len(plan.upper) * HOUR
        if not plan.first_hour <= now < horizon_end:
            return (f"no forecast for pool {pool.name} at {at:%Y-%m-%d %H:%M} UTC, so no scale-down: its load history "
                    "ends more than 24 h before (or after) now")
        window = plan.window_at(now)
        if window is None:
            upcoming = [f"{_clock(a)}-{_clock(b)}" for a, b in plan.windows if a > now]
            return (f"pool {pool.name} is outside its predicted low-load windows ({plan.model}); "
                    + (f"next: {', '.join(upcoming)} UTC" if upcoming else "none predicted in the next 24 h"))
        scale_up = window[1] - self.rule.scale_up_lead
        if now >= scale_up:
            return (f"pool {pool.name}'s low-load window {_clock(window[0])}-{_clock(window[1])} UTC ends within "
                    f"the scale-up lead ({format_duration(self.rule.scale_up_lead)}): no scale-down now")
        return plan, window[0], window[1], scale_up

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
        clock_open = in_time_window(obs.at, rule.scale_down_start, rule.scale_down_end)
        if rule.scale_down == "fixed" and not clock_open:
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
            planned: dict[str, float] = {}
            forecast_note = ""
            if self._uses_forecast(pool):
                found = self.forecast_window(pool, obs.at)
                if isinstance(found, str):
                    self.notes[pool.name] = found
                    continue
                planned, forecast_note = self._planned(pool, suggested, obs.at, *found)
            elif not clock_open:
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
                + forecast_note
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
                        **planned,
                    },
                    waste_gpu_hours=gpus * hours,
                    waste_cost=gpus * hours * pool.price_per_gpu_hour,
                    currency=pool.currency,
                )
            )
        return findings

    def _planned(self, pool: PoolInfo, suggested: int, at: datetime, plan: LowWindowPlan, start: float, end: float,
                 scale_up: float) -> tuple[dict[str, float], str]:
        """A forecast scale-down's plan as metrics, and its sentence: window, scale-up, saving, risk."""
        gpus = (pool.nodes - suggested) * pool.gpus_per_node
        hours = (scale_up - at.timestamp()) / HOUR
        saving = round(gpus * hours * pool.price_per_gpu_hour, 2)
        metrics = {
            "forecast": 1.0,
            "window_start": start,
            "window_end": end,
            "scale_up_at": scale_up,
            "scale_up_nodes": float(pool.nodes),
            "saving_gpu_hours": round(gpus * hours, 2),
            "saving": saving,
            "forecast_risk": plan.risk,
            "backtest_origins": float(plan.origins),
            "history_hours": float(plan.history_hours),
            "low_threshold_gpus": round(plan.threshold, 2),
        }
        note = (
            f"; forecast ({plan.model}, {plan.history_hours // 24} days of history): low load {_clock(start)}-"
            f"{_clock(end)} UTC (upper bound <= {plan.threshold:.1f} GPUs); scale back up to {pool.nodes} nodes at "
            f"{_clock(scale_up)} UTC; saves {gpus * hours:.1f} GPU-hours, {saving:.2f} {pool.currency}; risk: the load "
            f"went over the forecast's upper bound in {plan.risk:.1%} of backtest hours ({plan.origins} days)"
        )
        return metrics, note
