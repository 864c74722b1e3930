"""Coarse history beyond the fine window: which coarse slices of a job or node were surely quiet or active.

Conservative in the protecting direction: a coarse slice with any activity counts as active, and quiet time
extends only through coarse slices whose sample counts rule out an empty fine slice inside.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from core.cluster import GpuHistory


def align_end(values: list, length: int) -> list:
    """The last `length` values, padded at the front with None (aligned from the end)."""
    if len(values) == length:
        return values  # read-only callers: no copy of a long series
    if len(values) > length:
        return values[len(values) - length :]
    return [None] * (length - len(values)) + list(values)


@dataclass(frozen=True, slots=True)
class CoarseHistory:
    """Coarse slices ending at the observation instant, oldest first; `ratio` fine slices make one."""

    ratio: int
    slice_s: float  # seconds one coarse slice spans
    util_max: list[float | None]  # max over the GPUs; None unless every GPU had a valid sample
    full: list[bool]  # every GPU had a sample in every fine slice inside, as far as the counts can tell
    util_min: list[float | None]  # the highest GPU's lowest sample; None = unknown
    util_avg: list[float | None] = field(default_factory=list)  # mean over the GPUs; empty or None = unknown

    def work_gpu_s(self, k: int, gpus: int) -> float:
        """The most GPU-seconds of work coarse slice k can hold: its average (its max when that is unknown) for the
        whole slice, on every GPU. Infinite when the slice is unknown or may have an empty fine slice inside."""
        high = self.util_max[k]
        if high is None or not self.full[k]:
            return math.inf
        mean = self.util_avg[k] if k < len(self.util_avg) else None
        share = mean if mean is not None and 0.0 <= mean <= high else high
        return share / 100.0 * self.slice_s * gpus

    def solid(self, k: int, threshold_pct: float) -> bool:
        """Slice k was surely active in each of its fine slices: no pause can hide inside it."""
        low = self.util_min[k]
        return self.full[k] and low is not None and low > threshold_pct

    def quiet_beyond(self, fine_slices: int, threshold_pct: float) -> int:
        """Fine slices of quiet older than the newest `fine_slices`: whole coarse slices, quiet and full."""
        return self.quiet_run_beyond(fine_slices, threshold_pct)[0]

    def quiet_run_beyond(self, fine_slices: int, threshold_pct: float, *, material_gpu_s: float = 0.0,
                         spent_gpu_s: float = 0.0, gpus: int = 1) -> tuple[int, float]:
        """Fine slices of quiet older than the newest `fine_slices`: whole coarse slices, full and quiet, or
        holding blips whose work, added to the `spent_gpu_s` already in the run, stays under `material_gpu_s`
        (0: any activity ends the run). Also the run's work in all (GPU-seconds, an upper bound)."""
        if fine_slices % self.ratio:
            return 0, spent_gpu_s  # the grids would not meet: claim nothing
        count = 0
        for k in range(len(self.util_max) - fine_slices // self.ratio - 1, -1, -1):
            value = self.util_max[k]
            if value is None or not self.full[k]:
                break  # missing data stops a quiet run, as it does in fine slices
            if value > threshold_pct:
                work = self.work_gpu_s(k, gpus)
                if material_gpu_s <= 0 or spent_gpu_s + work >= material_gpu_s:
                    break
                spent_gpu_s += work
            count += self.ratio
        return count, spent_gpu_s


def _typical(samples: list[int]) -> int:
    """The count a GPU's coarse slices usually hold (the lower median of those with any): above `expected` when
    the sampler is denser than configured (a 120 s scrape read as 150 s), which Prometheus corrects only past 1.5x."""
    held = sorted(c for c in samples if c)
    return held[(len(held) - 1) // 2] if held else 0


def _no_empty_fine_slice(count: int, expected: int, ratio: int, typical: int = 0) -> bool:
    """Whether a coarse slice's sample count proves every one of its `ratio` fine slices had a sample.

    `expected` is what a healthy coarse slice holds at least (expected_samples: the floor). A fine slice holds at
    most expected // ratio + 1 (the interval need not divide the slice), so with one fine slice empty the count is
    at most (ratio - 1) times that; more than that, and none was empty, whenever the samples came.

    Samples come at a fixed interval (a Prometheus scrape, a DCGM or NVML collect), and an empty fine slice then
    lost at least expected // ratio of them: with two or more per fine slice, a coarse slice holding all it
    should cannot have lost them. Without this, an interval of 100-300 s (two or three samples a fine slice)
    left no coarse slice proven whole, and an idle stretch was never read past the fine slices. "All it should"
    is the more of `expected` and `typical` (what the GPU's slices usually hold): a sampler denser than configured
    fills a slice with an empty fine slice up to `expected` (a review: a 120 s scrape configured as 150 s).
    """
    per_fine = expected // ratio
    return count > (ratio - 1) * (per_fine + 1) or (per_fine >= 2 and count >= max(expected, typical))


def merge_history(gpus: list[GpuHistory], ratio: int) -> CoarseHistory | None:
    """One job's or node's GPUs merged per coarse slice; None without any."""
    if not gpus or ratio < 1:
        return None
    if len(gpus) == 1:  # most jobs hold one GPU: its own lists
        g = gpus[0]
        typical = _typical(g.samples)
        whole = [_no_empty_fine_slice(c, g.expected, ratio, typical) for c in g.samples]
        return CoarseHistory(ratio=ratio, slice_s=g.slice_s, util_max=g.util_max, full=whole,
                             util_min=g.util_min or [None] * len(whole), util_avg=g.util_avg)
    length = max(len(g.util_max) for g in gpus)
    typicals = [_typical(g.samples) for g in gpus]
    cols = [(align_end(g.util_max, length), align_end(g.samples, length), g.expected,
             align_end(g.util_min, length) if g.util_min else [None] * length,
             align_end(g.util_avg, length) if g.util_avg else [None] * length) for g in gpus]
    maxes: list[float | None] = []
    avgs: list[float | None] = []
    mins: list[float | None] = []
    full: list[bool] = []
    for k in range(length):
        values = [c[0][k] for c in cols]
        maxes.append(None if None in values else max(values))
        means = [mean for c in cols if (mean := c[4][k]) is not None]
        avgs.append(sum(means) / len(means) if len(means) == len(cols) else None)
        # One GPU busy throughout keeps every fine slice of the job active.
        mins.append(max((low for c in cols if (low := c[3][k]) is not None), default=None))
        full.append(all(_no_empty_fine_slice(c[1][k] or 0, c[2], ratio, t) for c, t in zip(cols, typicals, strict=True)))
    return CoarseHistory(ratio=ratio, slice_s=max(g.slice_s for g in gpus), util_max=maxes, full=full, util_min=mins,
                         util_avg=avgs)
