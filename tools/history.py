"""Coarse GPU history from fine slices: the MetricsSource default for adapters without a cheaper query."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from core.cluster import GpuHistory, GpuSeries


def history_from_series(series: list[GpuSeries]) -> list[GpuHistory]:
    """Keep only what the coarse history carries: each slice's max, mean and sample count."""
    return [
        GpuHistory.model_construct(
            job=s.job, node=s.node, gpu=s.gpu, slice_s=s.slice_s, util_max=s.util_max, samples=s.samples,
            expected=s.expected, util_avg=s.util_avg,
        )
        for s in series
    ]


def gpu_history(metrics: Any, end: datetime, lookback_s: float, slice_s: float) -> list[GpuHistory]:
    """The source's own gpu_history, or its gpu_series asked for coarse slices (same answer, more fields)."""
    own = getattr(metrics, "gpu_history", None)
    if own is not None:
        return own(end, lookback_s, slice_s)
    return history_from_series(metrics.gpu_series(end, lookback_s, slice_s))
