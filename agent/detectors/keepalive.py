"""KeepAliveDetector: jobs that keep their GPUs looking busy with short, regular bursts while nothing progresses.

A keep-alive loop (a tiny kernel every few minutes, written to dodge idle culling) never lets a whole window go
quiet, so the idle rule cannot see it. It shows as short bursts at a steady period (or a steady low level in
every slice) with no log progress, no network or disk I/O, and a tensor pipe or power draw near idle. That is
reported as idle, since the GPUs do no work; but real work can look alike, so a stop on this finding alone
always needs a human's approval (Finding.stop_needs_approval, enforced by the guardrail).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta

from agent.config.policy import Policy
from agent.detectors.activity import GpuActivity
from agent.detectors.evidence import io_metrics, log_metrics
from agent.detectors.history import align_end
from agent.detectors.idle import ACTIVE_STATES, log_summary
from agent.detectors.longtail import long_tail_reason
from agent.detectors.signals import ClusterSignals, JobWindow, group_signals, window_slices
from core.actions import Finding
from core.cluster import JobInfo
from core.durations import format_duration
from core.observation import LogProgress, Observation
from core.text import gigabytes

APPROVAL_REASON = "a keep-alive pattern is judged from its shape, which real work can resemble"
APPROVAL_REASON_ZH = "保活模式仅凭活动形态判断，真实工作也可能呈现相同形态"


@dataclass(frozen=True, slots=True)
class Bursts:
    """Regular GPU activity in a window, in slices: how many bursts, their period and the longest one."""

    count: int
    period: int  # slices between burst starts (1 when every slice is busy)
    longest: int  # slices


def regular_bursts(maxes: list[float | None], avgs: list[float | None], quiet_pct: float,
                   min_bursts: int) -> Bursts | None:
    """Short bursts at a steady period (starts at most one slice apart from the usual spacing, each burst no
    longer than the pause after it), or every slice busy at a steady level (highest average at most twice the
    lowest); None for anything else, unknown slices included."""
    if None in maxes or None in avgs or not maxes:
        return None
    busy = [m is not None and m > quiet_pct for m in maxes]
    if all(busy):
        levels = [a for a in avgs if a is not None]
        low, high = min(levels), max(levels)
        if len(levels) >= min_bursts and low > 0 and high <= 2 * low:
            return Bursts(count=len(levels), period=1, longest=len(levels))
        return None
    runs: list[tuple[int, int]] = []  # (start, length)
    for k, b in enumerate(busy):
        if not b:
            continue
        if runs and runs[-1][0] + runs[-1][1] == k:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((k, 1))
    if len(runs) < min_bursts:
        return None
    # A burst cut by the window's start has an unknown start: it counts, but does not set the spacing.
    timed = runs[1:] if runs[0][0] == 0 else runs
    spacing = [b[0] - a[0] for a, b in zip(timed, timed[1:], strict=False)]
    if len(spacing) < 1 or max(spacing) - min(spacing) > 1:
        return None
    longest = max(length for _, length in runs)
    if longest > min(spacing) - longest:
        return None  # bursts as long as the pauses are not short
    return Bursts(count=len(runs), period=round(sum(spacing) / len(spacing)), longest=longest)


def pattern_began(w: JobWindow, level_pct: float) -> datetime:
    """How far back the window's keep-alive level reaches: walking back from the window's start, the end of the
    newest slice the pattern cannot explain, or the start of the data when none. A slice cannot be explained
    when it has no valid reading (or, coarse, samples missing), or when it held more work than the level allows:
    an average above twice the higher of the window's busiest slice average and the detector's own limit
    (`level_pct`, keepalive.max_avg_util_pct; twice: the spread a steady level is allowed, `regular_bursts`), or,
    where the average is unknown (the Prometheus coarse history), a lowest sample above that (busy throughout:
    work, not pings) or a highest one more than half again above the window's (a heavier kernel than the pings).
    A slice with neither reading is not explained. The ceiling does not drop with a quieter window, so a
    stretch's start stays put from one sweep to the next. Not seen: work whose samples dip to idle in every
    coarse slice and never peak above the pings' peak, where only maxima and minima are kept."""
    series = w.series
    n, s = w.slices, series.slice_s
    inside = range(series.length - n, series.length)
    ceiling = 2 * max(level_pct, max((series.util_avg[k] or 0.0) for k in inside))
    peak = 1.5 * max((series.util_max[k] or 0.0) for k in inside)

    def explained(top: float | None, mean: float | None, low: float | None) -> bool:
        if top is None:
            return False
        if mean is not None:
            return mean <= ceiling
        return low is not None and low <= ceiling and top <= peak

    for k in range(series.length - n - 1, -1, -1):
        if not explained(series.util_max[k], series.util_avg[k], None):
            return series.at - timedelta(seconds=(series.length - 1 - k) * s)
    coarse = series.history
    if coarse is None:
        return series.at - timedelta(seconds=series.length * s)
    m, r = len(coarse.util_max), coarse.ratio
    first_older = m - 1 - math.ceil(series.length / r - 1e-9)  # the newest coarse slice wholly before the fine ones
    for j in range(first_older, -1, -1):
        mean = coarse.util_avg[j] if j < len(coarse.util_avg) else None
        if not coarse.full[j] or not explained(coarse.util_max[j], mean, coarse.util_min[j]):
            return series.at - timedelta(seconds=(m - 1 - j) * r * s)
    return series.at - timedelta(seconds=max(series.length, m * r) * s)


def idle_draws(signals: ClusterSignals, slices: int, quiet_pct: float) -> dict[str, float]:
    """Per GPU model, the lowest power any GPU of it drew in a quiet slice of the newest `slices` (at most
    `quiet_pct` utilisation): what an idle one of that model draws on this cluster now."""
    lowest: dict[str, float] = {}
    for series in signals.by_node.values():
        for g in series:
            if not g.power_w_slices or not g.model:
                continue
            for p, top in zip(align_end(g.power_w_slices, slices), align_end(g.util_max, slices), strict=True):
                if p is not None and top is not None and top <= quiet_pct and p > 0:
                    lowest[g.model] = min(p, lowest.get(g.model, p))
    return lowest


def fleet_idle_of(obs: Observation, policy: Policy) -> dict[str, float]:
    """idle_draws over the observation's whole cluster and its detectors' idle window, and what it carries."""
    rule = policy.detectors.idle
    measured = idle_draws(group_signals(obs), window_slices(rule.window, obs.slice_s), rule.util_threshold_pct)
    return _lowest(measured, obs.fleet_idle_w)


def _lowest(a: dict[str, float], b: dict[str, float]) -> dict[str, float]:
    return {m: min(v for v in (a.get(m), b.get(m)) if v is not None) for m in a.keys() | b.keys()}


def burst_power_share(w: JobWindow, board_w: float | None, quiet_pct: float,
                      fleet_idle: dict[str, float] | None = None) -> tuple[float, float] | None:
    """(the highest share of board power a burst itself may draw, the slice average it was read from) over the
    window's GPUs; None when power or the board is unknown, no slice holds a burst, or nothing shows the idle
    draw.

    A slice average dilutes a burst shorter than the slice with the idle minutes around it: a notebook cell that
    drew 65 % for 90 s reads 39 % in its 5-minute slice. The share of the slice the burst lasted is about its
    average utilisation over its highest; the idle draw is the GPU's own quietest slice in the window. So a
    burst draws about idle + (slice power - idle) / duty, read in the job's favour (a higher estimate only
    clears it). Where every slice holds a burst (work whose cycle matches the slice: 30 s of math in every 5
    minutes), no slice shows the idle draw and the quietest one's includes a burst: the idle draw is then what
    idle GPUs of the same model draw in the same sweep (`fleet_idle`, idle_draws), and where none is seen the GPU
    is not read at all, since any idle draw assumed for it would decide the answer."""
    if not board_w:
        return None
    n = w.slices
    best: tuple[float, float] | None = None
    for g in w.series.gpus:
        power = align_end(g.power_w_slices, n) if g.power_w_slices else []
        if not power:
            continue
        maxes, avgs = align_end(g.util_max, n), align_end(g.util_avg, n)
        known = [p for p in power if p is not None]
        if not known:
            continue
        if any(p is not None and top is not None and top <= quiet_pct for p, top in zip(power, maxes, strict=True)):
            idle = min(known)
        elif fleet_idle and g.model in fleet_idle:
            idle = min(fleet_idle[g.model], min(known))
        else:
            continue
        for p, top, mean in zip(power, maxes, avgs, strict=True):
            if p is None or top is None or mean is None or top <= quiet_pct or mean <= 0:
                continue
            duty = min(1.0, mean / top)
            burst = (idle + (p - idle) / duty) / board_w
            if best is None or burst > best[0]:
                best = (burst, p / board_w)
    return best


class KeepAliveDetector:
    """Short regular bursts over the idle window, no log progress seen, frozen I/O, near-idle power or tensor."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.keepalive
        self.idle = policy.detectors.idle
        self.longtail = policy.detectors.longtail
        self.activity = policy.detectors.activity

    def pattern_window(self, job: JobInfo, signals: ClusterSignals) -> tuple[JobWindow, Bursts] | None:
        """The job's window and its bursts when its GPU side looks like a keep-alive loop, before logs."""
        if not self.rule.enabled or job.state not in ACTIVE_STATES or job.gpus <= 0:
            return None
        series = signals.jobs.get(job.id)
        if series is None:
            return None
        w = series.window(self.idle.window, job.gpus)
        if w.coverage < self.idle.min_coverage or not w.complete:
            return None
        if w.quiet(self.idle.util_threshold_pct, self.idle.blip_gpu_seconds):
            return None  # the idle rule's case (with its blips, when allowed)
        if w.avg_util is None or w.avg_util > self.rule.max_avg_util_pct:
            return None
        n = w.slices
        bursts = regular_bursts(align_end(series.util_max, n), align_end(series.util_avg, n),
                                self.idle.util_threshold_pct, self.rule.min_bursts)
        return (w, bursts) if bursts is not None else None

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        signals = signals or group_signals(obs)
        findings = []
        fleet_idle: dict[str, float] | None = None  # read once, when a pattern needs it
        for job in obs.jobs:
            if job.started_at is not None and (obs.at - job.started_at).total_seconds() < self.idle.window:
                continue  # judged only over a window the job has lived through
            found = self.pattern_window(job, signals)
            if found is None:
                continue
            w, bursts = found
            logs = obs.logs.get(job.id)
            if logs is None:
                continue  # no progress must be seen, not assumed
            start = obs.at - timedelta(seconds=w.seconds)
            if logs.advanced_since(start):
                continue
            if w.io_known < self.idle.min_coverage:
                continue  # frozen I/O must be seen, not assumed
            if long_tail_reason(w, logs, self.longtail, quiet_pct=self.idle.util_threshold_pct,
                                min_coverage=self.idle.min_coverage, periodic=False):
                continue  # I/O, a busy CPU, or incomplete metrics
            activity = GpuActivity.of(w, self.idle.min_coverage)
            if activity.real_work(self.activity):
                continue
            if fleet_idle is None:
                fleet_idle = _lowest(idle_draws(signals, w.slices, self.idle.util_threshold_pct), obs.fleet_idle_w)
            burst = burst_power_share(w, activity.board_w, self.idle.util_threshold_pct, fleet_idle)
            if burst is not None and burst[0] > self.activity.idle_power_share:
                continue  # the bursts themselves draw a working GPU's power: short work, not pings
            if not activity.tensor_known and burst is None:
                continue  # neither the tensor pipe nor the bursts' own power can show they do no work
            # The stretch began after the last progress the log showed, the job's start and the last work the
            # pattern cannot explain: a fixed point, so a warning sent in it keeps announcing the stop while the
            # stop waits for a human, and real work after a warning ends what that warning announced.
            began = [t for t in (logs.last_progress_at, job.started_at) if t is not None]
            since = max([pattern_began(w, self.rule.max_avg_util_pct), *began])
            findings.append(self._finding(job, w, bursts, logs, activity, since, obs.at))
        return findings

    def _finding(self, job: JobInfo, w: JobWindow, bursts: Bursts, logs: LogProgress, activity: GpuActivity,
                 since: datetime, at: datetime) -> Finding:
        s = w.series.slice_s
        if bursts.period == 1:
            shape = f"GPU activity in every slice of the last {format_duration(w.seconds)} at a steady low level"
        else:
            shape = (f"{bursts.count} short bursts of GPU activity in the last {format_duration(w.seconds)}, one "
                     f"every {format_duration(bursts.period * s)}, each at most {format_duration(bursts.longest * s)}")
        evidence = (
            f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} kept looking busy: {shape}; average util "
            f"{w.avg_util or 0.0:.1f}% (max {w.max_util or 0.0:.1f}%, coverage {w.coverage:.0%}), holding "
            f"{gigabytes(w.mem_gb)} GB; {log_summary(logs)}; {w.io_summary()}; {activity.summary()}: looks like a keep-alive "
            f"loop, not work; a stop needs a human's approval"
        )
        metrics = {
            "keepalive_bursts": float(bursts.count),
            "keepalive_period_s": bursts.period * s,
            "keepalive_burst_s": bursts.longest * s,
            "util_avg_pct": round(w.avg_util or 0.0, 2),
            "util_max_pct": w.max_util or 0.0,
            "coverage": round(w.coverage, 4),
            "window_s": w.seconds,
            "mem_gb": round(w.mem_gb, 1),
        }
        metrics.update(log_metrics(logs, at) | io_metrics(w) | activity.metrics())
        return Finding(kind="idle", target=job.id, since=since, detected_at=at, evidence=evidence, metrics=metrics,
                       gpus=job.gpus, stop_needs_approval=APPROVAL_REASON, stop_needs_approval_zh=APPROVAL_REASON_ZH)
