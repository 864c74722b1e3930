"""What the graph's nodes run against: adapters, policy, stores and planner, built once and passed down."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.approvals import ApprovalStore
from agent.audit import AuditLog
from agent.detectors.engine import log_candidates
from agent.detectors.signals import window_slices
from agent.observation import Observation
from agent.policy import Policy
from tools.history import gpu_history
from tools.log_progress import analyse_log
from tools.protocols import Clock, JobScheduler, LogSource, MetricsSource, NodePools, Notifier

if TYPE_CHECKING:
    from agent.planner import Planner


@dataclass
class StewardDeps:
    metrics: MetricsSource
    scheduler: JobScheduler
    logs: LogSource
    pools: NodePools
    notifier: Notifier
    clock: Clock
    policy: Policy
    audit: AuditLog
    approvals: ApprovalStore
    planner: Planner
    currency: str = "USD"
    language: str = "en"
    runbook_search: Any = None  # callable(query, kind, k) -> list[dict], when an index is configured
    runbook_catalog: Any = None  # callable(language) -> str: the runbook list the planning prompt shows
    runbook_max_level: Any = None  # callable(runbook_id) -> int | None: agent/runbook_limits.py applies it
    # Raw samples are large and can be re-read from the cluster, so they stay out of checkpoints.
    _observations: OrderedDict[str, Observation] = field(default_factory=OrderedDict)

    def lookback_s(self) -> float:
        """What the fine slices cover: the detectors' windows (the long-tail day is read coarse)."""
        d = self.policy.detectors
        return max(d.idle.window, d.zombie.window, d.overprovisioned.window, d.pools.empty_window)

    def history_slice_s(self) -> float:
        """The coarse slice: a whole number of fine slices, so the two grids meet at the sweep instant.

        Never longer than the detectors' windows, since the fine slices are rounded up to whole coarse ones.
        """
        d = self.policy.detectors
        ratio = min(round(d.longtail.history_slice / d.slice), window_slices(self.lookback_s(), d.slice))
        return max(1, ratio) * d.slice

    def observe(self, at: datetime | None = None) -> Observation:
        """Read the whole cluster: a fixed handful of backend calls whatever its size."""
        at = at or self.clock.now()
        slice_s = self.policy.detectors.slice
        coarse_s = self.history_slice_s()
        windows = math.ceil(self.lookback_s() / coarse_s - 1e-9) * coarse_s
        history_lookback = math.ceil(self.policy.detectors.longtail.lookback / coarse_s - 1e-9) * coarse_s
        history: list = []
        lookback = windows
        if history_lookback > windows:
            # Whole coarse slices, so both grids meet; one more coarse slice of fine ones measures a quiet
            # stretch to the fine slice up to a coarse slice past the windows, where idle calls are made.
            lookback = min(windows + coarse_s, history_lookback)
            history = gpu_history(self.metrics, at, history_lookback, coarse_s)
        obs = Observation(
            at=at,
            slice_s=slice_s,
            lookback_s=lookback,
            currency=self.currency,
            jobs=self.scheduler.list_jobs(),
            nodes=self.scheduler.list_nodes(),
            pools=self.pools.list_pools(),
            gpus=self.metrics.gpu_series(at, lookback, slice_s),
            io=self.metrics.job_io_series(at, lookback, slice_s),
            history=history,
            history_slice_s=coarse_s if history else 0.0,
            backend_calls=6 if history else 5,
        )
        # Logs are read per job, so only for jobs whose GPUs look quiet or pinned.
        log_span = timedelta(seconds=max(self.policy.detectors.zombie.window, self.policy.detectors.idle.window) * 2)
        logs = {}
        for job_id in log_candidates(obs, self.policy):
            lines = self.logs.tail(job_id, at - log_span, at, limit=500)
            logs[job_id] = analyse_log(job_id, lines, at)
            obs.backend_calls += 1
        obs.logs = logs
        return obs

    def remember(self, run_id: str, obs: Observation) -> None:
        self._observations[run_id] = obs
        while len(self._observations) > 4:
            self._observations.popitem(last=False)

    def observation(self, run_id: str) -> Observation:
        """The run's observation, or a fresh one if this process has not seen it (after a restart)."""
        obs = self._observations.get(run_id)
        if obs is None:
            obs = self.observe()
            self.remember(run_id, obs)
        return obs

    def fresh_observation(self, run_id: str) -> Observation:
        """An observation taken now: reused only when no time has passed since the run's."""
        now = self.clock.now()
        obs = self._observations.get(run_id)
        if obs is not None and obs.at == now:
            return obs
        obs = self.observe(now)
        self.remember(run_id, obs)
        return obs
