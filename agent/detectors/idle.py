"""IdleGpuDetector: jobs whose every GPU stayed quiet for the whole idle window (blips aside, when allowed)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

from agent.config.policy import LongTailRule, Policy
from agent.detectors.activity import last_real_work
from agent.detectors.evidence import duration_zh, io_metrics, log_metrics, with_doubt
from agent.detectors.history import align_end
from agent.detectors.longtail import LongTail, long_tail, work_off_the_gpu
from agent.detectors.serving import requests_since
from agent.detectors.signals import IO_RATES, IO_WORDS, ClusterSignals, JobSeries, JobWindow, group_signals
from core.actions import Finding
from core.cluster import JobInfo
from core.durations import format_duration
from core.observation import LogProgress, Observation
from core.text import gigabytes

ACTIVE_STATES = frozenset({"running", "stopping"})
# A hung process spins about one core per rank (one rank per GPU), and its main loop one more; CPU above that, in
# % of one core, is work a spin does not explain (a pandas cell at 600 %, a FAISS build on 15 cores).
SPIN_CORES_PER_GPU = 1.0
SPIN_CORES_EXTRA = 1.0
# GPU memory a process holds for its CUDA context alone (300-600 MB on current drivers), no model or tensors in it.
CUDA_CONTEXT_MB = 1024.0




def unread_log(logs: LogProgress | None) -> tuple[str, str] | None:
    """Why a quiet job whose log exists but could not be read needs a person to stop it: the log is unknown, not
    empty, and a checkpoint save it announces would show nowhere else."""
    if logs is None or not logs.unread:
        return None
    return (f"its log could not be read ({logs.unread}): a save or load it announces would show nowhere else, so "
            f"the stop needs a person",
            f"无法读取其日志（{logs.unread}）：日志中宣告的检查点保存或加载在别处看不到，因此停止需由人工确认")


def unfinished_state_io(logs: LogProgress | None) -> tuple[str, str] | None:
    """Why a quiet job's stop needs a person when its log's last burst announces a write, move or load of its state
    that no line has finished (tools/log_progress.py state_io_announced); else None."""
    if logs is None or not logs.state_io:
        return None
    quoted = " ".join(logs.state_io.split())[:120]
    return (f"its log's last lines announce a write or load of its state that no line has finished (\"{quoted}\"): "
            f"a checkpoint or model moved over network storage shows no I/O in the pod's own counters, so the stop "
            f"needs a person",
            f"其日志最后几行宣告了一次尚未完成的状态写入或加载（“{quoted}”）：经网络存储读写的检查点或模型在 pod "
            f"自身的计数器中看不到 I/O")


def log_summary(logs: LogProgress | None) -> str:
    """The log half of the evidence, in the operator's words."""
    if logs is None:
        return "log not inspected"
    ended = f", then it ended: \"{' '.join(logs.ended.split())[:120]}\"" if logs.ended else ""
    if logs.last_progress_at is not None:
        step = f" (step {logs.last_step:g})" if logs.last_step is not None else ""
        return f"no log progress since {logs.last_progress_at:%H:%M} UTC{step}{ended}"
    if logs.ended:
        return f"no progress in the last {logs.lines} log lines{ended}"
    if logs.lines:
        return f"no progress in the last {logs.lines} log lines"
    return "no recent log lines"


def in_grace(tail: LongTail | None, at: datetime, warn_in_grace: bool) -> datetime | None:
    """When a job held back only by its own rhythm's grace may be stopped (a warning may go out now); None when
    nothing holds it back, or when what does (evidence of work, unknown data, or warnings off in grace) allows
    no finding at all."""
    if tail is None or tail.grace_left_s is None or not warn_in_grace:
        return None
    return at + timedelta(seconds=tail.grace_left_s)


def with_grace(finding: Finding, reason: str, stop_after: datetime) -> Finding:
    """The finding of a job in its long-tail grace: a warning now, no stop before `stop_after`."""
    return finding.model_copy(update={
        "stop_after": stop_after,
        "evidence": f"{finding.evidence}; {reason}: no stop before {stop_after:%Y-%m-%d %H:%M} UTC",
        "metrics": finding.metrics | {"grace_left_s": round((stop_after - finding.detected_at).total_seconds())},
    })


def last_other_work(series: JobSeries, logs: LogProgress | None, rule: LongTailRule,
                    cpu: bool = True) -> datetime | None:
    """When the job last showed work besides its GPUs, as far as the sweep can see: the end of the newest slice of
    process CPU at or above `rule.cpu_active_pct` (unless `cpu` is False: a CPU judged a spin shows no work) or
    network, disk read or disk write at or above `rule.io_threshold_mbps` (the evidence long_tail_reason protects a
    quiet job with), or its last log progress line."""
    newest = logs.last_progress_at if logs is not None else None
    io = series.io
    if io is not None:
        columns = ((io.cpu_pct, rule.cpu_active_pct if cpu else math.inf),
                   *((getattr(io, name), rule.io_threshold_mbps) for name, _, _ in IO_RATES))
        for values, threshold in columns:
            for back, value in enumerate(reversed(values)):
                if value is not None and value >= threshold:
                    end = series.at - timedelta(seconds=back * io.slice_s)
                    newest = end if newest is None or end > newest else newest
                    break
    return newest


def _unseen_io(missing: list[str]) -> tuple[str, str] | None:
    """Why a quiet job some of whose CPU/IO series are missing (read for other jobs, not for it) needs a person to
    stop it: the missing one may be where it works."""
    if not missing:
        return None
    en = "/".join(IO_WORDS[m][0] for m in missing)
    zh = "、".join(IO_WORDS[m][1] for m in missing)
    return (f"its {en} metrics are read for other jobs but not for it: it may be working there, so the stop needs a "
            f"person", f"其他作业有{zh}指标而它没有：它可能正在那里工作，因此停止需由人工确认")


CADENCE_LINES = 3  # progress lines that make a cadence: a gap seen repeat, not one interval between two lines


class IdleGpuDetector:
    """All of a job's GPUs at or below the idle threshold in every slice of the window, with full data, but for
    blips: activity that adds up to less than `idle.blip_gpu_seconds` (0 by default: none) is not work."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.idle
        self.longtail = policy.detectors.longtail
        self.warn_in_grace = policy.warning.during_grace
        self.cadence_factor = policy.detectors.zombie.log_cadence_factor
        self.activity = policy.detectors.activity
        self.overprovisioned = policy.detectors.overprovisioned
        self.serving = policy.detectors.serving

    def quiet_window(self, job: JobInfo, signals: ClusterSignals) -> JobWindow | None:
        """The job's window when its GPUs look idle (before logs and long-tail checks), else None."""
        if job.state not in ACTIVE_STATES or job.gpus <= 0:
            return None
        series = signals.jobs.get(job.id)
        if series is None:
            return None
        window = series.window(self.rule.window, job.gpus)
        if window.coverage < self.rule.min_coverage or not window.quiet(self.rule.util_threshold_pct,
                                                                         self.rule.blip_gpu_seconds):
            return None
        return window

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        signals = signals or group_signals(obs)
        findings = []
        for job in obs.jobs:
            # A job is judged idle only over a window it has lived through: a 55-minute-old job was not
            # "idle for 1h", however its slices round.
            if job.started_at is not None and (obs.at - job.started_at).total_seconds() < self.rule.window:
                continue
            window = self.quiet_window(job, signals)
            if window is None:
                continue
            missing = signals.io_unread(window, self.rule.min_coverage)
            if missing and len(missing) == len(signals.io_fields):
                continue  # none of the CPU/IO read for other jobs is read for it: unknown is not idle (the report names it)
            unseen_io = _unseen_io(missing)
            logs = obs.logs.get(job.id)
            tail = long_tail(window, logs, self.longtail, quiet_pct=self.rule.util_threshold_pct,
                             min_coverage=self.rule.min_coverage, blip_gpu_s=self.rule.blip_gpu_seconds)
            spin = self._cpu_only(window, logs, tail, obs.at)
            if spin is not None:
                tail = None  # only a busy CPU held it back, beside a log long stalled: judged, its stop for a person
            unasked = tail is not None and tail.grace_left_s is None and self._unasked_service(window, obs.at)
            if unasked:
                tail = None  # a model server nobody called: its engine's spin is no work (advice, never a stop)
            stop_after = in_grace(tail, obs.at, self.warn_in_grace)
            if tail is not None and stop_after is None:
                if (unused := self._unused_allocation(job, window, logs, obs.at)) is not None:
                    findings.append(unused)
                continue
            quiet, blips = window.series.quiet_run(self.rule.util_threshold_pct, self.rule.blip_gpu_seconds)
            if quiet == 0:
                continue  # the newest slice was not seen whole (an exporter gap now): nothing is known about now
            if quiet < window.slices:
                # A gap inside the window that could hide work ended the stretch: quiet for less than the window
                # is no idle finding (an exporter dark five minutes an hour had its jobs warned "idle for 5m" hourly).
                continue
            since = obs.at - timedelta(seconds=quiet * window.series.slice_s)
            # Quiet as far back as the data read goes, in a job older than that: the stretch is longer still.
            history = window.series.history
            read = len(history.util_max) * history.ratio if history is not None else window.series.length
            at_least = quiet >= read and (job.started_at is None or job.started_at < since)
            if job.started_at is not None and job.started_at > since:
                since = job.started_at  # the GPU's quiet before the job started on it is not the job's
            # The stretch of waste begins after the last work of any kind, not only the GPU's: an owner who answered
            # a warning by working on the CPU (or the network, disk, log) and left again must be warned anew.
            worked = last_other_work(window.series, logs, self.longtail, cpu=spin is None and not unasked)
            if worked is not None and worked > since:
                since = worked
            # Work GPU_UTIL does not count (a video encode, copies, the power they draw): not idle inside the window,
            # and the stretch of waste begins after it (a warning from before it announced another stretch).
            gpu_work = last_real_work(window.series, self.activity)
            if gpu_work is not None and (obs.at - gpu_work[0]).total_seconds() < self.rule.window:
                continue
            if gpu_work is not None and gpu_work[0] > since:
                since = gpu_work[0]
            finding = self._finding(job, window, logs, since, obs.at, blips, at_least=at_least)
            spin = spin or self._trickle(window) or unfinished_state_io(logs) or unread_log(logs) or unseen_io
            if spin is not None:
                finding = with_doubt(finding, *spin, in_evidence=spin[0])
            if tail is not None and stop_after is not None:
                finding = with_grace(finding, tail.reason, stop_after)
            findings.append(finding)
        return findings

    def _unasked_service(self, window: JobWindow, at: datetime) -> bool:
        """A job serving request metrics that counted no request over the window: its CPU (vLLM's engine spins a core
        per TP worker with nothing to do, vllm#19243) and its probe lines are no work. Judged only where the serving
        rule is on, which turns the finding into advice no stop can cite (agent/detectors/serving.py)."""
        if not self.serving.enabled:
            return False
        seen = requests_since(window.series.io, at - timedelta(seconds=window.seconds), at)
        return seen is not None and seen[1] >= window.seconds and round(seen[0]) == 0

    def _unused_allocation(self, job: JobInfo, window: JobWindow, logs: LogProgress | None,
                           at: datetime) -> Finding | None:
        """Advice for a job that works, but not on its GPUs: none used over the window, no more GPU memory held than
        a CUDA context, while its CPU, disk, network or log work (a dataset tokenised for hours inside a 4-GPU
        allocation, Princeton's jobstats alert; a dataset copied from network storage to local disk, seen as disk
        writes). An over-provisioned finding with no GPU working: level 1, never a stop. A job of one GPU is told too
        (AlphaFold's hours of CPU-only MSA search inside a GPU allocation, google-deepmind/alphafold#6: the GPU is held
        and unused just the same); one holding a model in GPU memory (an eval reading its dataset on the CPU) is not:
        it will use its GPU."""
        if job.gpus < 1 or len(window.series.gpus) < job.gpus:
            return None
        mems = [g.mem_used_mb for g in window.series.gpus]
        if any(m is None for m in mems) or sum(m or 0.0 for m in mems) > CUDA_CONTEXT_MB * job.gpus:
            return None
        if window.series.quiet_run(self.rule.util_threshold_pct, self.rule.blip_gpu_seconds)[0] < window.slices:
            return None
        if last_real_work(window.series, self.activity) is not None:
            return None
        work = work_off_the_gpu(window, logs, self.longtail)
        if work is None or not self._worked_throughout(window, logs, at):
            return None
        since = at - timedelta(seconds=window.seconds)
        if job.started_at is not None and job.started_at > since:
            since = job.started_at
        evidence = (f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} requested, none used over {format_duration(window.seconds)} (max "
                    f"{window.max_util:.1f}% util, no more GPU memory held than a CUDA context) while the job works "
                    f"off the GPU: {work}. Run this stage as a job without GPUs and ask for them where it uses them")
        metrics = {"gpus_requested": float(job.gpus), "gpus_working": 0.0, "ratio": float(job.gpus),
                   "coverage": round(window.coverage, 4), "util_avg_pct": window.avg_util or 0.0,
                   "window_s": window.seconds, "working_util_pct": self.overprovisioned.working_util_pct,
                   "off_gpu_work": 1.0, **{f"gpu_util_pct_{k}": 0.0 for k in range(job.gpus)}}
        return Finding(kind="overprovisioned", target=job.id, since=since, detected_at=at, evidence=evidence,
                       metrics=metrics, gpus=job.gpus)

    def _worked_throughout(self, window: JobWindow, logs: LogProgress | None, at: datetime) -> bool:
        """Whether the job's work off the GPU held through the whole window, not only at its edge (a model load's
        last line as training starts is no stage to run without GPUs): CPU at the active line in every slice, network
        or disk (read or write) at it on average, or a log that advanced from the window's start to within three of its gaps of now."""
        io, rule = window.series.io, self.longtail
        if io is not None:
            cpu = [v for v in align_end(io.cpu_pct, window.slices) if v is not None]
            if cpu and len(cpu) == window.slices and min(cpu) >= rule.cpu_active_pct:
                return True
            for name, _, _ in IO_RATES:
                known = [v for v in align_end(getattr(io, name), window.slices) if v is not None]
                if known and sum(known) / len(known) >= rule.io_threshold_mbps:
                    return True
        if logs is None or logs.first_progress_at is None:
            return False
        start = at - timedelta(seconds=window.seconds)
        recent = timedelta(seconds=3 * (logs.typical_gap_s or window.series.slice_s))
        return logs.first_progress_at <= start and logs.advanced_since(at - recent)

    def _trickle(self, window: JobWindow) -> tuple[str, str] | None:
        """Why a quiet job's stop needs a person when its network, disk reads or disk writes move data steadily but
        under the active line (longtail.io_trickle_mbps to io_threshold_mbps, on average over the window); else None."""
        io = window.series.io
        floor, line = self.longtail.io_trickle_mbps, self.longtail.io_threshold_mbps
        if io is None or floor <= 0:
            return None
        for field, name, zh in IO_RATES:
            known = [v for v in align_end(getattr(io, field), window.slices) if v is not None]
            mean = sum(known) / len(known) if known else 0.0
            if floor <= mean < line:
                return (f"{name} averages {mean:.2f} MB/s over the window (under {line:g} MB/s, at least "
                        f"{floor:g}): a slow transfer (a results upload) or a service answering small requests reads the same, so "
                        f"the stop needs a person",
                        f"{zh}在窗口内平均 {mean:.2f} MB/s（低于活跃线 {line:g} MB/s，但不低于 {floor:g} MB/s）："
                        f"缓慢的数据传输（如上传结果）或处理小请求的服务看起来一样")
        return None

    def _cpu_only(self, window: JobWindow, logs: LogProgress | None, tail: LongTail | None,
                  at: datetime) -> tuple[str, str] | None:
        """Why a quiet job that only its CPU protects is judged all the same, its stop needing a person; None when
        something else protects it too, or its log never kept a cadence to fall silent from.

        A deadlocked DataLoader worker spins a core at 100 % (pytorch/pytorch#9753) like real CPU work does (a
        single-threaded fit, a torch.compile trace). A log that advanced every G and has been silent for max(window,
        zombie cadence factor x G) tells them apart well enough to warn, not to stop on its own; the text names both
        readings, so whoever approves the stop weighs both."""
        if tail is None or tail.grace_left_s is not None or not tail.reason.startswith("process CPU"):
            return None
        if long_tail(window, logs, self.longtail, quiet_pct=self.rule.util_threshold_pct,
                     min_coverage=self.rule.min_coverage, cpu=False, blip_gpu_s=self.rule.blip_gpu_seconds) is not None:
            return None
        # A spin is steady: the same cores every slice of the window, never more than a hung process burns. CPU
        # that came and went (an owner's pandas cell) or used more cores is work, and protects the job.
        io = window.series.io
        cpu = [v for v in align_end(io.cpu_pct, window.slices) if v is not None] if io is not None else []
        spin_max = 100.0 * (SPIN_CORES_PER_GPU * max(1, len(window.series.gpus)) + SPIN_CORES_EXTRA)
        if not cpu or min(cpu) < self.longtail.cpu_active_pct or max(cpu) > spin_max:
            return None
        last, gap = (logs.last_progress_at, logs.typical_gap_s) if logs is not None else (None, None)
        if last is None or not gap or logs is None or logs.progress_lines < CADENCE_LINES:
            return None  # two start-up lines minutes apart are no rhythm to fall silent from (a 85-minute XLA compile)
        silent = (at - last).total_seconds()
        if silent < max(self.rule.window, self.cadence_factor * gap):
            return None
        return (f"only the CPU is busy (up to {max(cpu):.0f}% of a core), while the log that advanced every "
                f"{format_duration(gap)} has been silent for {format_duration(silent)}: a deadlocked DataLoader "
                f"worker spins a core the same way, and so does real work that prints nothing (a single-threaded "
                f"pandas or scikit-learn step, a torch.compile trace), so the stop needs a person who checks which",
                f"只有 CPU 在忙（最高 {max(cpu):.0f}% 个核心），而此前每 {duration_zh(gap)}推进一次的日志已沉默 "
                f"{duration_zh(silent)}：卡死的 DataLoader worker 会这样空转占用一个核心，不打印输出的真实计算（单线程的 "
                f"pandas 或 scikit-learn 步骤、torch.compile 编译）也是如此，需由人工确认是哪一种")

    def _finding(self, job: JobInfo, w: JobWindow, logs: LogProgress | None, since: datetime, at: datetime,
                 blips: float = 0.0, at_least: bool = False) -> Finding:
        quiet_s = (at - since).total_seconds()
        # Blips: activity under IdleRule.blip_gpu_seconds in all over the stretch is not work.
        blip = f", blips only ({blips:.0f} GPU-s of work in all)" if blips > 0 else ""
        evidence = (
            f"{job.gpus} GPU{'s' if job.gpus != 1 else ''} at max {w.max_util:.1f}% util for "
            f"{'at least ' if at_least else ''}{format_duration(quiet_s)}"
            f"{blip} (coverage {w.coverage:.0%}), holding {gigabytes(w.mem_gb)} GB; {log_summary(logs)}; {w.io_summary()}"
        )
        metrics = {
            "util_max_pct": w.max_util or 0.0,
            "coverage": round(w.coverage, 4),
            "quiet_s": quiet_s,
            "mem_gb": round(w.mem_gb, 1),
        }
        if blips > 0:
            metrics["blip_gpu_s"] = round(blips, 1)
        if at_least:
            metrics["quiet_at_least"] = 1.0  # quiet as far back as the data read: longer still
        if w.cpu_avg is not None:
            metrics["cpu_pct"] = w.cpu_avg
        metrics.update(log_metrics(logs, at) | io_metrics(w))
        return Finding(
            kind="idle", target=job.id, since=since, detected_at=at, evidence=evidence, metrics=metrics, gpus=job.gpus
        )
