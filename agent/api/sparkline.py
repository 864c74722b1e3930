"""Each finding's GPU utilisation over the detection window, for the Findings table's sparklines.

Read from the sweep's own observation (the fine series every detector judged on, grouped once per sweep by
agent/detectors/signals.py): no backend query per request. A job's series is its per-slice max and mean over its
GPUs; a node's the same over the node's GPUs; a pool finding has none. The window's slices are folded into at
most MAX_POINTS points, newest last, each the max of its slices' maxima and the mean of their means (a slice
without a valid reading on every GPU adds nothing; a point with none is null: a gap, never a quiet stretch).
"""

from __future__ import annotations

import math

from agent.api.schemas import UtilSpark
from agent.detectors.signals import JobSeries, build_job_series, group_signals
from core.actions import Finding
from core.observation import Observation

MAX_POINTS = 48


def _fold(values: list[float | None], size: int, pick: str) -> list[float | None]:
    """`values` in buckets of `size` slices aligned to the end (the oldest bucket may be shorter)."""
    out: list[float | None] = []
    start = len(values) % size or size
    bounds = [(0, start)] + [(i, i + size) for i in range(start, len(values), size)]
    for lo, hi in bounds:
        known = [v for v in values[lo:hi] if v is not None]
        if not known:
            out.append(None)
        else:
            out.append(round(max(known) if pick == "max" else sum(known) / len(known), 1))
    return out


def spark_of(series: JobSeries, max_points: int = MAX_POINTS) -> UtilSpark | None:
    n = series.length
    if n == 0:
        return None
    size = max(1, math.ceil(n / max_points))
    return UtilSpark(step_s=size * series.slice_s, end=series.at, max=_fold(series.util_max, size, "max"),
                     avg=_fold(series.util_avg, size, "avg"))


def finding_sparks(findings: list[Finding], obs: Observation | None) -> dict[str, UtilSpark]:
    """Per job or node finding's target, its utilisation over the sweep's window (missing: no series for it)."""
    if obs is None or not findings:
        return {}
    signals = group_signals(obs)  # cached on the observation: grouped once per sweep
    out: dict[str, UtilSpark] = {}
    for f in findings:
        series: JobSeries | None = None
        if f.target_type == "job":
            series = signals.jobs.get(f.target)
        elif f.target_type == "node" and signals.by_node.get(f.target):
            series = build_job_series(f.target, obs.at, obs.slice_s, signals.by_node[f.target], None)
        if series is not None and (spark := spark_of(series)) is not None:
            out[f.target] = spark
    return out
