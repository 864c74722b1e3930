"""The small protocols every cluster adapter implements: metrics, jobs, logs, pools, notifier.

Each has a real adapter (Prometheus, Kubernetes, Slurm, cloud APIs, chat webhooks) and a
simulated one in `sim/` that behaves alike. Read calls cost a fixed number of backend
requests per sweep, whatever the cluster size.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol, runtime_checkable

from core.cluster import (
    FinishedJob,
    GpuHistory,
    GpuSeries,
    JobInfo,
    JobIoSeries,
    LogLine,
    NodeInfo,
    NotifyResult,
    PoolInfo,
    ResizeResult,
    StopResult,
)


@runtime_checkable
class MetricsSource(Protocol):
    """GPU and process metrics, aggregated into equal time slices ending at `end`."""

    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        """Per-GPU slice aggregates for every GPU that reported in the lookback."""
        ...

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        """Per-job process CPU, network and disk slice averages."""
        ...

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        """Per-GPU coarse max utilisation and sample counts (tools/history.py has the default)."""
        ...


@runtime_checkable
class JobScheduler(Protocol):
    """Jobs and nodes as the scheduler (Kubernetes or Slurm) sees them; stops jobs."""

    def list_jobs(self) -> list[JobInfo]:
        """Every job that holds or waits for GPUs now (running and pending)."""
        ...

    def get_job(self, job_id: str) -> JobInfo | None:
        """Fresh state of one job, or None when the scheduler no longer knows it."""
        ...

    def list_nodes(self) -> list[NodeInfo]:
        ...

    def stop_job(self, job_id: str, *, force: bool, grace_s: float, reason: str, uid: str | None = None) -> StopResult:
        """Graceful stop (SIGTERM, then wait grace_s) or forced reclaim; idempotent.

        With `uid`, only the job with that immutable identity is stopped: a namesake is `refused`."""
        ...


@runtime_checkable
class FinishedJobSource(Protocol):
    """Optional on a JobScheduler: jobs that ended since a moment, with how they ended (docs/doomed-jobs.md).
    A scheduler without it reports no history, and no job is judged doomed."""

    def list_finished(self, since: datetime) -> list[FinishedJob]:
        ...


@runtime_checkable
class LogSource(Protocol):
    def tail(self, job_id: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        """Log lines a job wrote in [since, until], oldest first, at most `limit` (the newest)."""
        ...


@runtime_checkable
class NodePools(Protocol):
    def list_pools(self) -> list[PoolInfo]:
        ...

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str) -> ResizeResult:
        """Set a pool's size; only nodes that run no job may go. Idempotent."""
        ...


@runtime_checkable
class Notifier(Protocol):
    def notify(self, recipient: str, subject: str, body: str, *, job_id: str | None = None,
               deadline: datetime | None = None, target_uid: str | None = None) -> NotifyResult:
        """deadline: the earliest stop the message announces (a warning), for channels that carry it apart from
        the text (the Kubernetes pod annotation); None for advice and digests. target_uid: the job's immutable
        identity, so a namesake (a new pod under the same name) is never taken for the job warned, nor the other way
        round (a channel that writes to the pod writes only to that uid; a channel that drops duplicates keys on it)."""
        ...


@runtime_checkable
class Clock(Protocol):
    def now(self) -> datetime:
        ...
