"""Coarse history beyond the fine window: which coarse slices of a job or node were surely quiet or active.

Conservative in the protecting direction: a coarse slice with any activity counts as active, and quiet time
extends only through coarse slices whose sample counts rule out an empty fine slice inside.
"""

from __future__ import annotations

from dataclasses import dataclass

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
    util_max: list[float | None]  # max over the GPUs; None unless every GPU had a valid sample
    full: list[bool]  # every GPU had a sample in every fine slice inside, as far as the counts can tell
    util_min: list[float | None]  # the highest GPU's lowest sample; None = unknown

    def solid(self, k: int, threshold_pct: float) -> bool:
        """Slice k was surely active in each of its fine slices: no pause can hide inside it."""
        low = self.util_min[k]
        return self.full[k] and low is not None and low > threshold_pct

    def quiet_beyond(self, fine_slices: int, threshold_pct: float) -> int:
        """Fine slices of quiet older than the newest `fine_slices`: whole coarse slices, quiet and full."""
        if fine_slices % self.ratio:
            return 0  # the grids would not meet: claim nothing
        count = 0
        for k in range(len(self.util_max) - fine_slices // self.ratio - 1, -1, -1):
            value = self.util_max[k]
            if value is None or value > threshold_pct or not self.full[k]:
                break  # missing data stops a quiet run, as it does in fine slices
            count += self.ratio
        return count


def merge_history(gpus: list[GpuHistory], ratio: int) -> CoarseHistory | None:
    """One job's or node's GPUs merged per coarse slice; None without any."""
    if not gpus or ratio < 1:
        return None
    if len(gpus) == 1:  # most jobs hold one GPU: its own lists
        g = gpus[0]
        whole = [c * ratio > g.expected * (ratio - 1) for c in g.samples]
        return CoarseHistory(ratio=ratio, util_max=g.util_max, full=whole, util_min=g.util_min or [None] * len(whole))
    length = max(len(g.util_max) for g in gpus)
    cols = [(align_end(g.util_max, length), align_end(g.samples, length), g.expected,
             align_end(g.util_min, length) if g.util_min else [None] * length) for g in gpus]
    maxes: list[float | None] = []
    mins: list[float | None] = []
    full: list[bool] = []
    for k in range(length):
        values = [c[0][k] for c in cols]
        maxes.append(None if None in values else max(values))
        # One GPU busy throughout keeps every fine slice of the job active.
        mins.append(max((low for c in cols if (low := c[3][k]) is not None), default=None))
        # An empty fine slice takes expected/ratio samples away, so more than (ratio-1)/ratio of a full
        # coarse slice means every fine slice inside had one.
        full.append(all((c[1][k] or 0) * ratio > c[2] * (ratio - 1) for c in cols))
    return CoarseHistory(ratio=ratio, util_max=maxes, full=full, util_min=mins)
