"""Doomed jobs in the sweep: a pending or running job whose identical recent runs all failed fast, the same way.

The rule is agent/history/doomed.py's DEFAULT_RULE (measured on a held-out trace, docs/doomed-jobs.md); the
history is the finished jobs the scheduler reports (Observation.finished). Level 1 advice ("doomed"); with
`detectors.doomed.stop_repeat_offenders` a running repeat offender is a "crash_loop", a stop candidate that the
policy model warns first and the guardrail licenses like an idle job's.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from agent.config.policy import Policy
from agent.detectors.signals import ClusterSignals
from agent.history.doomed import DEFAULT_RULE, FinishedRun, JobToJudge, RunHistory, history_key, judge
from core.actions import Finding
from core.cluster import FinishedJob, JobInfo
from core.durations import format_duration
from core.observation import Observation

# The longest streak looked back over: enough for any "last N runs" a person reads, bounded per job.
MAX_STREAK = 50
# A running job that has run this many times as long as the longest of its failed predecessors (counted from
# its start or the latest failure, whichever is later) has outlived the loop: not flagged.
OUTLIVED_FACTOR = 2.0
_REASON = re.compile(r"each with (.+?); the latest")


def identity(user: str, image: str | None, command: str | None, name: str, gpus: int) -> str:
    """What makes two runs "the same job": user, image, command and GPUs; the job's name stands in for an
    unknown image and command (a Slurm job name, a scenario's pod)."""
    if image is None and command is None:
        return f"{user}\x1f\x1f{name}\x1f{gpus}"
    return f"{user}\x1f{image or ''}\x1f{command or ''}\x1f{gpus}"


def job_identity(job: JobInfo) -> str:
    return identity(job.user, job.image, job.command, job.name, job.gpus)


def finished_identity(f: FinishedJob) -> str:
    return identity(f.user, f.image, f.command, f.id.split("/", 1)[-1], f.gpus)


def run_history(finished: list[FinishedJob]) -> RunHistory:
    return RunHistory(
        FinishedRun(identity=finished_identity(f), user=f.user, gpus=f.gpus, ended_at=f.ended_at.timestamp(),
                    state=f.state, duration_s=max(0.0, (f.ended_at - f.started_at).total_seconds()), reason=f.reason)
        for f in finished
    )


def streak(history: RunHistory, job: JobInfo, now: float) -> list[FinishedRun]:
    """The newest runs of the job's identity that all failed fast with one reason (oldest first)."""
    runs = history.last("identity", history_key("identity", job_identity(job), job.user, job.gpus), now, MAX_STREAK)
    out: list[FinishedRun] = []
    for r in reversed(runs):
        fast = DEFAULT_RULE.fast_s is None or r.duration_s <= DEFAULT_RULE.fast_s
        if not (r.failed and fast and (not out or r.reason == out[0].reason)):
            break
        out.insert(0, r)
    return out


class DoomedJobDetector:
    """Pending or running jobs whose identical recent runs all failed fast with one cause."""

    def __init__(self, policy: Policy) -> None:
        self.rule = policy.detectors.doomed

    def detect(self, obs: Observation, signals: ClusterSignals | None = None) -> list[Finding]:
        if not self.rule.enabled:
            return []
        history = run_history(obs.finished)
        now = obs.at.timestamp()
        findings = []
        for job in obs.jobs:
            if job.state not in ("pending", "running") or job.gpus <= 0:
                continue
            verdict = judge(DEFAULT_RULE, history, JobToJudge(job_identity(job), job.user, job.gpus), now)
            if verdict is None:
                if (loop := in_place_loop(job, now)) is not None:
                    findings.append(loop)
                continue
            runs = streak(history, job, now) or list(verdict.runs)
            longest = max(r.duration_s for r in runs)
            last_end = runs[-1].ended_at
            running_s = 0.0
            if job.state == "running" and job.started_at is not None:
                running_s = max(0.0, now - max(job.started_at.timestamp(), last_end))
                if running_s > OUTLIVED_FACTOR * max(longest, 1.0):
                    continue  # it has outlived the loop: this run may well be the fix
            findings.append(self._finding(job, obs, runs, running_s))
        return findings

    def _finding(self, job: JobInfo, obs: Observation, runs: list[FinishedRun], running_s: float) -> Finding:
        now = obs.at.timestamp()
        n, longest = len(runs), max(r.duration_s for r in runs)
        since_last = max(0.0, now - runs[-1].ended_at)
        lost = sum(r.gpu_hours for r in runs)
        reason = runs[0].reason
        repeat = n >= self.rule.repeat_offender_runs
        kind = "crash_loop" if (repeat and self.rule.stop_repeat_offenders and job.state == "running") else "doomed"
        what = f"image {job.image}" if job.image else "this job"
        cause = f"each with {reason}" if reason else "each with no reason given"
        now_doing = ("it is running again" if job.state == "running" else "it is queued to run again")
        evidence = (f"the last {n} runs of {what} ({job.gpus} GPUs) all failed within {format_duration(longest)}, "
                    f"{cause}; the latest ended {format_duration(since_last)} ago, and together they held "
                    f"{lost:.1f} GPU-hours; {now_doing} unchanged and is likely to fail the same way; fix: find "
                    f"the cause in the last run's log and change the job before it runs again")
        if kind == "crash_loop":
            evidence += (f"; a repeat offender ({n} failures in a row, the policy stops such a loop after the "
                         f"notice)")
        # Running again: the waste is the loop, which began with the first of its failed runs, not this run (each
        # restart would make the warning of the run before stale, and runs shorter than the notice would never be
        # stopped). A fixed point, so a warning keeps announcing the stop; never the sweep's own time.
        loop_began = datetime.fromtimestamp(runs[0].ended_at - runs[0].duration_s, UTC)
        started = loop_began if job.state == "running" else obs.at
        return Finding(
            kind=kind, target=job.id, since=min(started, obs.at), detected_at=obs.at, evidence=evidence,
            gpus=job.gpus if job.state == "running" else 0, owner=job.user,
            metrics={"runs": float(n), "longest_s": longest, "since_last_s": since_last, "lost_gpu_hours": round(lost, 4),
                     "running_s": running_s, "pending": 1.0 if job.state == "pending" else 0.0,
                     "repeat_offender": 1.0 if repeat else 0.0, "gpus_requested": float(job.gpus)},
        )


def in_place_loop(job: JobInfo, now: float) -> Finding | None:
    """A running pod whose container restarts in place, failing fast: the streak rule read from the kubelet's own
    count (restartCount) instead of finished runs, since a pod that restarts in place never ends. At least the rule's
    runs restarts, the last run no longer than its fast_s and ended within its within_s, and the pod either backing
    off (waiting, e.g. CrashLoopBackOff) or not yet running OUTLIVED_FACTOR times as long as that last run. The
    kubelet keeps only the last run's end, so the evidence says the last cause, not that all were one. Advice
    (level 1): a controller would recreate a deleted pod, so the fix is the owner's."""
    rule = DEFAULT_RULE
    last_s, ended = job.last_run_s, job.last_exit_at
    if job.state != "running" or job.restarts < rule.runs or last_s is None or ended is None:
        return None
    since_last = max(0.0, now - ended.timestamp())
    if (rule.fast_s is not None and last_s > rule.fast_s) or (rule.within_s is not None and since_last > rule.within_s):
        return None
    if job.waiting is None and since_last > OUTLIVED_FACTOR * max(last_s, 1.0):
        return None  # running again for longer than the loop's runs lasted: this run may be the fix
    cause = f"with {job.last_exit}" if job.last_exit else "with no reason given"
    now_doing = (f"it waits to restart ({job.waiting})" if job.waiting else "it is running again")
    evidence = (f"restarting in place: its container has restarted {job.restarts} times; the last run lasted "
                f"{format_duration(last_s)} and ended {format_duration(since_last)} ago {cause}; the pod holds its "
                f"{job.gpus} GPUs between restarts and {now_doing}, likely to fail the same way; fix: find the cause "
                f"in the last run's log (kubectl logs --previous) and change the job, or scale it to zero")
    at = datetime.fromtimestamp(now, UTC)
    return Finding(
        kind="doomed", target=job.id, since=min(job.started_at or at, at), detected_at=at, evidence=evidence,
        gpus=job.gpus, owner=job.user,
        metrics={"restarts": float(job.restarts), "longest_s": last_s, "since_last_s": since_last,
                 "waiting": 1.0 if job.waiting else 0.0, "gpus_requested": float(job.gpus), "in_place": 1.0},
    )


def doomed_zh(finding: Finding) -> str:
    """A doomed / crash-loop finding's evidence in Chinese, from its numbers (the reason from the evidence)."""
    from agent.detectors.evidence import duration_zh  # evidence.py renders through this module

    m = finding.metrics
    if m.get("in_place"):
        cause = re.search(r" ago with (.+?); the pod holds", finding.evidence)
        why = cause.group(1) if cause and cause.group(1) != "no reason given" else ""
        waiting = re.search(r"waits to restart \((.+?)\)", finding.evidence)
        return (f"容器原地重启：已重启 {m['restarts']:g} 次，最近一次运行 {duration_zh(m['longest_s'])}后结束"
                + (f"，原因 {why}" if why else "") + f"（{duration_zh(m['since_last_s'])}前）；"
                + f"重启间隙 Pod 仍占着 {m['gpus_requested']:g} 块 GPU，"
                + (f"正在等待重启（{waiting.group(1)}）" if waiting else "它又在运行")
                + "，很可能以同样方式失败；处理办法：查看上一次运行的日志（kubectl logs --previous）找出原因并修改作业，"
                + "或将其副本数缩为零")
    found = _REASON.search(finding.evidence)
    reason = found.group(1) if found and found.group(1) != "no reason given" else ""
    image = re.search(r"of image (\S+) \(", finding.evidence)
    what = f"镜像 {image.group(1)} " if image else "该作业"
    text = (f"{what}最近 {m['runs']:g} 次运行（{m['gpus_requested']:g} 块 GPU）全部在 {duration_zh(m['longest_s'])}内失败"
            + (f"，原因均为 {reason}" if reason else "")
            + f"；最近一次在 {duration_zh(m['since_last_s'])}前结束，共占用 {m['lost_gpu_hours']:.1f} GPU 小时；"
            + ("它又在原样排队" if m.get("pending") else "它又在原样运行")
            + "，很可能以同样方式失败；处理办法：查看上一次运行的日志找出原因，修改后再运行")
    if finding.kind == "crash_loop":
        text += f"；屡次失败（连续 {m['runs']:g} 次），按策略在通知期满后停止该循环"
    return text
