"""ZombieDetector: jobs that look alive (GPU pinned) but whose progress, I/O and real GPU activity stopped."""

from __future__ import annotations

from datetime import datetime, timedelta

from agent.config.policy import Policy
from agent.detectors.activity import GpuActivity, last_real_work
from agent.detectors.evidence import io_metrics, log_metrics, with_doubt
from agent.detectors.idle import ACTIVE_STATES, in_grace, log_summary, with_grace
from agent.detectors.longtail import long_tail
from agent.detectors.signals import ClusterSignals, JobWindow, group_signals
from core.actions import Finding
from core.cluster import JobInfo
from core.durations import format_duration
from core.observation import LogProgress, Observation

# GPU memory in use with no process attached: the driver's own few MiB. Any process holds its CUDA context (300 MB or
# more), so a GPU under this has no rank left on it.
NO_PROCESS_MB = 128.0


def _never_doubt() -> tuple[str, str]:
    """Why a hang never seen to progress needs a person to stop it: in a job of several pods only rank 0 may log, and
    a silent rank spinning in a barrier while rank 0 saves a checkpoint on the CPU reads the same."""
    return ("its log never showed progress: a rank that does not log (only rank 0 prints) waiting in a barrier for a "
            "peer reads the same as a hang in the first collective, so the stop needs a person",
            "其日志从未显示进展：不输出日志的 rank（只有 rank 0 打印）在屏障中等待其他 rank 时，与首个集合通信即挂起的情形看起来一样，"
            "因此停止需由人工确认")


class ZombieDetector:
    """A hung job: progress seen before and none for max(window, cadence x usual gap), network and disk I/O
    frozen, GPU_UTIL pinned, and no real GPU activity where the exporter can show it.

    A job never seen to progress (a hang in its first collective: nvidia/nccl-tests#117, NVIDIA/nccl#631, where not
    one step is logged) is judged from its start, and only on the GPU's own counters: every DCGM profiling field the
    job's GPUs report says the SMs, pipes and memory idle under the pinned utilisation. Without them nothing tells
    it from a job that computes and logs nothing until it ends, and it is left alone.

    CPU clears no one (a hung collective's host threads spin) unless the policy asks for a quiet CPU. With DCGM
    profiling fields, SM/tensor/DRAM activity, power and NVLink/PCIe traffic must all be near idle; without them,
    power where the GPU model is known, and the log and network/disk I/O decide. The evidence names the signals.
    A job whose every GPU is quiet is the idle detector's case, so the two kinds never overlap; pinned and idle
    GPUs side by side (one rank stuck on the host) are a hang whose stop needs a person (`_mixed_doubt`).
    """

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.zombie
        self.idle = policy.detectors.idle
        self.longtail = policy.detectors.longtail
        self.activity = policy.detectors.activity
        self.warn_in_grace = policy.warning.during_grace

    def pinned_window(self, job: JobInfo, signals: ClusterSignals) -> JobWindow | None:
        """The job's window when the GPU side looks hung (pinned, network and disk frozen), before logs."""
        if job.state not in ACTIVE_STATES or job.gpus <= 0:
            return None
        series = signals.jobs.get(job.id)
        if series is None:
            return None
        w = series.window(self.rule.window, job.gpus)
        if w.coverage < self.idle.min_coverage or not w.complete:
            return None
        if w.all_quiet(self.idle.util_threshold_pct):
            return None
        busy = [v for v in w.gpu_avg_util if v is not None]
        if len(busy) < job.gpus:
            return None
        # Every GPU pinned; or pinned and idle side by side (one rank stuck on the host while the others spin in the
        # collective it never joined): nothing in between, which is a GPU working.
        quiet = self.idle.util_threshold_pct
        if any(quiet < v < self.rule.busy_threshold_pct for v in busy) or max(busy) < self.rule.busy_threshold_pct:
            return None
        if w.io_known < self.idle.min_coverage:
            return None  # frozen I/O must be seen, not assumed
        io_limit = self.longtail.io_threshold_mbps
        if max(w.net_max or 0.0, w.disk_max or 0.0, w.disk_write_max or 0.0) >= io_limit:
            return None
        cpu_limit = self.rule.cpu_threshold_pct
        if cpu_limit is not None and (w.cpu_max is None or w.cpu_max >= cpu_limit):
            return None
        return w

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        signals = signals or group_signals(obs)
        findings = []
        for job in obs.jobs:
            logs = obs.logs.get(job.id)
            if logs is None:
                continue  # the log was not read: progress unknown
            last = logs.last_progress_at or logs.first_progress_at
            never = last is None and logs.progress_lines == 0
            if never and (logs.unread or not logs.lines):
                continue  # a log not read, or one with nothing in it: no reading of its silence
            if never:
                last = job.started_at  # never seen to progress: silent since it started, or since its GPUs last worked
            if last is None:
                continue
            w = self.pinned_window(job, signals)
            if w is None:
                continue
            if never:
                # The stretch began at the job's last real GPU work (a rank that never logs trained until rank 0 began
                # its save); with none in the read, no earlier than the read's start: a warning from before it
                # announced another stretch (a reviewer's job that spun, worked, and spun again).
                worked = last_real_work(w.series, self.activity)
                read_from = obs.at - timedelta(seconds=obs.lookback_s)
                last = max(last, worked[0] if worked is not None else read_from)
            needed = max(self.rule.window, self.rule.log_cadence_factor * (logs.typical_gap_s or 0.0))
            silent = (obs.at - last).total_seconds()
            if silent < needed:
                continue
            tail = long_tail(w, logs, self.longtail, quiet_pct=self.idle.util_threshold_pct,
                             min_coverage=self.idle.min_coverage, cpu=False)
            stop_after = in_grace(tail, obs.at, self.warn_in_grace)
            if tail is not None and stop_after is None:
                continue
            activity = GpuActivity.of(w, self.idle.min_coverage)
            if activity.real_work(self.activity):
                continue  # the GPU computes, draws power or talks to its peers: slow or quiet, not hung
            if never and not activity.profiled:
                continue  # no progress ever seen, and nothing on the GPU's side shows it idle
            finding = self._finding(job, w, logs, activity, last, silent, obs.at, never=never)
            for doubt in (activity.doubt(self.activity), self._mixed_doubt(w, logs), _never_doubt() if never else None):
                if doubt is not None:
                    finding = with_doubt(finding, *doubt)
            if tail is not None and stop_after is not None:
                finding = with_grace(finding, tail.reason, stop_after)
            findings.append(finding)
        return findings

    def _shape(self, w: JobWindow) -> str:
        pinned = [v or 0.0 for v in w.gpu_avg_util if (v or 0.0) >= self.rule.busy_threshold_pct]
        idle = len(w.gpu_avg_util) - len(pinned)
        head = f"busy at min {min(pinned):.0f}%"
        return f"{head} on {len(pinned)} of them ({idle} idle)" if idle else head

    def _mixed_doubt(self, w: JobWindow, logs: LogProgress) -> tuple[str, str] | None:
        """Why a hang with some GPUs idle beside pinned ones needs a person to stop it: one rank working on the CPU
        (rank 0 writing a checkpoint) idles its GPU while the others wait pinned, which reads the same. Not when a
        launcher's verdict on a rank follows the last progress (`LogProgress.rank_died`: a caught subprocess error or
        a killed side monitor names none) and no process is left on any idle GPU (a CUDA context alone means a live
        rank is still attached: one that freed its model to build the next stage's data on the CPU holds exactly
        that): that rank is gone, and its peers wait for it for ever (srun's "task 7: Exited with exit code 1" beside
        seven ranks in an all-reduce, pytorch#76287)."""
        quiet = [g for v, g in zip(w.gpu_avg_util, w.series.gpus, strict=False)
                 if v is not None and v < self.rule.busy_threshold_pct]
        idle = len(quiet)
        if not idle:
            return None
        if logs.rank_died and all(g.mem_used_mb is not None and g.mem_used_mb <= NO_PROCESS_MB for g in quiet):
            return None
        return (f"{idle} of {len(w.gpu_avg_util)} GPUs idle beside pinned ones: a rank stuck on the host, or one "
                f"working on the CPU (a rank-0 checkpoint save) while the others wait, read the same",
                f"{len(w.gpu_avg_util)} 块 GPU 中 {idle} 块空闲、其余满载：卡在主机侧的 rank，与在 CPU 上工作"
                f"（rank 0 保存检查点）而其他 rank 等待的情形，看起来一样")

    def _finding(self, job: JobInfo, w: JobWindow, logs: LogProgress, activity: GpuActivity, last: datetime,
                 silent: float, at: datetime, *, never: bool = False) -> Finding:
        gap = f", usual gap {format_duration(logs.typical_gap_s)}" if logs.typical_gap_s else ""
        used = ["log progress", "network/disk I/O", *activity.signals()]
        since = f", none seen since it started at {last:%H:%M} UTC" if never else ""
        evidence = (
            f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} {self._shape(w)} "
            f"avg util over {format_duration(w.seconds)} (coverage {w.coverage:.0%}) but {log_summary(logs)}{since}: "
            f"silent {format_duration(silent)}{gap}; {w.io_summary()}; {activity.summary()}; "
            f"judged on {', '.join(used)}; likely hung (e.g. a stuck NCCL collective)"
        )
        metrics = {
            "util_avg_pct": w.avg_util or 0.0,
            "coverage": round(w.coverage, 4),
            "log_silent_s": silent,
            "cpu_pct": w.cpu_avg or 0.0,
            "mem_gb": round(w.mem_gb, 1),
            "util_min_pct": min(v or 0.0 for v in w.gpu_avg_util),
            "window_s": w.seconds,
            "used_profiling": float(activity.profiled),
            "used_interconnect": float(activity.interconnect_known),
            "used_power": float(activity.power_share is not None),
        }
        if never:
            metrics["never_progressed"] = 1.0
        if logs.typical_gap_s:
            metrics["log_gap_s"] = logs.typical_gap_s
        metrics.update(log_metrics(logs, at) | io_metrics(w) | activity.metrics())
        return Finding(kind="zombie", target=job.id, since=last, detected_at=at, evidence=evidence, metrics=metrics,
                       gpus=job.gpus)
