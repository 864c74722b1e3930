"""What the graph's nodes run against: adapters, policy, stores and planner, built once and passed down."""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from agent.config.policy import Policy, stretch_span
from agent.detectors.engine import log_candidates
from agent.detectors.signals import window_slices
from agent.records.approvals import ApprovalStore
from agent.records.audit import AuditLog, answered_requests
from core.cluster import FinishedJob, GpuHistory, GpuSeries, JobInfo, JobIoSeries, NodeInfo, PoolInfo, job_gang
from core.durations import format_duration
from core.observation import Observation
from tools.history import gpu_history
from tools.log_progress import analyse_log
from tools.protocols import Clock, JobScheduler, LogSource, MetricsSource, NodePools, Notifier

if TYPE_CHECKING:
    from collections.abc import Callable

    from agent.planning.policy_model import Planner


_T = TypeVar("_T")


FINISHED_REUSE_S = 300.0  # how old a sweep's finished-job history may be when a re-read reuses it


class BackendUnavailable(RuntimeError):
    """A backend could not be read; the message names which one (scheduler, node pools, metrics, logs) and why."""


def _read(what: str, call: Callable[[], _T]) -> _T:
    try:
        return call()
    except Exception as exc:
        raise BackendUnavailable(f"{what} unavailable: {brief_error(exc)}") from exc


def brief_error(exc: BaseException, limit: int = 600) -> str:
    """`Type: message` on one line, the middle cut out when long (a failed PromQL query quotes the whole query;
    the server's answer is at the end), so a report line stays readable and still says what went wrong."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else f"{text[:limit // 3]} … {text[-(limit - limit // 3):]}"


@dataclass(frozen=True)
class SweepGrid:
    """What one observation reads: fine slices over the detectors' windows, coarse ones over the long-tail day."""

    slice_s: float
    lookback_s: float
    history_slice_s: float
    history_lookback_s: float  # 0 when the fine slices already cover the long-tail lookback


def _newest_sample(gpus: list[GpuSeries]) -> int | None:
    """How many of the newest slices hold no sample on any of `gpus` (0: the newest slice has one); None when no
    slice read holds one."""
    # Per GPU, how many of its newest slices hold no sample; the freshest GPU's count says how stale the read is.
    empty = [next((k for k, c in enumerate(reversed(g.samples)) if c), None) for g in gpus]
    known = [k for k in empty if k is not None]
    return min(known) if known else None


def stale_metrics(gpus: list[GpuSeries], at: datetime, slice_s: float) -> str | None:
    """Why the sweep's GPU metrics are stale: no GPU series has a sample in the newest slice (an exporter or its
    scrape is down; Prometheus still answers with the older samples). None when any GPU has one, or none is read
    at all (the report's `not measured` says that)."""
    newest = _newest_sample(gpus)
    if not gpus or newest == 0:
        return None
    if newest is None:
        return (f"GPU metrics stale: no GPU has a sample in the whole read ({len(gpus)} GPU series): the exporter "
                f"or its scrape is down; nothing is judged idle or hung")
    seen = at - timedelta(seconds=newest * slice_s)
    return (f"GPU metrics stale: no GPU has a sample since {seen:%H:%M} UTC ({len(gpus)} GPU series): the exporter "
            f"or its scrape is down; nothing is judged idle or hung")


def stale_job_metrics(gpus: list[GpuSeries], jobs: list[JobInfo], at: datetime, slice_s: float) -> str | None:
    """The re-read of one job before an action, judged as stale_metrics judges a sweep, scoped to the GPUs it read:
    the target's and, for a pod of a distributed job, its other pods' (observe_job). Stale when, for any of these
    jobs, no GPU of it on some node has a sample in the newest slice (that node's exporter or its scrape is down;
    Prometheus still answers with the older samples): then what the job does now is unknown, and unknown is not idle.
    None when every such node has a sample there, or the target (the first job) has no GPU series at all (`not
    measured`: nothing is judged on it). Another running pod of its job that holds GPUs and has no GPU series in the
    read is stale too: its exporter has been dark longer than the read reaches back, and a rank working again there
    would otherwise be invisible to the gang rule. Names each stale job and node and when its GPU metrics last had a
    sample (the end of the newest slice holding one)."""
    wanted = {j.id for j in jobs}
    groups: dict[tuple[str, str], list[GpuSeries]] = {}
    for g in gpus:
        if g.job is not None and g.job in wanted:
            groups.setdefault((g.job, g.node), []).append(g)
    seen = {job for job, _ in groups}
    parts = [f"{j.id} on {j.node or '-'}: no GPU sample in the whole read (no GPU series)" for j in jobs[1:]
             if j.state == "running" and j.gpus > 0 and j.id not in seen]
    for (job, node), series in sorted(groups.items()):
        newest = _newest_sample(series)
        if newest == 0:
            continue
        last = ("no GPU sample in the whole read" if newest is None
                else f"no GPU sample since {at - timedelta(seconds=newest * slice_s):%H:%M} UTC")
        parts.append(f"{job} on {node}: {last} ({len(series)} GPU series)")
    if not parts:
        return None
    return (f"GPU metrics stale: {'; '.join(parts)}; none in the newest {format_duration(slice_s)} slice, to "
            f"{at:%H:%M} UTC: the exporter or its scrape is down")


def log_span(policy: Policy) -> float:
    """Seconds of log a sweep reads back for a quiet or pinned job: twice the detectors' windows, plus the notice,
    so a hung job flagged once its silence reached three of its usual gaps still shows its last progress line
    when the notice runs out (with 2 windows alone, a job logging every 20 minutes lost its zombie finding, and
    so its stop, just before the stop was due); and never less than a stretch can matter (stretch_span: as long as
    a warning or an approval about it can count), or a hung job whose stop waits for a person loses the progress
    line that makes it a hang (the demo's hung detector-train lost its finding 3 h into its silence, and was
    never stopped)."""
    d = policy.detectors
    return max(2 * max(d.zombie.window, d.idle.window) + policy.warning.min_notice, stretch_span(policy))


def sweep_grid(policy: Policy) -> SweepGrid:
    d = policy.detectors
    windows = max(d.idle.window, d.zombie.window, d.overprovisioned.window, d.pools.empty_window)
    # A whole number of fine slices, and never longer than the windows: the fine span is rounded up to it.
    coarse = max(1, min(round(d.longtail.history_slice / d.slice), window_slices(windows, d.slice))) * d.slice
    fine = math.ceil(windows / coarse - 1e-9) * coarse
    # The long-tail day, or longer when a warning or an approval can outlive it (stretch_span).
    history = math.ceil(max(d.longtail.lookback, stretch_span(policy)) / coarse - 1e-9) * coarse
    if history <= fine:
        return SweepGrid(d.slice, fine, coarse, 0.0)
    # Both grids end at the sweep instant. One more coarse slice of fine ones measures a quiet stretch to
    # the fine slice a little past the windows, where idle calls are made.
    return SweepGrid(d.slice, min(fine + coarse, history), coarse, history)


@dataclass
class JobMetrics:
    """A metrics source narrowed to some jobs' series (one job, or the pods of its distributed job), for sources
    that cannot scope their own queries."""

    inner: Any
    job_ids: frozenset[str]

    @property
    def warnings(self) -> list[str]:
        return list(getattr(self.inner, "warnings", None) or [])

    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        return [s for s in self.inner.gpu_series(end, lookback_s, slice_s) if s.job in self.job_ids]

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        return [s for s in self.inner.job_io_series(end, lookback_s, slice_s) if s.job in self.job_ids]

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        return [h for h in gpu_history(self.inner, end, lookback_s, slice_s) if h.job in self.job_ids]


@dataclass
class ScopedMetrics:
    """The scoped reads (`for_job`) of a few jobs merged: a distributed job's pods, read as a sweep reads them, for
    a handful of queries per pod (bounded by the job's size, never the cluster's)."""

    parts: list[Any]

    @property
    def warnings(self) -> list[str]:
        seen: list[str] = []
        for part in self.parts:
            seen.extend(w for w in (getattr(part, "warnings", None) or []) if w not in seen)
        return seen

    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        return [s for part in self.parts for s in part.gpu_series(end, lookback_s, slice_s)]

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        return [s for part in self.parts for s in part.job_io_series(end, lookback_s, slice_s)]

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        return [h for part in self.parts for h in gpu_history(part, end, lookback_s, slice_s)]


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
    runbook_max_level: Any = None  # callable(runbook_id) -> int | None: agent/guardrail/runbook_limits.py applies it
    changes: Any = None  # agent.records.changes.ChangeStore: change governance at each sweep (docs/changes.md)
    # Raw samples are large and can be re-read from the cluster, so they stay out of checkpoints.
    _observations: OrderedDict[str, Observation] = field(default_factory=OrderedDict)
    # The last finished-job history read (when, what): a re-read of one job before acting reuses its sweep's.
    _finished_read: tuple[datetime, list[FinishedJob]] | None = None

    def lookback_s(self) -> float:
        return sweep_grid(self.policy).lookback_s

    def observe(self, at: datetime | None = None) -> Observation:
        """Read the whole cluster: a fixed handful of backend calls whatever its size."""
        at = at or self.clock.now()
        # Jobs first: on Slurm the metrics map dcgm-exporter's hpc_job label through this listing, so every
        # series read below (the coarse history included) is mapped with the jobs this sweep judges.
        jobs = _read("scheduler", self.scheduler.list_jobs)
        nodes = _read("scheduler", self.scheduler.list_nodes)
        pools = _read("node pools", self.pools.list_pools)
        return self._observe(at, self.metrics, jobs, nodes, pools, listing_calls=3)

    def unread(self, reason: str, at: datetime | None = None) -> Observation:
        """What a sweep knows when the cluster could not be read: nothing, and why (so nothing is judged)."""
        grid = sweep_grid(self.policy)
        return Observation(at=at or self.clock.now(), slice_s=grid.slice_s, lookback_s=grid.lookback_s,
                           currency=self.currency, degraded=[reason])

    def observe_job(self, job: JobInfo, at: datetime | None = None) -> Observation:
        """Re-read one job right before acting on it, with the context a sweep judges it in: its own series over the
        detectors' windows and its log, and, for a pod of a distributed job (core.cluster.job_gang), every pod of
        that job (one scheduler list call, then theirs): a stop of one pod kills them all, and a rank that waits
        for a working one is part of a working job (agent/detectors/gang.py). The list failing fails the re-read
        (BackendUnavailable): the action is then not taken.

        Bounded whatever the cluster's size: a metrics source that can scope its queries to one job
        (`for_job`, e.g. a PromQL label matcher) does, per pod; any other is filtered to the pods after reading.
        """
        at = at or self.clock.now()
        jobs, calls = [job], 0
        gang = job_gang(job)
        if gang is not None:
            listed = _read("scheduler (the other pods of its distributed job)", self.scheduler.list_jobs)
            jobs += [j for j in listed if j.id != job.id and job_gang(j) == gang]
            calls = 1
        for_job = getattr(self.metrics, "for_job", None)
        if callable(for_job):
            metrics: Any = for_job(job) if len(jobs) == 1 else ScopedMetrics([for_job(j) for j in jobs])
        else:
            metrics = JobMetrics(self.metrics, frozenset(j.id for j in jobs))
        return self._observe(at, metrics, jobs, [], [], listing_calls=calls, whole=False)

    def _observe(self, at: datetime, metrics: Any, jobs: list[JobInfo], nodes: list[NodeInfo],
                 pools: list[PoolInfo], *, listing_calls: int, whole: bool = True) -> Observation:
        grid = sweep_grid(self.policy)
        slice_s, lookback, coarse_s = grid.slice_s, grid.lookback_s, grid.history_slice_s
        history = (_read("metrics", lambda: gpu_history(metrics, at, grid.history_lookback_s, coarse_s))
                   if grid.history_lookback_s else [])
        gpus = _read("metrics", lambda: metrics.gpu_series(at, lookback, slice_s))
        io = _read("metrics", lambda: metrics.job_io_series(at, lookback, slice_s))
        obs = Observation(
            at=at,
            slice_s=slice_s,
            lookback_s=lookback,
            currency=self.currency,
            jobs=jobs,
            nodes=nodes,
            pools=pools,
            gpus=gpus,
            io=io,
            history=history,
            history_slice_s=coarse_s if history else 0.0,
            backend_calls=listing_calls + (3 if history else 2),
        )
        # Partial answers (Prometheus warnings, a Thanos store that did not answer) of this sweep's reads.
        obs.degraded = list(getattr(metrics, "warnings", None) or [])
        # A sweep's metrics are stale when no GPU has a sample in the newest slice; a re-read of one job before an
        # action, when no GPU of it (or of a pod of its distributed job) on some node has: nothing is judged idle or
        # hung on it, and the guardrail refuses the action (execute.fresh_facts, Facts.stale_metrics).
        stale = stale_metrics(gpus, at, slice_s) if whole else stale_job_metrics(gpus, jobs, at, slice_s)
        if stale is not None:
            obs.degraded.append(stale)
        # Logs are read per job, so only for jobs whose GPUs look quiet or pinned.
        span = timedelta(seconds=log_span(self.policy))
        logs = {}
        redactor = self.policy.redaction.redactor()
        for job_id in log_candidates(obs, self.policy):
            lines = _read(f"logs of {job_id}", partial(self.logs.tail, job_id, at - span, at, limit=500))
            logs[job_id] = analyse_log(job_id, lines, at, redactor)
            unread = getattr(self.logs, "unread_log", None)
            if callable(unread) and (why := unread(job_id)):
                logs[job_id] = logs[job_id].model_copy(update={"unread": why})
            obs.backend_calls += 1
        obs.logs = logs
        # What the jobs have shown themselves to be: a server that answered requests stays one for its life, after
        # its request lines leave the span read above (agent/detectors/serving.py). Unreadable: nothing is judged.
        obs.answered = _read("audit log", lambda: answered_requests(self.audit, jobs))
        obs.notes = list(getattr(self.scheduler, "warnings", None) or [])
        obs.finished = self._finished(at, jobs, reuse=not whole)
        return obs

    def _finished(self, at: datetime, jobs: list[JobInfo], *, reuse: bool = False) -> list[FinishedJob]:
        """Jobs that ended over the doomed-job history (docs/doomed-jobs.md), of the users of `jobs`. A scheduler
        that reports none, or fails to, gives no history: no job is judged doomed, nothing else changes.

        `reuse`: a re-read of one job before acting takes the history its sweep read, when that is at most
        FINISHED_REUSE_S old: a week of outcomes does not change within a sweep, and one list call per action
        would grow with the actions (the job's own state is re-read all the same)."""
        rule = self.policy.detectors.doomed
        read = getattr(self.scheduler, "list_finished", None)
        if not rule.enabled or not callable(read) or not jobs:
            return []
        users = {j.user for j in jobs}
        cached = self._finished_read
        if reuse and cached is not None and 0 <= (at - cached[0]).total_seconds() <= FINISHED_REUSE_S:
            history = cached[1]
        else:
            try:
                history = list(read(at - timedelta(seconds=rule.history)))
            except Exception:  # noqa: BLE001 - history is advice only; a sweep never fails for it
                return []
            self._finished_read = (at, history)
        return [f for f in history if f.user in users and f.ended_at <= at]

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
