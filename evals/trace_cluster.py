"""TraceCluster: a recorded GPU trace behind the metrics, scheduler, log and pool protocols.

Each container is a one-GPU job on its own node, holding its memory. It starts at its
first sample and, when its samples stop well before the trace does, ends at its last.
Slices (end - slice_s, end] are precomputed per container with numpy, so a sweep over
thousands of containers costs array slicing, not a pass over raw samples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import numpy as np

from core.cluster import (
    GpuHistory,
    GpuSeries,
    JobInfo,
    JobIoSeries,
    LogLine,
    NodeInfo,
    PoolInfo,
    ResizeResult,
    StopResult,
    expected_samples,
)
from evals.trace import ContainerTrace, Trace

NAMESPACE = "trace"
POOL = "trace-pool"


def job_id(container: str) -> str:
    return f"{NAMESPACE}/{container}"


@dataclass(frozen=True, slots=True)
class TraceStop:
    container: str
    at: float  # seconds from the trace start
    force: bool


@dataclass(slots=True)
class _Slices:
    """One container's per-slice aggregates on one grid; index 0 is global slice `first`."""

    first: int
    util_max: np.ndarray  # NaN where no valid sample
    util_min: np.ndarray
    util_sum: np.ndarray
    count: np.ndarray
    mem_last: np.ndarray  # latest memory sample in the slice, NaN where none


def _slices(c: ContainerTrace, phase: float, slice_s: float) -> _Slices:
    idx = np.ceil((c.t - phase) / slice_s - 1e-9).astype(np.int64) - 1  # slice i covers (phase+i*s, phase+(i+1)*s]
    first = int(idx[0])
    rel = idx - first
    n = int(rel[-1]) + 1
    valid = ~np.isnan(c.util)
    count = np.bincount(rel[valid], minlength=n)
    util_sum = np.bincount(rel[valid], weights=c.util[valid], minlength=n)
    util_max = np.full(n, -np.inf)
    np.maximum.at(util_max, rel[valid], c.util[valid])
    util_max[count == 0] = np.nan
    util_min = np.full(n, np.inf)
    np.minimum.at(util_min, rel[valid], c.util[valid])
    util_min[count == 0] = np.nan
    mem_last = np.full(n, np.nan)
    has_mem = ~np.isnan(c.mem_mb)
    mem_last[rel[has_mem]] = c.mem_mb[has_mem]  # later samples overwrite earlier ones
    return _Slices(first, util_max, util_min, util_sum, count, mem_last)


# Where the trace's own first timestamp is no date (an offset past year 9999): only differences between its
# timestamps mean anything (the GenAI trace shifts them for privacy), so the replay starts it here instead.
FALLBACK_START = datetime(2000, 1, 1, tzinfo=UTC)


def _epoch(trace: Trace) -> datetime:
    try:
        start = datetime.fromtimestamp(trace.start_epoch, UTC)
        start + timedelta(seconds=trace.duration_s + 86400)  # the whole replay must stay a date too
    except (ValueError, OverflowError, OSError):
        return FALLBACK_START
    return start


class TraceCluster:
    """Implements MetricsSource, JobScheduler, LogSource, NodePools and Clock over one trace."""

    def __init__(self, trace: Trace, *, start: datetime | None = None, gpu_model: str = "trace-gpu",
                 price_per_gpu_hour: float = 0.0) -> None:
        self.trace = trace
        self.start = start or _epoch(trace)
        self.offset_s = 0.0
        self.backend_calls = 0
        self.gpu_model = gpu_model
        self.price = price_per_gpu_hour
        self.stops: list[TraceStop] = []
        self._stopped: dict[str, float] = {}
        self._cache: dict[tuple[float, float], dict[str, _Slices]] = {}

    # -- clock -----------------------------------------------------------------------------------
    def now(self) -> datetime:
        return self.start + timedelta(seconds=self.offset_s)

    def advance_to(self, offset_s: float) -> None:
        if offset_s < self.offset_s:
            raise ValueError(f"the replay clock only moves forward ({offset_s} < {self.offset_s})")
        self.offset_s = float(offset_s)

    def offset_of(self, at: datetime) -> float:
        return (at - self.start).total_seconds()

    # -- lifecycle -------------------------------------------------------------------------------
    def state(self, c: ContainerTrace, at: float) -> str | None:
        """running / cancelled (stopped by us) / completed (really ended); None before it starts."""
        if at < c.first:
            return None
        if c.id in self._stopped:
            return "cancelled"
        if self.trace.ended_inside(c) and at > c.last:
            return "completed"
        return "running"

    def _job(self, c: ContainerTrace, state: str) -> JobInfo:
        return JobInfo(id=job_id(c.id), uid=f"container:{c.id}", scheduler="kubernetes", namespace=NAMESPACE, name=c.id,
                       user=f"owner-{c.id[:6]}", gpus=1, node=f"node-{c.id}", state=state,  # type: ignore[arg-type]
                       started_at=self.start + timedelta(seconds=c.first))  # owner unknown: the trace does not say

    def running(self) -> list[ContainerTrace]:
        return [c for c in self.trace.containers.values() if self.state(c, self.offset_s) == "running"]

    # -- scheduler -------------------------------------------------------------------------------
    def list_jobs(self) -> list[JobInfo]:
        self.backend_calls += 1
        return [self._job(c, "running") for c in self.running()]

    def get_job(self, job: str) -> JobInfo | None:
        self.backend_calls += 1
        c = self.trace.containers.get(job.removeprefix(f"{NAMESPACE}/"))
        state = self.state(c, self.offset_s) if c is not None else None
        return self._job(c, state) if c is not None and state is not None else None

    def list_nodes(self) -> list[NodeInfo]:
        self.backend_calls += 1
        return [NodeInfo(name=f"node-{c.id}", pool=POOL, gpus=1, gpu_model=self.gpu_model, jobs=[job_id(c.id)])
                for c in self.running()]

    def stop_job(self, job: str, *, force: bool, grace_s: float, reason: str, uid: str | None = None) -> StopResult:
        self.backend_calls += 1
        cid = job.removeprefix(f"{NAMESPACE}/")
        c = self.trace.containers.get(cid)
        if c is None or self.state(c, self.offset_s) != "running":
            return StopResult(job=job, status="already_gone", detail="not running")
        if self.offset_s < self.trace.act_after_s:
            return StopResult(job=job, status="refused", detail="replay: no stops before --act-after")
        self._stopped[cid] = self.offset_s
        self.stops.append(TraceStop(cid, self.offset_s, force))
        return StopResult(job=job, status="stopped", detail="replay: the container is gone from here on")

    def stop_offset(self, container: str) -> float | None:
        return self._stopped.get(container)

    # -- pools -----------------------------------------------------------------------------------
    def list_pools(self) -> list[PoolInfo]:
        self.backend_calls += 1
        n = len(self.running())
        # Reserved billing: a recorded trace cannot show what a resize would have freed.
        return [PoolInfo(name=POOL, gpu_model=self.gpu_model, gpus_per_node=1, nodes=n, min_nodes=0,
                         price_per_gpu_hour=self.price, billing="reserved", busy_nodes=n)]

    def resize_pool(self, pool: str, target_nodes: int, *, reason: str) -> ResizeResult:
        n = len(self.running())
        return ResizeResult(pool=pool, status="refused", nodes_before=n, nodes_after=n,
                            detail="a trace replay does not resize pools")

    # -- logs ------------------------------------------------------------------------------------
    def tail(self, job: str, since: datetime, until: datetime, limit: int = 200) -> list[LogLine]:
        self.backend_calls += 1
        return []  # the trace has no logs

    # -- metrics ---------------------------------------------------------------------------------
    def _grid(self, phase: float, slice_s: float) -> dict[str, _Slices]:
        key = (round(phase, 6), slice_s)
        grid = self._cache.get(key)
        if grid is None:
            grid = {cid: _slices(c, phase, slice_s) for cid, c in self.trace.containers.items()}
            self._cache[key] = grid
        return grid

    def _window(self, end: datetime, lookback_s: float, slice_s: float) -> list[tuple]:
        """(container, its slices, first index, end index, empty slices to pad, expected) per running container."""
        end_off = self.offset_of(end)
        n = max(1, math.ceil(lookback_s / slice_s - 1e-6))
        phase = end_off % slice_s
        last = round((end_off - phase) / slice_s) - 1  # global index of the slice ending at `end`
        grid = self._grid(phase, slice_s)
        expected = expected_samples(slice_s, self.trace.interval_s)
        out = []
        for c in self.running():
            s = grid[c.id]
            lo = max(last - n + 1, s.first) - s.first
            hi = last - s.first + 1
            if hi <= 0:
                continue
            lo = min(lo, len(s.count))
            hi_in = min(hi, len(s.count))
            pad = hi - max(lo, hi_in)  # slices after its last sample (a gap so far)
            out.append((c, s, lo, hi_in, pad, expected))
        return out

    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        self.backend_calls += 1
        out = []
        for c, s, lo, hi_in, pad, expected in self._window(end, lookback_s, slice_s):
            umax = s.util_max[lo:hi_in]
            cnt = s.count[lo:hi_in]
            avg = np.divide(s.util_sum[lo:hi_in], cnt, out=np.full(len(cnt), np.nan), where=cnt > 0)
            mem = s.mem_last[lo:hi_in]
            mem_known = mem[~np.isnan(mem)]
            # Built from typed numpy slices, so pydantic's per-element validation is skipped (a 50k sweep).
            out.append(GpuSeries.model_construct(
                job=job_id(c.id), node=f"node-{c.id}", gpu=0, model=self.gpu_model, slice_s=slice_s,
                util_max=[None if math.isnan(v) else v for v in umax.tolist()] + [None] * pad,
                util_avg=[None if math.isnan(v) else v for v in avg.tolist()] + [None] * pad,
                samples=cnt.tolist() + [0] * pad, expected=expected,
                mem_used_mb=float(mem_known[-1]) if len(mem_known) else None,
            ))
        return out

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        """Coarse max, min, mean and sample count per running container, on the same grid as gpu_series."""
        self.backend_calls += 1
        out = []
        for c, s, lo, hi_in, pad, expected in self._window(end, lookback_s, slice_s):
            cnt = s.count[lo:hi_in]
            avg = np.divide(s.util_sum[lo:hi_in], cnt, out=np.full(len(cnt), np.nan), where=cnt > 0)
            out.append(GpuHistory.model_construct(
                job=job_id(c.id), node=f"node-{c.id}", gpu=0, slice_s=slice_s, expected=expected,
                util_max=[None if math.isnan(v) else v for v in s.util_max[lo:hi_in].tolist()] + [None] * pad,
                util_min=[None if math.isnan(v) else v for v in s.util_min[lo:hi_in].tolist()] + [None] * pad,
                util_avg=[None if math.isnan(v) else v for v in avg.tolist()] + [None] * pad,
                samples=cnt.tolist() + [0] * pad,
            ))
        return out

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        self.backend_calls += 1
        return []  # the trace has no CPU, network or disk columns
