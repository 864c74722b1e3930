"""Long-tail protection: quiet GPUs that are still part of live work are kept out of idle/zombie."""

from __future__ import annotations

from datetime import timedelta

from agent.detectors.signals import JobWindow, window_slices
from agent.observation import LogProgress
from agent.policy import LongTailRule
from sim.durations import format_duration


def long_tail_reason(
    window: JobWindow, logs: LogProgress | None, rule: LongTailRule, *, quiet_pct: float
) -> str | None:
    """Why this quiet job is probably still working (for the explanation), or None when nothing suggests it."""
    span = format_duration(window.seconds)
    if window.net_max is not None and window.net_max >= rule.io_threshold_mbps:
        return (
            f"network receive up to {window.net_max:.1f} MB/s in the last {span} (>= {rule.io_threshold_mbps:g} MB/s)"
        )
    if window.disk_max is not None and window.disk_max >= rule.io_threshold_mbps:
        return f"disk read up to {window.disk_max:.1f} MB/s in the last {span} (>= {rule.io_threshold_mbps:g} MB/s)"
    if window.cpu_max is not None and window.cpu_max >= rule.cpu_active_pct:
        return f"process CPU up to {window.cpu_max:.0f}% in the last {span} (>= {rule.cpu_active_pct:g}%)"
    last = logs.last_progress_at if logs is not None else None
    if last is not None and last >= window.at - timedelta(seconds=window.seconds):
        step = f" (step {logs.last_step:g})" if logs is not None and logs.last_step is not None else ""
        return f"log still advancing: last progress line at {last:%H:%M}{step}"
    return _periodic(window, rule, quiet_pct)


def _periodic(window: JobWindow, rule: LongTailRule, quiet_pct: float) -> str | None:
    """A job with past bursts of GPU work whose current pause is not yet long for it.

    Long means both: longer than quiet_factor x its longest past pause, and longer than
    quiet_share x the span over which it worked in the lookback. A service that has served
    all day has quiet hours longer than any pause seen so far; the longer it has worked,
    the longer the lull it is given before it counts as idle.
    """
    series = window.series
    quiet = series.quiet_slices(quiet_pct)
    if quiet == 0:
        return None  # busy now: periodicity protects pauses, not hangs
    lookback = window_slices(rule.lookback, series.slice_s)
    history = series.util_max[max(0, series.length - lookback) : series.length - quiet]
    bursts = 0
    longest_gap = gap = 0
    first_busy = last_busy = -1
    for k, value in enumerate(history):
        if value is not None and value > quiet_pct:
            if gap and bursts:
                longest_gap = max(longest_gap, gap)
            if gap or bursts == 0:
                bursts += 1
            gap = 0
            first_busy = k if first_busy < 0 else first_busy
            last_busy = k
        else:
            gap += 1
    worked = last_busy - first_busy + 1 if bursts else 0
    needed = max(rule.quiet_factor * longest_gap, rule.quiet_share * worked)
    if bursts >= 2 and quiet < needed:
        s = series.slice_s
        return (
            f"periodic GPU work: {bursts} bursts in the last {format_duration(lookback * s)} (working over "
            f"{format_duration(worked * s)}) with pauses up to {format_duration(longest_gap * s)}; quiet for "
            f"{format_duration(quiet * s)} now (< {rule.quiet_factor:g} x the longest pause and "
            f"{rule.quiet_share:.2g} x the span it worked)"
        )
    return None
