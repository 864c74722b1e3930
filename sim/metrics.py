"""Per-GPU and per-job metric slices from the simulated exporter, memoised so repeated sweeps stay cheap."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import cast

from core.cluster import GpuHistory, GpuSeries, JobIoSeries, expected_samples
from sim.lifecycle import Lifecycle, Run
from sim.signals import IDLE_POWER_SHARE, board_w, temp_c
from sim.topology import SimNode

_EPS = 1e-6
MB = 1e6
# DCGM profiling at one sample: SM, tensor-pipe and DRAM ratios, NVLink and PCIe bytes/s (TX + RX)
Profile = tuple[float, float, float, float, float]
# (util %, FB used MB, temp C, power W, xid, xid time, profiling fields or None when the node's exporter has none)
Sample = tuple[float, float, float, float, int, float | None, Profile | None]


def gpu_sample(run: Run | None, node: SimNode, gpu: int, t: float, k: int) -> Sample | None:
    """What the exporter reports for one GPU at time t (sample index k for noise); None = no sample."""
    if t < node.created_at:
        return None
    if run is None:
        util, mem = 0.0, 0.0
        sm = tensor = dram = nvlink = pcie = 0.0
        power = IDLE_POWER_SHARE * board_w(node.gpu_model)
    else:
        phase = run.signals.phase_at(t - run.started)
        if phase.metrics == "missing":
            return None
        index = run.gpus.index(gpu)
        util, mem = run.signals.gpu(phase, index, k)
        sm, tensor, dram, power, nvlink, pcie = run.signals.activity(phase, index, k, util, board_w(node.gpu_model))
    xid, xid_at = node.xid(gpu, t)
    profile = (sm, tensor, dram, nvlink * MB, pcie * MB) if node.profiling else None
    return util, mem, max(temp_c(util), node.temp_floor(gpu, t)), power, xid, xid_at, profile


def io_sample(run: Run, t: float, k: int) -> tuple[float, float, float, float, float] | None:
    if not run.running_at(t):
        return None
    phase = run.signals.phase_at(t - run.started)
    return None if phase.metrics == "missing" else run.signals.io(phase, k)


def _aggregate(samples: list) -> tuple:
    umax = umin = None
    usum = 0.0
    nvalid = nraw = 0
    tmax = None
    psum = 0.0
    mem = None
    xid, xid_at = 0, None
    prof = [0.0] * 5
    nprof = 0
    for s in samples:
        if s is None:
            continue
        nraw += 1
        if s[6] is not None:
            nprof += 1
            for i, v in enumerate(s[6]):
                prof[i] += v
        u = s[0]
        if 0.0 <= u <= 100.0:  # a broken exporter's 150% is not a measurement
            nvalid += 1
            usum += u
            if umax is None or u > umax:
                umax = u
            if umin is None or u < umin:
                umin = u
        if tmax is None or s[2] > tmax:
            tmax = s[2]
        psum += s[3]
        mem = s[1]
        if s[4]:
            xid, xid_at = s[4], s[5]
    profile = tuple(v / nprof for v in prof) if nprof else None
    return umax, usum, nvalid, nraw, tmax, psum, mem, xid, xid_at, umin, profile


def serving_sample(run: Run, t: float, k: int) -> tuple[float, float] | None:
    """(requests/s, mean latency s) of a serving job at time t (sample k); None: not serving or no metrics."""
    if not run.running_at(t):
        return None
    phase = run.signals.phase_at(t - run.started)
    return None if phase.metrics == "missing" else run.signals.serving(phase, k)


def _mean(samples: list) -> float | None:
    got = [s for s in samples if s is not None]
    return sum(got) / len(got) if got else None


def _io_aggregate(samples: list) -> tuple[float | None, float | None, float | None, float | None]:
    got = [s for s in samples if s is not None]
    if not got:
        return None, None, None, None
    n = len(got)
    # Network is receive + transmit, as tools/promql.py reads it: an upload is traffic too.
    return (sum(s[0] for s in got) / n, sum(s[1] + s[3] for s in got) / n, sum(s[2] for s in got) / n,
            sum(s[4] for s in got) / n)


class MetricSlices:
    """Answers gpu_series/job_io_series. Samples before `now` never change, so they and whole slices
    that end before `now` are cached; only the newest partial slice is computed again."""

    def __init__(self, lifecycle: Lifecycle, origin: datetime, step: float) -> None:
        self.lifecycle = lifecycle
        self.origin = origin
        self.step = step
        self._samples: dict[tuple, list] = {}
        self._base: dict[tuple, int] = {}  # index of each series' first kept sample (older ones dropped)
        self._slices: dict[tuple, tuple] = {}
        # Like a Prometheus --storage.tsdb.retention.time: samples older than this are dropped and read as absent.
        # None (the default): keep everything the scenario produced.
        self.retention_s: float | None = None
        self._pruned_at = 0.0

    def slices(self, end: float, lookback_s: float, slice_s: float) -> list[tuple[int, int]]:
        """Sample index ranges [k_lo, k_hi] of slices (end - slice_s, end], oldest first, none before 0.

        A slice that straddles 0 keeps its part after 0 (as a real exporter's first scrapes would): a
        coarse slice must not drop the first minutes the fine slices still show.
        """
        n = max(math.ceil(lookback_s / slice_s - _EPS), 0)
        out = []
        for j in range(n):
            s_end = end - (n - 1 - j) * slice_s
            s_start = s_end - slice_s
            if s_end <= _EPS:
                continue
            k_lo = 0 if s_start < -_EPS else math.floor(s_start / self.step + _EPS) + 1
            out.append((k_lo, math.floor(s_end / self.step + _EPS)))
        return out

    def _range(self, key: tuple, make, k_lo: int, k_hi: int, now: float) -> list:
        """Samples k_lo..k_hi of one series; cached for t < now, computed for t == now, none after."""
        k_now = math.floor(now / self.step + _EPS)
        on_boundary = abs(k_now * self.step - now) < _EPS
        k_cache = k_now - 1 if on_boundary else k_now
        arr = self._samples.setdefault(key, [])
        base = self._base.get(key, 0)
        top = min(k_hi, k_cache)
        for k in range(base + len(arr), top + 1):
            arr.append(make(k * self.step, k))
        lo = max(k_lo, base)
        out = arr[lo - base:top + 1 - base] if top >= lo else []
        if on_boundary and k_lo <= k_now <= k_hi:
            out.append(make(k_now * self.step, k_now))
        return out

    def prune(self, now: float) -> None:
        """Drop samples and cached slices older than `retention_s` (at most once per simulated hour)."""
        if self.retention_s is None or now - self._pruned_at < 3600.0:
            return
        self._pruned_at = now
        keep_from = math.floor((now - self.retention_s) / self.step)
        for key, arr in self._samples.items():
            base = self._base.get(key, 0)
            drop = min(len(arr), keep_from - base)
            if drop > 0:
                del arr[:drop]
                self._base[key] = base + drop
        for ck in [ck for ck in self._slices if ck[3] < keep_from]:
            del self._slices[ck]

    def _slice(self, kind: str, key: tuple, make, agg, k_lo: int, k_hi: int, now: float) -> tuple:
        ck = (kind, key, k_lo, k_hi)
        hit = self._slices.get(ck)
        if hit is not None:
            return hit
        value = agg(self._range((kind, *key), make, k_lo, k_hi, now))
        if k_hi * self.step < now - _EPS:
            self._slices[ck] = value
        return value

    def gpu_series(self, end: float, now: float, lookback_s: float, slice_s: float) -> list[GpuSeries]:
        expected = expected_samples(slice_s, self.step)  # the floor, as Prometheus and the history count it
        return [self._series(run, node, g, slice_s, expected, aggs)
                for run, node, g, aggs in self._gpu_slices(end, now, lookback_s, slice_s)]

    def gpu_history(self, end: float, now: float, lookback_s: float, slice_s: float) -> list[GpuHistory]:
        """Coarse max, min and sample count per GPU, for the same occupant gpu_series picks."""
        return [GpuHistory(job=run.job.id if run else None, node=node.name, gpu=g, slice_s=slice_s,
                           expected=expected_samples(slice_s, self.step), util_max=[a[0] for a in aggs],
                           util_min=[a[9] for a in aggs], samples=[a[2] for a in aggs],
                           util_avg=[a[1] / a[2] if a[2] else None for a in aggs])
                for run, node, g, aggs in self._gpu_slices(end, now, lookback_s, slice_s)]

    def _gpu_slices(self, end: float, now: float, lookback_s: float, slice_s: float) -> list[tuple]:
        """(occupant run, node, gpu, per-slice aggregates) for every GPU that reported in the lookback."""
        at = min(end, now)
        bounds = self.slices(end, lookback_s, slice_s)
        out = []
        for node in self.lifecycle.nodes:
            for g in range(node.gpus):
                run = self.lifecycle.occupant(node, g, at)
                make = self._job_gpu(run, node, g) if run is not None else self._free_gpu(node, g)
                key = (node.uid, g, run.index if run else -1)
                aggs = [self._slice("gpu", key, make, _aggregate, lo, hi, now) for lo, hi in bounds]
                if any(a[3] for a in aggs):
                    out.append((run, node, g, aggs))
        return out

    @staticmethod
    def _job_gpu(run: Run, node: SimNode, g: int) -> Callable[[float, int], Sample | None]:
        def make(t: float, k: int) -> Sample | None:
            return gpu_sample(run, node, g, t, k) if run.running_at(t) else None
        return make

    def _free_gpu(self, node: SimNode, g: int) -> Callable[[float, int], Sample | None]:
        """Samples of a GPU while no job holds it (the series without pod labels)."""
        busy = [(r.started, r.end if r.end is not None else math.inf)
                for r in self.lifecycle.runs if r.node is node and g in r.gpus and r.start is not None]

        def make(t: float, k: int) -> Sample | None:
            if any(s <= t < e for s, e in busy):
                return None
            return gpu_sample(None, node, g, t, k)
        return make

    def _series(self, run: Run | None, node: SimNode, g: int, slice_s: float, expected: int,
                aggs: list[tuple]) -> GpuSeries:
        nraw = sum(a[3] for a in aggs)
        temps = [a[4] for a in aggs if a[4] is not None]
        mem = next((a[6] for a in reversed(aggs) if a[6] is not None), None)
        xid, xid_at = next(((a[7], a[8]) for a in reversed(aggs) if a[7]), (0, None))
        profiled = node.profiling

        def profile(i: int) -> list[float | None]:
            return [a[10][i] if a[10] is not None else None for a in aggs] if profiled else []
        return GpuSeries(
            job=run.job.id if run else None, node=node.name, gpu=g, uuid=node.uuid(g), model=node.gpu_model,
            slice_s=slice_s, expected=expected,
            util_max=[a[0] for a in aggs],
            util_avg=[a[1] / a[2] if a[2] else None for a in aggs],
            samples=[a[2] for a in aggs],
            engine_active_avg=[a[1] / a[2] / 100.0 if a[2] else None for a in aggs],
            mem_used_mb=mem, temp_c_max=max(temps) if temps else None,
            power_w_avg=sum(a[5] for a in aggs) / nraw if nraw else None,
            power_w_slices=[a[5] / a[3] if a[3] else None for a in aggs],
            sm_active_avg=profile(0), tensor_active_avg=profile(1), dram_active_avg=profile(2),
            nvlink_bytes_avg=profile(3), pcie_bytes_avg=profile(4),
            xid_last=xid, xid_at=self.origin + timedelta(seconds=xid_at) if xid_at is not None else None,
        )

    def job_io_series(self, end: float, now: float, lookback_s: float, slice_s: float) -> list[JobIoSeries]:
        at = min(end, now)
        bounds = self.slices(end, lookback_s, slice_s)
        out: list[JobIoSeries] = []
        for run in self.lifecycle.runs:
            if not run.running_at(at):
                continue

            def make(t: float, k: int, run=run) -> tuple[float, float, float, float, float] | None:
                return io_sample(run, t, k)
            aggs = [self._slice("io", (run.index,), make, _io_aggregate, lo, hi, now) for lo, hi in bounds]
            rps: list[float | None] = []
            if any(p.requests_per_s is not None for p in run.signals.phases):

                def make_rps(t: float, k: int, run=run) -> float | None:
                    sample = serving_sample(run, t, k)
                    return sample[0] if sample is not None else None
                rps = [cast("float | None", self._slice("rps", (run.index,), make_rps, _mean, lo, hi, now))
                       for lo, hi in bounds]
            out.append(JobIoSeries(job=run.job.id, slice_s=slice_s, cpu_pct=[a[0] for a in aggs],
                                   net_rx_mbps=[a[1] for a in aggs], disk_read_mbps=[a[2] for a in aggs],
                                   disk_write_mbps=[a[3] for a in aggs], requests_per_s=rps))
        return out
