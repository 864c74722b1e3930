"""What one sweep saw: jobs, nodes, pools, metric slices and log progress, at one instant."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, PrivateAttr

from core.cluster import FinishedJob, GpuHistory, GpuSeries, JobInfo, JobIoSeries, NodeInfo, PoolInfo


class LogProgress(BaseModel):
    """What a job's recent log says about progress (see tools/log_progress.py)."""

    model_config = ConfigDict(extra="forbid")

    job: str
    lines: int = 0  # lines in the inspected span
    last_line_at: datetime | None = None
    progress_lines: int = 0  # lines whose counters (step, loss, shard n/N, ...) changed
    first_progress_at: datetime | None = None
    last_progress_at: datetime | None = None
    typical_gap_s: float | None = None  # median gap between progress lines
    last_step: float | None = None
    # Requests the log shows the job answering (a POST to a path that is neither a health check nor a notebook
    # server's own API): a service at work, however rare (agent/detectors/serving.py). One path, without its query.
    requests: int = 0
    request_path: str | None = None
    # Of those, the ones it answered with a server error (HTTP 5xx): a caller served nothing, so no progress; a
    # server whose every request fails is broken, not busy (a poisoned CUDA context behind a healthy /healthz).
    failed_requests: int = 0
    tail: list[str] = []
    # The last burst's announcement of a write or load of the job's state that no line finished (a checkpoint to NFS,
    # a model read from a network volume): tools/log_progress.py state_io_announced.
    state_io: str | None = None
    # Why a log that exists could not be read (a Slurm StdOut another uid owns): unknown, not empty.
    unread: str | None = None
    # The failure line (a Python exception, a signal death, a non-zero exit) after the newest progress line: the
    # job's process ended, so its earlier progress shows no work now (tools/log_progress.py _FAILURE).
    ended: str | None = None
    # A launcher's verdict that one rank's process died, after the newest progress line: srun's "task 7: Exited with
    # exit code 1", torchrun's "failed (exitcode: 1) local_rank: 7", mpirun's "process rank 7 ... exited on signal".
    # Narrower than `ended`: a caught subprocess error or a killed side monitor names no rank.
    rank_died: str | None = None

    def advanced_since(self, since: datetime) -> bool:
        """Whether the log shows work at or after `since`: a progress line then, and no failure after it. The one
        reading of a log as protection from a stop (a crashed job's last steps protect nothing); the time of the last
        progress stays a fact (when the waste began, how long a hung job has been silent)."""
        return self.ended is None and self.last_progress_at is not None and self.last_progress_at >= since


class AnsweredRequests(BaseModel):
    """A job the steward once saw answering requests in its log (agent/detectors/serving.py): what a job has shown
    itself to be does not expire while it lives, so a server stays one after its request lines leave the log read.
    Remembered in the audit log (kind `served`) under the job's uid, never its name, across sweeps and restarts."""

    model_config = ConfigDict(extra="forbid")

    at: datetime  # the sweep that first saw it
    requests: int = 0  # in that sweep's log read
    failed_requests: int = 0
    request_path: str | None = None


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid")

    at: datetime
    slice_s: float
    lookback_s: float
    currency: str = "USD"
    jobs: list[JobInfo] = []
    nodes: list[NodeInfo] = []
    pools: list[PoolInfo] = []
    gpus: list[GpuSeries] = []
    io: list[JobIoSeries] = []
    # Coarse max/sample counts over the long-tail lookback (agent/detectors/history.py); empty when not read.
    history: list[GpuHistory] = []
    history_slice_s: float = 0.0
    # What an idle GPU of each model drew, read across the cluster by the sweep (agent/detectors/keepalive.py,
    # idle_draws): handed to a re-check that reads one job alone, which sees no idle GPU to measure it on.
    fleet_idle_w: dict[str, float] = {}
    # The CPU/IO fields the metrics source reads, as the sweep's reading of the whole cluster showed them: handed to a
    # re-check that reads a few jobs, whose series cannot show that a field missing for them is read for others (a
    # job whose every CPU/IO series vanished is unknown, not idle). Added to what the observation's own series show.
    io_fields: list[str] = []
    logs: dict[str, LogProgress] = {}
    # Jobs (by id) that an earlier sweep saw answering requests, remembered under their uid (AnsweredRequests).
    answered: dict[str, AnsweredRequests] = {}
    # Jobs that ended recently (the doomed-job detector's history); empty when the scheduler reports none.
    finished: list[FinishedJob] = []
    backend_calls: int = 0  # requests this observation cost (for the benchmarks)
    # What the scheduler's listing left out and why (a Slurm row that did not check out, a job id in two records, a
    # log not read): those jobs only; every other job is judged as usual, unlike `degraded`.
    notes: list[str] = []
    # Why the metrics may be incomplete (e.g. a partial Thanos response, Prometheus warnings); empty = complete.
    # The idle and zombie detectors make no job finding on degraded data (agent/detectors/longtail.py).
    degraded: list[str] = []
    # Derived once per observation (agent/detectors/signals.py), never serialised.
    _signals: Any = PrivateAttr(default=None)
    _gpu_total: tuple[tuple[int, int], int] | None = PrivateAttr(default=None)
    _jobs_index: dict[str, JobInfo] | None = PrivateAttr(default=None)

    def jobs_by_id(self) -> dict[str, JobInfo]:
        """Jobs by id; built once per observation (every decision of a sweep looks its target up)."""
        if self._jobs_index is None or len(self._jobs_index) != len(self.jobs):
            self._jobs_index = {j.id: j for j in self.jobs}
        return self._jobs_index

    def gpus_by_job(self) -> dict[str, list[GpuSeries]]:
        out: dict[str, list[GpuSeries]] = {}
        for series in self.gpus:
            if series.job is not None:
                out.setdefault(series.job, []).append(series)
        return out

    def io_by_job(self) -> dict[str, JobIoSeries]:
        return {s.job: s for s in self.io}

    def price_for_node(self, node: str | None) -> float:
        pool_of = {n.name: n.pool for n in self.nodes}
        prices = {p.name: p.price_per_gpu_hour for p in self.pools}
        return prices.get(pool_of.get(node or "") or "", 0.0)

    def cluster_gpus(self) -> int:
        """GPUs on every node; counted once, since each guarded action of a sweep asks."""
        key = (id(self.nodes), len(self.nodes))
        if self._gpu_total is None or self._gpu_total[0] != key:
            self._gpu_total = (key, sum(n.gpus for n in self.nodes))
        return self._gpu_total[1]
