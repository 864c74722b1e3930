"""NvmlMetrics: a MetricsSource over one node's NVML readings kept in memory (single-server use, no Prometheus)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime

from core.cluster import GpuHistory, GpuSeries, JobIoSeries, expected_samples
from tools.nvml import GpuReading, NvmlCollector
from tools.pid_jobs import ProcessOwner


def default_job_id(owner: ProcessOwner | None) -> str | None:
    if owner is None:
        return None
    return owner.pod or (f"pod-uid/{owner.pod_uid}" if owner.pod_uid else owner.slurm_job)


class NvmlMetrics:
    """Call sample() every `interval_s` (a loop or timer); gpu_series() aggregates what was kept.

    NVML sees no process CPU, network or disk, so job_io_series() is empty: the zombie detector, which needs
    frozen I/O to be seen, never fires on NVML alone (the safe side).
    """

    def __init__(self, collector: NvmlCollector, *, interval_s: float = 10.0, keep_s: float = 6 * 3600.0,
                 job_id: Callable[[ProcessOwner | None], str | None] = default_job_id) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be positive, got {interval_s}")
        self.collector = collector
        self.interval_s = interval_s
        self.job_id = job_id
        self._readings: deque[tuple[float, list[GpuReading]]] = deque(maxlen=max(int(keep_s / interval_s), 1) + 1)

    def sample(self) -> list[GpuReading]:
        readings = self.collector.read()
        self._readings.append((readings[0].at if readings else self.collector.clock(), readings))
        return readings

    def gpu_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        expected = expected_samples(slice_s, self.interval_s)
        return [GpuSeries(
            job=job, node=self.collector.hostname, gpu=index, uuid=r.uuid, model=r.model, slice_s=slice_s,
            util_max=[max(u) if u else None for u in utils], util_avg=[sum(u) / len(u) if u else None for u in utils],
            samples=counts, expected=expected, mem_used_mb=r.mem_used_mb,
            temp_c_max=max(temps) if temps else None, power_w_avg=sum(powers) / len(powers) if powers else None,
            xid_last=r.xid, xid_at=datetime.fromtimestamp(r.xid_at, UTC) if r.xid_at is not None else None,
        ) for (index, job), (utils, counts, r, temps, powers) in self._collect(end, lookback_s, slice_s)]

    def gpu_history(self, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        """Coarse max, min and sample count per GPU, from the same kept readings."""
        expected = expected_samples(slice_s, self.interval_s)
        return [GpuHistory(
            job=job, node=self.collector.hostname, gpu=index, slice_s=slice_s, expected=expected, samples=counts,
            util_max=[max(u) if u else None for u in utils], util_min=[min(u) if u else None for u in utils],
        ) for (index, job), (utils, counts, _, _, _) in self._collect(end, lookback_s, slice_s)]

    def _collect(self, end: datetime, lookback_s: float, slice_s: float) -> list:
        """((gpu index, job), (per-slice utilisations, counts, newest reading, temps, powers)) per GPU."""
        n = max(math.ceil(lookback_s / slice_s - 1e-9), 1)
        t_end = end.timestamp()
        t_start = t_end - n * slice_s
        # (gpu index, job) -> per-slice lists of utilisation, plus the newest reading
        series: dict[tuple[int, str | None], tuple[list[list[float]], list[int], GpuReading, list[float], list[float]]] = {}
        latest: dict[int, tuple[float, str | None]] = {}
        for at, readings in self._readings:
            if not t_start < at <= t_end:
                continue
            i = min(max(math.ceil((at - t_start) / slice_s - 1e-9) - 1, 0), n - 1)  # slices are (start, end]
            for r in readings:
                job = self.job_id(r.owner())
                utils, counts, _, temps, powers = series.setdefault(
                    (r.index, job), ([[] for _ in range(n)], [0] * n, r, [], []))
                series[(r.index, job)] = (utils, counts, r, temps, powers)
                if r.util is not None:
                    utils[i].append(r.util)
                    counts[i] += 1
                if r.temp_c is not None:
                    temps.append(r.temp_c)
                if r.power_w is not None:
                    powers.append(r.power_w)
                if r.index not in latest or at >= latest[r.index][0]:
                    latest[r.index] = (at, job)
        # One series per GPU: the job that holds it now.
        return [(key, value) for key, value in sorted(series.items(), key=lambda kv: str(kv[0]))
                if latest.get(key[0], (0, None))[1] == key[1]]

    def job_io_series(self, end: datetime, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        return []
