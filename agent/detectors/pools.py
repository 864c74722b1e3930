"""OversizedPoolDetector: on-demand pools that keep empty nodes they could release."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, time, timedelta

from agent.config.policy import Policy
from agent.detectors.queue import STUCK_AFTER_S, Capacity, demand_for_pool
from agent.detectors.signals import ClusterSignals, CoarseHistory, align_end, group_signals, valid_pct, window_slices
from agent.history.forecast import HOUR, MIN_FORECAST_H, ForecastError, LowWindowPlan, cached_low_windows
from core.actions import Finding, History
from core.cluster import GpuSeries, JobInfo, NodeInfo, PoolInfo
from core.durations import format_duration
from core.observation import Observation
from core.pool_plans import left_at, open_scale_down

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

    def __init__(self, policy: Policy, history: History | None = None) -> None:
        self.rule = policy.detectors.pools
        self.quiet_pct = policy.detectors.idle.util_threshold_pct
        self.reserve = policy.reserve.fraction
        self.history = history  # the guardrail's: a further scale-down keeps an open scale-down's way back
        self.notes: dict[str, str] = {}

    def open_plan(self, pool: PoolInfo) -> tuple[int, datetime, datetime] | None:
        """(nodes, when, scaled down at) of the way back an open scale-down of the pool planned, when the pool is as
        that scale-down left it. A further scale-down keeps it: back to the size the pool had before the steward's
        first, no later than planned (its own way back, to the size the first left, would lose the difference)."""
        down = open_scale_down(self.history, pool.name) if self.history is not None else None
        if down is None or left_at(down) != pool.nodes or down.scale_up_at is None or down.scale_up_nodes is None \
                or down.scale_up_nodes <= pool.nodes:
            return None
        at = down.scale_up_at if down.scale_up_at.tzinfo else down.scale_up_at.replace(tzinfo=UTC)
        return down.scale_up_nodes, at, down.at

    def _uses_forecast(self, pool: PoolInfo) -> bool:
        if self.rule.scale_down == "forecast":
            return True
        return self.rule.scale_down == "auto" and len(pool.load_history) >= MIN_FORECAST_H

    def forecast_window(self, pool: PoolInfo, at: datetime,
                        keep_gpus: float | None = None) -> tuple[LowWindowPlan, float, float, float] | str:
        """(plan, window start, window end, scale-up time) when `at` is inside a predicted low-load window with
        time to spare before the planned scale-up; otherwise why not.

        `keep_gpus`: the load the pool can carry as the scale-down leaves it (its kept nodes' GPUs less the
        reserve). A window is then also every run of hours from now whose forecast upper bound stays within it,
        and no window outlasts that run: a scale-down is safe while even the upper bound fits in what it keeps.
        (The quietest-quarter line alone finds no window on a pool quiet for more than ~8 h a day: its quiet
        hours' own noise straddles the line.)"""
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
        if keep_gpus is not None:
            hour = int((now - plan.first_hour) // HOUR)
            fits = 0
            while hour + fits < len(plan.upper) and plan.upper[hour + fits] <= keep_gpus + 1e-9:
                fits += 1
            if fits:
                start, end = plan.first_hour + hour * HOUR, plan.first_hour + (hour + fits) * HOUR
                window = (window[0], min(window[1], end)) if window is not None else (start, end)
            else:
                window = None
        if window is None:
            upcoming = [f"{_clock(a)}-{_clock(b)}" for a, b in plan.windows if a > now]
            return (f"pool {pool.name} is outside its predicted low-load windows ({plan.model}); "
                    + (f"next: {', '.join(upcoming)} UTC" if upcoming else "none predicted in the next 24 h"))
        lead = self.rule.scale_up_lead
        scale_up = window[1] - lead
        if scale_up - now < lead:
            return (f"pool {pool.name}'s low-load window {_clock(window[0])}-{_clock(window[1])} UTC leaves less than "
                    f"the scale-up lead ({format_duration(lead)}) before its planned scale-up at {_clock(scale_up)} "
                    "UTC: nodes released for less time than it takes to bring them back are not worth the risk, "
                    "no scale-down now")
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
            # Queued work is demand: the pool keeps room for pending jobs that wait for capacity its nodes could give
            # (`demand_for_pool`), counted for every pool they fit, so a scale-down never strands them.
            queued = sum(j.gpus for j in _queued_for(obs, pool, 0.0))
            total = pool.nodes * pool.gpus_per_node
            needed = used + queued + self.reserve * total
            suggested = max(pool.min_nodes, pool.nodes - len(empty), math.ceil(needed / pool.gpus_per_node - 1e-9))
            if suggested >= pool.nodes:
                continue
            planned: dict[str, float] = {}
            forecast_note = ""
            carried = self.open_plan(pool)
            if carried is not None and (carried[1] - obs.at).total_seconds() < rule.scale_up_lead:
                # As for a scale-down's own scale-up: nodes released for less time than it takes to bring them
                # back are not worth the risk.
                self.notes[pool.name] = (f"pool {pool.name}'s planned scale-up back to {carried[0]} nodes at "
                                         f"{carried[1]:%H:%M} UTC is less than the scale-up lead "
                                         f"({format_duration(rule.scale_up_lead)}) away: no further scale-down")
                continue
            if self._uses_forecast(pool):
                found = self.forecast_window(pool, obs.at, suggested * pool.gpus_per_node - self.reserve * total)
                if isinstance(found, str):
                    self.notes[pool.name] = found
                    continue
                planned, forecast_note = self._planned(pool, suggested, obs.at, *found, carried=carried)
            elif not clock_open:
                continue
            else:
                back = self._way_back(pool, obs.at, carried)
                if isinstance(back, str):
                    self.notes[pool.name] = back
                    continue
                planned, forecast_note = back
            gpus = (pool.nodes - suggested) * pool.gpus_per_node
            since = obs.at - timedelta(seconds=min(s for _, s in empty) * obs.slice_s)
            hours = (obs.at - since).total_seconds() / 3600.0
            names = ", ".join(n.name for n, _ in empty[:5]) + (" ..." if len(empty) > 5 else "")
            evidence = (
                f"on-demand pool {pool.name}: {len(empty)} of {pool.nodes} nodes empty for at least "
                f"{format_duration(needed_slices * obs.slice_s)} ({names}); jobs hold {used} of {total} GPUs"
                f"{f' and {queued} more are queued' if queued else ''}; "
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
                        "queued_gpus": float(queued),
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

    @staticmethod
    def _back_to(pool: PoolInfo, scale_up: float, carried: tuple[int, datetime, datetime] | None
                 ) -> tuple[int, float, str]:
        """(nodes, when, why) of a scale-down's way back: the pool's size, or an open scale-down's (open_plan)."""
        if carried is None:
            return pool.nodes, scale_up, ""
        return carried[0], min(scale_up, carried[1].timestamp()), \
            f" (its size before the scale-down at {carried[2]:%H:%M} UTC)"

    def _way_back(self, pool: PoolInfo, at: datetime, carried: tuple[int, datetime, datetime] | None = None
                  ) -> tuple[dict[str, float], str] | str:
        """A scale-down in the fixed window plans its way back too: to the pool's size, a lead before the window
        ends (or, with no window, a lead after the longest a fixed night lasts: 12 h), earlier when queued work
        that fits finds no room (PlannedScaleUpDetector). Every shrink the steward makes can be undone by it. Less
        than a lead before that scale-up, why no scale-down is proposed: nodes released for less time than it
        takes to bring them back are not worth the risk."""
        rule = self.rule
        if rule.scale_down_end is not None:
            end = datetime.combine(at.astimezone(UTC).date(), rule.scale_down_end.replace(tzinfo=None), tzinfo=UTC)
            if end <= at:
                end += timedelta(days=1)
        else:
            end = at + timedelta(hours=12)
        scale_up = end - timedelta(seconds=rule.scale_up_lead)
        if (scale_up - at).total_seconds() < rule.scale_up_lead:
            return (f"pool {pool.name}'s scale-down window ends at {end:%H:%M} UTC: less than the scale-up lead "
                    f"({format_duration(rule.scale_up_lead)}) is left before its scale-up at {scale_up:%H:%M} UTC, "
                    "and nodes released for less time than it takes to bring them back are not worth the risk: no "
                    "scale-down now")
        back, when, why = self._back_to(pool, scale_up.timestamp(), carried)
        lead = (f" (the window's end less the {format_duration(rule.scale_up_lead)} lead)"
                if when == scale_up.timestamp() else "")
        note = (f"; scale back up to {back} nodes{why} at {_clock(when)} UTC{lead}, earlier if queued work "
                "finds no room")
        return {"scale_up_at": when, "scale_up_nodes": float(back)}, note

    def _planned(self, pool: PoolInfo, suggested: int, at: datetime, plan: LowWindowPlan, start: float, end: float,
                 scale_up: float, *, carried: tuple[int, datetime, datetime] | None = None
                 ) -> tuple[dict[str, float], str]:
        """A forecast scale-down's plan as metrics, and its sentence: window, scale-up, saving, risk."""
        back, scale_up, why = self._back_to(pool, scale_up, carried)
        gpus = (pool.nodes - suggested) * pool.gpus_per_node
        hours = (scale_up - at.timestamp()) / HOUR
        saving = round(gpus * hours * pool.price_per_gpu_hour, 2)
        metrics = {
            "forecast": 1.0,
            "window_start": start,
            "window_end": end,
            "scale_up_at": scale_up,
            "scale_up_nodes": float(back),
            "saving_gpu_hours": round(gpus * hours, 2),
            "saving": saving,
            "forecast_risk": plan.risk,
            "backtest_origins": float(plan.origins),
            "history_hours": float(plan.history_hours),
            "low_threshold_gpus": round(plan.threshold, 2),
        }
        note = (
            f"; forecast ({plan.model}, {plan.history_hours // 24} days of history): low load {_clock(start)}-"
            f"{_clock(end)} UTC (upper bound <= {plan.threshold:.1f} GPUs); scale back up to {back} nodes{why} at "
            f"{_clock(scale_up)} UTC; saves {gpus * hours:.1f} GPU-hours, {saving:.2f} {pool.currency}; risk: the load "
            f"went over the forecast's upper bound in {plan.risk:.1%} of backtest hours ({plan.origins} days)"
        )
        return metrics, note


def _free_by_node(obs: Observation, pool: str) -> dict[str, int]:
    """Each node of the pool: its GPUs no job holds now."""
    held: dict[str, int] = {}
    for j in obs.jobs:
        if j.node is not None and j.state in _HOLDING_STATES:
            held[j.node] = held.get(j.node, 0) + j.gpus
    return {n.name: max(0, n.gpus - held.get(n.name, 0)) for n in obs.nodes if n.pool == pool}


def _place(job: JobInfo, free: dict[str, int]) -> bool:
    """Place the job on the free GPUs (first fit; a Kubernetes pod on one node, a Slurm job across nodes); the
    free map is updated. False: it does not fit."""
    if job.scheduler == "kubernetes":
        node = next((n for n, g in free.items() if g >= job.gpus), None)
        if node is None:
            return False
        free[node] -= job.gpus
        return True
    if sum(free.values()) < job.gpus:
        return False
    need = job.gpus
    for n in free:
        take = min(need, free[n])
        free[n] -= take
        need -= take
    return True


def _queued_for(obs: Observation, pool: PoolInfo, min_wait_s: float) -> list[JobInfo]:
    """Pending GPU jobs that are demand for the pool's nodes (`demand_for_pool`: they wait for capacity its nodes
    could give), waiting at least `min_wait_s`, oldest first."""
    cap = Capacity(obs)
    out = []
    for j in obs.jobs:
        if not demand_for_pool(j, pool, obs, cap):
            continue
        waited = (obs.at - j.submitted_at).total_seconds() if j.submitted_at is not None else None
        if waited is not None and waited < min_wait_s:
            continue
        out.append(j)
    return sorted(out, key=lambda j: (j.submitted_at or obs.at, j.id))


def _jobs_listed(jobs: list[JobInfo]) -> str:
    return ", ".join(f"{j.id} ({j.gpus} GPUs)" for j in jobs[:5]) + (" ..." if len(jobs) > 5 else "")


class PlannedScaleUpDetector:
    """The scale-up back a scale-down planned (docs/forecast.md; a forecast window's, or the fixed window's end less
    the lead): due at its `scale_up_at`, or earlier when pending GPU jobs that are demand for the pool's nodes
    (`demand_for_pool`) find no room; back to the recorded size, never above max_nodes.

    Reads the executed scale-down from the guardrail's history; a pool whose size changed since (someone else
    resized it) gets none, and `notes` says why.
    """

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.pools
        self.notes: dict[str, str] = {}

    def detect(self, obs: Observation, history: History) -> list[Finding]:
        findings = []
        for pool in obs.pools:
            down = open_scale_down(history, pool.name)
            if down is None or down.scale_up_at is None or down.scale_up_nodes is None:
                continue
            if pool.nodes != left_at(down):
                self.notes[pool.name] = (f"pool {pool.name} has {pool.nodes} nodes, not the {left_at(down)} its "
                                         f"scale-down left: it changed since, so its planned scale-up is not proposed")
                continue
            target = down.scale_up_nodes if pool.max_nodes is None else min(down.scale_up_nodes, pool.max_nodes)
            if target <= pool.nodes:
                continue
            due_at = down.scale_up_at if down.scale_up_at.tzinfo else down.scale_up_at.replace(tzinfo=UTC)
            free = _free_by_node(obs, pool.name)
            waiting = [j for j in _queued_for(obs, pool, STUCK_AFTER_S)
                       if j.gpus <= (pool.gpus_per_node if j.scheduler == "kubernetes" else target * pool.gpus_per_node)
                       and not _place(j, dict(free))]
            due = obs.at >= due_at
            if not due and not waiting:
                continue
            why = (f"the planned scale-up time {due_at:%H:%M} UTC has come" if due else
                   f"{len(waiting)} pending GPU job(s) find no room before the planned {due_at:%H:%M} UTC: "
                   f"{_jobs_listed(waiting)}")
            capped = f" (capped at max_nodes {pool.max_nodes})" if target < down.scale_up_nodes else ""
            gpus = (target - pool.nodes) * pool.gpus_per_node
            evidence = (f"pool {pool.name} was scaled down from {down.nodes_before or down.scale_up_nodes} to "
                        f"{left_at(down)} nodes at {down.at:%H:%M} UTC for a low-load window; {why}: "
                        f"scale back up to {target} nodes{capped}, {gpus} GPUs at {pool.price_per_gpu_hour:g} "
                        f"{pool.currency}/GPU-hour")
            findings.append(Finding(
                kind="pool_scale_up", target=pool.name, target_type="pool", since=min(due_at, obs.at),
                detected_at=obs.at, evidence=evidence, gpus=gpus, currency=pool.currency,
                metrics={"nodes": float(pool.nodes), "target_nodes": float(target),
                         "planned_nodes": float(down.scale_up_nodes), "scale_up_at": due_at.timestamp(),
                         "scaled_down_at": down.at.timestamp(), "due": 1.0 if due else 0.0,
                         "waiting_jobs": float(len(waiting)), "waiting_gpus": float(sum(j.gpus for j in waiting)),
                         "price_per_gpu_hour": pool.price_per_gpu_hour}))
        return findings


class QuietFillDetector:
    """Queued low-priority work (policy `fill_classes`: a PriorityClass or QOS) that fits a pool's idle GPUs inside,
    or within the hour before, a predicted low-load window: level 1 advice naming the jobs; nothing is started."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.pools
        self.reserve = policy.reserve.fraction

    def _low(self, job: JobInfo) -> bool:
        classes = self.rule.fill_classes
        return (job.priority_class in classes) if job.scheduler == "kubernetes" else (job.qos in classes)

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        if not self.rule.fill_classes:
            return []
        now = obs.at.timestamp()
        findings = []
        for pool in obs.pools:
            queued = [j for j in _queued_for(obs, pool, 0.0) if self._low(j)]
            if not queued or pool.gpus_per_node <= 0:
                continue
            try:
                plan = pool_forecast(pool)
            except ForecastError:
                continue
            window = plan.window_at(now) or next(((a, b) for a, b in plan.windows if now < a <= now + HOUR), None)
            if window is None:
                continue
            free = _free_by_node(obs, pool.name)
            idle = sum(free.values())
            budget = idle - math.ceil(round(self.reserve * pool.nodes * pool.gpus_per_node, 9))
            fits = []
            for j in queued:
                if j.gpus <= budget and _place(j, free):
                    budget -= j.gpus
                    fits.append(j)
            if not fits:
                continue
            used = sum(j.gpus for j in fits)
            start, end = window
            when = "inside" if start <= now else "starting within the hour of"
            evidence = (f"pool {pool.name} is {when} its predicted low-load window {_clock(start)}-{_clock(end)} UTC "
                        f"with {idle} idle GPUs (keeping the {self.reserve:.0%} reserve); {len(fits)} queued "
                        f"low-priority job(s) fit: {_jobs_listed(fits)}; start them on the idle capacity "
                        f"({used} GPUs) until {_clock(end)} UTC")
            findings.append(Finding(
                kind="quiet_fill", target=pool.name, target_type="pool", since=obs.at, detected_at=obs.at,
                evidence=evidence, gpus=used, currency=pool.currency,
                metrics={"idle_gpus": float(idle), "fill_gpus": float(used), "fill_jobs": float(len(fits)),
                         "queued_jobs": float(len(queued)), "window_start": start, "window_end": end,
                         "reserve_fraction": self.reserve}))
        return findings


_JOBS = re.compile(r"fit: (.*); start them")


def plan_zh(f: Finding) -> str:
    """A scale-up back or a quiet-window fill in Chinese, from its numbers (times in describe()'s zone)."""
    from agent.detectors.evidence import zh_span, zh_time

    m = f.metrics
    if f.kind == "pool_scale_up":
        why = (f"计划的扩容时间 {zh_time(m['scale_up_at'])}已到" if m.get("due") else
               f"{m['waiting_jobs']:g} 个排队的 GPU 作业（共 {m['waiting_gpus']:g} 块 GPU）在计划的 "
               f"{zh_time(m['scale_up_at'])}之前找不到空位")
        capped = f"（受 max_nodes 限制，计划为 {m['planned_nodes']:g}）" if m["target_nodes"] < m["planned_nodes"] else ""
        return (f"节点池 {f.target} 于 {zh_time(m['scaled_down_at'])}为预测的低负载窗口缩容至 {m['nodes']:g} 个节点；"
                f"{why}：扩容回 {m['target_nodes']:g} 个节点{capped}，{f.gpus} 块 GPU"
                f"（单价 {m['price_per_gpu_hour']:g} {f.currency}/GPU 小时）")
    jobs = _JOBS.search(f.evidence)
    listed = jobs.group(1).replace(" GPUs)", " 块 GPU）").replace(" (", "（").replace(", ", "、") if jobs else ""
    return (f"节点池 {f.target} 处于（或一小时内进入）预测的低负载窗口 {zh_span(m['window_start'], m['window_end'])}，空闲 {m['idle_gpus']:g} 块 GPU（保留 {m['reserve_fraction']:.0%} 余量）；"
            f"{m['fill_jobs']:g} 个排队的低优先级作业可以放下：{listed}；可在空闲容量上启动它们"
            f"（{m['fill_gpus']:g} 块 GPU），直到 {zh_time(m['window_end'])}")
