"""OverprovisionedDetector: jobs that hold several GPUs but keep only a few of them working."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from agent.config.policy import Policy
from agent.detectors.history import align_end
from agent.detectors.idle import CUDA_CONTEXT_MB
from agent.detectors.signals import ClusterSignals, JobWindow, group_signals, valid_pct
from core.actions import Finding
from core.cluster import GpuHistory, GpuSeries
from core.durations import format_duration
from core.observation import Observation


class OverprovisionedDetector:
    """gpus / working GPUs >= ratio over the window, with at least one GPU working (none = idle's case)."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.overprovisioned
        self.min_coverage = policy.detectors.idle.min_coverage

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        signals = signals or group_signals(obs)
        rule = self.rule
        findings = []
        for job in obs.jobs:
            if job.state != "running" or job.gpus < rule.min_gpus:
                continue
            # Judged only over a window the job has lived through, as idle is: a 55-minute-old job did not keep
            # GPUs unused "over 1h", however its slices round (and its first hour may be a one-GPU preprocessing).
            if job.started_at is not None and (obs.at - job.started_at).total_seconds() < rule.window:
                continue
            series = signals.jobs.get(job.id)
            if series is None:
                continue
            w = series.window(rule.window, job.gpus)
            if w.coverage < self.min_coverage or len(series.gpus) < job.gpus or None in w.gpu_avg_util:
                continue  # a GPU we cannot see might be the working one
            working = worked(w, rule.working_util_pct)
            untouched = never_touched(w, rule.working_util_pct)
            ended = released(w, rule.working_util_pct)
            if working < 1 or (job.gpus / working < rule.ratio and not untouched and not ended):
                continue
            unused = job.gpus - working
            since = obs.at - timedelta(seconds=w.seconds)
            if job.started_at is not None and job.started_at > since:
                since = job.started_at
            utils = ", ".join(f"{v:.0f}%" for v in sorted((v or 0.0 for v in w.gpu_avg_util), reverse=True))
            evidence = (
                f"{job.gpus} GPUs requested, {working} working (util >= {rule.working_util_pct:g}% on average or in "
                f"any slice) over "
                f"{format_duration(w.seconds)} (coverage {w.coverage:.0%}); per-GPU avg util {utils}; "
                f"{unused} GPU{'s' if unused != 1 else ''} unused"
                + (f", {untouched} of {'them' if unused != 1 else 'it'} never touched (no work in the job's lookback, "
                   f"no more memory than a CUDA context: a CUDA_VISIBLE_DEVICES or --nproc_per_node that leaves "
                   f"{'them' if untouched != 1 else 'it'} out reads this way)" if untouched else "")
                + (f", {ended} worked earlier and {'have' if ended != 1 else 'has'} let go of {'their' if ended != 1 else 'its'}"
                   f" memory (the task on {'them' if ended != 1 else 'it'} ended: single-GPU runs packed in one job that "
                   f"finish unevenly read this way; run as a job array, each would free its GPU when it ends)"
                   if ended else "")
            )
            metrics = {
                "gpus_requested": float(job.gpus),
                "gpus_working": float(working),
                "ratio": job.gpus / working,
                "coverage": round(w.coverage, 4),
                "util_avg_pct": w.avg_util or 0.0,
                "window_s": w.seconds,
                "working_util_pct": rule.working_util_pct,
                **({"gpus_untouched": float(untouched)} if untouched else {}),
                **({"gpus_released": float(ended)} if ended else {}),
            }
            per_gpu = sorted((v or 0.0 for v in w.gpu_avg_util), reverse=True)
            metrics.update({f"gpu_util_pct_{k}": v for k, v in enumerate(per_gpu)})  # highest first
            findings.append(
                Finding(
                    kind="overprovisioned",
                    target=job.id,
                    since=since,
                    detected_at=obs.at,
                    evidence=evidence,
                    metrics=metrics,
                    gpus=unused,
                )
            )
        return findings


def never_touched(w: JobWindow, line: float) -> int:
    """GPUs of the job that never worked (by `worked`'s reading) and hold no more memory than a CUDA context: a GPU
    the job never touched is unused whatever the ratio (a launch script's device list that lost an index leaves one
    H100 of eight empty all day, 8/7 under any ratio). Only where every GPU has a lookback history to say so."""
    if len(w.series.history_gpus) < len(w.series.gpus):
        return 0
    return sum(1 for use in _used(w, line) if not use.used and not use.before and _empty(use.gpu))


def released(w: JobWindow, line: float) -> int:
    """GPUs that worked earlier in the lookback, were quiet over the whole window and now hold no more memory than
    a CUDA context: their task has ended (packed single-GPU runs that finish unevenly), so they are unused whatever
    the ratio. A rank that waits for its siblings holds its model and optimiser state, and stays working."""
    return sum(1 for use in _used(w, line) if use.before and not use.used)


def worked(w: JobWindow, line: float) -> int:
    """GPUs that worked: at the working line on average over the window, or in any of its slices, or over any
    coarse slice of the job's lookback (a day) while it still holds more than a CUDA context's memory. A GPU that
    reached it was used: the GPUs of a parallel job coming out of a quiet hour average a few percent each, and the
    ranks of a job that trained on all 8 GPUs for hours and now finishes an uneven last shard on 2 did not ask for
    6 too many; a GPU whose task ended and let its memory go is not waiting for anything (`released`)."""
    return sum(1 for use in _used(w, line) if use.used)


@dataclass(frozen=True, slots=True)
class _Use:
    gpu: GpuSeries
    used: bool  # working now: in the window, or earlier in the lookback and still holding its memory
    before: bool  # worked earlier in the lookback, and is quiet over the window with its memory released


def _empty(g: GpuSeries) -> bool:
    return g.mem_used_mb is not None and g.mem_used_mb <= CUDA_CONTEXT_MB


def _used(w: JobWindow, line: float) -> list[_Use]:
    """Each GPU of the window's job: whether it reached the working line (window average, any slice, or any coarse
    slice of its lookback while it still holds its memory), and whether it worked before and has since let go."""
    past = {(h.node, h.gpu): h for h in w.series.history_gpus}
    out = []
    for avg, g in zip(w.gpu_avg_util, w.series.gpus, strict=False):
        peak = max((v for v in (valid_pct(x) for x in align_end(g.util_max, w.slices)) if v is not None), default=None)
        now = (avg is not None and avg >= line) or (peak is not None and peak >= line)
        before = not now and _worked_before(past.get((g.node, g.gpu)), line)
        out.append(_Use(g, now or (before and not _empty(g)), before and _empty(g)))
    return out


def _worked_before(history: GpuHistory | None, line: float) -> bool:
    """Whether a coarse slice of the GPU's lookback held work at the line: by its mean, else by its max."""
    if history is None:
        return False
    level = history.util_avg or history.util_max
    return any(v is not None and v >= line for v in (valid_pct(x) for x in level))
