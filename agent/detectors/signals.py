"""Per-job and per-node slice summaries, grouped once per sweep and shared by every detector.

Series are aligned from the END: the newest slice is last and ends at `obs.at`. A slice a
series does not reach counts as a slice with no samples, never as a quiet one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from agent.detectors.history import CoarseHistory, align_end, merge_history
from core.cluster import GpuHistory, GpuSeries, JobIoSeries
from core.durations import format_duration
from core.observation import Observation

__all__ = ["CoarseHistory", "align_end"]

# A quiet stretch is only as long as it was watched: a slice whose missing samples could hide more than a GPU-minute
# of work (the material line: longtail.material_gpu_seconds, the replay scorer's MATERIAL_WORK_GPU_S) ends it.
UNSEEN_GPU_S = 60.0


def window_slices(seconds: float, slice_s: float) -> int:
    """How many of the newest slices make a window of `seconds`."""
    return max(1, math.ceil(seconds / slice_s - 1e-9))


def valid_pct(value: float | None) -> float | None:
    return value if value is not None and 0.0 <= value <= 100.0 else None


@dataclass(slots=True)
class JobSeries:
    """One job's GPUs aggregated per slice over the whole lookback (oldest first)."""

    job_id: str
    at: datetime
    slice_s: float
    gpus: list[GpuSeries]
    io: JobIoSeries | None = None
    util_max: list[float | None] = field(default_factory=list)  # max over GPUs; None unless every GPU had a sample
    util_avg: list[float | None] = field(default_factory=list)  # mean over GPUs; same rule
    samples: list[int] = field(default_factory=list)  # valid samples over GPUs
    expected: list[int] = field(default_factory=list)
    # Its GPUs' coarse history over the long-tail lookback; merged only when asked (few jobs are quiet).
    history_gpus: list[GpuHistory] = field(default_factory=list)
    history_ratio: int = 0
    started_at: datetime | None = None  # the job's start, when the scheduler knows it
    # GPUs whose newest slice misses samples: one sample each there is the store's lag, not a gap (unseen_gpu_s).
    lagging_gpus: int = 0
    degraded: tuple[str, ...] = ()  # why the sweep's metrics may be incomplete (partial reads); empty = complete
    _history: CoarseHistory | None = None
    _merged: bool = False

    @property
    def length(self) -> int:
        return len(self.util_max)

    @property
    def history(self) -> CoarseHistory | None:
        if not self._merged:
            self._history = merge_history(self.history_gpus, self.history_ratio)
            self._merged = True
        return self._history

    def work_gpu_s(self, k: int) -> float:
        """The GPU-seconds of work fine slice k holds (its average over the GPUs, for the whole slice, on each);
        infinite when it cannot be bounded: no valid reading, or samples missing."""
        mean = self.util_avg[k]
        if mean is None or self.util_max[k] is None or self.samples[k] < self.expected[k]:
            return math.inf
        return mean / 100.0 * self.slice_s * len(self.gpus)

    def unseen_gpu_s(self, k: int) -> float:
        """GPU-seconds of fine slice k that no sample covers (its missing samples times the sample interval, over
        its GPUs): the most work the slice's gaps could hide.

        In the newest slice one missing sample per GPU is not counted: that is the store's lag (VictoriaMetrics
        leaves out its newest 30 s by default, -search.latencyOffset; remote-write stores lag a scrape; a scrape
        may be in flight when the query lands), the time not yet seen, as at a sweep one sample earlier. Counted,
        it read as 30 s x GPUs unseen, more than UNSEEN_GPU_S for any job of 3 GPUs or more, which was then never
        quiet. A GPU that misses more than that one sample still counts the rest; one that reports nothing has no
        valid reading there, which ends a quiet stretch whatever is unseen."""
        expected, samples = self.expected[k], self.samples[k]
        if k == self.length - 1:
            samples += self.lagging_gpus
        if expected <= 0 or samples >= expected:
            return 0.0
        return (expected - samples) * self.slice_s * len(self.gpus) / expected

    def quiet_run(self, threshold_pct: float, material_gpu_s: float = 0.0, limit: int | None = None) -> tuple[int, float]:
        """The current quiet stretch: newest slices in a row where every GPU stayed at or below `threshold_pct`,
        or whose activity (blips) adds up to less than `material_gpu_s` GPU-seconds over the stretch (0: any
        activity ends it). A slice without a valid reading ends it, as does a blip with samples missing, and a
        slice whose gaps could hide more than a GPU-minute of work (UNSEEN_GPU_S): an exporter dark for minutes
        at the decisive sweep, while the owner ran a cell, left a window 90 % covered and a stop licensed by a
        warning from before. Past the fine slices it reads the coarse history. `limit`: stop counting there.

        Returns (slices, GPU-seconds of work inside the stretch)."""
        count = 0
        spent = 0.0
        stop = self.length if limit is None else min(limit, self.length)
        for k in range(self.length - 1, self.length - 1 - stop, -1):
            value = self.util_max[k]
            if value is None or self.unseen_gpu_s(k) > UNSEEN_GPU_S:
                break
            if value > threshold_pct:
                work = self.work_gpu_s(k)
                if material_gpu_s <= 0 or spent + work >= material_gpu_s:
                    break
                spent += work
            count += 1
        if count == self.length and (limit is None or limit > count) and self.history is not None:
            more, spent = self.history.quiet_run_beyond(count, threshold_pct, material_gpu_s=material_gpu_s,
                                                        spent_gpu_s=spent, gpus=len(self.gpus))
            count += more
        return count, spent

    def quiet_slices(self, threshold_pct: float, material_gpu_s: float = 0.0) -> int:
        """Newest slices in a row where every GPU stayed at or below `threshold_pct`, blips under
        `material_gpu_s` in all aside (quiet_run)."""
        return self.quiet_run(threshold_pct, material_gpu_s)[0]

    def quiet_since(self, threshold_pct: float, material_gpu_s: float = 0.0) -> datetime:
        return self.at - timedelta(seconds=self.quiet_slices(threshold_pct, material_gpu_s) * self.slice_s)

    def window(self, seconds: float, requested: int | None = None) -> JobWindow:
        return JobWindow.of(self, window_slices(seconds, self.slice_s), requested)

    def coverage(self, lookback_s: float) -> HistoryCoverage:
        """How much of the last `lookback_s` (or of the job's life, when shorter) its GPUs' valid samples cover.

        Coverage = valid samples / expected samples, summed over the job's GPUs and the whole slices inside
        the span (a slice that straddles the job's start is left out). The coarse history is read when it
        is attached and the span reaches past the fine slices; a GPU without history, a slice it did not
        reach and a slice without a valid reading all add expected samples and no valid ones. An unknown
        start counts as older than the lookback: missing data is never taken for the job's own youth.
        """
        span = lookback_s
        lifetime = False
        if self.started_at is not None:
            age = max(0.0, (self.at - self.started_at).total_seconds())
            if age < lookback_s:
                span, lifetime = age, True
        if self.history_ratio > 0 and span > self.length * self.slice_s + 1e-9:
            step = self.slice_s * self.history_ratio
            index = {(h.node, h.gpu): h for h in self.history_gpus}
            columns = [(h.util_max, h.samples, h.expected) if (h := index.get((g.node, g.gpu))) is not None
                       else ([], [], g.expected * self.history_ratio) for g in self.gpus]
        else:
            step = self.slice_s
            columns = [(g.util_max, g.samples, g.expected) for g in self.gpus]
        n = math.floor(span / step + 1e-9)
        valid = expected = 0
        for maxes, counts, exp in columns:
            expected += exp * n
            if not n:
                continue
            for value, count in zip(align_end(maxes, n), align_end(counts, n), strict=True):
                if valid_pct(value) is not None and count:
                    valid += min(max(int(count), 0), exp)
        fraction = valid / expected if expected else (1.0 if n == 0 and self.gpus else 0.0)
        return HistoryCoverage(span_s=span, lookback_s=lookback_s, lifetime=lifetime, fraction=fraction)


def build_job_series(
    job_id: str, at: datetime, slice_s: float, gpus: list[GpuSeries], io: JobIoSeries | None
) -> JobSeries:
    length = max((len(g.util_max) for g in gpus), default=0)
    out = JobSeries(job_id=job_id, at=at, slice_s=slice_s, gpus=gpus, io=io)
    columns = []
    for g in gpus:
        exp = g.expected
        maxes = align_end(g.util_max, length)
        avgs = align_end(g.util_avg, length)
        counts = [min(max(int(c or 0), 0), exp) for c in align_end(g.samples, length)]
        # A slice counts only with a valid max, a valid average and at least one sample.
        keep = [
            m is not None and a is not None and c > 0 and 0.0 <= m <= 100.0 and 0.0 <= a <= 100.0
            for m, a, c in zip(maxes, avgs, counts, strict=True)
        ]
        columns.append((maxes, avgs, counts, keep))
    expected = sum(g.expected for g in gpus)
    out.expected = [expected] * length
    if length:
        out.lagging_gpus = sum(1 for g, col in zip(gpus, columns, strict=True) if col[2][-1] < g.expected)
    if len(columns) == 1:  # most jobs hold one GPU: its own slices, without a per-slice merge
        maxes, avgs, counts, keep = columns[0]
        if all(keep):  # share the GPU's lists rather than copy them
            out.util_max, out.util_avg = maxes, avgs
        else:
            out.util_max = [m if k else None for m, k in zip(maxes, keep, strict=True)]
            out.util_avg = [a if k else None for a, k in zip(avgs, keep, strict=True)]
        out.samples = counts
        return out
    n = len(columns)
    for k in range(length):
        if all(col[3][k] for col in columns):
            out.util_max.append(max(col[0][k] for col in columns))
            out.util_avg.append(sum(col[1][k] for col in columns) / n)
        else:
            out.util_max.append(None)
            out.util_avg.append(None)
        out.samples.append(sum(col[2][k] for col in columns))
    return out


@dataclass(frozen=True, slots=True)
class HistoryCoverage:
    """How much of a job's long-tail lookback its history covers (JobSeries.coverage)."""

    span_s: float  # the lookback, or the job's age when it is younger
    lookback_s: float
    lifetime: bool  # the job is younger than the lookback: judged on its life, which is not a gap
    fraction: float  # valid samples / expected samples over the span

    def gap(self, min_coverage: float) -> str | None:
        """Why the history cannot rule out a periodic job (retention or gaps), or None when it covers enough."""
        if self.fraction >= min_coverage:
            return None
        whole = f"the job's {format_duration(self.span_s)} life" if self.lifetime else (
            f"the {format_duration(self.lookback_s)} lookback")
        return (f"history covers only {format_duration(self.fraction * self.span_s)} ({self.fraction:.0%}) of {whole} "
                f"(retention or gaps): cannot rule out a periodic job")


@dataclass(frozen=True, slots=True)
class JobWindow:
    """A job over its newest `slices` slices: what every detector and its evidence reads."""

    series: JobSeries
    slices: int
    seconds: float
    coverage: float  # valid samples / expected, over all requested GPUs
    complete: bool  # every requested GPU has a valid sample in every slice
    max_util: float | None
    avg_util: float | None
    gpu_avg_util: list[float | None]  # per GPU, mean of its slice averages
    mem_gb: float
    cpu_avg: float | None
    cpu_max: float | None
    net_max: float | None
    disk_max: float | None  # disk read
    io_known: float  # share of slices with CPU, network and disk read all reported
    # Disk write (a copy to local disk, a checkpoint save): work like a read. Not in io_known: a source may not read it.
    disk_write_max: float | None = None

    @classmethod
    def of(cls, series: JobSeries, slices: int, requested: int | None = None) -> JobWindow:
        n = slices
        seen = len(series.gpus)
        missing_gpus = max(0, (requested or seen) - seen)
        maxes = align_end(series.util_max, n)
        avgs = align_end(series.util_avg, n)
        samples = sum(c or 0 for c in align_end(series.samples, n))
        per_gpu_expected = (sum(g.expected for g in series.gpus) / seen) if seen else 0.0
        expected = sum(g.expected for g in series.gpus) * n + missing_gpus * per_gpu_expected * n
        known = [v for v in maxes if v is not None]
        known_avg = [v for v in avgs if v is not None]
        gpu_avg: list[float | None] = []
        for g in series.gpus:
            vals = [v for v in (valid_pct(x) for x in align_end(g.util_avg, n)) if v is not None]
            gpu_avg.append(sum(vals) / len(vals) if vals else None)
        empty: list[float | None] = [None] * n
        cpu, net, disk, write = empty, empty, empty, empty
        if series.io is not None:
            cpu, net, disk, write = (
                align_end(series.io.cpu_pct, n),
                align_end(series.io.net_rx_mbps, n),
                align_end(series.io.disk_read_mbps, n),
                align_end(series.io.disk_write_mbps, n),
            )
        cpu_known = [v for v in cpu if v is not None]
        return cls(
            series=series,
            slices=n,
            seconds=n * series.slice_s,
            coverage=samples / expected if expected else 0.0,
            complete=seen > 0 and missing_gpus == 0 and len(known) == n,
            max_util=max(known) if known else None,
            avg_util=sum(known_avg) / len(known_avg) if known_avg else None,
            gpu_avg_util=gpu_avg,
            mem_gb=sum(g.mem_used_mb or 0.0 for g in series.gpus) / 1024.0,
            cpu_avg=sum(cpu_known) / len(cpu_known) if cpu_known else None,
            cpu_max=max(cpu_known) if cpu_known else None,
            net_max=max((v for v in net if v is not None), default=None),
            disk_max=max((v for v in disk if v is not None), default=None),
            io_known=sum(1 for c, r, d in zip(cpu, net, disk, strict=True) if None not in (c, r, d)) / n,
            disk_write_max=max((v for v in write if v is not None), default=None),
        )

    @property
    def at(self) -> datetime:
        return self.series.at

    def all_quiet(self, threshold_pct: float) -> bool:
        """Every GPU at or below the threshold in every slice (unknown slices are not quiet)."""
        return self.complete and self.max_util is not None and self.max_util <= threshold_pct

    def quiet(self, threshold_pct: float, material_gpu_s: float) -> bool:
        """Every slice known, and every GPU at or below the threshold but for blips that add up to less than
        `material_gpu_s` GPU-seconds over the window (JobSeries.quiet_run)."""
        if not self.complete:
            return False
        if self.max_util is not None and self.max_util <= threshold_pct:
            return True
        return self.series.quiet_run(threshold_pct, material_gpu_s, limit=self.slices)[0] >= self.slices

    def working_gpus(self, util_pct: float) -> int:
        return sum(1 for v in self.gpu_avg_util if v is not None and v >= util_pct)

    def io_summary(self) -> str:
        parts = []
        if self.cpu_avg is not None:
            parts.append(f"CPU {self.cpu_avg:.1f}%")
        if self.net_max is not None:
            parts.append(f"net max {self.net_max:.1f} MB/s")
        # The disk's busier direction, named when it is the writes: one figure says whether the job used its disk.
        if self.disk_write_max is not None and (self.disk_max is None or self.disk_write_max > self.disk_max):
            parts.append(f"disk write max {self.disk_write_max:.1f} MB/s")
        elif self.disk_max is not None:
            parts.append(f"disk max {self.disk_max:.1f} MB/s")
        return ", ".join(parts) if parts else "no CPU/IO metrics"


@dataclass(slots=True)
class ClusterSignals:
    """Every series grouped once: by job (aggregated) and by node (raw)."""

    jobs: dict[str, JobSeries]
    by_node: dict[str, list[GpuSeries]]
    history_by_node: dict[str, list[GpuHistory]] = field(default_factory=dict)  # nodes whose GPUs were all free
    history_ratio: int = 0
    # The CPU/IO fields the metrics source reported for any job this sweep: one it reads for others but not for a
    # job (its node's cAdvisor target down) is unknown for that job, not zero (`io_unread`).
    io_fields: frozenset[str] = frozenset()

    def io_unread(self, window: JobWindow, min_coverage: float) -> list[str]:
        """The CPU/IO fields the source reads for other jobs that this job's window lacks (known in fewer than
        `min_coverage` of its slices): its work off the GPU is unknown there."""
        io = window.series.io
        out = []
        for name in sorted(self.io_fields):
            values = align_end(getattr(io, name), window.slices) if io is not None else []
            if sum(1 for v in values if v is not None) < min_coverage * window.slices:
                out.append(name)
        return out

    def node_history(self, node: str) -> CoarseHistory | None:
        """An empty node's coarse history, merged on demand."""
        return merge_history(self.history_by_node.get(node, []), self.history_ratio)


def group_signals(obs: Observation) -> ClusterSignals:
    """One pass over obs.gpus and obs.io; cost is linear in the number of samples.

    Kept on the observation, so log selection, detection and every fresh re-check of one
    sweep group its metrics once.
    """
    key = (id(obs.gpus), len(obs.gpus), id(obs.io), len(obs.io), id(obs.history), len(obs.history), obs.at, obs.slice_s,
           id(obs.jobs), len(obs.jobs), tuple(obs.degraded), tuple(obs.io_fields))
    cached = obs._signals
    if cached is not None and cached[0] == key:
        return cached[1]
    signals = _group(obs)
    obs._signals = (key, signals)
    return signals


_IO_FIELDS = ("cpu_pct", "net_rx_mbps", "disk_read_mbps", "disk_write_mbps")
# The fields' names as people read them: (English, Chinese).
IO_WORDS = {"cpu_pct": ("CPU", "CPU"), "net_rx_mbps": ("network", "网络"), "disk_read_mbps": ("disk read", "磁盘读取"),
            "disk_write_mbps": ("disk write", "磁盘写入")}
# The data-moving columns (MB/s) a job works through off its GPU, each with the words for it: a job writing to its
# disk (a copy from network storage to local disk, a checkpoint save) works as surely as one reading from it.
IO_RATES = (("net_rx_mbps", "network", "网络"), ("disk_read_mbps", "disk read", "磁盘读取"),
            ("disk_write_mbps", "disk write", "磁盘写入"))
_IO_NEWEST = 4  # newest slices looked at to tell whether the source reads a CPU/IO field


def _group(obs: Observation) -> ClusterSignals:
    by_job: dict[str, list[GpuSeries]] = {}
    by_node: dict[str, list[GpuSeries]] = {}
    for s in obs.gpus:
        by_node.setdefault(s.node, []).append(s)
        if s.job is not None:
            by_job.setdefault(s.job, []).append(s)
    io = {s.job: s for s in obs.io}
    jobs = {job: build_job_series(job, obs.at, obs.slice_s, series, io.get(job)) for job, series in by_job.items()}
    infos = obs.jobs_by_id()
    degraded = tuple(obs.degraded)
    for job_id, series in jobs.items():
        info = infos.get(job_id)
        series.started_at = info.started_at if info is not None else None
        series.degraded = degraded
    # Read now, as the newest slices show it: a field the source reads has values there for some job (a bounded look
    # per series, so a field absent everywhere costs no walk through every value).
    read = frozenset(name for name in _IO_FIELDS
                     if name in obs.io_fields
                     or any(any(v is not None for v in getattr(s, name)[-_IO_NEWEST:]) for s in obs.io))
    signals = ClusterSignals(jobs=jobs, by_node=by_node, io_fields=read)
    if obs.history and obs.history_slice_s > 0:
        _attach_history(signals, obs.history, round(obs.history_slice_s / obs.slice_s))
    return signals


def _attach_history(signals: ClusterSignals, history: list[GpuHistory], ratio: int) -> None:
    """Each job's and empty node's coarse history, matched to its fine series by GPU and occupant."""
    index = {(h.node, h.gpu, h.job): h for h in history}
    for job in signals.jobs.values():
        job.history_gpus = [h for g in job.gpus if (h := index.get((g.node, g.gpu, g.job))) is not None]
        job.history_ratio = ratio
    signals.history_ratio = ratio
    for node, series in signals.by_node.items():
        free = [h for g in series if g.job is None and (h := index.get((g.node, g.gpu, None))) is not None]
        if free and len(free) == len(series):
            signals.history_by_node[node] = free
